#ifndef NH_CMOSQUITTO_SHIM_H
#define NH_CMOSQUITTO_SHIM_H
#include <mosquitto.h>
/* Many libmosquitto clients share one epoll set instead of the library's select() loop,
   and Swift's Glibc module does not export epoll. */
#include <sys/epoll.h>
#endif
