/*
 * test_uncommitted.c - readers never see a put before it commits (SPEC §3:
 * PROCESSING data is invisible). The proxy runs with --debug-put-delay 2s, so
 * a put sits between writing its bytes and PutEnd for two seconds; another
 * handle meanwhile sees exists == 0 and get == REPLICA_IS_NOT_READY, and the
 * object appears whole once the put returns.
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

#include "atomic.h"
#include "harness.h"
#include "tests/cmocka_main.h"

#define OBJ_LEN	     (256u * 1024u)
#define PUT_DELAY_MS 2000

static char sock[PATH_MAX];

struct writer {
	struct lunar_client *c;
	const char *key;
	void *buf;
	int rc;
	uint64_t started, ended; /* h_now_ms */
	int done;		 /* atomic: set when the put returned */
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;

	w->started = h_now_ms();
	w->rc = lunar_put(w->c, w->key, w->buf, OBJ_LEN, NULL);
	w->ended = h_now_ms();
	lc_store_release(&w->done, 1); /* pairs with the acquire in the test below */
	return NULL;
}

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, NULL, "--segment-size", "16MiB", "--debug-put-delay", "2s",
			       NULL)
		   ? 0
		   : -1;
}

static void test_uncommitted_put_invisible_until_committed(void **state)
{
	struct writer w = {.key = "uncommitted/K"};
	struct lunar_client *reader;
	uint8_t *rbuf = malloc(OBJ_LEN);
	pthread_t th;
	int64_t got;
	int exists;

	(void)state;
	H_ASSERT(rbuf != NULL);
	w.buf = malloc(OBJ_LEN);
	H_ASSERT(w.buf != NULL);
	h_fill(w.buf, OBJ_LEN, h_seed(w.key));
	w.c = h_client(sock);
	reader = h_client(sock);

	H_ASSERT_EQ(pthread_create(&th, NULL, writer_main, &w), 0);
	/* Well inside the 2 s window between the bytes and the commit. */
	h_sleep_ms(600);
	exists = lunar_exists(reader, w.key);
	got = lunar_get_into(reader, w.key, rbuf, OBJ_LEN);
	if (lc_load_acquire(&w.done)) { /* pairs with the release in the writer */
		pthread_join(th, NULL);
		H_ASSERT_MSG(0,
			     "the put returned within 600 ms (rc %d, %llu ms): "
			     "--debug-put-delay did not hold it, nothing was observed",
			     w.rc, (unsigned long long)(w.ended - w.started));
	}
	pthread_join(th, NULL);
	H_ASSERT_EQ(exists, 0);
	H_ASSERT_EQ(got, LUNAR_ERR_REPLICA_IS_NOT_READY);

	H_ASSERT_EQ(w.rc, 0);
	H_ASSERT_MSG(w.ended - w.started >= PUT_DELAY_MS - 200,
		     "put took %llu ms, the debug delay is %d ms",
		     (unsigned long long)(w.ended - w.started), PUT_DELAY_MS);
	H_ASSERT_EQ(lunar_exists(reader, w.key), 1);
	memset(rbuf, 0, OBJ_LEN);
	H_ASSERT_EQ(lunar_get_into(reader, w.key, rbuf, OBJ_LEN), OBJ_LEN);
	H_ASSERT(h_verify(rbuf, OBJ_LEN, h_seed(w.key)) < 0);

	lunar_close(reader);
	lunar_close(w.c);
	free(w.buf);
	free(rbuf);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_uncommitted_put_invisible_until_committed)
