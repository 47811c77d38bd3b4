/*
 * test_ha_restart.c - the whole HA cluster restarted (SPEC §14): etcd, two
 * masters electing through it with --offload on_put, two proxies following
 * the leader with --disk-dir. Objects put before the restart reached the
 * SSD tier; everything is stopped and started again (etcd on its data dir,
 * the masters and proxies on the same addresses and disk directories), and
 * every object reads back byte-exact from disk through the proxy that wrote
 * it. Skips (77) without etcd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "disk_util.h"
#include "etcd_util.h"
#include "http_get.h"

#define TTL_ARG	 "2s"
#define ELECT_MS 4000
#define NOBJ	 24 /* per proxy */
#define VAL_MAX	 (256 * 1024)

struct node {
	struct h_proc *p;
	int port, http;
	char adv[64], dir[PATH_MAX], sock[PATH_MAX];
};

static struct e_cluster ec;
static struct node masters[2], proxies[2];
static char etcd_master[128], text[1 << 16];

static int case_setup(void **state)
{
	(void)state;
	e_skip_without_etcd();
	return h_init() || e_start(&ec, 1) ? -1 : 0;
}

static int case_teardown(void **state)
{
	(void)state;
	h_cleanup();
	return 0;
}

static void start_master(int i)
{
	struct node *n = &masters[i];
	char http[16], name[16];

	snprintf(http, sizeof(http), "%d", n->http);
	snprintf(name, sizeof(name), "master%d", i);
	snprintf(n->adv, sizeof(n->adv), "tcp://127.0.0.1:%d", n->port);
	n->p = h_start_master(name, n->port, "--http-port", http, "--etcd", ec.urls, "--cluster-id",
			      "t", "--advertise", n->adv, "--etcd-lease-ttl", TTL_ARG, "--offload",
			      "on_put", NULL);
	H_ASSERT(n->p != NULL);
}

static void start_proxy(int i)
{
	struct node *n = &proxies[i];
	char name[16];
	char *argv[] = {(char *)h_bin("lunar-proxy"),
			"--socket",
			n->sock,
			"--master",
			etcd_master,
			"--host",
			"127.0.0.1",
			"--data-port",
			"0",
			"--http-port",
			"0",
			"--segment-size",
			"32MiB",
			"--disk-dir",
			n->dir,
			"--disk-capacity",
			"256MiB",
			"--ping-interval",
			"200ms",
			"--rpc-timeout",
			"2s",
			NULL};

	snprintf(name, sizeof(name), "proxy%d", i);
	H_ASSERT((n->p = h_spawn(name, argv)) != NULL);
	H_ASSERT_EQ(h_wait_proxy(n->p, n->sock, H_READY_TIMEOUT_MS), 0);
	H_ASSERT((n->http = d_proxy_http_port(n->p)) > 0);
}

/* The master that leads (its /metrics say so) within timeout_ms, other than
 * not; -1 when none does. */
static int leader(int timeout_ms, int not )
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	while (h_now_ms() < end) {
		for (int i = 0; i < 2; i++)
			if (i != not &&hg_get(masters[i].http, "/metrics", text, sizeof(text)) ==
				200 &&
			    hg_metric(text, "lunar_master_is_leader") == 1)
				return i;
		h_sleep_ms(50);
	}
	return -1;
}

static void start_all(int again)
{
	if (again) {
		H_ASSERT_EQ(e_start_member(&ec, 0, "new"), 0); /* its data dir holds the state */
		H_ASSERT_EQ(e_wait_healthy(&ec), 0);
	}
	start_master(0);
	start_master(1);
	H_ASSERT(leader(ELECT_MS, -1) >= 0);
	start_proxy(0);
	start_proxy(1);
	h_sleep_ms(3200); /* the new leader waits for the proxies' reports (or 3 s) */
}

static void key_of(int p, int i, char *k, size_t n)
{
	snprintf(k, n, "restart-%d-%d", p, i);
}

static size_t len_of(int p, int i)
{
	return 4096 + (size_t)(h_seed("len") + (uint64_t)p * 7919 + (uint64_t)i * 104729) %
			  (VAL_MAX - 4096);
}

/* Offloads the proxies' disk tiers finished. */
static long long offloads(void)
{
	long long sum = 0;

	for (int p = 0; p < 2; p++) {
		H_ASSERT(d_http_get(proxies[p].http, "/disk/status", text, sizeof(text)) > 0);
		sum += d_json_num(text, "offloads");
	}
	return sum;
}

/* Every object reads back exact through the proxy that wrote it. */
static void read_all(uint8_t *buf)
{
	struct lunar_client *c;
	char k[64];
	int read = 0;

	for (int p = 0; p < 2; p++) {
		H_ASSERT((c = h_client(proxies[p].sock)) != NULL);
		for (int i = 0; i < NOBJ; i++) {
			int64_t n;

			key_of(p, i, k, sizeof(k));
			n = d_get_exact(c, k, buf, VAL_MAX);
			H_ASSERT_MSG(n == (int64_t)len_of(p, i), "%s: %s", k, h_code(n));
			read++;
		}
		lunar_close(c);
	}
	printf("# %d object(s) read back exact\n", read);
}

static void test_ha_restart_whole_cluster_keeps_disk_tier(void **state)
{
	uint8_t *buf = malloc(VAL_MAX);
	struct lunar_client *c;
	char k[64];
	uint64_t t0;
	int p, i;

	(void)state;
	H_ASSERT(buf != NULL);
	for (p = 0; p < 2; p++) {
		masters[p].port = h_free_port();
		masters[p].http = h_free_port();
		snprintf(proxies[p].dir, sizeof(proxies[p].dir), "%s/disk%d", h_tmpdir(), p);
		h_named_sock(proxies[p].sock, p ? "b" : "a");
	}
	snprintf(etcd_master, sizeof(etcd_master), "etcd://%.60s/t", ec.m[0].url + 7);
	start_all(0);
	/* Given objects that reached the SSD tier */
	for (p = 0; p < 2; p++) {
		H_ASSERT((c = h_client(proxies[p].sock)) != NULL);
		for (i = 0; i < NOBJ; i++) {
			key_of(p, i, k, sizeof(k));
			H_ASSERT_EQ(d_put(c, k, buf, len_of(p, i)), 0);
		}
		lunar_close(c);
	}
	for (t0 = h_now_ms(); offloads() < 2 * NOBJ && h_now_ms() - t0 < 20000;)
		h_sleep_ms(50);
	H_ASSERT_EQ(offloads(), 2 * NOBJ);
	/* When everything stops: proxies, masters, etcd */
	for (p = 0; p < 2; p++)
		h_stop(proxies[p].p);
	for (p = 0; p < 2; p++)
		h_stop(masters[p].p);
	h_stop(ec.m[0].p);
	/* And starts again */
	t0 = h_now_ms();
	start_all(1);
	printf("# cluster up again in %llu ms\n", (unsigned long long)(h_now_ms() - t0));
	/* Then every object reads back exact, from disk */
	read_all(buf);
	/* And still after a failover: the re-registered disk objects are
	 * reported to the next leader too */
	H_ASSERT((p = leader(ELECT_MS, -1)) >= 0);
	h_kill(masters[p].p);
	H_ASSERT(leader(ELECT_MS + 2000, p) >= 0);
	h_sleep_ms(3200);
	read_all(buf);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_ha_restart_whole_cluster_keeps_disk_tier,
					    case_setup, case_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
