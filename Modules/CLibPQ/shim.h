#ifndef NH_CLIBPQ_SHIM_H
#define NH_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#include <postgres_ext.h>

/* The PG_DIAG_ field codes are character-literal macros, which Swift does not import. */
static const int NH_PG_DIAG_SQLSTATE = PG_DIAG_SQLSTATE;
static const int NH_PG_DIAG_MESSAGE_PRIMARY = PG_DIAG_MESSAGE_PRIMARY;
static const int NH_PG_DIAG_MESSAGE_DETAIL = PG_DIAG_MESSAGE_DETAIL;
#endif
