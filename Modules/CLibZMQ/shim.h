#ifndef NH_CLIBZMQ_SHIM_H
#define NH_CLIBZMQ_SHIM_H
#include <zmq.h>
#endif
