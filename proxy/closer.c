/*
 * closer.c - closes, off the loop, the descriptors a client had a hand in:
 * its connection and the files it sent. Such a close can block for as long
 * as the client likes: a socket set to linger with unsent data, a UNIX
 * socket whose queue holds such a socket (the last close of each runs in
 * the closing thread), a FUSE file whose flush waits on its daemon.
 *
 * A socket is disarmed just before its close (SO_LINGER 0; not earlier: the
 * client keeps its own descriptor of the same socket and could arm it
 * again). A close that still lasts longer than
 * PX_CLOSE_INTERRUPT_MS is interrupted, and again each PX_CLOSE_INTERRUPT_MS
 * after, by a timer of the closing thread's own that sends it SIGURG (a
 * standard signal: never more than one pending); that ends a linger wait
 * however deep in nested sockets it is. The closing is done by a few
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
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"

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
};

/* The signal that interrupts a close; its handler does nothing. */
#define PX_CLOSER_SIGNAL SIGURG

static void on_interrupt(int sig)
{
	(void)sig;
}

/* A socket closes at once (SO_LINGER 0), whatever its sender chose. */
static void disarm(int fd)
{
	struct linger now = {.l_onoff = 1, .l_linger = 0};
	struct stat st;

	/* Lingering is the sender's choice; an abortive close never waits. */
	if (!fstat(fd, &st) && S_ISSOCK(st.st_mode))
		(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
}

/* A timer that sends this thread PX_CLOSER_SIGNAL; false if none. */
static bool interrupt_timer(timer_t *t)
{
	struct sigevent ev = {.sigev_notify = SIGEV_THREAD_ID, .sigev_signo = PX_CLOSER_SIGNAL};

	ev._sigev_un._tid = gettid();
	return !timer_create(CLOCK_MONOTONIC, &ev, t);
}

/* Start (on) or stop the interrupts of a close on timer t. */
static void interrupts(timer_t t, bool on)
{
	const struct timespec every = {0, PX_CLOSE_INTERRUPT_MS * 1000000L};
	struct itimerspec its = {0};

	if (on)
		its.it_value = its.it_interval = every;
	timer_settime(t, 0, &its, NULL);
}

static void close_timed(int fd, const timer_t *t)
{
	uint64_t t0 = lc_now_ms(), ms;

	disarm(fd);
	if (t)
		interrupts(*t, true);
	close(fd);
	if (t)
		interrupts(*t, false);
	ms = lc_now_ms() - t0;
	if (ms >= PX_CLOSE_SLOW_MS)
		LC_WARN("proxy", "closing a client's descriptor took %llu ms",
			(unsigned long long)ms);
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
	timer_t timer;
	bool timed = interrupt_timer(&timer);

	if (!timed)
		LC_WARN("proxy", "closing thread without an interrupt timer: %s", strerror(errno));
	pthread_mutex_lock(&c->lock);
	for (;;) {
		int fd;

		c->idle++;
		while (!c->n && !c->stopping)
			if (!wait_until(c, &c->work, lc_now_ms() + PX_CLOSER_IDLE_MS) && !c->n &&
			    c->threads > 1)
				break;
		c->idle--;
		if (!c->n)
			break;
		fd = c->fds[c->head++];
		if (--c->n == 0)
			c->head = 0;
		pthread_mutex_unlock(&c->lock);
		close_timed(fd, timed ? &timer : NULL);
		pthread_mutex_lock(&c->lock);
	}
	c->threads--;
	pthread_cond_broadcast(&c->gone);
	pthread_mutex_unlock(&c->lock);
	if (timed)
		timer_delete(timer);
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

	if (!c || sigaction(PX_CLOSER_SIGNAL, &sa, NULL)) {
		free(c);
		return LUNAR_ERR_INTERNAL;
	}
	pthread_mutex_init(&c->lock, NULL);
	lc_cond_init(&c->work);
	lc_cond_init(&c->gone);
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
			/* Every thread is in a close, maybe one that never ends. */
			if (c->idle < c->n && c->threads < PX_CLOSERS_MAX && add_thread(c))
				LC_WARN("proxy", "cannot start another closing thread");
			pthread_cond_signal(&c->work);
			pthread_mutex_unlock(&c->lock);
			return;
		}
		pthread_mutex_unlock(&c->lock);
	}
	close_timed(fd, NULL); /* no closer, or no memory: here, as a last resort */
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
	while (c->threads && wait_until(c, &c->gone, end))
		;
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
