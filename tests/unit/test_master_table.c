/*
 * test_master_table.c - the master's object table (objects.c): open
 * addressing with linear probing, erase by shifting the run back. Keys are
 * chosen so that thousands land in one shard, where probe runs are long,
 * or so that a few form one run that wraps past the end of a fresh 16-slot
 * table; every key must stay findable through removes in any order, and a
 * sweep that erases must visit every object exactly once. A batch asks
 * memory for its keys ahead (prefetch.c) without waiting for a shard's lock,
 * and without a race on a table that grows meanwhile.
 */
#include "test_master_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "master/mst_obj.h"
#include "tests/cmocka_main.h"

#define SHARD 7	   /* the shard every key of these tests lands in */
#define NKEYS 3000 /* a table of 8192 slots at most half full */

/* Linked with --wrap=calloc (Makefile): while fail_slots is set, a slot
 * array cannot be allocated, so a table cannot grow. */
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);
static int fail_slots;

void *__wrap_calloc(size_t n, size_t size)
{
	if (fail_slots && size == sizeof(struct mst_slot))
		return NULL;
	return __real_calloc(n, size);
}

/* Where name's probe starts in a 16-slot table of SHARD; -1 in another shard. */
static int home16(const char *name)
{
	struct mst_okey ok;

	assert_int_equal(mst_okey_make(&ok, NULL, name), 0);
	return ok.hash % MST_SHARDS == SHARD ? (int)((ok.hash / MST_SHARDS) & 15) : -1;
}

struct keys {
	char name[NKEYS][32];
	int present[NKEYS];
};

/* NKEYS keys of one shard, found by trying names in turn. */
static struct keys *keys_of_one_shard(void)
{
	struct keys *k = calloc(1, sizeof(*k));
	char name[32];

	assert_non_null(k);
	for (unsigned i = 0, n = 0; n < NKEYS; i++) {
		snprintf(name, sizeof(name), "table-%u", i);
		if (home16(name) >= 0)
			memcpy(k->name[n++], name, sizeof(name));
	}
	return k;
}

static struct mst_shard *shard(struct mst_master *m)
{
	return &m->shards[SHARD];
}

static struct mst_master *filled(struct keys *k)
{
	struct mst_master *m = master_new(NULL, NULL);

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	for (int i = 0; i < NKEYS; i++) {
		assert_int_equal(put(m, CLIENT_A, k->name[i], 1024, 1), 0);
		k->present[i] = 1;
	}
	return m;
}

/* Every key is found exactly when present, and the shard counts them. */
static void check_all(struct mst_master *m, const struct keys *k)
{
	struct mst_shard *s;
	size_t n = 0, in_table = 0;

	for (int i = 0; i < NKEYS; i++) {
		assert_int_equal(exist(m, NULL, k->name[i]), k->present[i]);
		n += (size_t)k->present[i];
	}
	s = shard(m);
	pthread_mutex_lock(&s->lock);
	for (size_t j = 0; j < s->cap; j++)
		in_table += s->slots[j].o != NULL;
	assert_int_equal(s->n, n);
	assert_int_equal(in_table, n);
	assert_true(s->n < s->cap);
	pthread_mutex_unlock(&s->lock);
}

/* Removes in a scattered order, then the rest from the far end first. */
static void test_table_remove_keeps_every_probe(void **state)
{
	struct keys *k = keys_of_one_shard();
	struct mst_master *m = filled(k);

	(void)state;
	assert_true(shard(m)->cap >= 2 * NKEYS);
	check_all(m, k);
	for (int i = 0; i < NKEYS; i += 3) {
		assert_int_equal(remove_key(m, k->name[(i * 7) % NKEYS], 1), 0);
		k->present[(i * 7) % NKEYS] = 0;
	}
	check_all(m, k);
	for (int i = NKEYS - 1; i >= 0; i--) {
		if (!k->present[i] || i % 2)
			continue;
		assert_int_equal(remove_key(m, k->name[i], 1), 0);
		k->present[i] = 0;
	}
	check_all(m, k);
	/* what was removed goes in again, into the shifted runs */
	for (int i = 0; i < NKEYS; i++) {
		if (k->present[i])
			continue;
		assert_int_equal(put(m, CLIENT_A, k->name[i], 1024, 1), 0);
		k->present[i] = 1;
	}
	check_all(m, k);
	mst_master_destroy(m);
	free(k);
}

static int visit_count(struct mst_master *m, struct mst_object *o, void *arg)
{
	(void)m;
	(void)o;
	++*(size_t *)arg;
	return 0;
}

/* Erase every other object a sweep meets: with the shifts, each object is
 * still visited once. */
static int visit_erase_odd(struct mst_master *m, struct mst_object *o, void *arg)
{
	size_t *seen = arg;

	(void)m;
	(void)o;
	return (int)(++*seen % 2);
}

static void test_table_sweep_visits_each_once(void **state)
{
	struct keys *k = keys_of_one_shard();
	struct mst_master *m = filled(k);
	size_t seen = 0;
	int64_t erased;

	(void)state;
	assert_int_equal(mst_shard_sweep(m, SHARD, visit_count, &seen), 0);
	assert_int_equal(seen, NKEYS);
	seen = 0;
	erased = mst_shard_sweep(m, SHARD, visit_erase_odd, &seen);
	assert_int_equal(seen, NKEYS);
	assert_int_equal(erased, (NKEYS + 1) / 2);
	seen = 0;
	assert_int_equal(mst_shard_sweep(m, SHARD, visit_count, &seen), 0);
	assert_int_equal(seen, NKEYS - erased);
	assert_int_equal(shard(m)->n, NKEYS - erased);
	/* the objects left are exactly those still found by key */
	seen = 0;
	for (int i = 0; i < NKEYS; i++)
		seen += exist(m, NULL, k->name[i]) == 1;
	assert_int_equal(seen, NKEYS - erased);
	assert_int_equal(remove_all(m, NULL, 1), NKEYS - erased);
	assert_int_equal(shard(m)->n, 0);
	mst_master_destroy(m);
	free(k);
}

/* Keys of SHARD whose probes start at the given slots of a 16-slot table. */
#define NWRAP 7
static const unsigned wrap_homes[NWRAP] = {13, 14, 14, 15, 15, 0, 0};

static void keys_wrapping(char names[NWRAP][32])
{
	int taken[NWRAP] = {0};
	char name[32];

	for (unsigned i = 0, n = 0; n < NWRAP; i++) {
		int home;

		snprintf(name, sizeof(name), "wrap-%u", i);
		home = home16(name);
		for (int j = 0; home >= 0 && j < NWRAP; j++) {
			if (!taken[j] && (int)wrap_homes[j] == home) {
				taken[j] = 1;
				memcpy(names[j], name, sizeof(name));
				n++;
				break;
			}
		}
	}
}

/* A fresh master with the wrapping keys: one run over slots 13..15, 0..3. */
static struct mst_master *wrapped(char names[NWRAP][32])
{
	struct mst_master *m = master_new(NULL, NULL);
	struct mst_shard *s;

	keys_wrapping(names);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	for (int i = 0; i < NWRAP; i++)
		assert_int_equal(put(m, CLIENT_A, names[i], 1024, 1), 0);
	s = shard(m);
	assert_int_equal(s->cap, 16);
	assert_non_null(s->slots[15].o);
	assert_non_null(s->slots[0].o);
	assert_non_null(s->slots[3].o);
	assert_null(s->slots[4].o);
	return m;
}

/* Remove from the front of the wrapping run: the keys homed at 0 move back
 * across the end of the table, and stay found. */
static void test_table_remove_across_the_end(void **state)
{
	static const int order[NWRAP] = {0, 3, 1, 6, 2, 5, 4};
	char names[NWRAP][32];
	struct mst_master *m = wrapped(names);

	(void)state;
	for (int r = 0; r < NWRAP; r++) {
		assert_int_equal(remove_key(m, names[order[r]], 1), 0);
		for (int k = 0; k < NWRAP; k++) {
			int gone = 0;

			for (int q = 0; q <= r; q++)
				gone |= order[q] == k;
			assert_int_equal(exist(m, NULL, names[k]), !gone);
		}
		assert_int_equal(shard(m)->n, NWRAP - 1 - r);
	}
	mst_master_destroy(m);
}

struct seen {
	char (*names)[32];
	int times[NWRAP];
};

/* Count each object and erase the ones at even positions of names. */
static int visit_erase_even(struct mst_master *m, struct mst_object *o, void *arg)
{
	struct seen *v = arg;

	(void)m;
	for (int i = 0; i < NWRAP; i++) {
		if (!strcmp(mst_obj_key(o), v->names[i])) {
			v->times[i]++;
			return i % 2 == 0;
		}
	}
	fail_msg("swept an object of no test key: %s", mst_obj_key(o));
	return 0;
}

/* A sweep over the wrapping run visits each object once while it erases. */
static void test_table_sweep_across_the_end(void **state)
{
	char names[NWRAP][32];
	struct mst_master *m = wrapped(names);
	struct seen v = {names, {0}};

	(void)state;
	assert_int_equal(mst_shard_sweep(m, SHARD, visit_erase_even, &v), (NWRAP + 1) / 2);
	for (int i = 0; i < NWRAP; i++) {
		assert_int_equal(v.times[i], 1);
		assert_int_equal(exist(m, NULL, names[i]), i % 2);
	}
	assert_int_equal(shard(m)->n, NWRAP / 2);
	mst_master_destroy(m);
}

/* A table that cannot grow fills on, up to one empty slot that ends every
 * probe; a put past that is refused, and the table grows once it can. */
static void test_table_full_without_memory(void **state)
{
	struct keys *k = keys_of_one_shard();
	struct mst_master *m = master_new(NULL, NULL);
	struct mst_shard *s = shard(m);

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", 64 * MIB), 0);
	assert_int_equal(s->cap, 16);
	fail_slots = 1;
	for (int i = 0; i < 15; i++)
		assert_int_equal(put(m, CLIENT_A, k->name[i], 1024, 1), 0);
	assert_int_equal(s->cap, 16);
	assert_int_equal(put(m, CLIENT_A, k->name[15], 1024, 1), LUNAR_ERR_INTERNAL);
	for (int i = 0; i < 16; i++)
		assert_int_equal(exist(m, NULL, k->name[i]), i < 15);
	assert_int_equal(remove_key(m, k->name[3], 1), 0);
	assert_int_equal(put(m, CLIENT_A, k->name[15], 1024, 1), 0);
	assert_int_equal(exist(m, NULL, k->name[3]), 0);
	fail_slots = 0;
	assert_int_equal(put(m, CLIENT_A, k->name[3], 1024, 1), 0);
	assert_int_equal(s->cap, 32);
	for (int i = 0; i < 16; i++)
		assert_int_equal(exist(m, NULL, k->name[i]), 1);
	mst_master_destroy(m);
	free(k);
}

/* BatchExistKey over every key of the shard (batches of LUNAR_BATCH_MAX at
 * most), the middle one made not valid: each code where its key is. */
static void batch_exist_all(struct mst_master *m, struct keys *k)
{
	static char *names[NKEYS];

	for (int i = 0; i < NKEYS; i++)
		names[i] = i == NKEYS / 2 ? "" : k->name[i];
	for (size_t at = 0; at < NKEYS; at += LUNAR_BATCH_MAX) {
		Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
		Lunar__BatchCodesReply *r;

		rq.client_id = CLIENT_A;
		rq.keys = names + at;
		rq.n_keys = NKEYS - at < LUNAR_BATCH_MAX ? NKEYS - at : LUNAR_BATCH_MAX;
		r = (Lunar__BatchCodesReply *)call(m, LUNAR__METHOD__BATCH_EXIST_KEY, &rq);
		assert_int_equal(r->n_codes, rq.n_keys);
		for (size_t i = 0; i < rq.n_keys; i++)
			assert_int_equal(r->codes[i], at + i == NKEYS / 2 ? LUNAR_ERR_INVALID_KEY
									  : k->present[at + i]);
		protobuf_c_message_free_unpacked(&r->base, NULL);
	}
}

/* A batch whose keys' shard is locked (here by this very thread, which a
 * wait would deadlock) asks ahead without waiting, and its answers are
 * those of one key at a time. */
static void test_table_batch_prefetch_never_waits(void **state)
{
	struct keys *k = keys_of_one_shard();
	struct mst_master *m = filled(k);
	struct mst_prefetch a;

	(void)state;
	for (int i = 0; i < NKEYS; i += 2) {
		assert_int_equal(remove_key(m, k->name[i], 1), 0);
		k->present[i] = 0;
	}
	pthread_mutex_lock(&shard(m)->lock);
	{
		char *names[NKEYS];

		for (int i = 0; i < NKEYS; i++)
			names[i] = k->name[i];
		mst_prefetch_begin(&a, m, NULL, names, NKEYS);
		for (size_t i = 0; i < NKEYS; i++)
			mst_prefetch_step(&a, i);
	}
	pthread_mutex_unlock(&shard(m)->lock);
	batch_exist_all(m, k);
	mst_master_destroy(m);
	free(k);
}

struct grower {
	struct mst_master *m;
	struct keys *k;
	atomic_int go, done;
	int failed; /* the first put that did not succeed, its code; read after join */
};

/* Puts every key once a walk has begun (cmocka's asserts stay on the test
 * thread). */
static void *grow_main(void *arg)
{
	struct grower *g = arg;

	while (!atomic_load(&g->go))
		sched_yield();
	for (int i = 0; i < NKEYS && !g->failed; i++) {
		g->failed = put(g->m, CLIENT_A, g->k->name[i], 1024, 1);
		g->k->present[i] = !g->failed;
	}
	atomic_store(&g->done, 1);
	return NULL;
}

/* Batches ask ahead while another thread's puts double the shard's table
 * again and again (16 -> 8192 slots): the TSan build finds no race (the
 * table's pointer and size are read without the lock); then every key
 * answers. */
static void test_table_batch_prefetch_beside_growth(void **state)
{
	struct keys *k = keys_of_one_shard();
	struct grower g = {.m = master_new(NULL, NULL), .k = k};
	static char *names[NKEYS];
	pthread_t th;
	struct mst_prefetch a;

	(void)state;
	assert_int_equal(mount(g.m, CLIENT_A, "seg-a", 64 * MIB), 0);
	for (int i = 0; i < NKEYS; i++)
		names[i] = k->name[i];
	assert_int_equal(pthread_create(&th, NULL, grow_main, &g), 0);
	do {
		mst_prefetch_begin(&a, g.m, NULL, names, NKEYS);
		atomic_store(&g.go, 1);
		for (size_t i = 0; i < NKEYS; i++)
			mst_prefetch_step(&a, i);
	} while (!atomic_load(&g.done));
	pthread_join(th, NULL);
	assert_int_equal(g.failed, 0);
	assert_int_equal(shard(g.m)->cap, 8192);
	batch_exist_all(g.m, k);
	mst_master_destroy(g.m);
	free(k);
}

LUNAR_TEST_MAIN(NULL, NULL, test_table_remove_keeps_every_probe, test_table_sweep_visits_each_once,
		test_table_remove_across_the_end, test_table_sweep_across_the_end,
		test_table_full_without_memory, test_table_batch_prefetch_never_waits,
		test_table_batch_prefetch_beside_growth)
