/*
 * uds.h - UNIX stream socket helpers: connect/listen on a pathname, and whole
 * messages with up to LC_UDS_MAX_FDS file descriptors (SCM_RIGHTS).
 */
#ifndef LUNAR_COMMON_UDS_H
#define LUNAR_COMMON_UDS_H

#include <stddef.h>

#define LC_UDS_MAX_FDS 4

/* lc_uds_listen - bind and listen on path (an old socket file is replaced),
 * mode applied with chmod. Returns the fd or -errno. */
int lc_uds_listen(const char *path, unsigned mode);
/*
 * lc_uds_connect - connect to path; returns the fd (CLOEXEC) or -errno.
 * timeout_ms > 0 bounds the connect (a listener that stopped accepting
 * blocks it once its backlog is full: -EAGAIN then) and every later send on
 * the socket; 0 waits without limit.
 */
int lc_uds_connect(const char *path, unsigned timeout_ms);
/* The two steps of lc_uds_connect, for a caller that must record the socket
 * before it connects: lc_uds_socket returns a new socket (CLOEXEC) or -errno;
 * lc_uds_connect_fd connects it (0 or -errno; fd stays open either way). */
int lc_uds_socket(void);
int lc_uds_connect_fd(int fd, const char *path, unsigned timeout_ms);
/*
 * lc_uds_send - send len bytes and nfds descriptors in one sendmsg.
 * Returns 0 or -errno. Blocks.
 */
int lc_uds_send(int sock, const void *buf, size_t len, const int *fds, int nfds);
/*
 * lc_uds_recv - receive exactly len bytes and up to maxfds descriptors,
 * waiting at most timeout_ms. Returns the number of descriptors received
 * (stored in fds, CLOEXEC) or -errno (-ETIMEDOUT, -ECONNRESET on EOF,
 * -EPROTO on truncated control data). Extra descriptors are closed.
 */
int lc_uds_recv(int sock, void *buf, size_t len, int *fds, int maxfds, int timeout_ms);
/* lc_uds_default_path - the default proxy socket path (SPEC §2) into buf. */
void lc_uds_default_path(char *buf, size_t cap);

#endif /* LUNAR_COMMON_UDS_H */
