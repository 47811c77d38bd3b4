/*
 * arena.c - the session's shared arena, where requests build their argument
 * blocks and stage values. Each request takes one block (so it never holds
 * part of the arena while waiting for more).
 *
 * The arena starts with one SHM_CELL-sized cell per completion slot (at
 * most an eighth of it): a block that fits a cell, which is every request
 * from registered memory with a key of common length, takes a free cell
 * with one CAS and frees it with one atomic OR. Larger blocks, and small
 * ones while every cell is taken, come from a range allocator over the rest
 * under the session lock. When neither has room a request waits for a block
 * to be freed, up to its deadline.
 */
#include "shm_int.h"

#include <errno.h>

#include "atomic.h"
#include "log.h"
#include "ralloc.h"

int shm_arena_init(struct shm_conn *cn)
{
	uint64_t cells = cn->arena_size / 8 / SHM_CELL;

	if (cells > cn->slot_count)
		cells = cn->slot_count;
	cn->cells_end = cn->arena_off + cells * SHM_CELL;
	cn->arena = lc_ralloc_create(cn->arena_size - cells * SHM_CELL, SHM_ARENA_ALIGN);
	if (!cn->arena || shm_bits_init(&cn->free_cells, (uint32_t)cells))
		return LUNAR_ERR_INTERNAL;
	cn->arena_max = lc_ralloc_capacity(cn->arena);
	return 0;
}

void shm_arena_fini(struct shm_conn *cn)
{
	lc_ralloc_destroy(cn->arena);
	cn->arena = NULL;
	shm_bits_fini(&cn->free_cells);
}

static int cell_take(struct shm_conn *cn, uint64_t len, uint64_t *off)
{
	uint32_t i;

	if (len > SHM_CELL || shm_bits_take(&cn->free_cells, &i))
		return -1;
	*off = cn->arena_off + (uint64_t)i * SHM_CELL;
	return 0;
}

/* cn->lock held: a cell or a range. 0, -ENOSPC, or -ENOMEM. */
static int block_take(struct shm_conn *cn, uint64_t len, uint64_t *off)
{
	int rc;

	if (!cell_take(cn, len, off))
		return 0;
	rc = lc_ralloc_get(cn->arena, len, off);
	if (!rc)
		*off += cn->cells_end;
	return rc;
}

int shm_arena_get(struct shm_conn *cn, uint64_t len, uint64_t deadline_ns, uint64_t *off)
{
	int rc;

	/* Fixed at connect time: no lock needed to read it. */
	if (len > cn->arena_max)
		return LUNAR_ERR_INVALID_PARAMS;
	if (!cell_take(cn, len, off))
		return 0;
	pthread_mutex_lock(&cn->lock);
	shm_waiter_enter(cn);
	while ((rc = block_take(cn, len, off)) != 0) {
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
	shm_waiter_leave(cn);
	pthread_mutex_unlock(&cn->lock);
	return rc;
}

void shm_arena_put(struct shm_conn *cn, uint64_t off)
{
	if (off < cn->cells_end) {
		shm_bits_give(&cn->free_cells, (uint32_t)((off - cn->arena_off) / SHM_CELL));
		shm_wake_waiters(cn);
		return;
	}
	pthread_mutex_lock(&cn->lock);
	if (lc_ralloc_put(cn->arena, off - cn->cells_end, NULL))
		LC_ERROR(SHM_LOG, "arena: no range at %llu", (unsigned long long)off);
	if (LC_READ_ONCE(cn->waiters))
		pthread_cond_broadcast(&cn->cond);
	pthread_mutex_unlock(&cn->lock);
}
