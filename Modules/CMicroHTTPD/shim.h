#ifndef NH_CMICROHTTPD_SHIM_H
#define NH_CMICROHTTPD_SHIM_H
#include <stdint.h>
#include <stdarg.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

/* MHD_start_daemon is variadic, which Swift cannot call; these wrappers fix the option lists. */
typedef enum MHD_Result (*nh_access_handler)(void *cls, struct MHD_Connection *connection, const char *url,
                                             const char *method, const char *version, const char *upload_data,
                                             size_t *upload_data_size, void **con_cls);

/* Polls on `threads` threads, each watching its share of the connections with epoll, and may
 * suspend a connection while its request is handled elsewhere; at most
 * `connections` at once, `per_address` from one client address, and a connection idle for
 * `idle_seconds` is closed. */
static inline struct MHD_Daemon *nh_mhd_start(const char *address, uint16_t port, nh_access_handler handler, void *cls,
                                              MHD_RequestCompletedCallback completed, const char *key_pem,
                                              const char *cert_pem, unsigned int threads, unsigned int connections,
                                              unsigned int per_address, unsigned int idle_seconds) {
    /* libmicrohttpd binds inside MHD_start_daemon, so the address need only live for the call. */
    struct sockaddr_in address_in;
    struct sockaddr_in *sa = &address_in;
    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    if (inet_pton(AF_INET, address, &sa->sin_addr) != 1) return NULL;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME;
    if (key_pem != NULL && cert_pem != NULL) {
        return MHD_start_daemon(flags | MHD_USE_TLS, port, NULL, NULL, handler, cls,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)sa,
                                MHD_OPTION_HTTPS_MEM_KEY, key_pem, MHD_OPTION_HTTPS_MEM_CERT, cert_pem,
                                MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                                MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, connections,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds, MHD_OPTION_END);
    }
    return MHD_start_daemon(flags, port, NULL, NULL, handler, cls, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)sa,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                            MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, connections,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds, MHD_OPTION_END);
}

static inline uint16_t nh_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}
#endif
