/*
 * case_util.h - what tests that start their own daemons in each case share:
 * per-case fixtures that stop the processes a case started newest first; a
 * look inside a running daemon over HTTP (the last body read in text, the
 * HTTP port a daemon logged, a GET that must answer 200, one sample of
 * /metrics, one key's /admin/stat); a client connected as a tenant; and
 * seeded puts and byte-checked gets. Failures fail the test with the reason.
 */
#ifndef LUNAR_TESTS_INTEGRATION_CASE_UTIL_H
#define LUNAR_TESTS_INTEGRATION_CASE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http_get.h"

#define TEXT_MAX (1u << 20)

static char *text; /* the last HTTP body */

/* Processes started by the current case, stopped newest first so that no
 * proxy outlives its master (a proxy whose master is gone takes its RPC
 * timeout to stop). */
static struct h_proc *tracked[8];
static int ntracked;

static inline struct h_proc *track(struct h_proc *p)
{
	if (p && ntracked < 8)
		tracked[ntracked++] = p;
	return p;
}

/* Per-case fixtures: h_init and text; then the tracked processes, text
 * and everything else the harness started. */
static inline int case_setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	text = malloc(TEXT_MAX);
	return text ? 0 : -1;
}

static inline int case_teardown(void **state)
{
	(void)state;
	while (ntracked > 0)
		h_stop(tracked[--ntracked]);
	free(text);
	text = NULL;
	h_cleanup();
	return 0;
}

/*
 * case_proxy_pair - tracked proxies "proxyA" and "proxyB" (the default 64 MiB
 * segments) joined to the master on mport, serving a.sock and b.sock in the
 * temp dir (paths written to sock_a and sock_b), and a client of each in *ca
 * and *cb. Fails the test when either proxy does not start.
 */
static inline void case_proxy_pair(int mport, char sock_a[PATH_MAX], char sock_b[PATH_MAX],
				   struct lunar_client **ca, struct lunar_client **cb)
{
	snprintf(sock_a, PATH_MAX, "%s", h_path("a.sock"));
	snprintf(sock_b, PATH_MAX, "%s", h_path("b.sock"));
	H_ASSERT(track(h_start_proxy("proxyA", sock_a, mport, NULL)) != NULL);
	H_ASSERT(track(h_start_proxy("proxyB", sock_b, mport, NULL)) != NULL);
	*ca = h_client(sock_a);
	*cb = h_client(sock_b);
}

/* The HTTP port p logged; fails the test if it logged none. */
/* Arm failpoints: write spec to file, the $LUNAR_FAILPOINTS_FILE of daemons
 * of the failpoint build (common/failpoint.h), each of which looks at it at
 * most every 20 ms; then wait wait_ms for them to have. */
static inline void case_arm(const char *file, const char *spec, unsigned wait_ms)
{
	FILE *f = fopen(file, "w");

	H_ASSERT(f != NULL);
	fputs(spec, f);
	fclose(f);
	if (wait_ms)
		h_sleep_ms(wait_ms);
}

/* A failpoint file, name in the case's directory, armed with nothing and
 * named by $LUNAR_FAILPOINTS_FILE for the daemons started from now on. */
static inline void case_failpoints(char file[PATH_MAX], const char *name)
{
	snprintf(file, PATH_MAX, "%s", h_path(name));
	case_arm(file, "", 0);
	setenv("LUNAR_FAILPOINTS_FILE", file, 1);
}

static inline int http_port_of(const struct h_proc *p)
{
	int port = hg_log_http_port(p->log);

	H_ASSERT_MSG(port > 0, "%s logged no HTTP port", p->name);
	return port;
}

/* GET path into text; fails the test unless the status is 200. */
static inline void fetch(int port, const char *path)
{
	int status = hg_get(port, path, text, TEXT_MAX);

	H_ASSERT_MSG(status == 200, "GET :%d%s = %d: %s", port, path, status, text);
}

/* One sample of port's /metrics; fails the test when it is missing. */
static inline int64_t metric(int port, const char *sample)
{
	int64_t v;

	fetch(port, "/metrics");
	v = hg_metric(text, sample);
	H_ASSERT_MSG(v >= 0, "no sample %s on :%d/metrics", sample, port);
	return v;
}

/* GET /admin/stat of (tenant, key) into text. */
static inline void stat_key(int port, const char *tenant, const char *key)
{
	char path[512];

	snprintf(path, sizeof(path), "/admin/stat?tenant=%s&key=%s", tenant, key);
	fetch(port, path);
}

static inline struct lunar_client *tenant_client(const char *sock, const char *tenant)
{
	struct lunar_opts o = {
	    .socket_path = sock, .tenant = tenant, .timeout_ms = H_CLIENT_TIMEOUT_MS};
	struct lunar_client *c = NULL;
	int rc = lunar_connect(&o, &c);

	H_ASSERT_MSG(rc == 0, "connect as tenant %s = %d (%s)", tenant ? tenant : "(default)", rc,
		     h_code(rc));
	return c;
}

static inline void put_seeded(struct lunar_client *c, const char *key, uint8_t *buf, size_t len,
			      uint64_t seed, const struct lunar_put_cfg *cfg)
{
	int rc;

	h_fill(buf, len, seed);
	rc = lunar_put(c, key, buf, len, cfg);
	H_ASSERT_MSG(rc == 0, "put %s (%zu bytes) = %d (%s)", key, len, rc, h_code(rc));
}

static inline void check_seeded(struct lunar_client *c, const char *key, uint8_t *buf, size_t len,
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

#endif /* LUNAR_TESTS_INTEGRATION_CASE_UTIL_H */
