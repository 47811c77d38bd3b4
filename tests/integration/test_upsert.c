/*
 * test_upsert.c - upsert end to end, on real processes: readers racing
 * upserts see whole old or new values, and the last one once the writer
 * stops; an upsert through another proxy reaches a reader whose proxy
 * cached the old replica list.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "case_util.h"
#include "tests/cmocka_main.h"

#define KIB	     1024u
#define MIB	     (1024u * 1024u)
#define READERS	     4
#define UPSERT_LEN   (256 * KIB)
#define UPSERT_SHORT (200 * KIB + 7)
#define UPSERTS	     300
#define SEED_A	     0xa11ce
#define SEED_B	     0xb0b
#define SEED_C	     0xc0ffee

struct reader {
	pthread_t tid;
	struct lunar_client *c;
	long reads, as_a, as_b, as_c, mixed, errors;
	int last_error;
	int64_t mixed_size, mixed_at;
};

static atomic_int stop_readers;

/* Which of A, B (same size) or C the size and bytes are; 0 for a mix. */
static int identify(const uint8_t *buf, int64_t n, int64_t *bad_at)
{
	if (n == UPSERT_LEN) {
		if (h_verify(buf, UPSERT_LEN, SEED_A) < 0)
			return 'A';
		if (h_verify(buf, UPSERT_LEN, SEED_B) < 0)
			return 'B';
		*bad_at = h_verify(buf, UPSERT_LEN, SEED_A);
		return 0;
	}
	if (n == UPSERT_SHORT && (*bad_at = h_verify(buf, UPSERT_SHORT, SEED_C)) < 0)
		return 'C';
	return 0;
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	uint8_t *buf = malloc(UPSERT_LEN);

	while (buf && !atomic_load(&stop_readers)) {
		int64_t n = lunar_get_into(r->c, "upsert/K", buf, UPSERT_LEN), bad = -1;

		r->reads++;
		if (n < 0) {
			r->errors++;
			r->last_error = (int)n;
			continue;
		}
		switch (identify(buf, n, &bad)) {
		case 'A': r->as_a++; break;
		case 'B': r->as_b++; break;
		case 'C': r->as_c++; break;
		default:
			r->mixed++;
			r->mixed_size = n;
			r->mixed_at = bad;
		}
	}
	free(buf);
	return NULL;
}

static void test_upsert_readers_see_whole_values(void **state)
{
	static const uint64_t seeds[3] = {SEED_A, SEED_B, SEED_C};
	const char *sock = h_path("p.sock");
	struct reader rd[READERS];
	struct lunar_client *w;
	uint8_t *vals[3], *buf = malloc(UPSERT_LEN);
	size_t lens[3] = {UPSERT_LEN, UPSERT_LEN, UPSERT_SHORT};
	int last = 0, upsert_errors = 0, last_upsert_error = 0;
	long total = 0;

	(void)state;
	H_ASSERT(buf != NULL);
	for (int v = 0; v < 3; v++) {
		vals[v] = malloc(lens[v]);
		H_ASSERT(vals[v] != NULL);
		h_fill(vals[v], lens[v], seeds[v]);
	}
	/* Given an embedded node holding K = A, and four reader threads, each
	 * with its own client, reading K in a loop. The segment is 256 MiB, not
	 * the default 64: every upsert parks the old value's space until the
	 * lease of K ends (10 s), and the readers keep K leased, so 300 upserts
	 * of 256 KiB hold up to 75 MiB (see upsert.c's upsert_commit). */
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "256MiB", NULL) !=
		 NULL);
	w = h_client(sock);
	H_ASSERT_EQ(lunar_upsert(w, "upsert/K", vals[0], lens[0], NULL), 0);
	memset(rd, 0, sizeof(rd));
	atomic_store(&stop_readers, 0);
	for (int i = 0; i < READERS; i++) {
		rd[i].c = h_client(sock);
		H_ASSERT_EQ(pthread_create(&rd[i].tid, NULL, reader_main, &rd[i]), 0);
	}

	/* When a writer upserts K UPSERTS times: A, B, A, B, C, A, B, ... */
	for (int i = 1; i <= UPSERTS; i++) {
		int v = i % 5 == 4 ? 2 : i % 2, rc;

		rc = lunar_upsert(w, "upsert/K", vals[v], lens[v], NULL);
		if (rc == 0) {
			last = v;
		} else {
			upsert_errors++;
			last_upsert_error = rc;
		}
	}
	h_sleep_ms(50); /* let the readers see the last value too */
	atomic_store(&stop_readers, 1);
	for (int i = 0; i < READERS; i++)
		pthread_join(rd[i].tid, NULL);

	/* Then every read returned a whole A, B or C */
	for (int i = 0; i < READERS; i++) {
		print_message("reader %d: %ld reads: %ld A, %ld B, %ld C, %ld mixed, %ld errors "
			      "(last %s)\n",
			      i, rd[i].reads, rd[i].as_a, rd[i].as_b, rd[i].as_c, rd[i].mixed,
			      rd[i].errors, h_code(rd[i].last_error));
		total += rd[i].reads;
	}
	H_ASSERT_MSG(upsert_errors == 0, "%d upserts failed, last with %d (%s)", upsert_errors,
		     last_upsert_error, h_code(last_upsert_error));
	for (int i = 0; i < READERS; i++) {
		H_ASSERT_MSG(rd[i].mixed == 0,
			     "reader %d got %ld mixed values (last: %lld bytes, wrong at %lld)", i,
			     rd[i].mixed, (long long)rd[i].mixed_size, (long long)rd[i].mixed_at);
		H_ASSERT_MSG(rd[i].errors == 0,
			     "reader %d: %ld of %ld gets failed, last with %d (%s)", i,
			     rd[i].errors, rd[i].reads, rd[i].last_error, h_code(rd[i].last_error));
	}
	H_ASSERT_MSG(total >= 100, "only %ld reads raced the upserts", total);
	/* and once the writer stopped, every client reads the last value */
	check_seeded(w, "upsert/K", buf, lens[last], seeds[last]);
	for (int i = 0; i < READERS; i++) {
		int64_t n = lunar_get_into(rd[i].c, "upsert/K", buf, UPSERT_LEN), bad = -1;
		int got = n > 0 ? identify(buf, n, &bad) : 0;

		H_ASSERT_MSG(
		    got == "ABC"[last],
		    "reader %d's client reads %c (%lld bytes, %s) after the writer stopped "
		    "on %c",
		    i, got ? got : '?', (long long)n, h_code(n), "ABC"[last]);
		lunar_close(rd[i].c);
	}
	lunar_close(w);
	for (int v = 0; v < 3; v++)
		free(vals[v]);
	free(buf);
}

#define X_LEN	  (64 * KIB)
#define X_TTL_MS  2000
#define X_WAIT_MS (3 * X_TTL_MS)

static void test_upsert_elsewhere_reaches_cached_reader(void **state)
{
	char sock_a[PATH_MAX], sock_b[PATH_MAX];
	struct lunar_client *ca, *cb;
	uint8_t *buf = malloc(X_LEN);
	uint64_t t0, seen_new = 0;
	int mport, stale = 0, bad = 0;
	int64_t n = 0;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given a master granting 2 s leases, proxies A and B, and K = A
	 * upserted through B and read through A (so A caches its list) */
	mport = h_free_port();
	H_ASSERT(track(h_start_master("master", mport, "--kv-lease-ttl", "2s", NULL)) != NULL);
	case_proxy_pair(mport, sock_a, sock_b, &ca, &cb);
	h_fill(buf, X_LEN, SEED_A);
	H_ASSERT_EQ(lunar_upsert(cb, "xupsert/K", buf, X_LEN, NULL), 0);
	check_seeded(ca, "xupsert/K", buf, X_LEN, SEED_A);

	/* When B upserts K = B, and A keeps reading K every 100 ms */
	h_fill(buf, X_LEN, SEED_B);
	H_ASSERT_EQ(lunar_upsert(cb, "xupsert/K", buf, X_LEN, NULL), 0);
	t0 = h_now_ms();
	while (h_now_ms() - t0 < X_WAIT_MS) {
		n = lunar_get_into(ca, "xupsert/K", buf, X_LEN);
		if (n == X_LEN && h_verify(buf, X_LEN, SEED_B) < 0) {
			seen_new = h_now_ms() - t0;
			break;
		}
		if (n == X_LEN && h_verify(buf, X_LEN, SEED_A) < 0)
			stale++;
		else
			bad++;
		h_sleep_ms(100);
	}

	/* Then A sees B within a few lease TTLs (it may serve A until its
	 * cached lease ends, but not keep renewing the stale list), and every
	 * read before that was a whole A */
	if (seen_new)
		print_message("A read the old value %d times, the new one after %llu ms\n", stale,
			      (unsigned long long)seen_new);
	H_ASSERT_MSG(bad == 0, "%d reads through A were neither value (last %lld, %s)", bad,
		     (long long)n, h_code(n));
	H_ASSERT_MSG(seen_new > 0,
		     "A still reads the value replaced %d ms ago (%d stale reads; lease TTL %d ms)",
		     X_WAIT_MS, stale, X_TTL_MS);
	lunar_close(ca);
	lunar_close(cb);
	free(buf);
}

LUNAR_TEST_MAIN_EACH(case_setup, case_teardown, test_upsert_readers_see_whole_values,
		     test_upsert_elsewhere_reaches_cached_reader)
