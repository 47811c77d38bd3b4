/*
 * disk_int.h - the proxy's SSD tier state, shared by disk_tier.c (life
 * cycle, registration, offload) and disk_read.c (reads, figures) only.
 */
#ifndef LUNAR_PROXY_DISK_INT_H
#define LUNAR_PROXY_DISK_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "disk/disk.h"
#include "px_int.h"

struct px_otask;

struct px_disk {
	struct dsk_store *store;
	struct dsk_scan_stats scan; /* what the open found */
	atomic_bool registered;	    /* the master has our records since the last mount */
	/* the offload worker's queue; lock guards head, tail, depth, stop */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct px_otask *head, **tail;
	uint64_t depth;
	bool stop;
	pthread_t worker;
	int worker_started;
	atomic_uint_fast64_t running; /* tasks of the batch being written */
	atomic_uint_fast64_t offloads, offload_failures, stale_removed, reported_bad;
	atomic_uint_fast64_t task_ms; /* when a Ping last brought tasks */
	/* offloads' bytes written and the time spent writing them (packed
	 * dsk_put_batch calls): the offload path's write rate */
	atomic_uint_fast64_t offload_bytes, offload_write_us;
};

/*
 * px_disk_records_call - one DiskRecordsRequest method over recs[0..n), in
 * chunks of LUNAR_BATCH_MAX (one call even for n == 0). Per record codes
 * into codes (if not NULL). 0, or the RPC failure or a status code. Blocks.
 */
int px_disk_records_call(struct px_proxy *px, uint32_t method, const struct dsk_record *recs,
			 size_t n, int *codes);

#endif /* LUNAR_PROXY_DISK_INT_H */
