/*
 * test_step2_semantics.c - Step 2 object semantics end to end, on real
 * processes: a byte flipped in a proxy's segment is reported as
 * CHECKSUM_MISMATCH, never as the value; readers racing upserts see whole
 * old or new values, and the last one once the writer stops; tenants are
 * separate key spaces with their own quotas; two replicas land on two
 * segments, and preferred segments are honoured.
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

#define KIB 1024u
#define MIB (1024u * 1024u)

/* GET /admin/stat of (tenant, key) into text. */
static void stat_key(int port, const char *tenant, const char *key)
{
	char path[512];

	snprintf(path, sizeof(path), "/admin/stat?tenant=%s&key=%s", tenant, key);
	fetch(port, path);
}

static struct lunar_client *tenant_client(const char *sock, const char *tenant)
{
	struct lunar_opts o = {
	    .socket_path = sock, .tenant = tenant, .timeout_ms = H_CLIENT_TIMEOUT_MS};
	struct lunar_client *c = NULL;
	int rc = lunar_connect(&o, &c);

	H_ASSERT_MSG(rc == 0, "connect as tenant %s = %d (%s)", tenant ? tenant : "(default)", rc,
		     h_code(rc));
	return c;
}

static void put_seeded(struct lunar_client *c, const char *key, uint8_t *buf, size_t len,
		       uint64_t seed, const struct lunar_put_cfg *cfg)
{
	int rc;

	h_fill(buf, len, seed);
	rc = lunar_put(c, key, buf, len, cfg);
	H_ASSERT_MSG(rc == 0, "put %s (%zu bytes) = %d (%s)", key, len, rc, h_code(rc));
}

static void check_seeded(struct lunar_client *c, const char *key, uint8_t *buf, size_t len,
			 uint64_t seed)
{
	int64_t got, bad;

	memset(buf, 0, len);
	got = lunar_get_into(c, key, buf, len);
	H_ASSERT_MSG(got == (int64_t)len, "get %s = %lld (%s), expected %zu", key, (long long)got,
		     h_code(got), len);
	bad = h_verify(buf, len, seed);
	H_ASSERT_MSG(bad < 0, "get %s: wrong byte at %lld", key, (long long)bad);
}

/* ---- corruption ---- */

#define CORRUPT_LEN (256 * KIB)

static void test_semantics_flipped_byte_is_checksum_mismatch(void **state)
{
	const char *sock = h_path("p.sock");
	char rest[128], *at;
	struct lunar_client *c;
	struct h_proc *px;
	uint8_t *buf = malloc(CORRUPT_LEN), byte;
	unsigned long long base;
	int64_t off, got;
	char mem[64];
	int port, fd;
	off_t where;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given an embedded node holding K and another key, K read once (so
	 * its replica list is cached too) */
	px = h_start_proxy("proxy", sock, H_EMBEDDED, NULL);
	H_ASSERT(px != NULL);
	port = http_port_of(px);
	c = h_client(sock);
	put_seeded(c, "crc/other", buf, CORRUPT_LEN, h_seed("crc/other"), NULL);
	put_seeded(c, "crc/K", buf, CORRUPT_LEN, h_seed("crc/K"), NULL);
	check_seeded(c, "crc/K", buf, CORRUPT_LEN, h_seed("crc/K"));

	/* When one byte of K's replica is flipped in the proxy's memory */
	H_ASSERT_MSG(hg_log_find(px->log, "segment of ", rest, sizeof(rest)) == 0,
		     "the proxy logged no \"segment of N bytes at 0x...\" line");
	at = strstr(rest, " at 0x");
	H_ASSERT_MSG(at != NULL, "no address in \"segment of %s\"", rest);
	base = strtoull(at + 4, NULL, 16);
	stat_key(port, "default", "crc/K");
	H_ASSERT_MSG(hg_count(text, "\"segment\":\"") == 1, "K: expected one replica: %s", text);
	off = hg_json_u64(text, "offset", 0);
	H_ASSERT_MSG(off >= 0, "no offset in %s", text);
	where = (off_t)(base + (unsigned long long)off + CORRUPT_LEN / 3);
	snprintf(mem, sizeof(mem), "/proc/%d/mem", (int)px->pid);
	fd = open(mem, O_RDWR | O_CLOEXEC);
	if (fd < 0 && (errno == EPERM || errno == EACCES)) {
		print_message("skipped: open %s: %s (no ptrace permission)\n", mem,
			      strerror(errno));
		lunar_close(c);
		free(buf);
		skip();
	}
	H_ASSERT_MSG(fd >= 0, "open %s: %s", mem, strerror(errno));
	H_ASSERT_MSG(pread(fd, &byte, 1, where) == 1, "pread %s: %s", mem, strerror(errno));
	byte ^= 0x5a;
	if (pwrite(fd, &byte, 1, where) != 1) {
		int e = errno;

		close(fd);
		if (e == EPERM || e == EACCES || e == EIO) {
			print_message("skipped: pwrite %s: %s\n", mem, strerror(e));
			lunar_close(c);
			free(buf);
			skip();
		}
		H_ASSERT_MSG(0, "pwrite %s: %s", mem, strerror(e));
	}
	close(fd);
	print_message("flipped the byte at segment %#llx + %lld\n", base,
		      (long long)(off + CORRUPT_LEN / 3));

	/* Then get K says CHECKSUM_MISMATCH, through the cache and again */
	got = lunar_get_into(c, "crc/K", buf, CORRUPT_LEN);
	H_ASSERT_EQ(got, LUNAR_ERR_CHECKSUM_MISMATCH);
	got = lunar_get_into(c, "crc/K", buf, CORRUPT_LEN);
	H_ASSERT_EQ(got, LUNAR_ERR_CHECKSUM_MISMATCH);
	/* and a fresh client is told the same */
	{
		struct lunar_client *c2 = h_client(sock);

		got = lunar_get_into(c2, "crc/K", buf, CORRUPT_LEN);
		lunar_close(c2);
		H_ASSERT_EQ(got, LUNAR_ERR_CHECKSUM_MISMATCH);
	}
	/* and the other key reads intact */
	check_seeded(c, "crc/other", buf, CORRUPT_LEN, h_seed("crc/other"));
	lunar_close(c);
	free(buf);
}

/* ---- upsert under readers ---- */

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

static void test_semantics_upsert_readers_see_whole_values(void **state)
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

static void test_semantics_upsert_elsewhere_reaches_cached_reader(void **state)
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
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	H_ASSERT(track(h_start_proxy("proxyA", sock_a, mport, NULL)) != NULL);
	H_ASSERT(track(h_start_proxy("proxyB", sock_b, mport, NULL)) != NULL);
	ca = h_client(sock_a);
	cb = h_client(sock_b);
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

/* ---- tenants ---- */

static void test_semantics_tenants_are_separate_with_quotas(void **state)
{
	const char *sock = h_path("p.sock");
	struct lunar_client *t1, *t2;
	uint8_t *buf = malloc(MIB);
	int rc;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given an embedded node where tenant t1 may store 1 MiB */
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--tenant-quota", "t1=1MiB", NULL) !=
		 NULL);
	t1 = tenant_client(sock, "t1");
	t2 = tenant_client(sock, "t2");

	/* When both tenants put the same key with different values, Then they
	 * are two objects */
	put_seeded(t1, "same", buf, 4 * KIB, 1, NULL);
	put_seeded(t2, "same", buf, 8 * KIB, 2, NULL);
	check_seeded(t1, "same", buf, 4 * KIB, 1);
	check_seeded(t2, "same", buf, 8 * KIB, 2);
	H_ASSERT_EQ(lunar_get_size(t1, "same"), 4 * KIB);
	H_ASSERT_EQ(lunar_get_size(t2, "same"), 8 * KIB);
	/* When t1 removes all, Then t2's object stays */
	H_ASSERT_EQ(lunar_remove_all(t1, 1), 1);
	H_ASSERT_EQ(lunar_exists(t1, "same"), 0);
	H_ASSERT_EQ(lunar_exists(t2, "same"), 1);
	check_seeded(t2, "same", buf, 8 * KIB, 2);

	/* When t1 puts past its 1 MiB quota, Then TENANT_QUOTA_EXCEEDED, and
	 * nothing of the refused put is left */
	put_seeded(t1, "q/1", buf, 600 * KIB, 11, NULL);
	h_fill(buf, 600 * KIB, 12);
	rc = lunar_put(t1, "q/2", buf, 600 * KIB, NULL);
	H_ASSERT_EQ(rc, LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	H_ASSERT_EQ(lunar_exists(t1, "q/2"), 0);
	/* and t2, without a quota, stores the same amount and more */
	put_seeded(t2, "q/1", buf, 600 * KIB, 21, NULL);
	put_seeded(t2, "q/2", buf, 600 * KIB, 22, NULL);
	put_seeded(t2, "q/3", buf, 600 * KIB, 23, NULL);
	/* and once t1 frees room, its put fits again */
	H_ASSERT_EQ(lunar_remove(t1, "q/1", 1), 0);
	put_seeded(t1, "q/2", buf, 600 * KIB, 12, NULL);
	check_seeded(t1, "q/2", buf, 600 * KIB, 12);
	check_seeded(t2, "q/1", buf, 600 * KIB, 21);
	lunar_close(t1);
	lunar_close(t2);
	free(buf);
}

/* ---- replicas and preferred segments ---- */

#define PREFERRED_PUTS 6

static void test_semantics_replicas_distinct_and_preferred_honoured(void **state)
{
	const struct lunar_put_cfg two = {.replica_num = 2};
	char sock_a[PATH_MAX], sock_b[PATH_MAX], segs[2][128], r0[128], r1[128], key[64];
	char example[512] = "";
	int ignored = 0;
	struct lunar_client *ca, *cb;
	struct h_proc *master;
	uint8_t *buf = malloc(256 * KIB);
	int mport, mhttp;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given a master and two proxies with 64 MiB segments */
	mport = h_free_port();
	master = track(h_start_master("master", mport, NULL));
	H_ASSERT(master != NULL);
	mhttp = http_port_of(master);
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	H_ASSERT(track(h_start_proxy("proxyA", sock_a, mport, NULL)) != NULL);
	H_ASSERT(track(h_start_proxy("proxyB", sock_b, mport, NULL)) != NULL);
	ca = h_client(sock_a);
	cb = h_client(sock_b);
	fetch(mhttp, "/admin/segments");
	H_ASSERT_MSG(hg_count(text, "\"name\":\"") == 2, "expected two segments: %s", text);
	H_ASSERT(hg_json_str(text, "name", 0, segs[0], sizeof(segs[0])) == 0);
	H_ASSERT(hg_json_str(text, "name", 1, segs[1], sizeof(segs[1])) == 0);
	H_ASSERT_MSG(strcmp(segs[0], segs[1]) != 0, "two segments named %s", segs[0]);

	/* When K is put with replica_num 2, Then it has two replicas on the
	 * two segments, and reads intact through both proxies */
	put_seeded(ca, "rep/K", buf, 256 * KIB, 7, &two);
	stat_key(mhttp, "default", "rep/K");
	H_ASSERT_MSG(hg_count(text, "\"segment\":\"") == 2, "expected two replicas: %s", text);
	H_ASSERT(hg_json_str(text, "segment", 0, r0, sizeof(r0)) == 0);
	H_ASSERT(hg_json_str(text, "segment", 1, r1, sizeof(r1)) == 0);
	H_ASSERT_MSG(strcmp(r0, r1) != 0, "both replicas on %s", r0);
	check_seeded(ca, "rep/K", buf, 256 * KIB, 7);
	check_seeded(cb, "rep/K", buf, 256 * KIB, 7);

	/* When keys are put through A preferring one segment, then the other,
	 * Then each replica is on the preferred segment (both are nearly empty,
	 * so the preference can always be met) */
	for (int s = 0; s < 2; s++) {
		const char *pref[1] = {segs[s]};
		const struct lunar_put_cfg cfg = {.preferred_segments = pref, .preferred_count = 1};

		for (int i = 0; i < PREFERRED_PUTS; i++) {
			snprintf(key, sizeof(key), "pref/%d/%d", s, i);
			put_seeded(ca, key, buf, 64 * KIB, h_seed(key), &cfg);
			stat_key(mhttp, "default", key);
			H_ASSERT(hg_json_str(text, "segment", 0, r0, sizeof(r0)) == 0);
			if (strcmp(r0, segs[s]) != 0) {
				ignored++;
				snprintf(example, sizeof(example), "%s preferred %s, placed on %s",
					 key, segs[s], r0);
			}
			check_seeded(cb, key, buf, 64 * KIB, h_seed(key));
		}
	}
	H_ASSERT_MSG(ignored == 0, "%d of %d puts ignored their preferred segment (e.g. %s)",
		     ignored, 2 * PREFERRED_PUTS, example);
	lunar_close(ca);
	lunar_close(cb);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_semantics_flipped_byte_is_checksum_mismatch,
					    s2_setup, s2_teardown),
	    cmocka_unit_test_setup_teardown(test_semantics_upsert_readers_see_whole_values,
					    s2_setup, s2_teardown),
	    cmocka_unit_test_setup_teardown(test_semantics_upsert_elsewhere_reaches_cached_reader,
					    s2_setup, s2_teardown),
	    cmocka_unit_test_setup_teardown(test_semantics_tenants_are_separate_with_quotas,
					    s2_setup, s2_teardown),
	    cmocka_unit_test_setup_teardown(test_semantics_replicas_distinct_and_preferred_honoured,
					    s2_setup, s2_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
