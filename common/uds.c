/*
 * uds.c - pathname UNIX stream sockets with descriptor passing; see uds.h.
 */
#include "uds.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* Control buffer for up to LC_UDS_MAX_FDS descriptors, aligned for cmsghdr. */
union lc_uds_ctl {
	char buf[CMSG_SPACE(sizeof(int) * LC_UDS_MAX_FDS)];
	struct cmsghdr align;
};

static int fill_addr(struct sockaddr_un *sa, const char *path)
{
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(sa->sun_path))
		return -ENAMETOOLONG;
	strcpy(sa->sun_path, path);
	return 0;
}

/*
 * Taking a path over. A proxy must not take the path of one that is alive,
 * and must take that of one that died (its socket file stays, and connects
 * are refused). Probing by connect and then unlink + bind would race with
 * another proxy starting or stopping on the same path: it could unlink the
 * socket the other one has just bound. So every step that looks at the path
 * and then changes it (probe, unlink, bind here; stat, unlink at exit) runs
 * under an exclusive flock on the path's directory. The lock is held for a
 * few system calls and needs no file of its own; processes that do not take
 * it (an older proxy, rm) are not ordered by it, but the inode check at exit
 * still keeps a proxy from removing a file it did not create.
 */
static int lock_dir(const char *path)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int dfd, rc;

	snprintf(buf, sizeof(buf), "%s", path); /* fill_addr checked the length */
	dfd = open(dirname(buf), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	while ((rc = flock(dfd, LOCK_EX)) < 0 && errno == EINTR)
		;
	if (rc < 0) {
		rc = -errno;
		close(dfd);
		return rc;
	}
	return dfd;
}

/* 0 when nobody serves sa's path (no file there, or a stale socket file),
 * -EADDRINUSE when a listener answers, -EEXIST for a file that is not a
 * socket, or -errno (-EACCES: someone else's socket). */
static int probe(const struct sockaddr_un *sa)
{
	struct stat st;
	int fd, rc = 0;

	if (lstat(sa->sun_path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Non-blocking: a listener with a full backlog says EAGAIN at once. */
	if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN)
		rc = -EADDRINUSE;
	else if (errno != ECONNREFUSED && errno != ENOENT)
		rc = -errno;
	close(fd);
	return rc;
}

int lc_uds_listen_file(const char *path, unsigned mode, struct lc_uds_file *file)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd, dfd, rc;

	rc = fill_addr(&sa, path);
	if (rc)
		return rc;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	dfd = lock_dir(path);
	if (dfd < 0) {
		rc = dfd;
		goto err_close;
	}
	rc = probe(&sa);
	if (rc)
		goto err_unlock;
	if (unlink(path) < 0 && errno != ENOENT) {
		rc = -errno;
		goto err_unlock;
	}
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		rc = -errno;
		goto err_unlock;
	}
	if (chmod(path, mode) < 0 || listen(fd, 128) < 0 || stat(path, &st) < 0) {
		rc = -errno;
		goto err_unlink;
	}
	close(dfd);
	if (file) {
		file->dev = st.st_dev;
		file->ino = st.st_ino;
	}
	return fd;

err_unlink:
	unlink(path);
err_unlock:
	close(dfd);
err_close:
	close(fd);
	return rc;
}

int lc_uds_listen(const char *path, unsigned mode)
{
	return lc_uds_listen_file(path, mode, NULL);
}

int lc_uds_unlink_file(const char *path, const struct lc_uds_file *file)
{
	struct sockaddr_un sa;
	struct stat st;
	int dfd, rc;

	rc = fill_addr(&sa, path);
	if (rc)
		return rc;
	dfd = lock_dir(path);
	if (dfd < 0)
		return dfd;
	if (lstat(path, &st) < 0)
		rc = -errno;
	else if (st.st_dev != file->dev || st.st_ino != file->ino)
		rc = -EEXIST;
	else if (unlink(path) < 0)
		rc = -errno;
	close(dfd);
	return rc;
}

int lc_uds_socket(void)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	return fd < 0 ? -errno : fd;
}

int lc_uds_connect_fd(int fd, const char *path, unsigned timeout_ms)
{
	struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
	struct sockaddr_un sa;
	int rc = fill_addr(&sa, path);

	if (rc)
		return rc;
	if ((timeout_ms && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return 0;
}

int lc_uds_connect(const char *path, unsigned timeout_ms)
{
	int fd = lc_uds_socket(), rc;

	if (fd < 0)
		return fd;
	rc = lc_uds_connect_fd(fd, path, timeout_ms);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

int lc_uds_send(int sock, const void *buf, size_t len, const int *fds, int nfds)
{
	union lc_uds_ctl ctl;
	struct iovec iov = {(void *)buf, len};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (nfds < 0 || nfds > LC_UDS_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		msg.msg_control = ctl.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
	}
	do
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

/* Keep the first maxfds descriptors of a control message, close the rest. */
static int take_fds(struct msghdr *msg, int *fds, int maxfds)
{
	int got = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		int n, *p;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		p = (int *)CMSG_DATA(c);
		for (int i = 0; i < n; i++) {
			if (got < maxfds)
				fds[got++] = p[i];
			else
				close(p[i]);
		}
	}
	return got;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline (from now_ms); -1 waits forever. */
static int left_ms(int64_t deadline)
{
	int64_t now;

	if (deadline < 0)
		return -1;
	now = now_ms();
	return now >= deadline ? 0 : (int)(deadline - now);
}

int lc_uds_recv(int sock, void *buf, size_t len, int *fds, int maxfds, int timeout_ms)
{
	union lc_uds_ctl ctl;
	size_t done = 0;
	int nfds = 0;
	/* One deadline for the whole message: a peer sending a byte at a time
	 * must not stretch the wait to len x timeout_ms. */
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;

	while (done < len) {
		struct iovec iov = {(char *)buf + done, len - done};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
		struct pollfd pfd = {sock, POLLIN, 0};
		ssize_t n;
		int rc;

		msg.msg_control = ctl.buf;
		msg.msg_controllen = sizeof(ctl.buf);
		rc = poll(&pfd, 1, left_ms(deadline));
		if (rc == 0)
			goto timeout;
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			goto fail;
		}
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
		if (n < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			rc = -errno;
			goto fail;
		}
		if (n == 0) {
			rc = -ECONNRESET;
			goto fail;
		}
		nfds += take_fds(&msg, fds + nfds, maxfds - nfds);
		if (msg.msg_flags & MSG_CTRUNC) {
			rc = -EPROTO;
			goto fail;
		}
		done += (size_t)n;
		continue;
	timeout:
		rc = -ETIMEDOUT;
	fail:
		for (int i = 0; i < nfds; i++)
			close(fds[i]);
		return rc;
	}
	return nfds;
}

void lc_uds_default_path(char *buf, size_t cap)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (geteuid() == 0)
		snprintf(buf, cap, "/run/lunar/proxy.sock");
	else if (xdg && *xdg)
		snprintf(buf, cap, "%s/lunar/proxy.sock", xdg);
	else
		snprintf(buf, cap, "/tmp/lunar-%u/proxy.sock", (unsigned)geteuid());
}
