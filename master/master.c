/*
 * master.c - creating and destroying a master, its housekeeping thread, and
 * its figures. The calls themselves are in dispatch.c.
 */
#include "master.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "mst_int.h"

#define HOUSEKEEPING_MS 100

static void housekeep(struct mst_master *m)
{
	uint64_t now = lc_now_ms();

	mst_clients_expire(m);
	mst_segments_drain_sweep(m, now);
	mst_resv_expire(m, now);
	mst_deferred_sweep(m, now);
	mst_evict_maybe(m);
}

static void *housekeeper(void *arg)
{
	struct mst_master *m = arg;
	struct timespec ts;

	pthread_mutex_lock(&m->stop_lock);
	while (!m->stopping) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += HOUSEKEEPING_MS * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&m->stop_cond, &m->stop_lock, &ts);
		if (m->stopping)
			break;
		pthread_mutex_unlock(&m->stop_lock);
		housekeep(m);
		pthread_mutex_lock(&m->stop_lock);
	}
	pthread_mutex_unlock(&m->stop_lock);
	return NULL;
}

static int stop_init(struct mst_master *m)
{
	int rc = lc_cond_init(&m->stop_cond);

	if (rc)
		return -rc;
	if (pthread_mutex_init(&m->stop_lock, NULL)) {
		pthread_cond_destroy(&m->stop_cond);
		return -ENOMEM;
	}
	return 0;
}

int mst_master_create(const struct mst_config *cfg, struct mst_master **out)
{
	struct mst_master *m = calloc(1, sizeof(*m));
	int rc = -ENOMEM;

	if (!m)
		goto err_log;
	m->cfg = *cfg;
	if ((rc = mst_objects_init(m)))
		goto err_free;
	if ((rc = mst_segtab_init(&m->segs)))
		goto err_objects;
	if ((rc = mst_clients_init(&m->clients)))
		goto err_segs;
	if ((rc = mst_deferred_init(&m->deferred)))
		goto err_clients;
	if ((rc = mst_resvtab_init(&m->resv)))
		goto err_deferred;
	if ((rc = mst_tenants_init(&m->tenants)))
		goto err_resv;
	if ((rc = mst_offload_init(&m->offload)))
		goto err_tenants;
	if ((rc = -pthread_mutex_init(&m->evict_lock, NULL)))
		goto err_offload;
	if ((rc = stop_init(m)))
		goto err_evict;
	if ((rc = -pthread_create(&m->housekeeper, NULL, housekeeper, m)))
		goto err_stop;
	*out = m;
	return 0;
err_stop:
	pthread_mutex_destroy(&m->stop_lock);
	pthread_cond_destroy(&m->stop_cond);
err_evict:
	pthread_mutex_destroy(&m->evict_lock);
err_offload:
	mst_offload_fini(&m->offload);
err_tenants:
	mst_tenants_fini(&m->tenants);
err_resv:
	mst_resvtab_fini(&m->resv);
err_deferred:
	mst_deferred_fini(&m->deferred);
err_clients:
	mst_clients_fini(&m->clients);
err_segs:
	mst_segtab_fini(m);
err_objects:
	mst_objects_fini(m);
err_free:
	free(m);
err_log:
	LC_ERROR("master", "cannot create the master: %s", strerror(-rc));
	return LUNAR_ERR_INTERNAL;
}

void mst_master_destroy(struct mst_master *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->stop_lock);
	m->stopping = 1;
	pthread_cond_signal(&m->stop_cond);
	pthread_mutex_unlock(&m->stop_lock);
	pthread_join(m->housekeeper, NULL);
	pthread_mutex_destroy(&m->stop_lock);
	pthread_cond_destroy(&m->stop_cond);
	mst_objects_fini(m); /* objects, reserved and deferred ranges first: they
			      * point into segments */
	mst_resvtab_fini(&m->resv);
	mst_deferred_fini(&m->deferred);
	mst_segtab_fini(m);
	mst_clients_fini(&m->clients);
	mst_tenants_fini(&m->tenants);
	mst_offload_fini(&m->offload);
	mst_evict_fini(m);
	pthread_mutex_destroy(&m->evict_lock);
	free(m);
}

void mst_master_stats(struct mst_master *m, struct mst_stats *out)
{
	out->keys = LC_READ_ONCE(m->n_complete);
	out->processing = LC_READ_ONCE(m->n_processing);
	out->capacity_bytes = LC_READ_ONCE(m->capacity);
	out->used_bytes = LC_READ_ONCE(m->used);
	pthread_rwlock_rdlock(&m->segs.lock);
	out->segments = m->segs.n;
	pthread_rwlock_unlock(&m->segs.lock);
	pthread_mutex_lock(&m->clients.lock);
	out->clients = m->clients.n;
	pthread_mutex_unlock(&m->clients.lock);
	out->tenants = mst_tenants_count(m);
}

int mst_master_ready(struct mst_master *m)
{
	int ready;

	pthread_rwlock_rdlock(&m->segs.lock);
	ready = m->segs.n > 0;
	pthread_rwlock_unlock(&m->segs.lock);
	return ready;
}
