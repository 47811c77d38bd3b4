/*
 * test_threads.c - 64 threads on ONE handle (SPEC §4: any number of
 * threads may have calls in flight on one handle). Each thread runs OPS
 * mixed calls - put of a new key (64 B..64 KiB, log-uniform), get_into of
 * one of its live keys with every byte checked, exists of a live key (1) or
 * of one it removed (0), and a forced remove when its window of live keys is
 * full - against an embedded-master proxy. Even threads use lunar_alloc
 * buffers (in place), odd ones malloc buffers (staged), so both paths and the
 * registration table's lock run concurrently. Must finish within 40 s on two
 * cores; the time and the call mix are printed. A second run, shorter, adds
 * one thread that registers and unregisters its own memfd over and over and
 * uses it both ways (in place, then staged) while the 64 are busy. And
 * eight threads with a batch of 1024 keys each in flight (8192, the
 * proxy's bound) are never told BUSY. Last, eight threads run 300 plain
 * rounds each of put / exists / get_size / get_into / remove on their own
 * keys, 1 KiB..256 KiB, every byte read checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define NTHREADS  64
#define OPS	  1000
#define WINDOW	  4
#define MIN_LEN	  64u
#define MAX_LEN	  (64u * 1024u)
#define BUDGET_MS 40000

enum { OP_PUT, OP_GET, OP_EXISTS, OP_EXISTS_GONE, OP_REMOVE, OP_KINDS };
static const char *const op_name[OP_KINDS] = {"put", "get", "exists", "exists(removed)", "remove"};

static char sock[PATH_MAX];
static struct lunar_client *cl;
static int ops_per_thread = OPS;
static int run_no; /* keys differ between runs */

struct worker {
	int id;
	uint64_t rng;
	int next_key;	  /* keys 0..next_key-1 were put */
	int live[WINDOW]; /* key numbers, oldest first */
	int nlive;
	int last_removed; /* -1: none yet */
	uint64_t counts[OP_KINDS];
	uint8_t *wbuf, *rbuf;
	/* The first failure; cmocka is asserted on the main thread only. */
	int op;
	int64_t rc;
	char what[128];
};

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	if (!h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "128MiB", NULL))
		return -1;
	cl = h_client_try(sock, 20000, NULL);
	return cl ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_embedded_node_stop(&cl);
	return 0;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void key_of(const struct worker *w, int k, char *key, size_t len)
{
	snprintf(key, len, "threads/r%d/t%02d/k%04d", run_no, w->id, k);
}

/* Log-uniform over 64 B..64 KiB, derived from the key so a reader knows. */
static size_t len_of(const char *key)
{
	uint64_t x = h_seed(key);
	unsigned bits = (unsigned)(x % 11); /* 2^6 .. 2^16 */
	size_t lo = (size_t)MIN_LEN << bits, span = lo;

	if (lo >= MAX_LEN)
		return MAX_LEN;
	return lo + (size_t)((x >> 8) % span);
}

static int failed(struct worker *w, int op, int64_t rc, const char *key, const char *why)
{
	w->op = op;
	w->rc = rc;
	snprintf(w->what, sizeof(w->what), "%s %s: %s", op_name[op], key, why);
	return -1;
}

static int do_put(struct worker *w)
{
	char key[64];
	size_t len;
	int64_t rc;

	key_of(w, w->next_key, key, sizeof(key));
	len = len_of(key);
	h_fill(w->wbuf, len, h_seed(key));
	w->counts[OP_PUT]++;
	if ((rc = lunar_put(cl, key, w->wbuf, len, NULL)) != 0)
		return failed(w, OP_PUT, rc, key, "not 0");
	w->live[w->nlive++] = w->next_key++;
	return 0;
}

static int do_remove_oldest(struct worker *w)
{
	char key[64];
	int64_t rc;

	key_of(w, w->live[0], key, sizeof(key));
	w->counts[OP_REMOVE]++;
	/* Read leases would refuse a plain remove. */
	if ((rc = lunar_remove(cl, key, 1)) != 0)
		return failed(w, OP_REMOVE, rc, key, "not 0");
	w->last_removed = w->live[0];
	memmove(w->live, w->live + 1, (size_t)(w->nlive - 1) * sizeof(int));
	w->nlive--;
	return 0;
}

static int do_get(struct worker *w, int k)
{
	char key[64];
	size_t len;
	int64_t rc, bad;

	key_of(w, k, key, sizeof(key));
	len = len_of(key);
	memset(w->rbuf, 0, len);
	w->counts[OP_GET]++;
	rc = lunar_get_into(cl, key, w->rbuf, MAX_LEN);
	if (rc != (int64_t)len)
		return failed(w, OP_GET, rc, key, "not the value's size");
	if ((bad = h_verify(w->rbuf, len, h_seed(key))) >= 0)
		return failed(w, OP_GET, bad, key, "wrong byte at the offset in rc");
	return 0;
}

static int do_exists(struct worker *w, int k, int op, int want)
{
	char key[64];
	int64_t rc;

	key_of(w, k, key, sizeof(key));
	w->counts[op]++;
	if ((rc = lunar_exists(cl, key)) != want)
		return failed(w, op, rc, key, want ? "expected 1" : "expected 0");
	return 0;
}

static int one_op(struct worker *w)
{
	uint64_t r = rng_next(&w->rng);
	unsigned pick = (unsigned)(r % 100);
	int k = w->nlive ? w->live[(r >> 32) % (unsigned)w->nlive] : -1;

	if (!w->nlive || pick < 30)
		return w->nlive == WINDOW ? do_remove_oldest(w) : do_put(w);
	if (pick < 75)
		return do_get(w, k);
	if (pick < 95 || w->last_removed < 0)
		return do_exists(w, k, OP_EXISTS, 1);
	return do_exists(w, w->last_removed, OP_EXISTS_GONE, 0);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int zero_copy = w->id % 2 == 0;

	w->wbuf = zero_copy ? lunar_alloc(cl, MAX_LEN) : malloc(MAX_LEN);
	w->rbuf = zero_copy ? lunar_alloc(cl, MAX_LEN) : malloc(MAX_LEN);
	if (!w->wbuf || !w->rbuf) {
		failed(w, OP_PUT, -1, "-", "no buffers");
	} else {
		for (int i = 0; i < ops_per_thread; i++)
			if (one_op(w) != 0)
				break;
	}
	if (zero_copy) {
		lunar_free(cl, w->wbuf);
		lunar_free(cl, w->rbuf);
	} else {
		free(w->wbuf);
		free(w->rbuf);
	}
	return NULL;
}

/* Runs the 64 workers; total calls by kind into total, wall time back. */
static uint64_t run_workers(struct worker *workers, uint64_t *total)
{
	pthread_t th[NTHREADS];
	uint64_t t0 = h_now_ms();

	memset(workers, 0, NTHREADS * sizeof(*workers));
	for (int i = 0; i < NTHREADS; i++) {
		workers[i].id = i;
		workers[i].rng = h_seed("threads") + (uint64_t)i + (uint64_t)run_no * 1000;
		workers[i].last_removed = -1;
		H_ASSERT_EQ(pthread_create(&th[i], NULL, worker_main, &workers[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < NTHREADS; i++)
		for (int k = 0; k < OP_KINDS; k++)
			total[k] += workers[i].counts[k];
	return h_now_ms() - t0;
}

static void check_workers(const struct worker *workers)
{
	for (int i = 0; i < NTHREADS; i++) {
		const struct worker *w = &workers[i];

		H_ASSERT_MSG(w->what[0] == '\0', "thread %d: %s (rc %lld, %s)", w->id, w->what,
			     (long long)w->rc, h_code(w->rc));
	}
}

static void test_threads_64_on_one_handle(void **state)
{
	static struct worker workers[NTHREADS];
	uint64_t total[OP_KINDS] = {0}, took;

	(void)state;
	run_no = 1;
	ops_per_thread = OPS;
	took = run_workers(workers, total);
	print_message("%d threads x %d calls on one handle in %llu ms (%.0f calls/s): put %llu, "
		      "get %llu, exists %llu, exists(removed) %llu, remove %llu\n",
		      NTHREADS, OPS, (unsigned long long)took,
		      (double)NTHREADS * OPS * 1000.0 / (double)(took ? took : 1),
		      (unsigned long long)total[OP_PUT], (unsigned long long)total[OP_GET],
		      (unsigned long long)total[OP_EXISTS],
		      (unsigned long long)total[OP_EXISTS_GONE],
		      (unsigned long long)total[OP_REMOVE]);
	check_workers(workers);
	H_ASSERT_MSG(took < BUDGET_MS, "took %llu ms, budget %d ms", (unsigned long long)took,
		     BUDGET_MS);
}

/* --- registering and unregistering while the handle is busy --- */

#define REG_LEN (4u * 1024u * 1024u)
#define REG_VAL (64u * 1024u + 5)
#define REG_OPS 300
#define MIB_OFF (1024u * 1024u)

struct registrar {
	atomic_int stop;
	int cycles;
	int64_t rc;
	char what[128];
};

static int reg_failed(struct registrar *r, int64_t rc, const char *what)
{
	r->rc = rc;
	snprintf(r->what, sizeof(r->what), "cycle %d: %s", r->cycles, what);
	return -1;
}

/* One cycle: register, put and get in place, unregister, get staged. */
static int reg_cycle(struct registrar *r, uint8_t *mem)
{
	char key[64];
	int64_t rc;

	snprintf(key, sizeof(key), "threads/registrar/%d", r->cycles);
	if ((rc = lunar_register(cl, mem, REG_LEN)) != 0)
		return reg_failed(r, rc, "register");
	h_fill(mem + 4096 + 7, REG_VAL, h_seed(key));
	if ((rc = lunar_put(cl, key, mem + 4096 + 7, REG_VAL, NULL)) != 0)
		return reg_failed(r, rc, "put from registered memory");
	memset(mem + MIB_OFF, 0, REG_VAL);
	if ((rc = lunar_get_into(cl, key, mem + MIB_OFF, REG_VAL)) != REG_VAL ||
	    h_verify(mem + MIB_OFF, REG_VAL, h_seed(key)) >= 0)
		return reg_failed(r, rc, "get into registered memory");
	if ((rc = lunar_unregister(cl, mem)) != 0)
		return reg_failed(r, rc, "unregister");
	memset(mem + 2 * MIB_OFF, 0, REG_VAL);
	if ((rc = lunar_get_into(cl, key, mem + 2 * MIB_OFF, REG_VAL)) != REG_VAL ||
	    h_verify(mem + 2 * MIB_OFF, REG_VAL, h_seed(key)) >= 0)
		return reg_failed(r, rc, "get into the same memory, unregistered");
	if ((rc = lunar_remove(cl, key, 1)) != 0)
		return reg_failed(r, rc, "remove");
	r->cycles++;
	return 0;
}

static void *registrar_main(void *arg)
{
	struct registrar *r = arg;
	int fd = memfd_create("t3-registrar", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	uint8_t *mem = MAP_FAILED;

	if (fd >= 0 && !ftruncate(fd, REG_LEN) && !fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
		mem = mmap(NULL, REG_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (mem == MAP_FAILED) {
		reg_failed(r, -1, "memfd");
	} else {
		while (!atomic_load(&r->stop))
			if (reg_cycle(r, mem) != 0)
				break;
		munmap(mem, REG_LEN);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void test_threads_register_while_busy(void **state)
{
	static struct worker workers[NTHREADS];
	uint64_t total[OP_KINDS] = {0}, took;
	struct registrar r = {0};
	pthread_t th;

	(void)state;
	run_no = 2;
	ops_per_thread = REG_OPS;
	H_ASSERT_EQ(pthread_create(&th, NULL, registrar_main, &r), 0);
	took = run_workers(workers, total);
	atomic_store(&r.stop, 1);
	pthread_join(th, NULL);
	print_message("%d threads x %d calls in %llu ms while one thread did %d "
		      "register/put/get/unregister/get cycles\n",
		      NTHREADS, REG_OPS, (unsigned long long)took, r.cycles);
	check_workers(workers);
	H_ASSERT_MSG(r.what[0] == '\0', "registrar: %s = %lld (%s)", r.what, (long long)r.rc,
		     h_code(r.rc));
	H_ASSERT_MSG(r.cycles > 0, "the registrar completed no cycle");
}

#define BATCH_THREADS 8
#define BATCH_KEYS    1024
#define BATCH_ROUNDS  150

struct batcher {
	int id;
	long busy, failed;
};

/* Rounds of one batch exists of BATCH_KEYS keys, counting refusals. */
static void *batcher_main(void *arg)
{
	static __thread char names[BATCH_KEYS][32];
	struct batcher *b = arg;
	const char *keys[BATCH_KEYS];
	int res[BATCH_KEYS];

	for (int i = 0; i < BATCH_KEYS; i++) {
		snprintf(names[i], sizeof(names[i]), "batch/%d-%d", b->id, i);
		keys[i] = names[i];
	}
	for (int r = 0; r < BATCH_ROUNDS; r++) {
		int rc = lunar_batch_exists(cl, BATCH_KEYS, keys, res);

		if (rc == LUNAR_ERR_BUSY || (rc == 0 && res[0] == LUNAR_ERR_BUSY))
			b->busy++;
		else if (rc || res[0] != 0)
			b->failed++;
	}
	return NULL;
}

/* The bound counts a request out before its client sees it done, so the
 * batch a thread sends as it wakes is let in (it was refused when the
 * worker had not yet counted the last one out). */
static void test_threads_batches_at_the_bound(void **state)
{
	struct batcher b[BATCH_THREADS];
	pthread_t th[BATCH_THREADS];
	long busy = 0, failed = 0;

	(void)state;
	for (int i = 0; i < BATCH_THREADS; i++) {
		b[i] = (struct batcher){.id = i};
		H_ASSERT_EQ(pthread_create(&th[i], NULL, batcher_main, &b[i]), 0);
	}
	for (int i = 0; i < BATCH_THREADS; i++) {
		pthread_join(th[i], NULL);
		busy += b[i].busy;
		failed += b[i].failed;
	}
	print_message("%d threads x %d batches of %d keys: %ld BUSY, %ld failed\n", BATCH_THREADS,
		      BATCH_ROUNDS, BATCH_KEYS, busy, failed);
	H_ASSERT_EQ(busy, 0);
	H_ASSERT_EQ(failed, 0);
}

/* --- eight threads, plain round trips: put / exists / get_size / get_into /
 * remove on their own keys, 1 KiB..256 KiB, every byte read checked --- */

#define RT_THREADS 8
#define RT_ROUNDS  300
#define RT_MIN_LEN 1024u
#define RT_MAX_LEN (256u * 1024u)

/* cmocka must not be called off the main thread: workers record the first
 * failure here and the main thread asserts. */
struct rt_worker {
	int id;
	int round;     /* where it failed */
	int64_t rc;    /* what the call returned */
	char what[96]; /* empty: no failure */
};

static int rt_failed(struct rt_worker *w, int round, int64_t rc, const char *what)
{
	w->round = round;
	w->rc = rc;
	snprintf(w->what, sizeof(w->what), "%s", what);
	return -1;
}

/* Sizes sweep 1 KiB..256 KiB, differently per thread, odd lengths included. */
static size_t round_len(int id, int round)
{
	uint64_t x = h_seed("len") ^ ((uint64_t)id << 32 | (uint64_t)round);

	x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
	return RT_MIN_LEN + (size_t)(x % (RT_MAX_LEN - RT_MIN_LEN + 1));
}

static int one_round(struct rt_worker *w, int r, uint8_t *wbuf, uint8_t *rbuf)
{
	size_t len = round_len(w->id, r);
	char key[64];
	int64_t rc;

	snprintf(key, sizeof(key), "threads/t%d/r%d", w->id, r);
	h_fill(wbuf, len, h_seed(key));
	if ((rc = lunar_put(cl, key, wbuf, len, NULL)) != 0)
		return rt_failed(w, r, rc, "put");
	if ((rc = lunar_exists(cl, key)) != 1)
		return rt_failed(w, r, rc, "exists");
	if ((rc = lunar_get_size(cl, key)) != (int64_t)len)
		return rt_failed(w, r, rc, "get_size");
	memset(rbuf, 0, len);
	if ((rc = lunar_get_into(cl, key, rbuf, RT_MAX_LEN)) != (int64_t)len)
		return rt_failed(w, r, rc, "get_into");
	if ((rc = h_verify(rbuf, len, h_seed(key))) >= 0)
		return rt_failed(w, r, rc, "bytes differ at the offset in rc");
	/* Leased by the reads above, so forced; keeps the live set small. */
	if ((rc = lunar_remove(cl, key, 1)) != 0)
		return rt_failed(w, r, rc, "remove");
	if ((rc = lunar_exists(cl, key)) != 0)
		return rt_failed(w, r, rc, "exists after remove");
	return 0;
}

static void *rt_worker_main(void *arg)
{
	struct rt_worker *w = arg;
	uint8_t *wbuf = malloc(RT_MAX_LEN), *rbuf = malloc(RT_MAX_LEN);

	if (!wbuf || !rbuf) {
		rt_failed(w, 0, -1, "malloc");
	} else {
		for (int r = 0; r < RT_ROUNDS; r++)
			if (one_round(w, r, wbuf, rbuf) != 0)
				break;
	}
	free(wbuf);
	free(rbuf);
	return NULL;
}

static void test_threads_shared_handle_round_trips(void **state)
{
	struct rt_worker workers[RT_THREADS];
	pthread_t th[RT_THREADS];
	uint64_t t0 = h_now_ms();

	(void)state;
	memset(workers, 0, sizeof(workers));
	for (int i = 0; i < RT_THREADS; i++) {
		workers[i].id = i;
		H_ASSERT_EQ(pthread_create(&th[i], NULL, rt_worker_main, &workers[i]), 0);
	}
	for (int i = 0; i < RT_THREADS; i++)
		pthread_join(th[i], NULL);
	print_message("%d threads x %d rounds in %llu ms\n", RT_THREADS, RT_ROUNDS,
		      (unsigned long long)(h_now_ms() - t0));
	for (int i = 0; i < RT_THREADS; i++) {
		struct rt_worker *w = &workers[i];

		H_ASSERT_MSG(w->what[0] == '\0', "thread %d round %d: %s returned %lld (%s)", w->id,
			     w->round, w->what, (long long)w->rc, h_code(w->rc));
	}
}

LUNAR_TEST_MAIN(setup, teardown, test_threads_64_on_one_handle, test_threads_register_while_busy,
		test_threads_batches_at_the_bound, test_threads_shared_handle_round_trips)
