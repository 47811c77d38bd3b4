/*
 * harness_metrics.c - a running daemon's /metrics, for the integration
 * tests (see harness.h): one sample; and whether a test's remote transfers
 * went over RDMA. Inside tests/vm/'s machine, where every proxy has a
 * soft-RoCE device, a cluster test's values must travel by RDMA, not by
 * the TCP fallback; elsewhere those checks do nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http_get.h"

#define RDMA_XFERS "lunar_proxy_transfers_total{transport=\"rdma\"}"
/* ENG_RDMA_REDIAL_NS (1 s), and some */
#define REDIAL_MS 1500

int64_t h_metric(const struct h_proc *p, const char *sample)
{
	static char text[1 << 17];
	int port = hg_log_http_port(p->log);
	int64_t v;

	H_ASSERT_MSG(port > 0, "%s logged no HTTP port", p->name);
	H_ASSERT_EQ(hg_get(port, "/metrics", text, sizeof(text)), 200);
	v = hg_metric(text, sample);
	H_ASSERT_MSG(v >= 0, "no sample %s in %s's /metrics", sample, p->name);
	return v;
}

int h_rdma_expected(void)
{
	const char *v = getenv("LUNAR_TEST_RDMA");

	return v && !strcmp(v, "1");
}

int64_t h_rdma_mark(const struct h_proc *p)
{
	return h_rdma_expected() ? h_metric(p, RDMA_XFERS) : 0;
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
	n = h_metric(p, RDMA_XFERS) - mark;
	print_message("%s: %lld RDMA transfers, at least %lld expected\n", p->name, (long long)n,
		      (long long)min);
	H_ASSERT_MSG(n >= min, "%s made %lld RDMA transfers, fewer than %lld", p->name,
		     (long long)n, (long long)min);
}
