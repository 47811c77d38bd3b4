/*
 * test_threads.c - one handle, many threads (SPEC §4: any number of threads
 * may have calls in flight on one handle). Eight threads share a single
 * lunar_client against an embedded-master proxy; each runs 300 rounds of
 * put / exists / get_size / get_into / remove on its own keys with sizes from
 * 1 KiB to 256 KiB, and every byte read is checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NTHREADS 8
#define ROUNDS	 300
#define MIN_LEN	 1024u
#define MAX_LEN	 (256u * 1024u)

static char sock[PATH_MAX];
static struct lunar_client *cl;

/* cmocka must not be called off the main thread: workers record the first
 * failure here and the main thread asserts. */
struct worker {
	int id;
	int round;     /* where it failed */
	int64_t rc;    /* what the call returned */
	char what[96]; /* empty: no failure */
};

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, &cl, "--segment-size", "64MiB", NULL) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_embedded_node_stop(&cl);
	return 0;
}

static int failed(struct worker *w, int round, int64_t rc, const char *what)
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
	return MIN_LEN + (size_t)(x % (MAX_LEN - MIN_LEN + 1));
}

static int one_round(struct worker *w, int r, uint8_t *wbuf, uint8_t *rbuf)
{
	size_t len = round_len(w->id, r);
	char key[64];
	int64_t rc;

	snprintf(key, sizeof(key), "threads/t%d/r%d", w->id, r);
	h_fill(wbuf, len, h_seed(key));
	if ((rc = lunar_put(cl, key, wbuf, len, NULL)) != 0)
		return failed(w, r, rc, "put");
	if ((rc = lunar_exists(cl, key)) != 1)
		return failed(w, r, rc, "exists");
	if ((rc = lunar_get_size(cl, key)) != (int64_t)len)
		return failed(w, r, rc, "get_size");
	memset(rbuf, 0, len);
	if ((rc = lunar_get_into(cl, key, rbuf, MAX_LEN)) != (int64_t)len)
		return failed(w, r, rc, "get_into");
	if ((rc = h_verify(rbuf, len, h_seed(key))) >= 0)
		return failed(w, r, rc, "bytes differ at the offset in rc");
	/* Leased by the reads above, so forced; keeps the live set small. */
	if ((rc = lunar_remove(cl, key, 1)) != 0)
		return failed(w, r, rc, "remove");
	if ((rc = lunar_exists(cl, key)) != 0)
		return failed(w, r, rc, "exists after remove");
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *wbuf = malloc(MAX_LEN), *rbuf = malloc(MAX_LEN);

	if (!wbuf || !rbuf) {
		failed(w, 0, -1, "malloc");
	} else {
		for (int r = 0; r < ROUNDS; r++)
			if (one_round(w, r, wbuf, rbuf) != 0)
				break;
	}
	free(wbuf);
	free(rbuf);
	return NULL;
}

static void test_threads_shared_handle_round_trips(void **state)
{
	struct worker workers[NTHREADS];
	pthread_t th[NTHREADS];
	uint64_t t0 = h_now_ms();

	(void)state;
	memset(workers, 0, sizeof(workers));
	for (int i = 0; i < NTHREADS; i++) {
		workers[i].id = i;
		H_ASSERT_EQ(pthread_create(&th[i], NULL, worker_main, &workers[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	print_message("%d threads x %d rounds in %llu ms\n", NTHREADS, ROUNDS,
		      (unsigned long long)(h_now_ms() - t0));
	for (int i = 0; i < NTHREADS; i++) {
		struct worker *w = &workers[i];

		H_ASSERT_MSG(w->what[0] == '\0', "thread %d round %d: %s returned %lld (%s)", w->id,
			     w->round, w->what, (long long)w->rc, h_code(w->rc));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_threads_shared_handle_round_trips),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
