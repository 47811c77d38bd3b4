/*
 * test_shm_arena.c - liblunar's free sets (shmlib/bits.c) and its arena
 * (shmlib/arena.c): small blocks come from cells without the session lock,
 * larger ones and the overflow from the range allocator, and a waiter for
 * space is woken by a freed cell as by a freed range.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "shmlib/shm_int.h"
#include "tests/cmocka_main.h"

#define ARENA_OFF 4096u

/* A session with only what the arena uses: no region, no proxy. */
static struct shm_conn *conn_new(uint64_t arena_size, uint32_t slots)
{
	struct shm_conn *cn = calloc(1, sizeof(*cn));

	assert_non_null(cn);
	cn->arena_off = ARENA_OFF;
	cn->arena_size = arena_size;
	cn->slot_count = slots;
	pthread_mutex_init(&cn->lock, NULL);
	lc_cond_init(&cn->cond);
	assert_int_equal(shm_arena_init(cn), 0);
	return cn;
}

static void conn_free(struct shm_conn *cn)
{
	shm_arena_fini(cn);
	pthread_cond_destroy(&cn->cond);
	pthread_mutex_destroy(&cn->lock);
	free(cn);
}

static uint64_t in_ms(uint64_t ms)
{
	return lc_now_ns() + ms * 1000000ull;
}

static int is_cell(const struct shm_conn *cn, uint64_t off)
{
	return off >= ARENA_OFF && off < cn->cells_end && (off - ARENA_OFF) % SHM_CELL == 0;
}

static void test_arena_cells_then_ranges(void **state)
{
	/* 1 MiB / 8 / 8 KiB = 16 cells at most; 4 slots, so 4 cells. */
	struct shm_conn *cn = conn_new(1u << 20, 4);
	uint64_t off[5], big;

	assert_int_equal(cn->cells_end, ARENA_OFF + 4 * SHM_CELL);
	assert_int_equal(cn->arena_max, (1u << 20) - 4 * SHM_CELL);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(shm_arena_get(cn, i ? SHM_CELL : 1, in_ms(1000), &off[i]), 0);
		assert_true(is_cell(cn, off[i]));
		for (int j = 0; j < i; j++)
			assert_true(off[i] != off[j]);
	}
	/* Every cell taken: a small block comes from the ranges. */
	assert_int_equal(shm_arena_get(cn, 100, in_ms(1000), &off[4]), 0);
	assert_true(off[4] >= cn->cells_end);
	assert_int_equal(off[4] % SHM_ARENA_ALIGN, 0);
	shm_arena_put(cn, off[4]);
	/* A cell freed is the next small block's. */
	shm_arena_put(cn, off[2]);
	assert_int_equal(shm_arena_get(cn, 100, in_ms(1000), &off[4]), 0);
	assert_int_equal(off[4], off[2]);
	/* Larger than a cell: a range, up to the allocator's whole space. */
	assert_int_equal(shm_arena_get(cn, SHM_CELL + 1, in_ms(1000), &big), 0);
	assert_true(big >= cn->cells_end);
	shm_arena_put(cn, big);
	assert_int_equal(shm_arena_get(cn, cn->arena_max, in_ms(1000), &big), 0);
	assert_int_equal(big, cn->cells_end);
	shm_arena_put(cn, big);
	assert_int_equal(shm_arena_get(cn, cn->arena_max + 1, in_ms(1000), &big),
			 LUNAR_ERR_INVALID_PARAMS);
	for (int i = 0; i < 4; i++)
		shm_arena_put(cn, off[i == 2 ? 4 : i]);
	conn_free(cn);
}

static void test_arena_small_has_no_cells(void **state)
{
	/* Under 8 cells' worth, the arena is all ranges. */
	struct shm_conn *cn = conn_new(32u << 10, 256);
	uint64_t off;

	assert_int_equal(cn->cells_end, ARENA_OFF);
	assert_int_equal(cn->arena_max, 32u << 10);
	assert_int_equal(shm_arena_get(cn, 1, in_ms(1000), &off), 0);
	assert_int_equal(off, ARENA_OFF);
	shm_arena_put(cn, off);
	conn_free(cn);
}

struct getter {
	struct shm_conn *cn;
	uint64_t len, wait_ms;
	uint64_t off;
	int rc;
	int done; /* atomic */
};

static void *getter_run(void *arg)
{
	struct getter *g = arg;

	g->rc = shm_arena_get(g->cn, g->len, in_ms(g->wait_ms), &g->off);
	lc_store_release(&g->done, 1);
	return NULL;
}

/* Wait up to ms for g to finish; 1 if it did. */
static int finished_within(struct getter *g, uint64_t ms)
{
	uint64_t end = in_ms(ms);

	while (!lc_load_acquire(&g->done) && lc_now_ns() < end)
		usleep(1000);
	return lc_load_acquire(&g->done);
}

static void test_arena_cell_needs_no_lock(void **state)
{
	struct shm_conn *cn = conn_new(1u << 20, 8);
	struct getter g = {cn, 200, 1000, 0, -1, 0};
	pthread_t th;
	int done;

	/* Another thread holds the session lock (a waiter, a large block):
	 * a small block is taken all the same. */
	pthread_mutex_lock(&cn->lock);
	pthread_create(&th, NULL, getter_run, &g);
	done = finished_within(&g, 2000);
	pthread_mutex_unlock(&cn->lock);
	pthread_join(th, NULL);
	assert_true(done);
	assert_int_equal(g.rc, 0);
	assert_true(is_cell(cn, g.off));
	shm_arena_put(cn, g.off);
	conn_free(cn);
}

static void test_arena_freed_cell_wakes_waiter(void **state)
{
	struct shm_conn *cn = conn_new(1u << 20, 2);
	struct getter g = {cn, 100, 5000, 0, -1, 0};
	uint64_t c0, c1, all;
	pthread_t th;
	uint64_t t0;

	/* Both cells and the whole range space taken: the small get waits. */
	assert_int_equal(shm_arena_get(cn, 1, in_ms(1000), &c0), 0);
	assert_int_equal(shm_arena_get(cn, 1, in_ms(1000), &c1), 0);
	assert_int_equal(shm_arena_get(cn, cn->arena_max, in_ms(1000), &all), 0);
	pthread_create(&th, NULL, getter_run, &g);
	assert_false(finished_within(&g, 100));
	/* Freeing a cell without the lock must still wake it, long before its
	 * deadline. */
	t0 = lc_now_ms();
	shm_arena_put(cn, c1);
	assert_true(finished_within(&g, 2000));
	pthread_join(th, NULL);
	assert_true(lc_now_ms() - t0 < 2000);
	assert_int_equal(g.rc, 0);
	assert_int_equal(g.off, c1);
	/* And a waiter for a range is woken by the range. */
	g = (struct getter){cn, 4 * SHM_CELL, 5000, 0, -1, 0};
	pthread_create(&th, NULL, getter_run, &g);
	assert_false(finished_within(&g, 100));
	shm_arena_put(cn, all);
	assert_true(finished_within(&g, 2000));
	pthread_join(th, NULL);
	assert_int_equal(g.rc, 0);
	assert_int_equal(g.off, cn->cells_end);
	shm_arena_put(cn, g.off);
	shm_arena_put(cn, c1);
	shm_arena_put(cn, c0);
	/* Nothing is freed in time: BUSY at the deadline. */
	assert_int_equal(shm_arena_get(cn, cn->arena_max, in_ms(1000), &all), 0);
	assert_int_equal(shm_arena_get(cn, SHM_CELL + 1, in_ms(50), &c0), LUNAR_ERR_BUSY);
	shm_arena_put(cn, all);
	conn_free(cn);
}

static void test_bits_take_all(void **state)
{
	struct shm_bits b;
	uint8_t seen[70] = {0};
	uint32_t i;

	/* Not a multiple of 64: the tail of the last word is never handed out. */
	assert_int_equal(shm_bits_init(&b, 70), 0);
	for (int k = 0; k < 70; k++) {
		assert_int_equal(shm_bits_free(&b), 70 - k);
		assert_int_equal(shm_bits_take(&b, &i), 0);
		assert_true(i < 70);
		assert_false(seen[i]);
		seen[i] = 1;
	}
	assert_int_equal(shm_bits_take(&b, &i), -1);
	assert_int_equal(shm_bits_free(&b), 0);
	shm_bits_give(&b, 69);
	assert_int_equal(shm_bits_free(&b), 1);
	assert_int_equal(shm_bits_take(&b, &i), 0);
	assert_int_equal(i, 69);
	shm_bits_fini(&b);
	/* An empty set has nothing to take. */
	assert_int_equal(shm_bits_init(&b, 0), 0);
	assert_int_equal(shm_bits_free(&b), 0);
	assert_int_equal(shm_bits_take(&b, &i), -1);
	shm_bits_fini(&b);
}

#define RACE_THREADS 8
#define RACE_ROUNDS  100000
#define RACE_THINGS  5

struct race {
	struct shm_bits b;
	uint32_t owner[RACE_THINGS]; /* atomic; 0 or 1 + the holder's number */
	uint32_t clashes;	     /* atomic */
};

struct racer {
	struct race *r;
	uint32_t id;
};

static void *racer_run(void *arg)
{
	struct racer *me = arg;
	struct race *r = me->r;
	uint32_t i;

	for (int k = 0; k < RACE_ROUNDS; k++) {
		if (shm_bits_take(&r->b, &i))
			continue;
		if (lc_xchg(&r->owner[i], me->id + 1) != 0)
			lc_fetch_add(&r->clashes, 1u);
		if (lc_xchg(&r->owner[i], 0u) != me->id + 1)
			lc_fetch_add(&r->clashes, 1u);
		shm_bits_give(&r->b, i);
	}
	return NULL;
}

static void test_bits_threads_never_share(void **state)
{
	static struct race r;
	struct racer me[RACE_THREADS];
	pthread_t th[RACE_THREADS];
	uint32_t i;

	assert_int_equal(shm_bits_init(&r.b, RACE_THINGS), 0);
	for (uint32_t t = 0; t < RACE_THREADS; t++) {
		me[t] = (struct racer){&r, t};
		pthread_create(&th[t], NULL, racer_run, &me[t]);
	}
	for (int t = 0; t < RACE_THREADS; t++)
		pthread_join(th[t], NULL);
	assert_int_equal(r.clashes, 0);
	/* Every thing came back. */
	for (int k = 0; k < RACE_THINGS; k++)
		assert_int_equal(shm_bits_take(&r.b, &i), 0);
	assert_int_equal(shm_bits_take(&r.b, &i), -1);
	shm_bits_fini(&r.b);
}

LUNAR_TEST_MAIN(NULL, NULL, test_arena_cells_then_ranges, test_arena_small_has_no_cells,
		test_arena_cell_needs_no_lock, test_arena_freed_cell_wakes_waiter,
		test_bits_take_all, test_bits_threads_never_share)
