/*
 * test_dead_reader.c - a client that dies has its leases dropped at
 * once, not after the lease TTL (SPEC §5.6).
 *
 * With the default 10 s lease: a forked child gets one key and asks whether
 * a second exists (each read takes a lease), and also gets a third key the
 * parent read first. While the child lives, an unforced remove of its keys
 * is refused (OBJECT_HAS_LEASE). Once it is SIGKILLed, the remove of its own
 * two keys succeeds within 3 s, while the third key stays leased for the
 * parent, who is alive and read it.
 *
 * With a 3 s lease: a child reads a key twice, a second apart, so that the
 * proxy's heartbeat renews the lease (the master grants a renewal to the proxy, not
 * to the child). Once the renewal is seen and the child is killed, the
 * remove succeeds within 1.5 s, long before the renewed lease would end.
 *
 * With the heartbeat held back for 6 s: 300 clients each read a key and
 * close before the first beat. Every one of their leases goes back on that
 * beat, long before the 10 s lease would end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "http_get.h"

#define VAL_LEN	      4096
#define RELEASE_MS    3000 /* well inside the 10 s lease */
#define ALIVE_MS      1500 /* over a heartbeat: a live reader's leases stay */
#define SHORT_TTL     "3s"
#define REREAD_MS     1000 /* over 3 s / 4, under 3 s * 3 / 4: a cached hit to renew */
#define RENEW_WAIT_MS 5000 /* for the heartbeat to renew a 3 s lease */
#define RENEWED_MS    1500 /* well inside a renewed 3 s lease */
#define CALLS_BGRL    "lunar_master_calls_total{method=\"BatchGetReplicaList\"}"
#define HB_HOLD	      "6s"
#define MANY	      300  /* closed clients before one beat: more than one batch */
#define MANY_MS	      8000 /* from the last read: well inside its 10 s lease */

static char sock[PATH_MAX];
static struct lunar_client *cl;
static struct h_proc *node;

static int setup(void **state)
{
	(void)state;
	node = h_embedded_node(sock, &cl, NULL);
	return node ? 0 : -1;
}

static int setup_held_heartbeat(void **state)
{
	(void)state;
	node = h_embedded_node(sock, &cl, "--debug-heartbeat-delay", HB_HOLD, NULL);
	return node ? 0 : -1;
}

static int setup_short_lease(void **state)
{
	(void)state;
	node = h_embedded_node(sock, &cl, "--kv-lease-ttl", SHORT_TTL, NULL);
	return node ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_embedded_node_stop(&cl);
	return 0;
}

/* The child: read its keys on a connection of its own, say so, then wait
 * to be killed. */
static void reader_main(int ready_fd, void *arg)
{
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 10000};
	static uint8_t buf[VAL_LEN];
	struct lunar_client *c = NULL;
	int64_t got1, got2;
	int rc, ex;

	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(30); /* bounded, should the test not kill it */
	rc = lunar_connect(&o, &c);
	if (rc) {
		fprintf(stderr, "reader: connect: %s\n", h_code(rc));
		_exit(2);
	}
	got1 = lunar_get_into(c, "mine-got", buf, sizeof(buf));
	ex = lunar_exists(c, "mine-asked");
	got2 = lunar_get_into(c, "shared", buf, sizeof(buf));
	if (got1 != VAL_LEN || ex != 1 || got2 != VAL_LEN) {
		fprintf(stderr, "reader: get %s, exists %s, get %s\n", h_code(got1), h_code(ex),
			h_code(got2));
		_exit(3);
	}
	if (write(ready_fd, "R", 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

static void test_dead_reader_leases_dropped(void **state)
{
	static const char *const keys[] = {"mine-got", "mine-asked", "shared"};
	static uint8_t val[VAL_LEN];
	uint64_t read_at, killed, took;
	int status = 0, rc1 = -1, rc2 = -1; /* not yet removed */
	pid_t pid;

	(void)state;
	/* Given: three keys, the last of them read by us */
	h_fill(val, sizeof(val), 1);
	for (int i = 0; i < 3; i++)
		H_ASSERT_EQ(lunar_put(cl, keys[i], val, sizeof(val), NULL), 0);
	H_ASSERT_EQ(lunar_exists(cl, "shared"), 1);
	/* When: the reader reads them all and stays alive */
	pid = h_fork_ready(reader_main, NULL, NULL);
	H_ASSERT_MSG(pid > 0, "the reader never read its keys");
	read_at = h_now_ms();
	/* Then: its leases hold over a heartbeat */
	while (h_now_ms() - read_at < ALIVE_MS) {
		H_ASSERT_EQ(lunar_remove(cl, "mine-got", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
		H_ASSERT_EQ(lunar_remove(cl, "mine-asked", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
		h_sleep_ms(100);
	}
	/* When: it dies */
	kill(pid, SIGKILL);
	H_ASSERT_EQ(waitpid(pid, &status, 0), pid);
	killed = h_now_ms();
	/* Then: the leases only its reads took go at once */
	do {
		if (rc1 != 0)
			rc1 = lunar_remove(cl, "mine-got", 0);
		if (rc2 != 0)
			rc2 = lunar_remove(cl, "mine-asked", 0);
		if (!rc1 && !rc2)
			break;
		h_sleep_ms(20);
	} while (h_now_ms() - killed < RELEASE_MS);
	took = h_now_ms() - killed;
	print_message("removable %llu ms after the reader's death (%llu ms after its reads)\n",
		      (unsigned long long)took, (unsigned long long)(h_now_ms() - read_at));
	H_ASSERT_MSG(!rc1 && !rc2, "remove after the reader died: %s, %s (lease TTL 10 s)",
		     h_code(rc1), h_code(rc2));
	/* ... and the key we read stays leased for us */
	H_ASSERT_EQ(lunar_remove(cl, "shared", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	H_ASSERT_EQ(lunar_remove(cl, "shared", 1), 0);
}

/* The child of the renewal case: read "renewed" twice (a miss, then a hit
 * the heartbeat renews: REREAD_MS later, past the quarter of the TTL a
 * renewal must add to what the grant covers), say so, then wait to be
 * killed. */
static void rereader_main(int ready_fd, void *arg)
{
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 10000};
	static uint8_t buf[VAL_LEN];
	struct lunar_client *c = NULL;
	int64_t got1, got2;

	(void)arg;
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	alarm(30);
	if (lunar_connect(&o, &c))
		_exit(2);
	got1 = lunar_get_into(c, "renewed", buf, sizeof(buf));
	h_sleep_ms(REREAD_MS);
	got2 = lunar_get_into(c, "renewed", buf, sizeof(buf));
	if (got1 != VAL_LEN || got2 != VAL_LEN) {
		fprintf(stderr, "rereader: get %s, %s\n", h_code(got1), h_code(got2));
		_exit(3);
	}
	if (write(ready_fd, "R", 1) != 1)
		_exit(4);
	for (;;)
		pause();
}

/* The master's BatchGetReplicaList calls so far (lookups and renewals). */
static int64_t bgrl_calls(int port)
{
	static char text[1 << 16];

	H_ASSERT_EQ(hg_get(port, "/metrics", text, sizeof(text)), 200);
	return hg_metric(text, CALLS_BGRL);
}

static void test_dead_reader_renewed_lease_dropped(void **state)
{
	static uint8_t val[VAL_LEN];
	int port = hg_log_http_port(node->log);
	int64_t calls0;
	uint64_t ready_at, killed, took;
	int status = 0, rc = -1;
	pid_t pid;

	(void)state;
	H_ASSERT(port > 0);
	/* Given: a key the reader read twice, and the heartbeat's renewal of
	 * its lease since (one more BatchGetReplicaList, from the proxy) */
	h_fill(val, sizeof(val), 2);
	H_ASSERT_EQ(lunar_put(cl, "renewed", val, sizeof(val), NULL), 0);
	pid = h_fork_ready(rereader_main, NULL, NULL);
	H_ASSERT_MSG(pid > 0, "the reader never read its key");
	ready_at = h_now_ms();
	calls0 = bgrl_calls(port);
	while (bgrl_calls(port) == calls0 && h_now_ms() - ready_at < RENEW_WAIT_MS)
		h_sleep_ms(50);
	H_ASSERT_MSG(bgrl_calls(port) > calls0, "no renewal in %d ms", RENEW_WAIT_MS);
	H_ASSERT_EQ(lunar_remove(cl, "renewed", 0), LUNAR_ERR_OBJECT_HAS_LEASE);
	/* When: the reader dies */
	kill(pid, SIGKILL);
	H_ASSERT_EQ(waitpid(pid, &status, 0), pid);
	killed = h_now_ms();
	/* Then: the renewed lease goes too, long before it would end */
	while ((rc = lunar_remove(cl, "renewed", 0)) != 0 && h_now_ms() - killed < RENEWED_MS)
		h_sleep_ms(20);
	took = h_now_ms() - killed;
	print_message("renewed %llu ms after the reads; removable %llu ms after the death\n",
		      (unsigned long long)(killed - ready_at), (unsigned long long)took);
	H_ASSERT_MSG(rc == 0, "remove after the reader died: %s (lease TTL %s, renewed)",
		     h_code(rc), SHORT_TTL);
}

static void test_dead_reader_many_closed_before_a_beat(void **state)
{
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 10000};
	static uint8_t val[VAL_LEN];
	int left = MANY, rc;
	uint64_t read_at;
	char key[32];

	(void)state;
	/* Given: MANY keys, each read by a client of its own that then closed,
	 * all before the proxy's first heartbeat */
	h_fill(val, sizeof(val), 3);
	for (int i = 0; i < MANY; i++) {
		snprintf(key, sizeof(key), "many-%d", i);
		H_ASSERT_EQ(lunar_put(cl, key, val, sizeof(val), NULL), 0);
	}
	for (int i = 0; i < MANY; i++) {
		struct lunar_client *c = NULL;

		snprintf(key, sizeof(key), "many-%d", i);
		H_ASSERT_EQ(lunar_connect(&o, &c), 0);
		H_ASSERT_EQ(lunar_get_into(c, key, val, sizeof(val)), VAL_LEN);
		lunar_close(c);
	}
	read_at = h_now_ms();
	/* When: the heartbeat beats; Then: every one of their leases goes */
	do {
		left = 0;
		for (int i = 0; i < MANY; i++) {
			snprintf(key, sizeof(key), "many-%d", i);
			rc = lunar_remove(cl, key, 0);
			left += rc == LUNAR_ERR_OBJECT_HAS_LEASE;
			H_ASSERT_MSG(rc == 0 || rc == LUNAR_ERR_OBJECT_HAS_LEASE ||
					 rc == LUNAR_ERR_OBJECT_NOT_FOUND,
				     "remove %s: %s", key, h_code(rc));
		}
		if (left)
			h_sleep_ms(100);
	} while (left && h_now_ms() - read_at < MANY_MS);
	print_message("%d of %d keys still leased %llu ms after the last read\n", left, MANY,
		      (unsigned long long)(h_now_ms() - read_at));
	H_ASSERT_EQ(left, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_dead_reader_leases_dropped, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_dead_reader_renewed_lease_dropped,
					    setup_short_lease, teardown),
	    cmocka_unit_test_setup_teardown(test_dead_reader_many_closed_before_a_beat,
					    setup_held_heartbeat, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
