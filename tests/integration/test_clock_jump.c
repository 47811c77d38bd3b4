/*
 * test_clock_jump.c - clocks that disagree (SPEC §13): a master and proxies
 * A and B, values put through one proxy stored on the other's segment, so
 * every transfer shows a capability the master made to an owner that
 * checks it. While they run, the daemons' wall clocks are stepped an hour
 * either way (the failpoints wall-clock-ahead-1h and wall-clock-behind-1h
 * of the `make failpoints` build, armed through $LUNAR_FAILPOINTS_FILE):
 * master behind and owners ahead, then the other way round. Before the
 * expiries moved to the master's monotonic clock, every grant then looked
 * an hour old to an owner and each transfer failed (a mass expiry); the
 * other way it stayed good an hour past its lease. Here every value put
 * before a step reads back byte-exact after it, new puts and gets between
 * the nodes work, and a read lease still ends on time (--kv-lease-ttl 2s:
 * the key is removable within the TTL and no proxy serves it after).
 * Then proxy C runs in a time namespace (unshare --time) whose monotonic
 * clock is a day ahead of the others': no process compares its monotonic
 * stamps with another's (an owner estimates the master's clock from the
 * readings it sends), so C serves and is served like the others. Skipped,
 * saying so, without the failpoint build; the namespace case skips when the
 * kernel or unshare refuses.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case_util.h"

#define LEN	 (256u * 1024u)
#define LEASE_MS 2000
#define DAY_S	 "86400"

struct node {
	const char *name;
	char sock[PATH_MAX], seg[H_SEG_NAME], fp[PATH_MAX];
	struct h_proc *p;
	struct lunar_client *c;
};

static struct node a = {.name = "proxyA"}, b = {.name = "proxyB"}, c = {.name = "proxyC"};
static char master_fp[PATH_MAX];
static struct h_proc *master;
static int mport;
static uint8_t *buf;

static void settle(void)
{
	h_sleep_ms(100);
}

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	buf = malloc(LEN);
	snprintf(master_fp, sizeof(master_fp), "%s", h_path("fp-master"));
	snprintf(a.fp, sizeof(a.fp), "%s", h_path("fp-a"));
	snprintf(b.fp, sizeof(b.fp), "%s", h_path("fp-b"));
	case_arm(master_fp, "", 0);
	case_arm(a.fp, "", 0);
	case_arm(b.fp, "", 0);
	mport = h_free_port();
	/* Each daemon inherits the failpoint file named when it starts. */
	setenv("LUNAR_FAILPOINTS_FILE", master_fp, 1);
	master = track(h_start_master("master", mport, "--kv-lease-ttl", "2s", NULL));
	if (!buf || !master)
		return -1;
	return 0;
}

static int teardown(void **state)
{
	struct node *n[] = {&a, &b, &c};

	for (int i = 0; i < 3; i++) {
		lunar_close(n[i]->c);
		n[i]->c = NULL;
		n[i]->p = NULL;
	}
	free(buf);
	buf = NULL;
	return case_teardown(state);
}

static void start_node(struct node *n)
{
	h_named_sock(n->sock, n->name);
	setenv("LUNAR_FAILPOINTS_FILE", n->fp, 1);
	n->p = track(h_start_peer(n->name, n->sock, mport, n->seg, "--segment-size", "32MiB",
				  "--ping-interval", "100ms", NULL));
	H_ASSERT(n->p != NULL);
	n->c = h_client(n->sock);
}

/* Put key through from, stored on to's segment only. */
static void put_on(struct node *from, struct node *to, const char *key)
{
	const char *pref[] = {to->seg};
	struct lunar_put_cfg cfg = {
	    .replica_num = 1, .preferred_segments = pref, .preferred_count = 1};

	put_seeded(from->c, key, buf, LEN, h_seed(key), &cfg);
}

/* Puts and gets both ways between x and y (each an owner of the other's
 * value), and the values put before, still byte-exact. */
static void cross(struct node *x, struct node *y, const char *when)
{
	char k1[96], k2[96];

	snprintf(k1, sizeof(k1), "clock/%s/%s-on-%s", when, x->name, y->name);
	snprintf(k2, sizeof(k2), "clock/%s/%s-on-%s", when, y->name, x->name);
	put_on(x, y, k1);
	put_on(y, x, k2);
	check_seeded(x->c, k2, buf, LEN, h_seed(k2)); /* stored on x: local */
	check_seeded(y->c, k2, buf, LEN, h_seed(k2));
	check_seeded(x->c, k1, buf, LEN, h_seed(k1));
	check_seeded(y->c, k1, buf, LEN, h_seed(k1));
	print_message("  %s: puts and gets between %s and %s work\n", when, x->name, y->name);
}

/* The values put before the steps still read through the node that put
 * them, from the other's segment. */
static void old_values(void)
{
	check_seeded(a.c, "clock/before/proxyA-on-proxyB", buf, LEN,
		     h_seed("clock/before/proxyA-on-proxyB"));
	check_seeded(b.c, "clock/before/proxyB-on-proxyA", buf, LEN,
		     h_seed("clock/before/proxyB-on-proxyA"));
}

/* A read lease ends on time: key, read through reader (which caches the
 * lease), can be removed without force within the TTL plus a bound, and
 * reader does not serve it after. */
static void lease_ends(struct node *reader, struct node *other, const char *key)
{
	uint64_t t0, end;
	int rc;

	check_seeded(reader->c, key, buf, LEN, h_seed(key));
	t0 = h_now_ms();
	end = t0 + LEASE_MS + (uint64_t)H_BOUND_MS(3000);
	while ((rc = lunar_remove(other->c, key, 0)) == LUNAR_ERR_OBJECT_HAS_LEASE &&
	       h_now_ms() < end)
		h_sleep_ms(50);
	H_ASSERT_MSG(rc == 0, "remove of %s %llu ms after the read: %d (%s)", key,
		     (unsigned long long)(h_now_ms() - t0), rc, h_code(rc));
	print_message("  the read lease on %s ended %llu ms after the read (TTL %d ms)\n", key,
		      (unsigned long long)(h_now_ms() - t0), LEASE_MS);
	H_ASSERT_EQ(lunar_get_into(reader->c, key, buf, LEN), LUNAR_ERR_OBJECT_NOT_FOUND);
}

static void test_clock_jump_wall_steps(void **state)
{
	(void)state;
	start_node(&a);
	start_node(&b);
	cross(&a, &b, "before");

	/* The master's wall clock an hour behind, the owners' an hour ahead
	 * (or behind): a grant would look an hour old to them. */
	case_arm(master_fp, "wall-clock-behind-1h=return", 0);
	case_arm(a.fp, "wall-clock-ahead-1h=return", 0);
	case_arm(b.fp, "wall-clock-behind-1h=return", 0);
	settle();
	old_values();
	cross(&a, &b, "master-behind");
	lease_ends(&a, &b, "clock/master-behind/proxyA-on-proxyB");

	/* The other way: a grant would live an hour past its lease. */
	case_arm(master_fp, "wall-clock-ahead-1h=return", 0);
	case_arm(a.fp, "wall-clock-behind-1h=return", 0);
	case_arm(b.fp, "wall-clock-ahead-1h=return", 0);
	settle();
	old_values();
	cross(&a, &b, "master-ahead");
	lease_ends(&b, &a, "clock/master-ahead/proxyB-on-proxyA");

	/* And back. */
	case_arm(master_fp, "", 0);
	case_arm(a.fp, "", 0);
	case_arm(b.fp, "", 0);
	settle();
	old_values();
	cross(&a, &b, "after");
	H_ASSERT(h_alive(master) && h_alive(a.p) && h_alive(b.p));
}

/* unshare(1) may enter a time namespace here: 0, else -1 and why in why. */
static int time_ns_usable(char *why, size_t cap)
{
	char cmd[256], out[128];
	FILE *f;
	double up = 0;
	int rc;

	snprintf(cmd, sizeof(cmd),
		 "timeout 10 unshare --time --monotonic " DAY_S " --boottime " DAY_S
		 " --fork cat /proc/uptime 2>&1");
	f = popen(cmd, "r");
	if (!f) {
		snprintf(why, cap, "popen failed");
		return -1;
	}
	if (!fgets(out, (int)sizeof(out), f))
		snprintf(out, sizeof(out), "no output");
	rc = pclose(f);
	out[strcspn(out, "\n")] = '\0';
	if (rc != 0 || sscanf(out, "%lf", &up) != 1 || up < 86400) {
		snprintf(why, cap, "unshare --time: %s (exit 0x%x)", out, rc);
		return -1;
	}
	return 0;
}

/* Proxy C in a time namespace whose CLOCK_MONOTONIC is a day ahead. */
static void start_shifted(struct node *n)
{
	char master_url[64];
	char *argv[] = {"unshare",
			"--time",
			"--monotonic",
			DAY_S,
			"--boottime",
			DAY_S,
			"--fork",
			"--kill-child",
			"--",
			(char *)h_bin("lunar-proxy"),
			"--socket",
			n->sock,
			"--master",
			master_url,
			"--host",
			"127.0.0.1",
			"--data-port",
			NULL, /* [17] */
			"--http-port",
			"0",
			"--segment-size",
			"32MiB",
			"--ping-interval",
			"100ms",
			NULL};
	int port = h_free_port();
	char portstr[16];

	h_named_sock(n->sock, n->name);
	snprintf(master_url, sizeof(master_url), "tcp://127.0.0.1:%d", mport);
	snprintf(portstr, sizeof(portstr), "%d", port);
	snprintf(n->seg, sizeof(n->seg), "127.0.0.1:%d", port);
	argv[17] = portstr;
	n->p = track(h_spawn(n->name, argv));
	H_ASSERT(n->p != NULL);
	H_ASSERT(h_wait_proxy(n->p, n->sock, H_READY_TIMEOUT_MS) == 0);
	n->c = h_client(n->sock);
}

static void test_clock_jump_monotonic_far_apart(void **state)
{
	char why[256];

	(void)state;
	if (time_ns_usable(why, sizeof(why))) {
		print_message("skipped: %s\n", why);
		skip();
	}
	start_node(&a);
	start_shifted(&c);
	cross(&a, &c, "shifted");
	lease_ends(&c, &a, "clock/shifted/proxyA-on-proxyC");
	lease_ends(&a, &c, "clock/shifted/proxyC-on-proxyA");
	H_ASSERT(h_alive(master) && h_alive(a.p) && h_alive(c.p));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_clock_jump_wall_steps, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_clock_jump_monotonic_far_apart, setup, teardown),
	};
	/* Every daemon the harness starts here is the failpoint build's. */
	int rc = h_failpoint_build("lunar-master");

	return rc ? rc : cmocka_run_group_tests(tests, NULL, NULL);
}
