/*
 * harness_after.h - the aftermath every fault test ends with: a well-behaved
 * client, a process of its own, runs put/get/verify/remove through the fault
 * and must see no error; and once the fault is over, the proxy's descriptors
 * (less its connections to other nodes' data ports, a pool of up to 8 a
 * peer whose size follows the transfers' concurrency:
 * lunar_proxy_peer_connections), its shared-memory mappings and the
 * master's used segment bytes are back at the baseline taken before the
 * fault. The fault's own counter is read with
 * h_metric_sum. Main thread only (cmocka), like the rest of the harness.
 *
 *	struct h_after a;
 *	h_after_begin(&a, sock, proxy, master_http);  baseline, client started
 *	... the fault; its counter went up (h_metric_sum) ...
 *	h_after_end(&a);                               client stopped, compared
 */
#ifndef LUNAR_TESTS_INTEGRATION_HARNESS_AFTER_H
#define LUNAR_TESTS_INTEGRATION_HARNESS_AFTER_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "harness.h"

/* How long h_after_end waits for the figures to come back. */
#define H_AFTER_SETTLE_MS 5000
/* The background client's largest value; its keys are "h-after/<pid>/<n>". */
#define H_AFTER_MAX_LEN (64u * 1024u)

struct h_after_shm; /* the background client's figures, in shared memory */

struct h_after {
	char sock[PATH_MAX];
	struct h_proc *proxy;
	int master_http; /* the port whose /metrics has lunar_master_* */
	pid_t bg;	 /* the background client, 0 when none runs */
	struct h_after_shm *shm;
	int proxy_http; /* the proxy's HTTP port (its /metrics) */
	int proxy_data; /* its data port */
	int fds;	/* the proxy's descriptors before the fault, less connections to and from
			 * peers, to the master and to its HTTP port */
	int maps;	/* its "memfd:" mappings */
	int64_t used;	/* the master's used segment bytes, all segments */
	int64_t keys;	/* the master's keys */
};

/*
 * h_metric_sum - GET port's /metrics and sum every sample whose name with
 * labels starts with prefix ("lunar_master_segment_used_bytes" sums every
 * segment; "x_total{reason=\"a\"}" is one sample). -1 when the GET fails or
 * no sample matches.
 */
int64_t h_metric_sum(int port, const char *prefix);

/*
 * h_after_begin - take the baseline of proxy (serving sock) and of the master
 * whose /metrics is on master_http (the proxy's own HTTP port when it embeds
 * the master), then fork the background client and wait until it has done a
 * round. Fails the test on error. The baseline is taken with no client of
 * ours connected: close every handle of the test's before calling, or open
 * them after.
 */
void h_after_begin(struct h_after *a, const char *sock, struct h_proc *proxy, int master_http);
/* h_after_pause - make the background client stop between rounds (no key of
 * its stored) until h_after_resume, so that a test may read exact used bytes.
 * Returns once it is idle; fails the test when it never is. */
void h_after_pause(struct h_after *a);
void h_after_resume(struct h_after *a);
/* h_after_rounds - rounds the background client completed so far. */
uint64_t h_after_rounds(const struct h_after *a);
/*
 * h_after_end - stop the background client and assert: it made progress and
 * saw no error; within H_AFTER_SETTLE_MS the proxy's descriptors and memfd
 * mappings, and the master's used bytes and keys, are back at the baseline.
 * A new client is served meanwhile. Fails the test with the figures.
 */
void h_after_end(struct h_after *a);
/* h_after_abandon - stop the background client with no checks (a failed
 * case's teardown). Safe on a zeroed struct and twice. */
void h_after_abandon(struct h_after *a);

#endif /* LUNAR_TESTS_INTEGRATION_HARNESS_AFTER_H */
