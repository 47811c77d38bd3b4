/*
 * step2_util.h - what the Step 2 tests share to look inside a running
 * daemon over HTTP: the last body read (text, TEXT_MAX bytes, allocated by
 * each test's setup), the HTTP port a daemon logged, a GET that must answer
 * 200, and one sample of /metrics. Failures fail the test with the reason.
 */
#ifndef LUNAR_TESTS_INTEGRATION_STEP2_UTIL_H
#define LUNAR_TESTS_INTEGRATION_STEP2_UTIL_H

#include <stdint.h>

#include "harness.h"
#include "http_get.h"

#define TEXT_MAX (1u << 20)

static char *text; /* the last HTTP body */

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
