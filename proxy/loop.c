/*
 * loop.c - the proxy's event loop: accepts clients, notices hang-ups, and
 * drains submission rings (running small requests itself, handing the rest
 * to the worker pool). It never blocks on the master or a transfer. While
 * work keeps coming it polls the rings without a system call (the sockets
 * get a look every 100 µs); after activity it polls briefly before
 * sleeping, so a busy client makes no system call to wake it; before it
 * sleeps it sets NEED_WAKEUP on every ring and looks once more. It also
 * keeps every ring's hints for how waiters wait (loop_cpu, crowded;
 * shm-abi.md, Completing) current.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"
#include "ring.h"

#define PX_SPIN_NS	  50000ull
#define PX_EFD_TAG	  1ul
#define PX_HELLO_POLL_MS  100
#define PX_YIELD_NS	  3000ull    /* polling this long without work: yield between polls */
#define PX_EVENTS_NS	  100000ull  /* look at the sockets at least this often */
#define PX_ACTIVE_NS	  1000000ull /* a client with work this recent is busy */
#define PX_DRAIN_ITEMS	  1024	     /* keys one session may have decoded per round */
#define PX_INFLIGHT_ITEMS 8192	     /* keys one session may have in flight */

static int watch(struct px_proxy *px, int fd, void *tag, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = tag};

	return epoll_ctl(px->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

static void session_close(struct px_proxy *px, struct px_session *s, const char *why)
{
	px_session_kill(s, why);
	if (why)
		PX_COUNT(px, violations, 1);
	epoll_ctl(px->epfd, EPOLL_CTL_DEL, s->sock, NULL);
	if (s->efd >= 0)
		epoll_ctl(px->epfd, EPOLL_CTL_DEL, s->efd, NULL);
	/* Not shut down here but with the last reference (px_session_put),
	 * when no worker touches the client's memory any more: the client's
	 * fence (after it gave up on a request) waits for just that. Queued
	 * requests are dropped, so only running ones hold it back. */
	if (s->prev)
		s->prev->next = s->next;
	else
		px->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	px->nsessions--;
	px_mreg_drop_all(s);
	px_pool_drop(px->pool, s);
	px_session_put(s);
}

static void accept_clients(struct px_proxy *px)
{
	struct px_session *s;
	int fd;

	while ((fd = accept4(px->listen_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
		if (px_session_accept(px, fd, &s))
			continue;
		if (watch(px, s->sock, s, EPOLLIN | EPOLLRDHUP)) {
			px_session_kill(s, "cannot watch its socket");
			px_session_put(s);
			continue;
		}
		PX_COUNT(px, clients_total, 1);
		s->next = px->sessions;
		if (s->next)
			s->next->prev = s;
		px->sessions = s;
		px->nsessions++;
	}
}

/* Whether s may have one more request naming items keys in flight. The
 * keys bound the memory its decoded requests take (a key is up to 4 KiB);
 * a request alone is always let in (at most LUNAR_BATCH_MAX keys). */
static bool admit(const struct px_proxy *px, struct px_session *s, uint32_t items)
{
	uint32_t queued = atomic_load(&s->inflight_items);

	return atomic_load(&s->inflight) < px->cfg.max_inflight &&
	       (!queued || (uint64_t)queued + items <= PX_INFLIGHT_ITEMS);
}

/*
 * Take published descriptors of s, decoding at most PX_DRAIN_ITEMS keys
 * (but at least one request) before the next session's turn: a client that
 * keeps its ring full of the largest batches holds the loop for one batch a
 * round. A request that is not admitted is answered BUSY without being
 * decoded. Returns how many descriptors it took, or -1 if s died.
 */
static int session_drain(struct px_proxy *px, struct px_session *s)
{
	const struct px_region *rg = &s->rg;
	const char *why = NULL;
	int64_t n, i, budget = PX_DRAIN_ITEMS;

	if (!s->open)
		return 0;
	n = lc_ring_consumable(rg->ring, rg->entries, s->cons);
	if (n < 0) {
		session_close(px, s, "submission ring indexes corrupted");
		return -1;
	}
	LC_ORDERED_AFTER(rg->base); /* the completions the client saw (complete_slot) */
	for (i = 0; i < n && budget > 0; i++) {
		struct lc_sqe sqe;
		struct px_req *r;
		int rc;

		/* Copy once; px_decode validates the copy, never the shared slot. */
		memcpy(&sqe, &rg->sqes[(s->cons + (uint32_t)i) & (rg->entries - 1)], sizeof(sqe));
		if (!admit(px, s, sqe.count)) {
			if (sqe.op && sqe.op < LC_OP_MAX)
				PX_COUNT(px, requests[sqe.op], 1);
			PX_COUNT(px, busy, 1);
			budget--;
			rc = px_refuse(rg, &sqe, LUNAR_ERR_BUSY, &why);
			if (rc) {
				session_close(px, s, why);
				return -1;
			}
			continue;
		}
		rc = px_decode(rg, &sqe, &r, &why);
		if (rc == -ENOMEM) {
			/* Out of memory fails this call only; the client may retry. */
			budget--;
			if (px_refuse(rg, &sqe, LUNAR_ERR_INTERNAL, &why)) {
				session_close(px, s, why);
				return -1;
			}
			continue;
		}
		if (rc) {
			const char *slot_why;

			/* The offender hears why before the hang-up when its
			 * completion slot is one it may be told in. */
			px_refuse(rg, &sqe, LUNAR_ERR_PROTOCOL, &slot_why);
			session_close(px, s, why);
			return -1;
		}
		PX_COUNT(px, requests[sqe.op], 1);
		budget -= r->count ? r->count : 1;
		atomic_fetch_add(&s->inflight, 1);
		atomic_fetch_add(&s->inflight_items, r->count);
		px_session_get(s);
		r->s = s;
		if (px_req_inline(px, r)) {
			PX_COUNT(px, requests_inline, 1);
			px_req_run(px, r);
		} else {
			px_pool_submit(px->pool, r);
		}
	}
	s->cons += (uint32_t)i;
	lc_ring_release(rg->ring, s->cons);
	return (int)i;
}

static int drain_all(struct px_proxy *px)
{
	struct px_session *s, *next;
	uint64_t now = 0;

	for (s = px->sessions; s; s = next) {
		next = s->next;
		if (session_drain(px, s) > 0)
			s->active_ns = now ? now : (now = lc_now_ns());
	}
	return now != 0;
}

/* Write the current hints into every open session's ring. */
static void publish_hints(struct px_proxy *px)
{
	for (struct px_session *s = px->sessions; s; s = s->next) {
		if (s->open) {
			LC_WRITE_ONCE(s->rg.ring->crowded, px->crowded);
			LC_WRITE_ONCE(s->rg.ring->loop_cpu, px->loop_cpu);
		}
	}
}

/* Tell the clients where the loop runs: a waiter on the same CPU sleeps
 * (and so may be woken elsewhere) instead of spinning against it. */
static void publish_cpu(struct px_proxy *px)
{
	int cpu = sched_getcpu();
	uint32_t hint = cpu < 0 ? 0 : (uint32_t)cpu + 1;

	if (hint != px->loop_cpu) {
		px->loop_cpu = hint;
		publish_hints(px);
	}
}

/*
 * Tell every client whether more of them are busy (work within the last
 * PX_ACTIVE_NS) than there are CPUs beside the loop: their waiting threads
 * then yield the CPU between looks rather than spin (unless their requests
 * take under 1.8 us, whose spins are that short), so that spinners of many
 * processes do not starve the loop that completes them. A client may
 * overwrite its own copy; that only changes how it waits. The hint is
 * reassessed only while the loop is awake: after a quiet spell the first
 * requests may still see it set, which costs them a yield, not a spin.
 */
static void publish_crowding(struct px_proxy *px, uint64_t now)
{
	unsigned active = 0;
	uint32_t crowded;

	for (struct px_session *s = px->sessions; s; s = s->next)
		if (s->open && now - s->active_ns < PX_ACTIVE_NS)
			active++;
	crowded = active > px->spare_cpus;
	if (crowded != px->crowded) {
		px->crowded = crowded;
		publish_hints(px);
	}
}

/* Close connections whose message stalled; 1 if some message is pending. */
static int sweep_handshakes(struct px_proxy *px)
{
	uint64_t now = lc_now_ms();
	struct px_session *s, *next;
	int waiting = 0;

	for (s = px->sessions; s; s = next) {
		next = s->next;
		if (px_session_expired(s, now))
			session_close(px, s, s->open ? "incomplete message" : "no hello in time");
		else if (!s->open || s->rxlen)
			waiting = 1;
	}
	return waiting;
}

/* Set NEED_WAKEUP everywhere; 1 if some ring filled meanwhile. */
static int prepare_sleep(struct px_proxy *px)
{
	int pending = 0;

	for (struct px_session *s = px->sessions; s; s = s->next) {
		if (!s->open)
			continue;
		lc_ring_set_sleeping(s->rg.ring, 1);
		if (lc_ring_consumable(s->rg.ring, s->rg.entries, s->cons) != 0)
			pending = 1;
	}
	return pending;
}

static void wake_up(struct px_proxy *px)
{
	for (struct px_session *s = px->sessions; s; s = s->next)
		if (s->open)
			lc_ring_set_sleeping(s->rg.ring, 0);
}

static void handle_event(struct px_proxy *px, struct epoll_event *ev)
{
	uintptr_t tag = (uintptr_t)ev->data.ptr;
	struct px_session *s = (struct px_session *)(tag & ~PX_EFD_TAG);

	if (ev->data.ptr == &px->listen_fd) {
		accept_clients(px);
	} else if (atomic_load(&s->dead)) {
		/* Closed by an earlier event of this batch; held until its end. */
	} else if (tag & PX_EFD_TAG) {
		/* A wakeup: the rings are polled below. */
	} else if (ev->events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) {
		LC_INFO("proxy", "client %llu (pid %d) hung up", (unsigned long long)s->client_id,
			(int)s->pid);
		PX_COUNT(px, hangups[px_session_mid_call(s)], 1);
		session_close(px, s, NULL);
	} else if (ev->events & EPOLLIN) {
		/* A client sends its hello, then only registrations. */
		const char *why = NULL;
		int rc = px_session_input(px, s, &why);

		/* Edge-triggered and never read: the client shares this
		 * eventfd's file description and may make it blocking, so a
		 * read could stall the loop. Each write is a new edge. */
		if (rc == 1 &&
		    watch(px, s->efd, (void *)((uintptr_t)s | PX_EFD_TAG), EPOLLIN | EPOLLET))
			rc = -1;
		if (rc == 1) {
			LC_WRITE_ONCE(s->rg.ring->crowded, px->crowded);
			LC_WRITE_ONCE(s->rg.ring->loop_cpu, px->loop_cpu);
		}
		if (rc < 0)
			session_close(px, s, why);
	}
}

static int is_session(struct px_proxy *px, const struct epoll_event *ev)
{
	return ev->data.ptr != &px->listen_fd && ev->data.ptr != &px->stop_efd;
}

static struct px_session *session_of(const struct epoll_event *ev)
{
	return (struct px_session *)((uintptr_t)ev->data.ptr & ~PX_EFD_TAG);
}

/*
 * SIGTERM (or SIGINT): stop now, or with --grace first give the segment back
 * gracefully and keep serving (reads of what it holds) for that long. A
 * second signal stops at once.
 */
static void stop_requested(struct px_proxy *px)
{
	struct signalfd_siginfo si;

	while (read(px->stop_efd, &si, sizeof(si)) == sizeof(si))
		;
	if (!px->cfg.grace_ms || px->drain_until_ms || !px->cfg.segment_size) {
		atomic_store(&px->stopping, true);
		return;
	}
	if (px_segment_unmount(px, px->cfg.grace_ms, px->cfg.rpc_timeout_ms)) {
		LC_WARN("proxy", "graceful unmount refused; stopping now");
		atomic_store(&px->stopping, true);
		return;
	}
	px->drain_until_ms = lc_now_ms() + px->cfg.grace_ms;
	LC_INFO("proxy", "draining: segment readable, no new data, for %llu ms",
		(unsigned long long)px->cfg.grace_ms);
}

int px_loop_run(struct px_proxy *px)
{
	struct epoll_event evs[64];
	uint64_t now, polled, last_busy = lc_now_ns(), last_crowd_check = 0;
	int rc, n, busy, timeout = 0;

	if ((rc = watch(px, px->listen_fd, &px->listen_fd, EPOLLIN)) ||
	    (rc = watch(px, px->stop_efd, &px->stop_efd, EPOLLIN)))
		return rc;
	while (!atomic_load(&px->stopping)) {
		n = epoll_wait(px->epfd, evs, 64, timeout);
		if (timeout)
			wake_up(px);
		if (n < 0 && errno != EINTR)
			return -errno;
		/* A session closed by one event of the batch may be named by a
		 * later one (hang-up, then its eventfd): hold each session the
		 * batch names until the whole batch is handled. */
		for (int i = 0; i < n; i++)
			if (is_session(px, &evs[i]))
				px_session_get(session_of(&evs[i]));
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == &px->stop_efd)
				stop_requested(px);
			else
				handle_event(px, &evs[i]);
		}
		if (px->drain_until_ms && lc_now_ms() >= px->drain_until_ms)
			atomic_store(&px->stopping, true);
		for (int i = 0; i < n; i++)
			if (is_session(px, &evs[i]))
				px_session_put(session_of(&evs[i]));
		/* While work keeps coming, poll the rings alone: no system call
		 * until PX_YIELD_NS pass without work, or PX_EVENTS_NS since the
		 * last look at the sockets. */
		polled = lc_now_ns();
		do {
			publish_cpu(px);
			busy = drain_all(px);
			now = lc_now_ns();
			if (busy)
				last_busy = now;
			else
				lc_cpu_relax();
		} while (now - last_busy < PX_YIELD_NS && now - polled < PX_EVENTS_NS);
		if (!busy && !timeout && now - last_busy >= PX_YIELD_NS)
			sched_yield(); /* polling: a client waiting on this CPU runs first */
		if (now - last_crowd_check > PX_ACTIVE_NS / 4) {
			last_crowd_check = now;
			publish_crowding(px, now);
		}
		timeout = 0;
		if (now - last_busy > PX_SPIN_NS) {
			if (prepare_sleep(px))
				wake_up(px);
			else
				timeout = sweep_handshakes(px) || px->drain_until_ms
					      ? PX_HELLO_POLL_MS
					      : -1;
		}
	}
	while (px->sessions)
		session_close(px, px->sessions, NULL);
	return 0;
}
