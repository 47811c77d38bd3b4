/*
 * metrics.c - the master's counters and their Prometheus text: calls and
 * errors per method and code (counted by mst_dispatch), evictions, discarded
 * puts, and the value size histogram observed at commit. Counters are
 * relaxed atomics; a render is a snapshot, not a consistent cut.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "atomic.h"
#include "lunar.h"
#include "master.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "rpc.h"

static const int codes[] = {
    LUNAR_ERR_INTERNAL,
    LUNAR_ERR_BUFFER_OVERFLOW,
    LUNAR_ERR_SEGMENT_NOT_FOUND,
    LUNAR_ERR_SEGMENT_ALREADY_EXISTS,
    LUNAR_ERR_NO_AVAILABLE_HANDLE,
    LUNAR_ERR_INVALID_KEY,
    LUNAR_ERR_INVALID_PARAMS,
    LUNAR_ERR_ILLEGAL_CLIENT,
    LUNAR_ERR_REPLICA_IS_NOT_READY,
    LUNAR_ERR_OBJECT_NOT_FOUND,
    LUNAR_ERR_OBJECT_ALREADY_EXISTS,
    LUNAR_ERR_OBJECT_HAS_LEASE,
    LUNAR_ERR_LEASE_EXPIRED,
    LUNAR_ERR_TRANSFER_FAIL,
    LUNAR_ERR_CHECKSUM_MISMATCH,
    LUNAR_ERR_RPC_FAIL,
    LUNAR_ERR_RPC_TIMEOUT,
    LUNAR_ERR_ETCD_OPERATION,
    LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS,
    LUNAR_ERR_FILE_READ_FAIL,
    LUNAR_ERR_FILE_WRITE_FAIL,
    LUNAR_ERR_TENANT_QUOTA_EXCEEDED,
    LUNAR_ERR_PROXY_UNAVAILABLE,
    LUNAR_ERR_UNAUTHORIZED,
    LUNAR_ERR_TOO_MANY_CLIENTS,
    LUNAR_ERR_PROTOCOL,
    LUNAR_ERR_VERSION_MISMATCH,
    LUNAR_ERR_BUSY,
};
#define NCODES (sizeof(codes) / sizeof(codes[0]))
_Static_assert(NCODES < MST_CODES_MAX, "one slot left for unknown codes");

#define HIST_BASE 1024ull /* bucket i holds sizes <= 1 KiB * 4^i */

static void add(uint64_t *c, uint64_t v)
{
	lc_fetch_add_relaxed(c, v);
}

static uint64_t get(const uint64_t *c)
{
	return LC_READ_ONCE(*c);
}

void mst_metrics_count(struct mst_master *m, uint32_t method, int code)
{
	size_t i = 0;

	if (method < MST_METHODS_MAX)
		add(&m->ctr.calls[method], 1);
	if (code >= 0)
		return;
	while (i < NCODES && codes[i] != code)
		i++;
	add(&m->ctr.errors[i], 1); /* i == NCODES: unknown codes */
}

void mst_metrics_value_size(struct mst_master *m, uint64_t size)
{
	unsigned b = 0;

	while (b < MST_HIST_BUCKETS && size > HIST_BASE << (2 * b))
		b++;
	add(&m->ctr.size_hist[b], 1);
	add(&m->ctr.size_sum, size);
	add(&m->ctr.size_count, 1);
}

void mst_metrics_reject(struct mst_master *m, enum mst_reject why)
{
	if (why < MST_REJ_MAX)
		add(&m->ctr.rpc_rejected[why], 1);
}

void mst_metrics_stale(struct mst_master *m)
{
	add(&m->ctr.rpc_stale, 1);
}

void mst_metrics_unauthorized(struct mst_master *m, uint32_t method)
{
	if (method < MST_METHODS_MAX)
		add(&m->ctr.unauthorized[method], 1);
}

/* The keyed RPC's refusals: peers closed unanswered, authentic calls too
 * old to run (answered STALE: sent again), and authentic calls answered
 * UNAUTHORIZED. */
static void auth_counters(struct mst_master *m, FILE *f)
{
	static const char *const reasons[MST_REJ_MAX] = {
	    [MST_REJ_PLAIN] = "unauthenticated",   [MST_REJ_MALFORMED] = "malformed",
	    [MST_REJ_BAD_PROOF] = "bad_proof",	   [MST_REJ_NO_HELLO] = "no_handshake",
	    [MST_REJ_BAD_MAC] = "bad_mac",	   [MST_REJ_REPLAY] = "replay",
	    [MST_REJ_BAD_REQUEST] = "bad_request", [MST_REJ_TABLE_FULL] = "sessions_full",
	};
	fprintf(f, "# TYPE lunar_master_rpc_rejected_total counter\n");
	for (int i = 0; i < MST_REJ_MAX; i++)
		fprintf(f, "lunar_master_rpc_rejected_total{reason=\"%s\"} %llu\n", reasons[i],
			(unsigned long long)get(&m->ctr.rpc_rejected[i]));
	fprintf(f, "# TYPE lunar_master_rpc_stale_total counter\n");
	fprintf(f, "lunar_master_rpc_stale_total %llu\n",
		(unsigned long long)get(&m->ctr.rpc_stale));
	fprintf(f, "# TYPE lunar_master_unauthorized_total counter\n");
	for (uint32_t i = 0; i < MST_METHODS_MAX; i++) {
		const struct lp_method *mt = lp_method_find(i);

		if (mt)
			fprintf(f, "lunar_master_unauthorized_total{method=\"%s\"} %llu\n",
				mt->name, (unsigned long long)get(&m->ctr.unauthorized[i]));
	}
}

static void gauges(struct mst_master *m, FILE *f)
{
	struct mst_stats st;

	mst_master_stats(m, &st);
	fprintf(f, "# TYPE lunar_master_keys gauge\nlunar_master_keys %llu\n",
		(unsigned long long)st.keys);
	fprintf(f, "# TYPE lunar_master_processing_keys gauge\nlunar_master_processing_keys %llu\n",
		(unsigned long long)st.processing);
	fprintf(f, "# TYPE lunar_master_segments gauge\nlunar_master_segments %llu\n",
		(unsigned long long)st.segments);
	fprintf(f, "# TYPE lunar_master_clients gauge\nlunar_master_clients %llu\n",
		(unsigned long long)st.clients);
	fprintf(f, "# TYPE lunar_master_tenants gauge\nlunar_master_tenants %llu\n",
		(unsigned long long)st.tenants);
}

/* Per-segment capacity and use; segment names are [^"\\\n] by convention,
 * and escaped anyway. */
static void segment_gauges(struct mst_master *m, FILE *f)
{
	static const char *const names[3] = {"lunar_master_segment_capacity_bytes",
					     "lunar_master_segment_used_bytes",
					     "lunar_master_segment_reserved_bytes"};

	pthread_rwlock_rdlock(&m->segs.lock);
	for (int k = 0; k < 3; k++) {
		fprintf(f, "# TYPE %s gauge\n", names[k]);
		for (size_t i = 0; i < m->segs.n; i++) {
			const struct mst_segment *s = m->segs.v[i];

			fprintf(f, "%s{segment=\"", names[k]);
			for (const char *c = s->name; *c; c++)
				fprintf(f, *c == '"' || *c == '\\' ? "\\%c" : "%c",
					*c == '\n' ? 'n' : *c);
			fprintf(f, "\"} %llu\n",
				(unsigned long long)(k == 2   ? get(&s->reserved)
						     : k == 1 ? mst_segment_used(s)
							      : s->size));
		}
	}
	pthread_rwlock_unlock(&m->segs.lock);
}

static void offload_counters(struct mst_master *m, FILE *f)
{
	static const struct {
		const char *name;
		size_t off;
	} c[] = {
	    {"queued", offsetof(struct mst_counters, offload_queued)},
	    {"done", offsetof(struct mst_counters, offload_done)},
	    {"failed", offsetof(struct mst_counters, offload_failed)},
	    {"requeued", offsetof(struct mst_counters, offload_requeued)},
	    {"skipped_queue_full", offsetof(struct mst_counters, offload_skipped)},
	    {"dropped_queue_full", offsetof(struct mst_counters, offload_dropped)},
	    {"forget", offsetof(struct mst_counters, forget_queued)},
	    {"forget_dropped", offsetof(struct mst_counters, forget_dropped)},
	};

	fprintf(f, "# TYPE lunar_master_offload_tasks_total counter\n");
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		fprintf(f, "lunar_master_offload_tasks_total{event=\"%s\"} %llu\n", c[i].name,
			(unsigned long long)get((uint64_t *)((char *)&m->ctr + c[i].off)));
	fprintf(f,
		"# TYPE lunar_master_offload_queue_depth gauge\nlunar_master_offload_queue_depth "
		"%llu\n",
		(unsigned long long)mst_offload_depth(m));
}

static void counters(struct mst_master *m, FILE *f)
{
	fprintf(f, "# TYPE lunar_master_calls_total counter\n");
	for (uint32_t i = 0; i < MST_METHODS_MAX; i++) {
		const struct lp_method *mt = lp_method_find(i);

		if (mt)
			fprintf(f, "lunar_master_calls_total{method=\"%s\"} %llu\n", mt->name,
				(unsigned long long)get(&m->ctr.calls[i]));
	}
	fprintf(f, "# TYPE lunar_master_errors_total counter\n");
	for (size_t i = 0; i <= NCODES; i++)
		fprintf(f, "lunar_master_errors_total{code=\"%s\"} %llu\n",
			i < NCODES ? lunar_strerror(codes[i]) : "UNKNOWN_ERROR",
			(unsigned long long)get(&m->ctr.errors[i]));
	fprintf(f,
		"# TYPE lunar_master_evictions_total counter\nlunar_master_evictions_total %llu\n",
		(unsigned long long)get(&m->ctr.evictions));
	fprintf(f,
		"# TYPE lunar_master_eviction_rounds_total counter\n"
		"lunar_master_eviction_rounds_total %llu\n"
		"# TYPE lunar_master_eviction_censuses_total counter\n"
		"lunar_master_eviction_censuses_total %llu\n",
		(unsigned long long)get(&m->ctr.evict_rounds),
		(unsigned long long)get(&m->ctr.evict_censuses));
	fprintf(f,
		"# TYPE lunar_master_evicted_bytes_total counter\n"
		"lunar_master_evicted_bytes_total %llu\n",
		(unsigned long long)get(&m->ctr.evicted_bytes));
	fprintf(f,
		"# TYPE lunar_master_discarded_puts_total counter\n"
		"lunar_master_discarded_puts_total %llu\n",
		(unsigned long long)get(&m->ctr.discarded_puts));
	/* part of the segments' used bytes: set aside for puts ahead (resv.c) */
	fprintf(f, "# TYPE lunar_master_reserved_bytes gauge\nlunar_master_reserved_bytes %llu\n",
		(unsigned long long)mst_resv_bytes(m));
	/* also part of them: of values committed beside their writes that
	 * went while those might still land (resv.c) */
	fprintf(
	    f, "# TYPE lunar_master_beside_held_bytes gauge\nlunar_master_beside_held_bytes %llu\n",
	    (unsigned long long)mst_resv_held_bytes(m));
	offload_counters(m, f);
}

static void histogram(struct mst_master *m, FILE *f)
{
	uint64_t cum = 0;

	fprintf(f, "# TYPE lunar_master_value_size_bytes histogram\n");
	for (unsigned b = 0; b <= MST_HIST_BUCKETS; b++) {
		cum += get(&m->ctr.size_hist[b]);
		if (b < MST_HIST_BUCKETS)
			fprintf(f, "lunar_master_value_size_bytes_bucket{le=\"%llu\"} %llu\n",
				HIST_BASE << (2 * b), (unsigned long long)cum);
		else
			fprintf(f, "lunar_master_value_size_bytes_bucket{le=\"+Inf\"} %llu\n",
				(unsigned long long)cum);
	}
	fprintf(f, "lunar_master_value_size_bytes_sum %llu\n",
		(unsigned long long)get(&m->ctr.size_sum));
	fprintf(f, "lunar_master_value_size_bytes_count %llu\n",
		(unsigned long long)get(&m->ctr.size_count));
}

int mst_metrics_render(struct mst_master *m, char **out, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	if (!f)
		return LUNAR_ERR_INTERNAL;
	gauges(m, f);
	segment_gauges(m, f);
	counters(m, f);
	auth_counters(m, f);
	histogram(m, f);
	mst_ha_metrics(m, f);
	if (ferror(f)) {
		fclose(f);
		free(buf);
		return LUNAR_ERR_INTERNAL;
	}
	fclose(f);
	*out = buf;
	*len = n;
	return 0;
}
