/*
 * test_put_ahead.c - puts into space reserved ahead (docs/protocol.md,
 * "Reservations"), with a real lunar-master, a writer proxy W without a
 * segment and an owner proxy O with one (O puts nothing ahead itself, so
 * every reserved byte is W's): a put that returned 0 is readable at once
 * from O; a key put twice keeps its first value and leaks no space; W
 * SIGKILLed holding reservations gets its space back once declared dead;
 * eviction under reservations loses no byte; a master restart drops them
 * and puts go on; puts that cannot go ahead take the two calls; a writer
 * refused a reservation asks again soon once its puts find room; a
 * tenant's quota holds. A leader change under put-ahead is test_ha_failover's (its
 * proxies put ahead).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "case_util.h"
#include "harness.h"
#include "harness_after.h"
#include "lunar.h"
#include "tests/cmocka_main.h"

#define KIB	 1024u
#define MIB	 (1024u * KIB)
#define RESERVED "lunar_master_reserved_bytes"
#define SEG_USED "lunar_master_segment_used_bytes"
#define COMMITS	 "lunar_master_calls_total{method=\"BatchPutCommit\"}"
#define STARTS	 "lunar_master_calls_total{method=\"BatchPutStart\"}"
#define RESERVES "lunar_master_calls_total{method=\"Reserve\"}"
#define ROOM	 "lunar_proxy_reserved_room_bytes"

static int mport, mhttp;
static char sock_w[PATH_MAX], sock_o[PATH_MAX], seg_o[H_SEG_NAME];
static struct h_proc *master, *proxy_w, *proxy_o;

/* The master with extra flags (NULL-terminated, at most 8). */
static struct h_proc *start_master(const char *name, int port, const char *const *flags)
{
	const char *a[9] = {0};

	for (int i = 0; i < 8 && flags && flags[i]; i++)
		a[i] = flags[i];
	return h_start_master(name, port, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], NULL);
}

/* The master with extra flags; the proxies' socket paths. */
static void start_master_for(const char *const *mflags)
{
	mport = h_free_port();
	master = track(start_master("master", mport, mflags));
	H_ASSERT(master != NULL);
	mhttp = http_port_of(master);
	h_named_sock(sock_o, "o");
	h_named_sock(sock_w, "w");
}

/* O: the owner, a segment of seg_size; it puts nothing ahead. */
static void start_owner(const char *seg_size)
{
	proxy_o = track(h_start_peer("proxyO", sock_o, mport, seg_o, "--segment-size", seg_size,
				     "--ping-interval", "200ms", "--reserve-size", "0", NULL));
	H_ASSERT(proxy_o != NULL);
}

/* W: the writer, no segment, with an extra flag pair (or NULL). */
static void start_writer(const char *wflag, const char *wval)
{
	proxy_w = track(h_start_proxy("proxyW", sock_w, mport, "--segment-size", "0",
				      "--ping-interval", "200ms", wflag, wval, NULL));
	H_ASSERT(proxy_w != NULL);
}

/* Master, O and W. */
static void start(const char *const *mflags, const char *seg_size, const char *wflag,
		  const char *wval)
{
	start_master_for(mflags);
	start_owner(seg_size);
	start_writer(wflag, wval);
}

/* W's room to put ahead into (its thread asks once the master answered
 * a heartbeat; the master counts a grant before W has its reply). */
static int64_t room_w(void)
{
	return metric(http_port_of(proxy_w), ROOM);
}

/* Wait until W holds reserved space. */
static void wait_reserved(void)
{
	uint64_t end = h_now_ms() + H_BOUND_MS(10000);

	while (room_w() == 0 && h_now_ms() < end)
		h_sleep_ms(20);
	H_ASSERT_MSG(room_w() > 0, "W holds no reservation");
	H_ASSERT_MSG(metric(mhttp, RESERVED) > 0, "the master counts no reservation");
}

/* Bytes of O's segment in objects (reserved space is said apart). */
static int64_t used_o(void)
{
	char sample[128];

	snprintf(sample, sizeof(sample), SEG_USED "{segment=\"%s\"}", seg_o);
	return metric(mhttp, sample);
}

static void key_of(char *k, size_t cap, const char *what, int i)
{
	snprintf(k, cap, "ahead/%s/%d", what, i);
}

static const char *const long_life[] = {"--reserve-ttl", "60s", NULL};

/* A put returned 0 through W is readable through O at once, and went
 * ahead: one BatchPutCommit each, no PutStart. */
static void test_put_ahead_commits_visible_everywhere(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t *buf = malloc(64 * KIB);
	int64_t commits, starts;
	char k[64];

	(void)state;
	H_ASSERT(buf != NULL);
	start(long_life, "64MiB", NULL, NULL);
	wait_reserved();
	cw = h_client(sock_w);
	co = h_client(sock_o);
	commits = metric(mhttp, COMMITS);
	starts = metric(mhttp, STARTS);
	for (int i = 0; i < 200; i++) {
		size_t len = i % 4 == 3 ? 64 * KIB : 4 * KIB - (size_t)i;

		key_of(k, sizeof(k), "visible", i);
		put_seeded(cw, k, buf, len, h_seed(k), NULL);
		check_seeded(co, k, buf, len, h_seed(k));
	}
	H_ASSERT_EQ(metric(mhttp, COMMITS) - commits, 200);
	H_ASSERT_EQ(metric(mhttp, STARTS) - starts, 0);
	lunar_close(cw);
	lunar_close(co);
	free(buf);
}

/* A key put again keeps its first value (as a PutStart would have it);
 * the refused piece goes back to W and nothing leaks: O holds exactly the
 * objects' bytes, and once W stops, no reserved byte is left. */
static void test_put_ahead_duplicate_keeps_first_no_leak(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t buf[4 * KIB];
	int64_t commits;

	(void)state;
	start(long_life, "64MiB", NULL, NULL);
	wait_reserved();
	cw = h_client(sock_w);
	co = h_client(sock_o);
	commits = metric(mhttp, COMMITS);
	put_seeded(cw, "ahead/dup", buf, sizeof(buf), h_seed("first"), NULL);
	put_seeded(cw, "ahead/dup", buf, sizeof(buf), h_seed("second"), NULL);
	put_seeded(cw, "ahead/other", buf, sizeof(buf), h_seed("other"), NULL);
	H_ASSERT_EQ(metric(mhttp, COMMITS) - commits, 3);
	check_seeded(co, "ahead/dup", buf, sizeof(buf), h_seed("first"));
	check_seeded(co, "ahead/other", buf, sizeof(buf), h_seed("other"));
	H_ASSERT_EQ(used_o(), 2 * sizeof(buf));
	H_ASSERT_EQ(lunar_exists(cw, "ahead/dup"), 1);
	lunar_close(cw);
	H_ASSERT_EQ(h_stop(proxy_w), 0);
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
	H_ASSERT_EQ(used_o(), 2 * sizeof(buf));
	check_seeded(co, "ahead/dup", buf, sizeof(buf), h_seed("first"));
	lunar_close(co);
}

/* W SIGKILLed with reservations: once the master declares it dead, their
 * space comes back (late, after --put-start-release-timeout past their
 * life, as a dead writer's PROCESSING put's), and what W committed stays. */
static void test_put_ahead_writer_killed_space_returns(void **state)
{
	static const char *const flags[] = {
	    "--client-ttl", "1s", "--reserve-ttl", "3s", "--put-start-release-timeout", "1s", NULL};
	struct lunar_client *cw, *co;
	uint8_t buf[8 * KIB];
	uint64_t end;
	char k[64];

	(void)state;
	start(flags, "64MiB", NULL, NULL);
	wait_reserved();
	cw = h_client(sock_w);
	for (int i = 0; i < 20; i++) {
		key_of(k, sizeof(k), "killed", i);
		put_seeded(cw, k, buf, sizeof(buf), h_seed(k), NULL);
	}
	H_ASSERT(metric(mhttp, RESERVED) > 0);
	h_kill(proxy_w);
	lunar_close(cw);
	end = h_now_ms() + H_BOUND_MS(15000);
	while ((metric(mhttp, RESERVED) != 0 || used_o() != 20 * (int64_t)sizeof(buf)) &&
	       h_now_ms() < end) {
		H_ASSERT(used_o() >= 20 * (int64_t)sizeof(buf)); /* committed stays */
		h_sleep_ms(50);
	}
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
	H_ASSERT_EQ(used_o(), 20 * sizeof(buf));
	co = h_client(sock_o);
	for (int i = 0; i < 20; i++) {
		key_of(k, sizeof(k), "killed", i);
		check_seeded(co, k, buf, sizeof(buf), h_seed(k));
	}
	lunar_close(co);
}

/* A 16 MiB segment takes 40 MiB of puts through W: eviction makes room
 * (reserved space is no object and is never evicted), every put returns
 * 0, the newest read back exact, and no key reads wrong bytes. The keys
 * are read newest first: W's next reservation may evict while they are
 * read, and it takes the least recently used, which a read is not. */
static void test_put_ahead_eviction_loses_no_byte(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t *buf = malloc(64 * KIB);
	int64_t got, commits;
	int n = 640, found = 0;
	char k[64];

	(void)state;
	H_ASSERT(buf != NULL);
	start(long_life, "16MiB", NULL, NULL);
	wait_reserved();
	cw = h_client(sock_w);
	co = h_client(sock_o);
	commits = metric(mhttp, COMMITS);
	for (int i = 0; i < n; i++) {
		key_of(k, sizeof(k), "evict", i);
		put_seeded(cw, k, buf, 64 * KIB, h_seed(k), NULL);
	}
	H_ASSERT(metric(mhttp, "lunar_master_evictions_total") > 0);
	H_ASSERT(metric(mhttp, COMMITS) > commits); /* some went ahead */
	for (int i = n - 1; i >= 0; i--) {
		key_of(k, sizeof(k), "evict", i);
		memset(buf, 0, 64 * KIB);
		got = lunar_get_into(co, k, buf, 64 * KIB);
		if (got == LUNAR_ERR_OBJECT_NOT_FOUND && i < n - 8)
			continue;
		H_ASSERT_MSG(got == 64 * KIB, "get %s = %lld (%s)", k, (long long)got, h_code(got));
		H_ASSERT_MSG(h_verify(buf, 64 * KIB, h_seed(k)) < 0, "%s: wrong bytes", k);
		found++;
	}
	H_ASSERT(found >= 8);
	H_ASSERT(used_o() <= 16 * (int64_t)MIB);
	lunar_close(cw);
	lunar_close(co);
	free(buf);
}

/* The master restarts (no HA: it forgets everything, reservations too).
 * W's puts go on: a commit naming a reservation the master does not know
 * takes the two calls, and new reservations come. */
static void test_put_ahead_master_restart(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t buf[4 * KIB];
	int64_t commits;
	uint64_t end;
	char k[64];
	int rc = -1;

	(void)state;
	start(long_life, "64MiB", NULL, NULL);
	wait_reserved();
	cw = h_client(sock_w);
	put_seeded(cw, "ahead/before", buf, sizeof(buf), h_seed("before"), NULL);
	h_kill(master);
	master = start_master("master2", mport, long_life); /* a log of its own */
	H_ASSERT(master != NULL);
	tracked[0] = master; /* stopped last, as the old one would have been */
	mhttp = http_port_of(master);
	/* Until O has mounted again, a put has nowhere to go. */
	end = h_now_ms() + H_BOUND_MS(10000);
	while (rc && h_now_ms() < end) {
		h_fill(buf, sizeof(buf), h_seed("ahead/first"));
		if ((rc = lunar_put(cw, "ahead/first", buf, sizeof(buf), NULL)))
			h_sleep_ms(50);
	}
	H_ASSERT_EQ(rc, 0);
	co = h_client(sock_o);
	check_seeded(co, "ahead/first", buf, sizeof(buf), h_seed("ahead/first"));
	/* and W is granted space again, by the master that knows it now */
	wait_reserved();
	commits = metric(mhttp, COMMITS);
	for (int i = 0; i < 100; i++) {
		key_of(k, sizeof(k), "restart", i);
		put_seeded(cw, k, buf, sizeof(buf), h_seed(k), NULL);
		check_seeded(co, k, buf, sizeof(buf), h_seed(k));
	}
	H_ASSERT_EQ(metric(mhttp, COMMITS) - commits, 100);
	lunar_close(cw);
	lunar_close(co);
}

/* Puts that cannot go ahead take PutStart and PutEnd, and work: a value
 * over --reserve-value-max, a preferred segment, two replicas. */
static void test_put_ahead_fallbacks_still_work(void **state)
{
	const char *pref[1] = {seg_o};
	struct lunar_put_cfg on_o = {.preferred_segments = pref, .preferred_count = 1};
	struct lunar_put_cfg two = {.replica_num = 2};
	struct lunar_client *cw, *co;
	uint8_t *buf = malloc(MIB);
	int64_t starts, commits;

	(void)state;
	H_ASSERT(buf != NULL);
	start(long_life, "64MiB", "--reserve-value-max", "64KiB");
	wait_reserved();
	cw = h_client(sock_w);
	co = h_client(sock_o);
	starts = metric(mhttp, STARTS);
	commits = metric(mhttp, COMMITS);
	put_seeded(cw, "ahead/big", buf, MIB, h_seed("big"), NULL);
	put_seeded(cw, "ahead/pref", buf, 4 * KIB, h_seed("pref"), &on_o);
	put_seeded(cw, "ahead/two", buf, 4 * KIB, h_seed("two"), &two);
	H_ASSERT_EQ(metric(mhttp, STARTS) - starts, 3);
	put_seeded(cw, "ahead/small", buf, 64 * KIB, h_seed("small"), NULL);
	H_ASSERT_EQ(metric(mhttp, COMMITS) - commits, 1);
	check_seeded(co, "ahead/big", buf, MIB, h_seed("big"));
	check_seeded(co, "ahead/pref", buf, 4 * KIB, h_seed("pref"));
	check_seeded(co, "ahead/two", buf, 4 * KIB, h_seed("two"));
	check_seeded(co, "ahead/small", buf, 64 * KIB, h_seed("small"));
	lunar_close(cw);
	lunar_close(co);
	free(buf);
}

/* W starts before any segment exists, so its Reserve is refused for want
 * of room, and it would wait a second before the next. Once O is up and a
 * put through W finds room (two calls), W asks again 100 ms after the
 * refusal and the next put goes ahead. The bound is the behaviour under
 * test, so it is not scaled for sanitizers; when O took so long to come
 * up that a second had nearly passed anyway, it cannot tell and says so. */
static void test_put_ahead_asks_again_once_puts_find_room(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t buf[4 * KIB];
	uint64_t end, refused_ms, put_ms, granted_ms;
	int64_t asked, commits, starts;
	int rc = -1;

	(void)state;
	start_master_for(long_life);
	start_writer(NULL, NULL);
	/* Catch a refusal as it happens: the next is a second away. */
	end = h_now_ms() + H_BOUND_MS(10000);
	while (metric(mhttp, RESERVES) < 1 && h_now_ms() < end)
		h_sleep_ms(5);
	asked = metric(mhttp, RESERVES);
	while (metric(mhttp, RESERVES) == asked && h_now_ms() < end)
		h_sleep_ms(5);
	refused_ms = h_now_ms();
	H_ASSERT_MSG(metric(mhttp, RESERVES) > asked, "W asked for no reservation");
	start_owner("64MiB");
	cw = h_client(sock_w);
	co = h_client(sock_o);
	h_fill(buf, sizeof(buf), h_seed("room"));
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
	starts = metric(mhttp, STARTS);
	while (rc && h_now_ms() < end) { /* until the master knows O's segment */
		rc = lunar_put(cw, "ahead/room", buf, sizeof(buf), NULL);
		if (rc)
			h_sleep_ms(5);
	}
	H_ASSERT_MSG(rc == 0, "put through W = %d (%s)", rc, h_code(rc));
	put_ms = h_now_ms();
	H_ASSERT_EQ(metric(mhttp, STARTS) - starts, 1); /* it took the two calls */
	while (room_w() == 0 && h_now_ms() < end)
		h_sleep_ms(5);
	granted_ms = h_now_ms();
	H_ASSERT_MSG(room_w() > 0, "W holds no reservation");
	if (put_ms - refused_ms < 700)
		H_ASSERT_MSG(granted_ms - refused_ms < 1000,
			     "granted %llu ms after the refusal, %llu after a put found room",
			     (unsigned long long)(granted_ms - refused_ms),
			     (unsigned long long)(granted_ms - put_ms));
	else
		print_message("not timed: the first put found room %llu ms after the refusal\n",
			      (unsigned long long)(put_ms - refused_ms));
	commits = metric(mhttp, COMMITS);
	put_seeded(cw, "ahead/next", buf, sizeof(buf), h_seed("next"), NULL);
	H_ASSERT_EQ(metric(mhttp, COMMITS) - commits, 1);
	check_seeded(co, "ahead/room", buf, sizeof(buf), h_seed("room"));
	check_seeded(co, "ahead/next", buf, sizeof(buf), h_seed("next"));
	lunar_close(cw);
	lunar_close(co);
}

/* A tenant's quota holds for puts ahead: the commit that would pass it is
 * refused, its piece goes back to W, and what fits still goes ahead. */
static void test_put_ahead_tenant_quota(void **state)
{
	static const char *const flags[] = {"--reserve-ttl", "60s", "--tenant-quota", "q=16KiB",
					    NULL};
	struct lunar_client *cw, *co;
	uint8_t buf[4 * KIB];
	int64_t commits;
	char k[64];

	(void)state;
	start(flags, "64MiB", NULL, NULL);
	wait_reserved();
	cw = tenant_client(sock_w, "q");
	co = tenant_client(sock_o, "q");
	commits = metric(mhttp, COMMITS);
	for (int i = 0; i < 4; i++) {
		key_of(k, sizeof(k), "quota", i);
		put_seeded(cw, k, buf, sizeof(buf), h_seed(k), NULL);
	}
	h_fill(buf, sizeof(buf), h_seed("over"));
	H_ASSERT_EQ(lunar_put(cw, "ahead/quota/over", buf, sizeof(buf), NULL),
		    LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	H_ASSERT_EQ(metric(mhttp, COMMITS) - commits, 5);
	H_ASSERT_EQ(used_o(), 4 * sizeof(buf));
	H_ASSERT_EQ(lunar_remove(cw, "ahead/quota/0", 0), 0);
	put_seeded(cw, "ahead/quota/again", buf, sizeof(buf), h_seed("again"), NULL);
	check_seeded(co, "ahead/quota/again", buf, sizeof(buf), h_seed("again"));
	H_ASSERT_EQ(lunar_exists(co, "ahead/quota/over"), 0);
	lunar_close(cw);
	lunar_close(co);
}

/* W with --reserve-size 0: every put makes two calls, as before. */
static void test_put_ahead_off(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t buf[4 * KIB];
	int64_t starts;

	(void)state;
	start(long_life, "64MiB", "--reserve-size", "0");
	cw = h_client(sock_w);
	co = h_client(sock_o);
	starts = metric(mhttp, STARTS);
	put_seeded(cw, "ahead/off", buf, sizeof(buf), h_seed("off"), NULL);
	H_ASSERT_EQ(metric(mhttp, STARTS) - starts, 1);
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
	check_seeded(co, "ahead/off", buf, sizeof(buf), h_seed("off"));
	lunar_close(cw);
	lunar_close(co);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_put_ahead_commits_visible_everywhere, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_duplicate_keeps_first_no_leak,
					    case_setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_writer_killed_space_returns, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_eviction_loses_no_byte, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_master_restart, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_fallbacks_still_work, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_asks_again_once_puts_find_room,
					    case_setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_tenant_quota, case_setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_off, case_setup, case_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
