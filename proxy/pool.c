/*
 * pool.c - worker threads that run requests. A request may block on the
 * master or a transfer; other requests keep flowing on the other workers.
 */
#include <pthread.h>
#include <stdlib.h>

#include "log.h"
#include "lunar.h"
#include "px_int.h"

struct px_pool {
	struct px_proxy *px;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct px_req *head, *tail;
	int stopping;
	unsigned nthreads;
	pthread_t threads[];
};

static struct px_req *pool_take(struct px_pool *p)
{
	struct px_req *r;

	pthread_mutex_lock(&p->lock);
	while (!p->head && !p->stopping)
		pthread_cond_wait(&p->cond, &p->lock);
	r = p->head;
	if (r) {
		p->head = r->next;
		if (!p->head)
			p->tail = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

static void *pool_main(void *arg)
{
	struct px_pool *p = arg;
	struct px_req *r;

	while ((r = pool_take(p)))
		px_req_run(p->px, r);
	return NULL;
}

int px_pool_create(struct px_proxy *px, unsigned nthreads, struct px_pool **out)
{
	struct px_pool *p = calloc(1, sizeof(*p) + nthreads * sizeof(pthread_t));

	if (!p)
		return LUNAR_ERR_INTERNAL;
	p->px = px;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	for (; p->nthreads < nthreads; p->nthreads++) {
		if (pthread_create(&p->threads[p->nthreads], NULL, pool_main, p)) {
			px_pool_destroy(p);
			return LUNAR_ERR_INTERNAL;
		}
	}
	*out = p;
	return 0;
}

void px_pool_submit(struct px_pool *p, struct px_req *r)
{
	r->next = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->tail)
		p->tail->next = r;
	else
		p->head = r;
	p->tail = r;
	pthread_mutex_unlock(&p->lock);
	/* After the unlock: the woken worker takes the lock at once. */
	pthread_cond_signal(&p->cond);
}

void px_pool_drop(struct px_pool *p, struct px_session *s)
{
	struct px_req *dropped = NULL, **pp, *r;

	pthread_mutex_lock(&p->lock);
	p->tail = NULL;
	for (pp = &p->head; (r = *pp);) {
		if (r->s == s) {
			*pp = r->next;
			r->next = dropped;
			dropped = r;
		} else {
			p->tail = r;
			pp = &r->next;
		}
	}
	pthread_mutex_unlock(&p->lock);
	/* Not under the lock: the last reference unmaps and hands descriptors
	 * to the closer. */
	while ((r = dropped)) {
		dropped = r->next;
		px_req_drop(r);
	}
}

void px_pool_destroy(struct px_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p);
}
