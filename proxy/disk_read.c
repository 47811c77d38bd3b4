/*
 * disk_read.c - reads from the proxy's SSD tier (our own gets, straight into
 * the client's memory, and peers' gets through the engine's disk_read
 * callback), and the tier's figures: lunar_proxy_disk_* on /metrics and the
 * JSON of GET /disk/status. A record found torn or corrupt is reported to
 * the master (DiskReplicasRemove) so nobody is sent to it again.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "disk/disk.h"
#include "http.h"
#include "log.h"
#include "lunar.h"
#include "disk_int.h"

/* A record the store dropped as bad: the master forgets our replica. */
static void report_bad(struct px_proxy *px, const char *tenant, const char *key,
		       const struct dsk_record *rec)
{
	struct dsk_record r = *rec;

	r.tenant = tenant;
	r.key = key;
	atomic_fetch_add(&px->disk->reported_bad, 1);
	if (px_disk_records_call(px, LUNAR__METHOD__DISK_REPLICAS_REMOVE, &r, 1, NULL))
		LC_WARN("proxy", "disk record of %s is bad; the master was not told", key);
}

static int64_t disk_get(struct px_proxy *px, const char *tenant, const char *key,
			const struct iovec *iov, int iovcnt, const uint32_t *want_crc)
{
	struct px_disk *d = px->disk;
	struct dsk_record rec = {0};
	int64_t n;

	if (!d)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	if (px->cfg.debug_disk_read_delay_ms)
		usleep((useconds_t)px->cfg.debug_disk_read_delay_ms * 1000);
	n = dsk_get(d->store, tenant, key, iov, iovcnt, &rec);
	if (!rec.key)
		return n; /* not stored */
	if (n == LUNAR_ERR_CHECKSUM_MISMATCH || n == LUNAR_ERR_OBJECT_NOT_FOUND) {
		report_bad(px, tenant, key, &rec); /* found, then bad or short */
		return n;
	}
	if (want_crc && rec.crc32c != *want_crc)
		return LUNAR_ERR_CHECKSUM_MISMATCH; /* the record holds another value */
	return n;
}

int64_t px_disk_read(void *arg, const char *tenant, const char *key, const struct iovec *iov,
		     int iovcnt)
{
	return disk_get(arg, tenant, key, iov, iovcnt, NULL);
}

int64_t px_disk_length(void *arg, const char *tenant, const char *key)
{
	struct px_proxy *px = arg;
	struct dsk_record rec;

	if (!px->disk || dsk_lookup(px->disk->store, tenant, key, &rec))
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	return (int64_t)rec.length;
}

int64_t px_disk_get(struct px_proxy *px, const char *tenant, const char *key,
		    const struct iovec *iov, int iovcnt, uint32_t want_crc)
{
	return disk_get(px, tenant, key, iov, iovcnt, &want_crc);
}

void px_disk_get_batch(struct px_proxy *px, struct dsk_get_item *v, size_t n)
{
	struct px_disk *d = px->disk;

	if (!d) {
		for (size_t i = 0; i < n; i++)
			v[i].res = LUNAR_ERR_OBJECT_NOT_FOUND;
		return;
	}
	if (px->cfg.debug_disk_read_delay_ms)
		usleep((useconds_t)px->cfg.debug_disk_read_delay_ms * 1000);
	dsk_get_batch(d->store, v, n);
	for (size_t i = 0; i < n; i++) {
		struct dsk_record rec = {
		    .length = v[i].length, .crc32c = v[i].crc32c, .location = v[i].location};

		/* NOT_FOUND: absent, or truncated; the one-by-one retry of a
		 * failed read tells those apart and reports the second */
		if (v[i].res == LUNAR_ERR_CHECKSUM_MISMATCH)
			report_bad(px, v[i].tenant, v[i].key, &rec);
	}
}

/* Tasks waiting for the worker or being written now. */
static uint64_t queue_depth(struct px_disk *d)
{
	uint64_t n;

	pthread_mutex_lock(&d->lock);
	n = d->depth;
	pthread_mutex_unlock(&d->lock);
	return n + atomic_load(&d->running);
}

static const char *policy_name(const struct px_proxy *px)
{
	return px->cfg.disk_policy == DSK_LRU	  ? "lru"
	       : px->cfg.disk_policy == DSK_CLOCK ? "clock"
						  : "fifo";
}

struct figure {
	const char *name, *type, *help;
	uint64_t v;
};

int px_disk_metrics(struct px_proxy *px, struct lc_http_reply *rep)
{
	struct px_disk *d = px->disk;
	struct dsk_stats st;
	int rc = 0;

	if (!d)
		return 0;
	dsk_stats(d->store, &st);
	const struct figure f[] = {
	    {"capacity_bytes", "gauge", "SSD tier capacity.", st.capacity},
	    {"used_bytes", "gauge", "Bytes of bucket files.", st.used},
	    {"buckets", "gauge", "Bucket files.", st.buckets},
	    {"records", "gauge", "Objects stored.", st.records},
	    {"offload_queue_depth", "gauge", "Offload tasks waiting or being written.",
	     queue_depth(d)},
	    {"offloads_total", "counter", "Objects copied to the SSD tier.",
	     atomic_load(&d->offloads)},
	    {"offload_failures_total", "counter", "Offload tasks that could not be written.",
	     atomic_load(&d->offload_failures)},
	    {"write_failures_total", "counter", "Disk writes that failed (I/O error or full).",
	     st.write_failures + st.full_failures},
	    {"read_failures_total", "counter", "Disk reads that failed or came short.",
	     st.read_failures},
	    {"checksum_failures_total", "counter", "Disk reads whose CRC32C did not match.",
	     st.checksum_failures},
	    {"dropped_at_scan_total", "counter", "Torn or corrupt records dropped at start.",
	     st.dropped_at_scan},
	    {"evicted_buckets_total", "counter", "Buckets evicted.", st.evicted_buckets},
	};

	for (size_t i = 0; !rc && i < sizeof(f) / sizeof(f[0]); i++)
		rc = lc_http_reply_printf(
		    rep,
		    "# HELP lunar_proxy_disk_%s %s\n# TYPE lunar_proxy_disk_%s "
		    "%s\nlunar_proxy_disk_%s %llu\n",
		    f[i].name, f[i].help, f[i].name, f[i].type, f[i].name,
		    (unsigned long long)f[i].v);
	return rc;
}

/* A JSON string of s (the directory: quotes and backslashes escaped). */
static int json_str(struct lc_http_reply *rep, const char *s)
{
	int rc = lc_http_reply_append(rep, "\"", 1);

	for (; !rc && *s; s++)
		rc = (unsigned char)*s < 0x20  ? lc_http_reply_printf(rep, "\\u%04x", *s)
		     : *s == '"' || *s == '\\' ? lc_http_reply_printf(rep, "\\%c", *s)
					       : lc_http_reply_append(rep, s, 1);
	return rc ?: lc_http_reply_append(rep, "\"", 1);
}

int px_disk_status(struct px_proxy *px, struct lc_http_reply *rep)
{
	struct px_disk *d = px->disk;
	struct dsk_stats st;
	int rc;

	rep->content_type = "application/json";
	if (!d) {
		rep->status = 404; /* lunarctl: "no disk tier on this proxy" */
		return lc_http_reply_printf(rep, "{\"enabled\":false}\n");
	}
	dsk_stats(d->store, &st);
	rc = lc_http_reply_printf(
	    rep,
	    "{\"enabled\":true,\"capacity\":%llu,\"used\":%llu,\"buckets\":%llu,\"records\":%llu,"
	    "\"queue_depth\":%llu,\"io_in_flight\":%llu,\"policy\":\"%s\",\"offloads\":%llu,"
	    "\"offload_failures\":%llu,\"write_failures\":%llu,\"full_failures\":%llu,"
	    "\"read_failures\":%llu,\"checksum_failures\":%llu,\"dropped_at_scan\":%llu,"
	    "\"evicted_buckets\":%llu,\"notify_failures\":%llu,\"io_uring\":%s,\"direct\":%s,"
	    "\"offload_bytes\":%llu,\"offload_write_us\":%llu,\"rescued\":%llu,\"dir\":",
	    (unsigned long long)st.capacity, (unsigned long long)st.used,
	    (unsigned long long)st.buckets, (unsigned long long)st.records,
	    (unsigned long long)queue_depth(d), (unsigned long long)st.queue_depth, policy_name(px),
	    (unsigned long long)atomic_load(&d->offloads),
	    (unsigned long long)atomic_load(&d->offload_failures),
	    (unsigned long long)st.write_failures, (unsigned long long)st.full_failures,
	    (unsigned long long)st.read_failures, (unsigned long long)st.checksum_failures,
	    (unsigned long long)st.dropped_at_scan, (unsigned long long)st.evicted_buckets,
	    (unsigned long long)st.notify_failures, st.uring ? "true" : "false",
	    st.direct ? "true" : "false", (unsigned long long)atomic_load(&d->offload_bytes),
	    (unsigned long long)atomic_load(&d->offload_write_us), (unsigned long long)st.rescued);
	rc = rc ?: json_str(rep, px->cfg.disk_dir);
	return rc ?: lc_http_reply_printf(rep, "}\n");
}
