/*
 * arena.c - the session's shared arena: one range allocator over
 * [arena_off, arena_off + arena_size) of the region, under the session lock.
 * Requests take one range each (so a request never holds part of the arena
 * while waiting for more); when the arena is full they wait for a range to
 * be freed, up to their deadline.
 */
#include "shm_int.h"

#include <errno.h>

#include "log.h"
#include "ralloc.h"

/* cn->lock held. */
static int arena_take(struct shm_conn *cn, uint64_t len, uint64_t *off)
{
	int rc = lc_ralloc_get(cn->arena, len, off);

	if (!rc)
		*off += cn->arena_off;
	return rc;
}

int shm_arena_get(struct shm_conn *cn, uint64_t len, uint64_t deadline_ns, uint64_t *off)
{
	int rc;

	/* Capacity is fixed: no lock needed to read it. */
	if (len > lc_ralloc_capacity(cn->arena))
		return LUNAR_ERR_INVALID_PARAMS;
	pthread_mutex_lock(&cn->lock);
	while ((rc = arena_take(cn, len, off)) != 0) {
		if (rc != -ENOSPC) {
			rc = LUNAR_ERR_INTERNAL;
			break;
		}
		if (shm_conn_is_broken(cn)) {
			rc = LUNAR_ERR_PROXY_UNAVAILABLE;
			break;
		}
		if (shm_wait_cond(cn, deadline_ns) == -ETIMEDOUT) {
			LC_DEBUG(SHM_LOG, "arena full: %llu bytes not free in time",
				 (unsigned long long)len);
			rc = LUNAR_ERR_BUSY;
			break;
		}
	}
	pthread_mutex_unlock(&cn->lock);
	return rc;
}

void shm_arena_put(struct shm_conn *cn, uint64_t off)
{
	pthread_mutex_lock(&cn->lock);
	if (lc_ralloc_put(cn->arena, off - cn->arena_off))
		LC_ERROR(SHM_LOG, "arena: no range at %llu", (unsigned long long)off);
	pthread_cond_broadcast(&cn->cond);
	pthread_mutex_unlock(&cn->lock);
}
