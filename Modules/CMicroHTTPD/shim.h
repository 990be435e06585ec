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
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* MHD_start_daemon is variadic, which Swift cannot call; these wrappers fix the option lists. */
typedef enum MHD_Result (*nh_access_handler)(void *cls, struct MHD_Connection *connection, const char *url,
                                             const char *method, const char *version, const char *upload_data,
                                             size_t *upload_data_size, void **con_cls);

/* Polls on `threads` threads, each watching its share of the connections with epoll; with
 * `threads` 0, no thread of its own: the caller watches the epoll descriptor (nh_mhd_epoll_fd)
 * and calls MHD_run. Either way a connection may be suspended while its request is handled
 * elsewhere; at most `connections` at once, `per_address` from one client address, and a
 * connection idle for `idle_seconds` is closed. */
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
    unsigned int flags = MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
    flags |= threads > 0 ? (MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO) : MHD_USE_EPOLL;
    struct MHD_OptionItem options[12];
    int n = 0;
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, sa};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)completed, NULL};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, connections, NULL};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_address, NULL};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024, NULL};
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, idle_seconds, NULL};
    if (threads > 0) options[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, threads, NULL};
    if (key_pem != NULL && cert_pem != NULL) {
        flags |= MHD_USE_TLS;
        options[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key_pem};
        options[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert_pem};
    }
    options[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return MHD_start_daemon(flags, port, NULL, NULL, handler, cls, MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

/* The epoll descriptor to watch for a daemon started without threads; -1 for one with them. */
static inline int nh_mhd_epoll_fd(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_EPOLL_FD);
    return info == NULL ? -1 : info->epoll_fd;
}

/* Milliseconds until the daemon must run again whatever its descriptor shows; -1 for no limit. */
static inline long long nh_mhd_timeout(struct MHD_Daemon *daemon) {
    MHD_UNSIGNED_LONG_LONG timeout = 0;
    if (MHD_get_timeout(daemon, &timeout) != MHD_YES) return -1;
    return timeout > 86400000ULL ? 86400000LL : (long long)timeout;
}

static inline uint16_t nh_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}
/* libmicrohttpd's epoll descriptor does not become readable when a connection is resumed (its
 * own wake-up descriptor is only watched by its own threads), so a caller that polls watches
 * one epoll descriptor over two: libmicrohttpd's, and an eventfd written on every resume.
 * Returns the epoll descriptor and sets *event_fd; -1 on failure. */
static inline int nh_poll_set(int mhd_fd, int *event_fd) {
    int set = epoll_create1(EPOLL_CLOEXEC);
    int event = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (set < 0 || event < 0) {
        if (set >= 0) close(set);
        if (event >= 0) close(event);
        return -1;
    }
    int fds[2] = {mhd_fd, event};
    for (int i = 0; i < 2; i++) {
        struct epoll_event ev;
        memset(&ev, 0, sizeof(ev));
        ev.events = EPOLLIN;
        ev.data.fd = fds[i];
        if (epoll_ctl(set, EPOLL_CTL_ADD, fds[i], &ev) != 0) {
            close(set);
            close(event);
            return -1;
        }
    }
    *event_fd = event;
    return set;
}

static inline void nh_poll_wake(int event_fd) {
    uint64_t one = 1;
    (void)!write(event_fd, &one, sizeof(one));
}

/* 1 when a wake was read (and the descriptor is quiet again), 0 when none had been written yet. */
static inline int nh_poll_drain(int event_fd) {
    uint64_t count;
    return read(event_fd, &count, sizeof(count)) == (ssize_t)sizeof(count);
}

#endif
