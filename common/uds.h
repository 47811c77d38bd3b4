/*
 * uds.h - UNIX stream socket helpers: connect/listen on a pathname, and whole
 * messages with up to LC_UDS_MAX_FDS file descriptors (SCM_RIGHTS).
 */
#ifndef LUNAR_COMMON_UDS_H
#define LUNAR_COMMON_UDS_H

#include <stddef.h>
#include <sys/types.h>

#define LC_UDS_MAX_FDS 4

/* The socket file a listener created, as lc_uds_listen_file found it right
 * after bind: the path may name another file later. */
struct lc_uds_file {
	dev_t dev;
	ino_t ino;
};

/*
 * lc_uds_listen_file - bind and listen on path, mode applied with chmod, and
 * record the new socket file in *file (when not NULL). A live listener keeps
 * its path: -EADDRINUSE when a connect to path succeeds. A stale socket file
 * (connect refused: its listener is gone) is replaced; any other kind of
 * file gives -EEXIST. Returns the fd (non-blocking, CLOEXEC) or -errno. Needs
 * to open path's directory for reading (the lock of uds.c). Blocks only for
 * as long as another lc_uds_listen_file or lc_uds_unlink_file holds that
 * lock on the same directory.
 */
int lc_uds_listen_file(const char *path, unsigned mode, struct lc_uds_file *file);
/* lc_uds_listen - lc_uds_listen_file without the record. */
int lc_uds_listen(const char *path, unsigned mode);
/*
 * lc_uds_unlink_file - remove path only if it still names *file (same st_dev
 * and st_ino); call it before closing the listener, so that the inode cannot
 * be reused meanwhile. 0 when removed, -EEXIST when path names another file
 * (left in place), or -errno (-ENOENT when nothing is there).
 */
int lc_uds_unlink_file(const char *path, const struct lc_uds_file *file);
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
