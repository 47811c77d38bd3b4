/*
 * closer.c - closes, on a thread of its own, the descriptors a client had a
 * hand in: its connection and the files it sent. Such a close can block for
 * as long as the client likes: a TCP socket with SO_LINGER and unsent data,
 * a FUSE file whose flush waits on its daemon, or a socket whose queue still
 * holds such files (the last close of each runs in the closing thread). The
 * loop only queues them, so one client's close never stalls the others.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"
#include "proxy/px_int.h"

/* A close slower than this is logged: some client made it linger. */
#define PX_CLOSE_SLOW_MS 1000

struct px_closer {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int *fds; /* queued, oldest first */
	size_t n, cap;
	bool stopping;
	pthread_t thread;
};

static void close_timed(int fd)
{
	uint64_t t0 = lc_now_ms(), ms;

	close(fd);
	ms = lc_now_ms() - t0;
	if (ms >= PX_CLOSE_SLOW_MS)
		LC_WARN("proxy", "closing a client's descriptor took %llu ms",
			(unsigned long long)ms);
}

static void *closer_main(void *arg)
{
	struct px_closer *c = arg;

	pthread_mutex_lock(&c->lock);
	for (;;) {
		int *batch;
		size_t n;

		while (!c->n && !c->stopping)
			pthread_cond_wait(&c->cond, &c->lock);
		if (!c->n)
			break;
		batch = c->fds;
		n = c->n;
		c->fds = NULL;
		c->n = c->cap = 0;
		pthread_mutex_unlock(&c->lock);
		for (size_t i = 0; i < n; i++)
			close_timed(batch[i]);
		free(batch);
		pthread_mutex_lock(&c->lock);
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

int px_closer_create(struct px_closer **out)
{
	struct px_closer *c = calloc(1, sizeof(*c));

	if (!c)
		return LUNAR_ERR_INTERNAL;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	if (pthread_create(&c->thread, NULL, closer_main, c)) {
		pthread_cond_destroy(&c->cond);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return LUNAR_ERR_INTERNAL;
	}
	*out = c;
	return 0;
}

/* Room for one more descriptor; 0, or -1 when memory ran out. */
static int grow(struct px_closer *c)
{
	size_t cap = c->cap ? c->cap * 2 : 16;
	int *v;

	if (c->n < c->cap)
		return 0;
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
			c->fds[c->n++] = fd;
			pthread_cond_signal(&c->cond);
			pthread_mutex_unlock(&c->lock);
			return;
		}
		pthread_mutex_unlock(&c->lock);
	}
	close_timed(fd); /* no closer, or no memory: here, as a last resort */
}

void px_closer_destroy(struct px_closer *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	c->stopping = true;
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
	pthread_join(c->thread, NULL);
	free(c->fds);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
