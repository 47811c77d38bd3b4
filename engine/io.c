/*
 * io.c - whole scatter/gather transfers on a stream socket: a cursor over an
 * iovec list feeds sendmsg/recvmsg straight from the caller's memory (no
 * staging buffer), resuming after partial I/O and EINTR, and poll() bounds
 * every wait by one deadline for the whole transfer. A wait for bytes that
 * are due (a transfer under way) first polls without sleeping for the
 * busy-poll budget: a sleeping thread's wakeup is what a small remote
 * transfer mostly waits for on a virtual machine.
 */
#include "eng_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>

#include "atomic.h"
#include "clock.h"
#include "crc32c.h"

void eng_iovc_init(struct eng_iovc *c, const struct iovec *iov, int cnt, uint64_t skip,
		   uint64_t len)
{
	c->iov = iov;
	c->cnt = cnt;
	c->idx = 0;
	c->off = 0;
	c->left = len;
	c->head = NULL;
	c->hlen = 0;
	while (c->idx < cnt && skip >= iov[c->idx].iov_len) {
		skip -= iov[c->idx].iov_len;
		c->idx++;
	}
	c->off = (size_t)skip;
}

int eng_iovc_window(const struct eng_iovc *c, struct iovec *win)
{
	uint64_t left = c->left;
	size_t off = c->off;
	int n = 0;

	if (c->hlen) {
		win[n].iov_base = (void *)c->head;
		win[n++].iov_len = c->hlen;
	}
	for (int i = c->idx; i < c->cnt && n < ENG_IOV_WINDOW && left; i++, off = 0) {
		uint64_t len = c->iov[i].iov_len - off;

		if (len > left)
			len = left;
		if (!len)
			continue;
		win[n].iov_base = (char *)c->iov[i].iov_base + off;
		win[n].iov_len = (size_t)(len < ENG_IOV_CHUNK ? len : ENG_IOV_CHUNK);
		left -= win[n].iov_len;
		if (win[n++].iov_len < len)
			break; /* an entry cut short ends the window */
	}
	return n;
}

static void iovc_advance(struct eng_iovc *c, size_t n)
{
	size_t h = n < c->hlen ? n : c->hlen;

	c->head += h;
	c->hlen -= h;
	n -= h;
	c->left -= n;
	while (n) {
		size_t avail = c->iov[c->idx].iov_len - c->off;

		if (n < avail) {
			c->off += n;
			return;
		}
		n -= avail;
		c->idx++;
		c->off = 0;
	}
}

static atomic_uint busy_poll_ns;
static atomic_ullong busy_polled, busy_slept;

void eng_busy_poll_set(unsigned us)
{
	atomic_store_explicit(&busy_poll_ns,
			      us > ENG_BUSY_POLL_MAX_US ? ENG_BUSY_POLL_MAX_US * 1000u : us * 1000u,
			      memory_order_relaxed);
}

void eng_busy_poll_stats(uint64_t *polled, uint64_t *slept)
{
	*polled = atomic_load_explicit(&busy_polled, memory_order_relaxed);
	*slept = atomic_load_explicit(&busy_slept, memory_order_relaxed);
}

int eng_io_poll(int fd, short events, uint64_t deadline_ns)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	unsigned budget = atomic_load_explicit(&busy_poll_ns, memory_order_relaxed);
	uint64_t end;

	if (!budget)
		return 0;
	end = lc_now_ns() + budget;
	end = end < deadline_ns ? end : deadline_ns;
	do {
		if (poll(&pfd, 1, 0) > 0) {
			atomic_fetch_add_explicit(&busy_polled, 1, memory_order_relaxed);
			return 1;
		}
		sched_yield(); /* a thread the CPU is wanted for runs first */
	} while (lc_now_ns() < end);
	atomic_fetch_add_explicit(&busy_slept, 1, memory_order_relaxed);
	return 0;
}

int eng_io_wait(int fd, short events, uint64_t deadline_ns)
{
	struct pollfd pfd = {.fd = fd, .events = events};

	if (deadline_ns != ENG_NO_DEADLINE && events == POLLIN) {
		if (lc_now_ns() >= deadline_ns)
			return -ETIMEDOUT;
		if (eng_io_poll(fd, events, deadline_ns))
			return 0;
	}
	for (;;) {
		int ms = -1;

		if (deadline_ns != ENG_NO_DEADLINE) {
			uint64_t now = lc_now_ns();

			if (now >= deadline_ns)
				return -ETIMEDOUT;
			/* Round up so we never wake just before the deadline and spin. */
			uint64_t wait = (deadline_ns - now + 999999) / 1000000;
			ms = wait > INT_MAX ? INT_MAX : (int)wait;
		}
		int n = poll(&pfd, 1, ms);

		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

int eng_io_send(int fd, struct eng_iovc *c, int flags, uint64_t deadline_ns)
{
	while (c->left || c->hlen) {
		struct iovec win[ENG_IOV_WINDOW];
		struct msghdr msg = {.msg_iov = win};
		ssize_t n;
		int rc;

		msg.msg_iovlen = (size_t)eng_iovc_window(c, win);
		n = sendmsg(fd, &msg, flags | MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			iovc_advance(c, (size_t)n);
			continue;
		}
		if (n == 0)
			return -EIO; /* nothing taken from a non-empty window */
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		rc = eng_io_wait(fd, POLLOUT, deadline_ns);
		if (rc)
			return rc;
	}
	return 0;
}

int eng_io_recv(int fd, struct eng_iovc *c, uint64_t deadline_ns)
{
	while (c->left) {
		struct iovec win[ENG_IOV_WINDOW];
		struct msghdr msg = {.msg_iov = win};
		ssize_t n;
		int rc;

		msg.msg_iovlen = (size_t)eng_iovc_window(c, win);
		n = recvmsg(fd, &msg, MSG_DONTWAIT);
		if (n > 0) {
			iovc_advance(c, (size_t)n);
			continue;
		}
		if (n == 0)
			return -ECONNRESET; /* orderly EOF in the middle of a message */
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		rc = eng_io_wait(fd, POLLIN, deadline_ns);
		if (rc)
			return rc;
	}
	return 0;
}

int eng_io_send_buf(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
	struct iovec v = {(void *)buf, len};
	struct eng_iovc c;

	eng_iovc_init(&c, &v, 1, 0, len);
	return eng_io_send(fd, &c, 0, deadline_ns);
}

int eng_io_recv_buf(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
	struct iovec v = {buf, len};
	struct eng_iovc c;

	eng_iovc_init(&c, &v, 1, 0, len);
	return eng_io_recv(fd, &c, deadline_ns);
}

/* Extend crc over the next n bytes from cursor c (not advanced). */
static uint32_t iovc_crc(struct eng_iovc c, uint64_t n, uint32_t crc)
{
	while (n) {
		size_t len = c.iov[c.idx].iov_len - c.off;

		len = len < n ? len : (size_t)n;
		crc = lc_crc32c(crc, (const char *)c.iov[c.idx].iov_base + c.off, len);
		n -= len;
		c.idx++;
		c.off = 0;
	}
	return crc;
}

uint32_t eng_iov_crc(const struct iovec *iov, int iovcnt, uint64_t skip, uint64_t len)
{
	struct eng_iovc c;

	eng_iovc_init(&c, iov, iovcnt, skip, len);
	return iovc_crc(c, len, 0);
}

/* Move c's bytes a chunk at a time, checksumming each beside the I/O; a
 * receive tells each landed chunk to landed when not NULL. */
static int io_crc(int fd, struct eng_iovc *c, uint32_t *crc, uint64_t deadline_ns, int send,
		  eng_landed_fn *landed, void *arg)
{
	for (uint64_t moved = 0; c->left;) {
		uint64_t rest = c->left, n = rest < ENG_CRC_CHUNK ? rest : ENG_CRC_CHUNK;
		struct eng_iovc start = *c;
		int rc;

		/* A send checksums first (the bytes are then hot for the copy),
		 * a receive after (while they are still hot from it). */
		if (send)
			*crc = iovc_crc(start, n, *crc);
		c->left = n;
		rc = send ? eng_io_send(fd, c, 0, deadline_ns) : eng_io_recv(fd, c, deadline_ns);
		c->left += rest - n;
		if (rc)
			return rc;
		if (!send)
			*crc = iovc_crc(start, n, *crc);
		moved += n;
		if (landed)
			landed(arg, moved);
	}
	return 0;
}

int eng_io_send_crc(int fd, struct eng_iovc *c, uint32_t *crc, uint64_t deadline_ns)
{
	return io_crc(fd, c, crc, deadline_ns, 1, NULL, 0);
}

int eng_io_recv_crc(int fd, struct eng_iovc *c, uint32_t *crc, uint64_t deadline_ns,
		    eng_landed_fn *landed, void *arg)
{
	return io_crc(fd, c, crc, deadline_ns, 0, landed, arg);
}
