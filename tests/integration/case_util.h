/*
 * step2_util.h - what the Step 2 tests share: per-case fixtures that stop
 * the processes a case started newest first, and a look inside a running
 * daemon over HTTP (the last body read in text, the HTTP port a daemon
 * logged, a GET that must answer 200, one sample of /metrics). Failures
 * fail the test with the reason.
 */
#ifndef LUNAR_TESTS_INTEGRATION_STEP2_UTIL_H
#define LUNAR_TESTS_INTEGRATION_STEP2_UTIL_H

#include <stdint.h>
#include <stdlib.h>

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
static inline int s2_setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	text = malloc(TEXT_MAX);
	return text ? 0 : -1;
}

static inline int s2_teardown(void **state)
{
	(void)state;
	while (ntracked > 0)
		h_stop(tracked[--ntracked]);
	free(text);
	text = NULL;
	h_cleanup();
	return 0;
}

/* The HTTP port p logged; fails the test if it logged none. */
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

#endif /* LUNAR_TESTS_INTEGRATION_STEP2_UTIL_H */
