/*
 * loop.c - the proxy's event loop: accepts clients, notices hang-ups, and
 * drains submission rings into the worker pool. It never blocks on the
 * master or a transfer. After activity it polls the rings briefly before
 * sleeping, so a busy client makes no system call to wake it; before it
 * sleeps it sets NEED_WAKEUP on every ring and looks once more.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "proxy/px_int.h"
#include "ring.h"

#define PX_SPIN_NS 50000ull
#define PX_EFD_TAG 1ul

static int watch(struct px_proxy *px, int fd, void *tag)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = tag };

	return epoll_ctl(px->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void session_close(struct px_proxy *px, struct px_session *s, const char *why)
{
	px_session_kill(s, why);
	epoll_ctl(px->epfd, EPOLL_CTL_DEL, s->sock, NULL);
	epoll_ctl(px->epfd, EPOLL_CTL_DEL, s->efd, NULL);
	/* The client sees the hang-up now, even while workers still hold refs. */
	shutdown(s->sock, SHUT_RDWR);
	if (s->prev)
		s->prev->next = s->next;
	else
		px->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	px->nsessions--;
	px_session_put(s);
}

static void accept_clients(struct px_proxy *px)
{
	struct px_session *s;
	int fd;

	while ((fd = accept4(px->listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		if (px_session_open(px, fd, &s))
			continue;
		if (watch(px, s->sock, s) || watch(px, s->efd, (void *)((uintptr_t)s | PX_EFD_TAG))) {
			epoll_ctl(px->epfd, EPOLL_CTL_DEL, s->sock, NULL);
			px_session_kill(s, "cannot watch its descriptors");
			px_session_put(s);
			continue;
		}
		s->next = px->sessions;
		if (s->next)
			s->next->prev = s;
		px->sessions = s;
		px->nsessions++;
	}
}

/* Take every published descriptor of s; returns how many, or -1 if s died. */
static int session_drain(struct px_proxy *px, struct px_session *s)
{
	const struct px_region *rg = &s->rg;
	int64_t n = lc_ring_consumable(rg->ring, rg->entries, s->cons);
	const char *why = NULL;

	if (n < 0) {
		session_close(px, s, "submission ring indexes corrupted");
		return -1;
	}
	for (int64_t i = 0; i < n; i++) {
		struct lc_sqe sqe;
		struct px_req *r;
		int rc;

		/* Copy once; px_decode validates the copy, never the shared slot. */
		memcpy(&sqe, &rg->sqes[(s->cons + (uint32_t)i) & (rg->entries - 1)], sizeof(sqe));
		rc = px_decode(rg, &sqe, &r, &why);
		if (rc) {
			session_close(px, s, rc == -ENOMEM ? "out of memory" : why);
			return -1;
		}
		px_session_get(s);
		r->s = s;
		px_pool_submit(px->pool, r);
	}
	s->cons += (uint32_t)n;
	lc_ring_release(rg->ring, s->cons);
	return (int)n;
}

static int drain_all(struct px_proxy *px)
{
	struct px_session *s, *next;
	int busy = 0;

	for (s = px->sessions; s; s = next) {
		next = s->next;
		if (session_drain(px, s) > 0)
			busy = 1;
	}
	return busy;
}

/* Set NEED_WAKEUP everywhere; 1 if some ring filled meanwhile. */
static int prepare_sleep(struct px_proxy *px)
{
	int pending = 0;

	for (struct px_session *s = px->sessions; s; s = s->next) {
		lc_ring_set_sleeping(s->rg.ring, 1);
		if (lc_ring_consumable(s->rg.ring, s->rg.entries, s->cons) != 0)
			pending = 1;
	}
	return pending;
}

static void wake_up(struct px_proxy *px)
{
	for (struct px_session *s = px->sessions; s; s = s->next)
		lc_ring_set_sleeping(s->rg.ring, 0);
}

static void handle_event(struct px_proxy *px, struct epoll_event *ev)
{
	uintptr_t tag = (uintptr_t)ev->data.ptr;
	struct px_session *s = (struct px_session *)(tag & ~PX_EFD_TAG);
	uint64_t v;

	if (ev->data.ptr == &px->listen_fd) {
		accept_clients(px);
	} else if (tag & PX_EFD_TAG) {
		if (read(s->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			LC_DEBUG("proxy", "eventfd read: %s", strerror(errno));
	} else if (ev->events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR | EPOLLIN)) {
		/* After the handshake a client only ever hangs up. */
		session_close(px, s, NULL);
		LC_DEBUG("proxy", "client %llu hung up", (unsigned long long)s->client_id);
	}
}

int px_loop_run(struct px_proxy *px)
{
	struct epoll_event evs[64];
	uint64_t last_busy = lc_now_ns();
	int rc, n, timeout = 0;

	if ((rc = watch(px, px->listen_fd, &px->listen_fd)) ||
	    (rc = watch(px, px->stop_efd, &px->stop_efd)))
		return rc;
	while (!atomic_load(&px->stopping)) {
		n = epoll_wait(px->epfd, evs, 64, timeout);
		if (timeout)
			wake_up(px);
		if (n < 0 && errno != EINTR)
			return -errno;
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &px->stop_efd)
				atomic_store(&px->stopping, true);
			else
				handle_event(px, &evs[i]);
		}
		if (drain_all(px))
			last_busy = lc_now_ns();
		timeout = 0;
		if (lc_now_ns() - last_busy > PX_SPIN_NS) {
			if (prepare_sleep(px))
				wake_up(px);
			else
				timeout = -1;
		}
	}
	while (px->sessions)
		session_close(px, px->sessions, NULL);
	return 0;
}
