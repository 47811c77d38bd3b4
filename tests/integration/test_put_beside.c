/*
 * test_put_beside.c - a put ahead whose commit travels beside its write
 * (proxy/ops_ahead.c), with a real lunar-master, a writer proxy W without a
 * segment and an owner O with one, all the failpoint build's
 * (common/failpoint.h). With O holding each write back
 * (engine-serve-write=sleep), the master has the value before the put
 * returns, and a reader meanwhile misses it until its bytes landed (never
 * CHECKSUM_MISMATCH, never other bytes) and reads it exactly once the put
 * returned; with
 * --commit-after-write the value exists only once its bytes landed. A
 * write O drops after its commit (engine-serve-write=return; over RDMA,
 * the engine's second run of it too) is taken back and put again the
 * two-call way: the put returns 0 and reads back exact; when the master
 * does not answer the taking back, or W has no memory to ask, W's
 * heartbeat asks again; a put of the key meanwhile fails. A grant W
 * cannot use is given back at once.
 * With --offload on_put, a value whose offload task reaches O before its
 * bytes land is copied to O's SSD once they have. A value W removes while
 * another of its puts' bytes still travel gives its range back at once.
 * Beside an RDMA device, the held writes go by RDMA.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>

#include "case_util.h"
#include "disk_util.h"
#include "harness.h"
#include "lunar.h"

#define LEN	       4096u
#define HOLD	       "engine-serve-write=sleep(1500)" /* each write O serves */
#define BESIDE	       "lunar_proxy_puts_beside_total"
#define UNCOMMITTED    "lunar_proxy_puts_uncommitted_total"
#define RESERVED_BYTES "lunar_master_reserved_bytes"
#define ROOM	       "lunar_proxy_reserved_room_bytes"

static char sock_w[PATH_MAX], sock_o[PATH_MAX], seg_o[H_SEG_NAME], fpfile[PATH_MAX];
static int mhttp, whttp, ohttp;
static struct h_proc *proxy_w, *proxy_o;

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	case_failpoints(fpfile, "failpoints");
	return 0;
}

/* The master, O (with an SSD tier the master offloads to on put, when
 * offload) and W (with wflag, or NULL). */
static void start_daemons(const char *wflag, int offload)
{
	int mport = h_free_port();
	struct h_proc *p = track(h_start_master("master", mport, "--reserve-ttl", "60s",
						offload ? "--offload" : NULL, "on_put", NULL));

	H_ASSERT(p != NULL);
	mhttp = http_port_of(p);
	h_named_sock(sock_o, "o");
	h_named_sock(sock_w, "w");
	proxy_o = track(h_start_peer("proxyO", sock_o, mport, seg_o, "--segment-size", "64MiB",
				     "--reserve-size", "0", offload ? "--disk-dir" : NULL,
				     h_path("disk-o"), "--disk-capacity", "64MiB",
				     "--ping-interval", "100ms", NULL));
	H_ASSERT(proxy_o != NULL);
	ohttp = http_port_of(proxy_o);
	proxy_w = track(h_start_proxy("proxyW", sock_w, mport, "--segment-size", "0", wflag, NULL));
	H_ASSERT(proxy_w != NULL);
	whttp = http_port_of(proxy_w);
}

/* start_daemons, and wait until W holds reserved space (the master
 * counts a grant before W has its reply). */
static void start_with(const char *wflag, int offload)
{
	uint64_t end;

	start_daemons(wflag, offload);
	end = h_now_ms() + H_BOUND_MS(10000);
	while (metric(whttp, ROOM) == 0 && h_now_ms() < end)
		h_sleep_ms(20);
	H_ASSERT_MSG(metric(whttp, ROOM) > 0, "W holds no reservation");
}

static void start(const char *wflag)
{
	start_with(wflag, 0);
}

struct putter {
	pthread_t th;
	const char *key;
	uint8_t buf[LEN];
	int rc;
	atomic_int done;
};

static void *put_main(void *arg)
{
	struct putter *p = arg;
	struct lunar_client *c = h_client(sock_w);

	h_fill(p->buf, LEN, h_seed(p->key));
	p->rc = lunar_put(c, p->key, p->buf, LEN, NULL);
	atomic_store(&p->done, 1);
	lunar_close(c);
	return NULL;
}

/* Put key through W on a thread of its own while O holds its write back;
 * how the value looked to a reader on O meanwhile: seen (exists) and
 * missed or, once its bytes landed, exact; never another answer. Then it
 * reads back exact. */
static int put_held(const char *key)
{
	static struct putter p; /* its thread outlives a failed assertion */
	struct lunar_client *c = h_client(sock_o);
	int64_t mark = h_rdma_mark(proxy_w);
	uint8_t buf[LEN];
	int seen = 0;

	p = (struct putter){.key = key};
	atomic_init(&p.done, 0);
	case_arm(fpfile, HOLD, 60);
	H_ASSERT(pthread_create(&p.th, NULL, put_main, &p) == 0);
	while (!atomic_load(&p.done)) {
		int e = lunar_exists(c, key);
		int64_t got = lunar_get_into(c, key, buf, sizeof(buf));

		H_ASSERT_MSG(e == 0 || e == 1, "exists %s = %d (%s)", key, e, h_code(e));
		/* a miss, or, once its bytes landed (the put's answer may still
		 * be on its way), its value exactly */
		H_ASSERT_MSG(got == LUNAR_ERR_OBJECT_NOT_FOUND || got == LEN,
			     "get %s while its bytes travel = %lld (%s)", key, (long long)got,
			     h_code(got));
		H_ASSERT_MSG(got != LEN || h_verify(buf, LEN, h_seed(key)) < 0,
			     "get %s while its bytes travel: other bytes", key);
		seen |= e == 1 && !atomic_load(&p.done);
		h_sleep_ms(20);
	}
	H_ASSERT(pthread_join(p.th, NULL) == 0);
	case_arm(fpfile, "", 60);
	H_ASSERT_MSG(p.rc == 0, "put %s = %d (%s)", key, p.rc, h_code(p.rc));
	h_rdma_check(proxy_w, mark, 1); /* the held write went by RDMA */
	check_seeded(c, key, buf, LEN, h_seed(key));
	lunar_close(c);
	return seen;
}

static void test_put_beside_commit_before_landing_reads_miss(void **state)
{
	(void)state;
	start(NULL);
	H_ASSERT_MSG(put_held("beside/held"), "the value did not exist before its put returned");
	H_ASSERT_EQ(metric(whttp, BESIDE), 1);
}

static void test_put_beside_off_commits_after_landing(void **state)
{
	(void)state;
	start("--commit-after-write");
	H_ASSERT_MSG(!put_held("beside/after"), "the value existed before its bytes landed");
	H_ASSERT_EQ(metric(whttp, BESIDE), 0);
}

/* Arm O to lose the next write it serves, with the failpoints of more
 * ("": none) beside. Over RDMA, a write whose QP set O ended under it
 * runs once more (engine/rdma.c): that run is lost too. */
static void arm_lost_write(const char *more)
{
	char fp[128];

	H_ASSERT_EQ(h_rdma_wait_segment(proxy_o), 0);
	snprintf(fp, sizeof(fp), "engine-serve-write=%d*return%s", h_rdma_expected() ? 2 : 1, more);
	case_arm(fpfile, fp, 60);
}

static void test_put_beside_failed_write_taken_back(void **state)
{
	struct lunar_client *cw, *co;
	uint8_t buf[LEN];

	(void)state;
	start(NULL);
	cw = h_client(sock_w);
	co = h_client(sock_o);
	arm_lost_write("");
	put_seeded(cw, "beside/lost", buf, LEN, h_seed("beside/lost"), NULL);
	case_arm(fpfile, "", 60);
	H_ASSERT_EQ(metric(whttp, UNCOMMITTED), 1);
	check_seeded(co, "beside/lost", buf, LEN, h_seed("beside/lost"));
	check_seeded(cw, "beside/lost", buf, LEN, h_seed("beside/lost"));
	lunar_close(cw);
	lunar_close(co);
}

/* A put through cw of key whose write O drops after its commit, whose
 * taking back fails as more has it (for arm_lost_write, left armed): it
 * fails as its write did. */
static void put_lost(struct lunar_client *cw, const char *more, const char *key)
{
	uint8_t buf[LEN];
	int rc;

	arm_lost_write(more);
	h_fill(buf, LEN, 1);
	rc = lunar_put(cw, key, buf, LEN, NULL);
	H_ASSERT_MSG(rc == LUNAR_ERR_TRANSFER_FAIL, "put = %d (%s)", rc, h_code(rc));
}

/* Until W's heartbeat has taken one value back. */
static void wait_taken_back(void)
{
	uint64_t end = h_now_ms() + H_BOUND_MS(10000);

	while (metric(whttp, UNCOMMITTED) == 0 && h_now_ms() < end)
		h_sleep_ms(20);
	H_ASSERT_EQ(metric(whttp, UNCOMMITTED), 1);
}

/* Once taken back, key is not left with bytes unlike its CRC32C: put
 * again through cw, it reads back exact through co. */
static void put_again_exact(struct lunar_client *cw, struct lunar_client *co, const char *key)
{
	uint8_t buf[LEN];

	put_seeded(cw, key, buf, LEN, h_seed(key), NULL);
	check_seeded(co, key, buf, LEN, h_seed(key));
}

/* A lost write whose taking back fails as more has it: W's heartbeat
 * takes the value back. */
static void uncommit_retried(const char *more, const char *key)
{
	struct lunar_client *cw, *co;

	start(NULL);
	cw = h_client(sock_w);
	co = h_client(sock_o);
	put_lost(cw, more, key);
	case_arm(fpfile, "", 60);
	wait_taken_back();
	put_again_exact(cw, co, key);
	lunar_close(cw);
	lunar_close(co);
}

/* The master did not answer the taking back (proxy-uncommit). */
static void test_put_beside_lost_uncommit_retried(void **state)
{
	(void)state;
	uncommit_retried(";proxy-uncommit=1*return", "beside/stuck");
}

/* W had no memory to ask for it (proxy-uncommit-alloc): before, the value
 * was neither taken back nor queued, and stayed unlike its CRC32C. */
static void test_put_beside_unasked_uncommit_retried(void **state)
{
	(void)state;
	uncommit_retried(";proxy-uncommit-alloc=1*return", "beside/oom");
}

#define RETRY_LOST ";proxy-uncommit=1*return;proxy-uncommit-retry=return"

/* A put of a key whose value waits to be taken back fails, as the value's
 * own put did: before, it was told the key exists (0), and the value then
 * went, leaving no value of the key at all. Once taken back, the put
 * works. */
static void test_put_beside_put_while_taking_back_fails(void **state)
{
	struct lunar_client *cw, *co;
	const char *key = "beside/waiting";
	uint8_t buf[LEN];
	int rc;

	(void)state;
	start(NULL);
	cw = h_client(sock_w);
	co = h_client(sock_o);
	put_lost(cw, RETRY_LOST, key);
	h_fill(buf, LEN, h_seed(key));
	rc = lunar_put(cw, key, buf, LEN, NULL);
	H_ASSERT_MSG(rc == LUNAR_ERR_TRANSFER_FAIL, "put while taken back = %d (%s)", rc,
		     h_code(rc));
	case_arm(fpfile, "", 60);
	wait_taken_back();
	put_again_exact(cw, co, key);
	lunar_close(cw);
	lunar_close(co);
}

/* The same when the value is taken back between the master's answer to
 * the put (the key exists) and W's look at the values waiting: the put
 * fails (before, it found none waiting and returned 0). */
static void test_put_beside_put_answered_as_taken_back_fails(void **state)
{
	static struct putter p; /* its thread outlives a failed assertion */
	struct lunar_client *cw, *co;

	(void)state;
	start(NULL);
	cw = h_client(sock_w);
	co = h_client(sock_o);
	p = (struct putter){.key = "beside/going"};
	atomic_init(&p.done, 0);
	put_lost(cw, RETRY_LOST, p.key);
	case_arm(fpfile, "proxy-uncommit-retry=return;proxy-commit-answered=sleep(1500)", 60);
	H_ASSERT(pthread_create(&p.th, NULL, put_main, &p) == 0);
	H_ASSERT_EQ(h_wait_log(proxy_w, "proxy-commit-answered fired", H_BOUND_MS(5000)), 0);
	case_arm(fpfile, "", 0); /* the heartbeat takes the value back meanwhile */
	wait_taken_back();
	H_ASSERT(pthread_join(p.th, NULL) == 0);
	H_ASSERT_MSG(p.rc == LUNAR_ERR_TRANSFER_FAIL, "put answered as taken back = %d (%s)", p.rc,
		     h_code(p.rc));
	put_again_exact(cw, co, p.key);
	lunar_close(cw);
	lunar_close(co);
}

/* A value W put and removes while another put's bytes still travel: W
 * tells the master its writes below that put's piece are done, so the
 * removed value's range is not held until every put of W's pauses. */
static void test_put_beside_removed_range_free_while_others_travel(void **state)
{
	static struct putter p; /* its thread outlives a failed assertion */
	struct lunar_client *cw, *co;
	uint8_t buf[LEN];
	uint64_t end;
	int64_t held = -1;
	int committed, removed = -1, travelling = 0;

	(void)state;
	start(NULL);
	cw = h_client(sock_w);
	co = h_client(sock_o);
	put_seeded(cw, "beside/done", buf, LEN, h_seed("beside/done"), NULL);
	/* committed beside its write, or its range would be free anyway */
	H_ASSERT_EQ(metric(whttp, BESIDE), 1);
	p = (struct putter){.key = "beside/travelling"};
	atomic_init(&p.done, 0);
	case_arm(fpfile, HOLD, 60);
	H_ASSERT(pthread_create(&p.th, NULL, put_main, &p) == 0);
	end = h_now_ms() + H_BOUND_MS(5000);
	while (lunar_exists(co, p.key) != 1 && h_now_ms() < end)
		h_sleep_ms(5);
	committed = lunar_exists(co, p.key) == 1;
	if (committed) {
		removed = lunar_remove(cw, "beside/done", 0);
		held = metric(mhttp, "lunar_master_beside_held_bytes");
		travelling = !atomic_load(&p.done);
	}
	H_ASSERT(pthread_join(p.th, NULL) == 0);
	case_arm(fpfile, "", 60);
	H_ASSERT_MSG(committed, "the travelling put was not committed");
	H_ASSERT_EQ(removed, 0);
	H_ASSERT_MSG(travelling, "the other put's write landed too soon to tell");
	H_ASSERT_MSG(held == 0, "%lld bytes held while another put's bytes travel",
		     (long long)held);
	H_ASSERT_MSG(p.rc == 0, "put %s = %d (%s)", p.key, p.rc, h_code(p.rc));
	H_ASSERT_EQ(metric(whttp, BESIDE), 2);
	check_seeded(co, p.key, buf, LEN, h_seed(p.key));
	lunar_close(cw);
	lunar_close(co);
}

/* A grant whose extent W cannot use (proxy-reserve-bad) is given back at
 * once: before, the master held its space for the grant's whole TTL (60 s
 * here). W asks again only much later, and puts the two-call way. */
static void test_put_beside_bad_grant_given_back(void **state)
{
	struct lunar_client *cw;
	uint8_t buf[LEN];
	uint64_t end;

	(void)state;
	case_arm(fpfile, "proxy-reserve-bad=1*return", 0);
	start_daemons(NULL, 0);
	H_ASSERT_EQ(h_wait_log(proxy_w, "proxy-reserve-bad fired", H_BOUND_MS(10000)), 0);
	end = h_now_ms() + H_BOUND_MS(5000);
	while (metric(mhttp, RESERVED_BYTES) != 0 && h_now_ms() < end)
		h_sleep_ms(20);
	H_ASSERT_MSG(metric(mhttp, RESERVED_BYTES) == 0, "%lld bytes still reserved",
		     (long long)metric(mhttp, RESERVED_BYTES));
	cw = h_client(sock_w);
	put_seeded(cw, "beside/unreserved", buf, LEN, h_seed("beside/unreserved"), NULL);
	H_ASSERT_EQ(metric(whttp, BESIDE), 0);
	check_seeded(cw, "beside/unreserved", buf, LEN, h_seed("beside/unreserved"));
	lunar_close(cw);
}

static void test_put_beside_offload_waits_for_landing(void **state)
{
	struct lunar_client *cw;
	uint8_t buf[LEN];
	char st[4096];
	uint64_t end;

	(void)state;
	start_with(NULL, 1);
	cw = h_client(sock_w);
	/* O's Pings (every 100 ms) hand it the task while the bytes wait */
	case_arm(fpfile, "engine-serve-write=sleep(300)", 60);
	put_seeded(cw, "beside/offload", buf, LEN, h_seed("beside/offload"), NULL);
	case_arm(fpfile, "", 0);
	end = h_now_ms() + H_BOUND_MS(5000);
	do {
		H_ASSERT(d_http_get(ohttp, "/disk/status", st, sizeof(st)) > 0);
		if (d_json_num(st, "offloads") >= 1)
			break;
		h_sleep_ms(20);
	} while (h_now_ms() < end);
	H_ASSERT_MSG(d_json_num(st, "offloads") == 1, "O offloaded %lld values, not 1: %s",
		     d_json_num(st, "offloads"), text);
	lunar_close(cw);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_put_beside_commit_before_landing_reads_miss, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_off_commits_after_landing, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_failed_write_taken_back, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_lost_uncommit_retried, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_unasked_uncommit_retried, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_put_while_taking_back_fails, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_put_answered_as_taken_back_fails, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_removed_range_free_while_others_travel,
					    setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_bad_grant_given_back, setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_put_beside_offload_waits_for_landing, setup,
					    case_teardown),
	};
	/* Every daemon the harness starts here is the failpoint build's. */
	int rc = h_failpoint_build("lunar-proxy");

	return rc ? rc : cmocka_run_group_tests(tests, NULL, NULL);
}
