/*
 * closer.c - closes, off the loop, the descriptors a client had a hand in:
 * its connection and the files it sent. Such a close can block for as long
 * as the client likes: a socket set to linger with unsent data, a UNIX
 * socket whose queue holds such a socket (the last close of each runs in
 * the closing thread), a FUSE file whose flush waits on its daemon.
 *
 * A socket a client sends is disarmed as it arrives and again just before
 * its close (SO_LINGER 0: the client keeps its own descriptor of the same
 * socket and could arm it again). A close that still lasts longer than
 * PX_CLOSE_INTERRUPT_MS is interrupted with a signal, which ends a linger
 * wait however deep in nested sockets it is. The closing is done by a few
 * threads: when a descriptor is queued and no closer is free, another one
 * starts, up to PX_CLOSERS_MAX, so a close nothing interrupts (a FUSE
 * flush) holds one thread, not every later close. Threads beyond the first
 * end after PX_CLOSER_IDLE_MS without work.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "proxy/px_int.h"

#define PX_CLOSE_SLOW_MS      1000 /* a close this slow is logged: a client made it linger */
#define PX_CLOSERS_MAX	      16
#define PX_CLOSER_IDLE_MS     2000
#define PX_CLOSER_STOP_MS     1000 /* how long stopping waits for a stuck close */
#define PX_CLOSE_INTERRUPT_MS 500  /* a close this long is interrupted (again) */

struct px_closer {
	pthread_mutex_t lock;
	pthread_cond_t work; /* a descriptor was queued, or stopping */
	pthread_cond_t gone; /* a thread ended */
	int *fds;	     /* queued, oldest first from head */
	size_t head, n, cap;
	unsigned threads, idle;
	bool stopping;
	/* The closes in progress: one slot per busy thread (since_ms 0: free). */
	struct {
		pthread_t tid;
		uint64_t since_ms;
	} busy[PX_CLOSERS_MAX];
};

/* The signal that interrupts a close; it does nothing else. */
#define PX_CLOSER_SIGNAL SIGRTMIN

static void on_interrupt(int sig)
{
	(void)sig;
}

void px_closer_disarm(int fd)
{
	struct linger now = {.l_onoff = 1, .l_linger = 0};
	struct stat st;

	/* Lingering is the sender's choice; an abortive close never waits. */
	if (!fstat(fd, &st) && S_ISSOCK(st.st_mode))
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
}

static void close_timed(int fd)
{
	uint64_t t0 = lc_now_ms(), ms;

	px_closer_disarm(fd);
	close(fd);
	ms = lc_now_ms() - t0;
	if (ms >= PX_CLOSE_SLOW_MS)
		LC_WARN("proxy", "closing a client's descriptor took %llu ms",
			(unsigned long long)ms);
}

/* Signal every thread whose close has lasted PX_CLOSE_INTERRUPT_MS. Lock
 * held, so no thread leaves its slot (or ends) meanwhile. */
static void interrupt_stuck(struct px_closer *c)
{
	uint64_t now = lc_now_ms();

	for (int i = 0; i < PX_CLOSERS_MAX; i++)
		if (c->busy[i].since_ms && now - c->busy[i].since_ms >= PX_CLOSE_INTERRUPT_MS)
			pthread_kill(c->busy[i].tid, PX_CLOSER_SIGNAL);
}

static bool any_busy(const struct px_closer *c)
{
	for (int i = 0; i < PX_CLOSERS_MAX; i++)
		if (c->busy[i].since_ms)
			return true;
	return false;
}

/* A free slot for this thread's close (there is one per thread). Lock held. */
static int take_slot(struct px_closer *c)
{
	int i = 0;

	while (c->busy[i].since_ms)
		i++;
	c->busy[i].tid = pthread_self();
	c->busy[i].since_ms = lc_now_ms();
	return i;
}

/* Wait on cond until end_ms (lc_now_ms); false on timeout. Lock held. */
static bool wait_until(struct px_closer *c, pthread_cond_t *cond, uint64_t end_ms)
{
	struct timespec ts = {(time_t)(end_ms / 1000), (long)(end_ms % 1000) * 1000000L};

	return pthread_cond_timedwait(cond, &c->lock, &ts) != ETIMEDOUT;
}

static void *closer_main(void *arg)
{
	struct px_closer *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		uint64_t idle_since = lc_now_ms();
		int fd, slot;

		/* Idle threads look after the busy ones' closes meanwhile; one
		 * idle for PX_CLOSER_IDLE_MS ends, unless it is the last. */
		c->idle++;
		while (!c->n && !c->stopping) {
			bool busy = any_busy(c);
			uint64_t now = lc_now_ms();

			if (!busy && c->threads > 1 && now - idle_since >= PX_CLOSER_IDLE_MS)
				break;
			wait_until(c, &c->work,
				   now + (busy ? PX_CLOSE_INTERRUPT_MS / 2 : PX_CLOSER_IDLE_MS));
			interrupt_stuck(c);
		}
		c->idle--;
		if (!c->n)
			break;
		fd = c->fds[c->head++];
		if (--c->n == 0)
			c->head = 0;
		slot = take_slot(c);
		pthread_mutex_unlock(&c->lock);
		close_timed(fd);
		pthread_mutex_lock(&c->lock);
		c->busy[slot].since_ms = 0;
	}
	c->threads--;
	pthread_cond_broadcast(&c->gone);
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* One more closing thread (detached: stopping waits on the count). Lock held. */
static int add_thread(struct px_closer *c)
{
	pthread_attr_t a;
	pthread_t t;
	int rc;

	if (pthread_attr_init(&a))
		return -1;
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &a, closer_main, c);
	pthread_attr_destroy(&a);
	if (rc)
		return -1;
	c->threads++;
	return 0;
}

int px_closer_create(struct px_closer **out)
{
	struct sigaction sa = {.sa_handler = on_interrupt, .sa_flags = SA_RESTART};
	struct px_closer *c = calloc(1, sizeof(*c));
	pthread_condattr_t ca;

	if (!c || sigaction(PX_CLOSER_SIGNAL, &sa, NULL)) {
		free(c);
		return LUNAR_ERR_INTERNAL;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* lc_now_ms's clock */
	pthread_cond_init(&c->work, &ca);
	pthread_cond_init(&c->gone, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&c->lock);
	if (add_thread(c)) {
		pthread_mutex_unlock(&c->lock);
		pthread_cond_destroy(&c->gone);
		pthread_cond_destroy(&c->work);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return LUNAR_ERR_INTERNAL;
	}
	pthread_mutex_unlock(&c->lock);
	*out = c;
	return 0;
}

/* Room for one more descriptor; 0, or -1 when memory ran out. Lock held. */
static int grow(struct px_closer *c)
{
	size_t cap = c->cap ? c->cap * 2 : 16;
	int *v;

	if (c->head + c->n < c->cap)
		return 0;
	if (c->head) { /* slide the queue to the front first */
		for (size_t i = 0; i < c->n; i++)
			c->fds[i] = c->fds[c->head + i];
		c->head = 0;
		if (c->n < c->cap)
			return 0;
	}
	v = realloc(c->fds, cap * sizeof(*v));
	if (!v)
		return -1;
	c->fds = v;
	c->cap = cap;
	return 0;
}

void px_closer_close(struct px_closer *c, int fd)
{
	if (fd < 0)
		return;
	if (c) {
		pthread_mutex_lock(&c->lock);
		if (!c->stopping && !grow(c)) {
			c->fds[c->head + c->n++] = fd;
			interrupt_stuck(c);
			/* Every thread is in a close, maybe one that never ends. */
			if (c->idle < c->n && c->threads < PX_CLOSERS_MAX && add_thread(c))
				LC_WARN("proxy", "cannot start another closing thread");
			pthread_cond_signal(&c->work);
			pthread_mutex_unlock(&c->lock);
			return;
		}
		pthread_mutex_unlock(&c->lock);
	}
	close_timed(fd); /* no closer, or no memory: here, as a last resort */
}

void px_closer_destroy(struct px_closer *c)
{
	uint64_t end;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_broadcast(&c->work);
	end = lc_now_ms() + PX_CLOSER_STOP_MS;
	while (c->threads && lc_now_ms() < end) {
		interrupt_stuck(c);
		wait_until(c, &c->gone, lc_now_ms() + PX_CLOSE_INTERRUPT_MS / 2);
	}
	if (c->threads) {
		/* Stuck in a client's close: leave them (and c) to the exit. */
		LC_WARN("proxy", "%u descriptor close(s) still stuck at stop; not waiting",
			c->threads);
		pthread_mutex_unlock(&c->lock);
		return;
	}
	pthread_mutex_unlock(&c->lock);
	free(c->fds);
	pthread_cond_destroy(&c->gone);
	pthread_cond_destroy(&c->work);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
