#ifndef NH_CSQLITE_SHIM_H
#define NH_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a cast macro that Swift cannot import. */
static inline sqlite3_destructor_type nh_sqlite_transient(void) {
    return SQLITE_TRANSIENT;
}
#endif
