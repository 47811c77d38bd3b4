/*
 * test_eviction.c - eviction and bulk removal end to end, on
 * real processes: a 16 MiB segment takes 200 MiB of unread puts, making room
 * by evicting the oldest objects while hard-pinned and leased ones stay; and
 * remove_all racing four writer threads loses nothing and leaks no space.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "case_util.h"
#include "tests/cmocka_main.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

/* Flood: FLOOD values of 1 MiB into a 16 MiB segment. */
#define FLOOD	      200
#define FLOOD_RETRIES 5
#define NPINNED	      2
#define NLEASED	      2
/* Newest flood objects that must have survived (4 MiB of 16). */
#define NEWEST 4

/* Race: WRITERS threads of WRITES puts each, against remove_all. */
#define WRITERS	    4
#define WRITES	    1000
#define WRITE_BYTES (64 * KIB)

/* Sum of every lunar_master_segment_used_bytes sample in text. */
static int64_t segments_used(int *nseg)
{
	const char *name = "lunar_master_segment_used_bytes{";
	int64_t sum = 0;

	*nseg = 0;
	for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
		const char *sp = strchr(p, ' ');

		if (p != text && p[-1] != '\n')
			continue;
		if (sp) {
			sum += (int64_t)strtod(sp + 1, NULL);
			(*nseg)++;
		}
	}
	return sum;
}

static void check_value(struct lunar_client *c, const char *key, uint8_t *buf, size_t len)
{
	int64_t got, bad;

	memset(buf, 0, len);
	got = lunar_get_into(c, key, buf, len);
	H_ASSERT_MSG(got == (int64_t)len, "get %s = %lld (%s), expected %zu", key, (long long)got,
		     h_code(got), len);
	bad = h_verify(buf, len, h_seed(key));
	H_ASSERT_MSG(bad < 0, "get %s: wrong byte at %lld", key, (long long)bad);
}

static void test_eviction_flood_keeps_newest_pinned_and_leased(void **state)
{
	const struct lunar_put_cfg pin = {.hard_pin = 1};
	const char *sock = h_path("p.sock");
	struct lunar_client *c;
	struct h_proc *px;
	uint8_t *buf = malloc(MIB);
	char key[64];
	int retries = 0, retried_puts = 0, max_retries = 0, survivors = 0, port;
	int64_t evictions;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given a 16 MiB embedded node granting 30 s leases, holding two
	 * hard-pinned 1 MiB objects and two 1 MiB objects just read (leased) */
	px = h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "16MiB", "--kv-lease-ttl",
			   "30s", NULL);
	H_ASSERT(px != NULL);
	port = http_port_of(px);
	c = h_client(sock);
	for (int i = 0; i < NPINNED; i++) {
		snprintf(key, sizeof(key), "pinned/%d", i);
		h_fill(buf, MIB, h_seed(key));
		H_ASSERT_EQ(lunar_put(c, key, buf, MIB, &pin), 0);
	}
	for (int i = 0; i < NLEASED; i++) {
		snprintf(key, sizeof(key), "leased/%d", i);
		h_fill(buf, MIB, h_seed(key));
		H_ASSERT_EQ(lunar_put(c, key, buf, MIB, NULL), 0);
		check_value(c, key, buf, MIB);
	}

	/* When 200 unread 1 MiB values are put, each retried a few times on
	 * NO_AVAILABLE_HANDLE */
	for (int i = 0; i < FLOOD; i++) {
		int rc, tries = 0;

		snprintf(key, sizeof(key), "flood/%03d", i);
		h_fill(buf, MIB, h_seed(key));
		while ((rc = lunar_put(c, key, buf, MIB, NULL)) == LUNAR_ERR_NO_AVAILABLE_HANDLE &&
		       tries < FLOOD_RETRIES) {
			tries++;
			h_sleep_ms(20);
		}
		H_ASSERT_MSG(rc == 0, "put %s = %d (%s) after %d retries", key, rc, h_code(rc),
			     tries);
		retries += tries;
		retried_puts += tries > 0;
		if (tries > max_retries)
			max_retries = tries;
	}
	evictions = metric(port, "lunar_master_evictions_total");
	print_message("flood: %d puts, %d retried, %d retries in all, at most %d for one put; "
		      "%lld evictions\n",
		      FLOOD, retried_puts, retries, max_retries, (long long)evictions);

	/* Then the pinned and the leased objects are intact */
	for (int i = 0; i < NPINNED; i++) {
		snprintf(key, sizeof(key), "pinned/%d", i);
		check_value(c, key, buf, MIB);
	}
	for (int i = 0; i < NLEASED; i++) {
		snprintf(key, sizeof(key), "leased/%d", i);
		check_value(c, key, buf, MIB);
	}
	/* and the newest values are there, the oldest evicted, and no more
	 * than the segment can hold */
	for (int i = FLOOD - NEWEST; i < FLOOD; i++) {
		snprintf(key, sizeof(key), "flood/%03d", i);
		check_value(c, key, buf, MIB);
	}
	for (int i = 0; i < FLOOD; i++) {
		int e;

		snprintf(key, sizeof(key), "flood/%03d", i);
		e = lunar_exists(c, key);
		H_ASSERT_MSG(e == 0 || e == 1, "exists %s = %d (%s)", key, e, h_code(e));
		survivors += e;
		H_ASSERT_MSG(i >= FLOOD - 16 || e == 0, "%s, among the oldest, was not evicted",
			     key);
	}
	print_message("%d flood objects left\n", survivors);
	H_ASSERT_MSG(survivors <= 16 - NPINNED - NLEASED, "%d 1 MiB flood objects in 16 MiB",
		     survivors);
	H_ASSERT_MSG(evictions >= FLOOD - 16, "only %lld evictions for %d puts into 16 MiB",
		     (long long)evictions, FLOOD);
	lunar_close(c);
	free(buf);
}

struct writer {
	pthread_t tid;
	const char *sock;
	int id;
	int ok, full, other, last_other;
	int connect_rc;
};

static atomic_int writers_done;

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	struct lunar_client *c;
	uint8_t *buf = malloc(WRITE_BYTES);
	char key[64];

	c = buf ? h_client_try(w->sock, H_CLIENT_TIMEOUT_MS, &w->connect_rc) : NULL;
	for (int i = 0; c && i < WRITES; i++) {
		int rc;

		snprintf(key, sizeof(key), "race/w%d/%04d", w->id, i);
		h_fill(buf, WRITE_BYTES, h_seed(key));
		rc = lunar_put(c, key, buf, WRITE_BYTES, NULL);
		if (rc == 0)
			w->ok++;
		else if (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE)
			w->full++;
		else {
			w->other++;
			w->last_other = rc;
		}
	}
	lunar_close(c);
	free(buf);
	atomic_fetch_add(&writers_done, 1);
	return NULL;
}

static void test_eviction_remove_all_races_writers(void **state)
{
	const char *sock = h_path("p.sock");
	struct writer w[WRITERS];
	struct lunar_client *c;
	struct h_proc *px;
	int64_t removed = 0, n, final, evictions, used, keys;
	int port, calls = 0, errors = 0, last_error = 0, ok = 0, nseg = 0;

	(void)state;
	/* Given an embedded node with a 64 MiB segment and four writer threads
	 * putting 1000 unread 64 KiB values each (250 MiB in all) */
	px = h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "64MiB", NULL);
	H_ASSERT(px != NULL);
	port = http_port_of(px);
	c = h_client(sock);
	atomic_store(&writers_done, 0);
	memset(w, 0, sizeof(w));
	for (int i = 0; i < WRITERS; i++) {
		w[i].sock = sock;
		w[i].id = i;
		H_ASSERT_EQ(pthread_create(&w[i].tid, NULL, writer_main, &w[i]), 0);
	}

	/* When remove_all, forced and not in turn, runs while they write */
	while (atomic_load(&writers_done) < WRITERS) {
		n = lunar_remove_all(c, calls & 1);
		calls++;
		if (n >= 0) {
			removed += n;
		} else {
			errors++;
			last_error = (int)n;
		}
	}
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i].tid, NULL);
	final = lunar_remove_all(c, 1);

	/* Then nothing failed but on a full segment, and every value committed
	 * was removed or evicted exactly once */
	for (int i = 0; i < WRITERS; i++) {
		H_ASSERT_MSG(w[i].connect_rc == 0, "writer %d: connect = %d (%s)", i,
			     w[i].connect_rc, h_code(w[i].connect_rc));
		H_ASSERT_MSG(w[i].other == 0, "writer %d: %d puts failed, last with %d (%s)", i,
			     w[i].other, w[i].last_other, h_code(w[i].last_other));
		ok += w[i].ok;
	}
	H_ASSERT_MSG(errors == 0, "%d of %d remove_all calls failed, last with %d (%s)", errors,
		     calls, last_error, h_code(last_error));
	H_ASSERT_MSG(final >= 0, "final remove_all = %lld (%s)", (long long) final, h_code(final));
	evictions = metric(port, "lunar_master_evictions_total");
	print_message("%d remove_all calls removed %lld, final %lld, evictions %lld; %d puts ok, "
		      "%d full\n",
		      calls, (long long)removed, (long long) final, (long long)evictions, ok,
		      w[0].full + w[1].full + w[2].full + w[3].full);
	H_ASSERT_MSG(removed + final + evictions == ok,
		     "%lld removed + %lld evicted != %d puts committed",
		     (long long)(removed + final), (long long)evictions, ok);
	/* and the master holds no key and no byte */
	fetch(port, "/metrics");
	used = segments_used(&nseg);
	keys = hg_metric(text, "lunar_master_keys");
	H_ASSERT_MSG(nseg == 1, "%d segment samples in /metrics", nseg);
	H_ASSERT_MSG(used == 0, "segment used bytes %lld after the final remove_all",
		     (long long)used);
	H_ASSERT_MSG(keys == 0, "lunar_master_keys %lld after the final remove_all",
		     (long long)keys);
	H_ASSERT_EQ(lunar_exists(c, "race/w0/0000"), 0);
	lunar_close(c);
}

LUNAR_TEST_MAIN_EACH(case_setup, case_teardown, test_eviction_flood_keeps_newest_pinned_and_leased,
		     test_eviction_remove_all_races_writers)
