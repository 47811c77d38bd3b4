/*
 * deferred.c - ranges given back late: a discarded put's (its writer may
 * still be writing; after put_start_release_timeout) and an upserted
 * object's old replicas (readers may still be reading; after its lease).
 * Housekeeping sweeps the list; a segment going away takes its ranges off it.
 */
#include <errno.h>
#include <stdlib.h>

#include "log.h"
#include "mst_int.h"

struct mst_deferred {
	struct mst_deferred *next;
	uint64_t due_ms;
	struct mst_replica *reps; /* heap */
	unsigned n;
};

int mst_deferred_init(struct mst_deferred_list *d)
{
	d->head = NULL;
	return -pthread_mutex_init(&d->lock, NULL);
}

static void entry_free(struct mst_deferred *e)
{
	free(e->reps);
	free(e);
}

void mst_deferred_fini(struct mst_deferred_list *d)
{
	struct mst_deferred *e, *n;

	for (e = d->head; e; e = n) {
		n = e->next;
		entry_free(e);
	}
	pthread_mutex_destroy(&d->lock);
}

void mst_deferred_add(struct mst_master *m, struct mst_replica *reps, unsigned n, uint64_t due_ms)
{
	struct mst_deferred *e;

	if (!n) {
		free(reps);
		return;
	}
	e = malloc(sizeof(*e));
	if (!e) {
		/* freeing early could hand a range in use to another writer */
		LC_ERROR("master", "out of memory: %u ranges leaked", n);
		free(reps);
		return;
	}
	*e = (struct mst_deferred){.due_ms = due_ms, .reps = reps, .n = n};
	pthread_mutex_lock(&m->deferred.lock);
	e->next = m->deferred.head;
	m->deferred.head = e;
	pthread_mutex_unlock(&m->deferred.lock);
}

void mst_deferred_sweep(struct mst_master *m, uint64_t now)
{
	struct mst_deferred **pp, *e;

	/* ranges are freed under the list lock: a segment being retired waits
	 * here (mst_deferred_drop_segment) before it is freed */
	pthread_mutex_lock(&m->deferred.lock);
	for (pp = &m->deferred.head; (e = *pp);) {
		if (e->due_ms > now) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		for (unsigned i = 0; i < e->n; i++)
			mst_replica_free(m, &e->reps[i]);
		entry_free(e);
	}
	pthread_mutex_unlock(&m->deferred.lock);
}

void mst_deferred_drop_segment(struct mst_master *m, const struct mst_segment *seg)
{
	struct mst_deferred **pp, *e;

	pthread_mutex_lock(&m->deferred.lock);
	for (pp = &m->deferred.head; (e = *pp);) {
		unsigned kept = 0;

		for (unsigned i = 0; i < e->n; i++)
			if (e->reps[i].seg != seg)
				e->reps[kept++] = e->reps[i];
		e->n = kept;
		if (kept) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		entry_free(e);
	}
	pthread_mutex_unlock(&m->deferred.lock);
}

uint64_t mst_deferred_bytes(struct mst_master *m)
{
	uint64_t n = 0;

	pthread_mutex_lock(&m->deferred.lock);
	for (struct mst_deferred *e = m->deferred.head; e; e = e->next)
		for (unsigned i = 0; i < e->n; i++)
			n += e->reps[i].len;
	pthread_mutex_unlock(&m->deferred.lock);
	return n;
}
