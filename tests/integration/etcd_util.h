/*
 * etcd_util.h - real etcd members for the HA tests (test_etcd.c, test_ha.c):
 * one member or a three-member cluster on free loopback ports, data in the
 * harness's temp dir, started through h_spawn (so always killed with the
 * test), and readiness waits bounded in time. A test without etcd installed
 * skips. Static, test main thread only.
 */
#ifndef LUNAR_TESTS_INTEGRATION_ETCD_UTIL_H
#define LUNAR_TESTS_INTEGRATION_ETCD_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "http_get.h"

#define E_MEMBERS_MAX 3
#define E_READY_MS    15000

struct e_member {
	struct h_proc *p;
	char name[16];
	int client, peer;
	char url[64]; /* http://127.0.0.1:<client> */
};

struct e_cluster {
	unsigned n;
	struct e_member m[E_MEMBERS_MAX];
	char urls[E_MEMBERS_MAX * 64]; /* comma-separated client URLs, for --etcd */
	char initial[E_MEMBERS_MAX * 80];
};

/* e_bin - the etcd binary ($LUNAR_ETCD, else /usr/bin/etcd), or NULL. */
static inline const char *e_bin(void)
{
	const char *b = getenv("LUNAR_ETCD");

	if (!b)
		b = "/usr/bin/etcd";
	return access(b, X_OK) ? NULL : b;
}

/* e_skip_without_etcd - exit 77 with the reason when etcd is not installed. */
static inline void e_skip_without_etcd(void)
{
	if (!e_bin()) {
		printf("SKIP: no etcd (install Debian's etcd-server, or set LUNAR_ETCD)\n");
		exit(77);
	}
}

/* e_start_member - (re)start member i of c. 0 or -1. */
static inline int e_start_member(struct e_cluster *c, unsigned i, const char *state)
{
	struct e_member *m = &c->m[i];
	char data[PATH_MAX], purl[64];
	char *argv[] = {(char *)e_bin(),
			"--name",
			m->name,
			"--data-dir",
			data,
			"--listen-client-urls",
			m->url,
			"--advertise-client-urls",
			m->url,
			"--listen-peer-urls",
			purl,
			"--initial-advertise-peer-urls",
			purl,
			"--initial-cluster",
			c->initial,
			"--initial-cluster-state",
			(char *)state,
			"--heartbeat-interval",
			"100",
			"--election-timeout",
			"1000",
			NULL};

	snprintf(data, sizeof(data), "%s/%s.etcd", h_tmpdir(), m->name);
	snprintf(purl, sizeof(purl), "http://127.0.0.1:%d", m->peer);
	m->p = h_spawn(m->name, argv);
	return m->p ? 0 : -1;
}

/* e_healthy - 1 when member i answers /health with "true". */
static inline int e_healthy(const struct e_cluster *c, unsigned i)
{
	char body[512];

	return hg_get(c->m[i].client, "/health", body, sizeof(body)) == 200 &&
	       strstr(body, "\"true\"") != NULL;
}

/* e_wait_healthy - wait until every running member is healthy. 0 or -1. */
static inline int e_wait_healthy(struct e_cluster *c)
{
	uint64_t end = h_now_ms() + E_READY_MS;

	for (unsigned i = 0; i < c->n; i++) {
		while (c->m[i].p && h_alive(c->m[i].p) && !e_healthy(c, i)) {
			if (h_now_ms() > end)
				return -1;
			h_sleep_ms(100);
		}
	}
	return 0;
}

/* e_start - n members on free ports, waited for. 0 or -1 (logs printed). */
static inline int e_start(struct e_cluster *c, unsigned n)
{
	size_t off = 0, uoff = 0;

	memset(c, 0, sizeof(*c));
	c->n = n;
	for (unsigned i = 0; i < n; i++) {
		struct e_member *m = &c->m[i];

		snprintf(m->name, sizeof(m->name), "etcd%u", i);
		m->client = h_free_port();
		m->peer = h_free_port();
		snprintf(m->url, sizeof(m->url), "http://127.0.0.1:%d", m->client);
		off += (size_t)snprintf(c->initial + off, sizeof(c->initial) - off,
					"%s%s=http://127.0.0.1:%d", i ? "," : "", m->name, m->peer);
		uoff += (size_t)snprintf(c->urls + uoff, sizeof(c->urls) - uoff, "%s%s",
					 i ? "," : "", m->url);
	}
	for (unsigned i = 0; i < n; i++)
		if (e_start_member(c, i, "new"))
			return -1;
	if (e_wait_healthy(c)) {
		h_dump_logs();
		return -1;
	}
	return 0;
}

/* e_leader - the index of the member that leads the etcd cluster (by its
 * etcd_server_is_leader metric), or -1. */
static inline int e_leader(const struct e_cluster *c)
{
	char *text = malloc(1 << 20);
	int found = -1;

	for (unsigned i = 0; text && i < c->n && found < 0; i++)
		if (c->m[i].p && h_alive(c->m[i].p) &&
		    hg_get(c->m[i].client, "/metrics", text, 1 << 20) == 200 &&
		    hg_metric(text, "etcd_server_is_leader") == 1)
			found = (int)i;
	free(text);
	return found;
}

#endif /* LUNAR_TESTS_INTEGRATION_ETCD_UTIL_H */
