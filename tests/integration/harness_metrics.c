/*
 * harness_metrics.c - a running daemon's /metrics, for the integration
 * tests (see harness.h): one sample; and whether a test's remote transfers
 * went over RDMA. Inside tests/vm/'s machine, where every proxy has a
 * soft-RoCE device, a cluster test's values must travel by RDMA, not by
 * the TCP fallback, and a proxy started there serves once its segment is
 * registered for it; elsewhere those checks do nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "harness_after.h"
#include "http_get.h"

#define RDMA_XFERS "lunar_proxy_transfers_total{transport=\"rdma\"}"
#define RDMA_FAILS "lunar_proxy_transfer_failures_total{transport=\"rdma\"}"
/* ENG_RDMA_REDIAL_NS (1 s), and some */
#define REDIAL_MS   1500
#define SEG_WAIT_MS 30000 /* a segment's registration, under emulation */

int64_t h_metric(const struct h_proc *p, const char *sample)
{
	int port = hg_log_http_port(p->log);
	int64_t v;

	H_ASSERT_MSG(port > 0, "%s logged no HTTP port", p->name);
	v = h_metric_sum(port, sample);
	H_ASSERT_MSG(v >= 0, "%s's /metrics: no answer, or no sample %s", p->name, sample);
	return v;
}

/* p's RDMA transfers that succeeded so far. */
static int64_t rdma_done(const struct h_proc *p)
{
	return h_metric(p, RDMA_XFERS) - h_metric(p, RDMA_FAILS);
}

int h_rdma_expected(void)
{
	const char *v = getenv("LUNAR_TEST_RDMA");

	return v && !strcmp(v, "1");
}

int h_rdma_wait_segment(const struct h_proc *p)
{
	uint64_t end = h_now_ms() + SEG_WAIT_MS;
	char rest[64];

	if (!h_rdma_expected())
		return 0;
	while (hg_log_find(p->log, "RDMA: segment registered", rest, sizeof(rest))) {
		if (h_now_ms() >= end) {
			fprintf(stderr,
				"harness: %s did not register its segment for RDMA in %d ms\n",
				p->name, SEG_WAIT_MS);
			return -1;
		}
		h_sleep_ms(20);
	}
	return 0;
}

int64_t h_rdma_mark(const struct h_proc *p)
{
	return h_rdma_expected() ? rdma_done(p) : 0;
}

void h_rdma_redial(void)
{
	if (h_rdma_expected())
		h_sleep_ms(REDIAL_MS);
}

void h_rdma_check(const struct h_proc *p, int64_t mark, int64_t min)
{
	int64_t n;

	if (!h_rdma_expected())
		return;
	n = rdma_done(p) - mark;
	print_message("%s: %lld RDMA transfers done, at least %lld expected\n", p->name,
		      (long long)n, (long long)min);
	H_ASSERT_MSG(n >= min, "%s made %lld RDMA transfers, fewer than %lld", p->name,
		     (long long)n, (long long)min);
}
