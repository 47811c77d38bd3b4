/*
 * mst_int.h - master internals shared by the files of master/ only: the
 * master struct, segments, objects and clients, and the calls between them.
 *
 * Lock order (never take an earlier lock while holding a later one):
 *   object shard lock -> segment table rwlock -> one segment's lock
 *   segment table rwlock -> client table lock
 * The hot path (object calls) takes one shard lock, the segment table for
 * reading, and briefly the allocator lock of the segments it touches.
 * Counters in struct mst_master are atomics updated without locks.
 */
#ifndef LUNAR_MASTER_MST_INT_H
#define LUNAR_MASTER_MST_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "lunar.h"
#include "lunar.pb-c.h"
#include "master.h"

struct lc_ralloc;

struct mst_segment {
	char *name;
	char *endpoint;
	uint64_t size;
	uint64_t owner;	      /* client_id of the mounting proxy */
	pthread_mutex_t lock; /* guards ra and used */
	struct lc_ralloc *ra;
	uint64_t used; /* written under lock, read relaxed for placement */
};

/* A chosen range: where one replica lives. */
struct mst_replica {
	struct mst_segment *seg;
	uint64_t off, len;
};

struct mst_segtab {
	pthread_rwlock_t lock;
	struct mst_segment **v; /* mounted segments, unordered */
	size_t n, cap;
};

struct mst_client {
	struct mst_client *next;
	uint64_t id;
	uint64_t last_ping_ms;
};

struct mst_clients {
	pthread_mutex_t lock;
	struct mst_client **buckets;
	size_t nbuckets, n;
};

struct mst_shard;

struct mst_master {
	struct mst_config cfg;
	struct mst_shard *shards; /* MST_SHARDS */
	struct mst_segtab segs;
	struct mst_clients clients;
	uint64_t n_complete, n_processing; /* atomics */
	uint64_t capacity, used;	   /* atomics, bytes over all segments */
	pthread_t housekeeper;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
	int stopping;
};

#define MST_VIEW 0 /* the view every reply carries; 0 until HA */

/* mst_code - the reply code for an internal result: ENOMEM is internal. */
static inline int mst_code(int rc)
{
	return rc == -ENOMEM ? LUNAR_ERR_INTERNAL : rc;
}

/* segments.c */
int mst_segtab_init(struct mst_segtab *t);
/* mst_segtab_fini - free every segment still mounted (no object may refer to
 * them any more). */
void mst_segtab_fini(struct mst_master *m);
int mst_segment_mount(struct mst_master *m, uint64_t client, const Lunar__SegmentDesc *d);
int mst_segment_unmount(struct mst_master *m, uint64_t client, const char *name);
/* mst_segments_drop_client - unmount every segment owned by client. */
void mst_segments_drop_client(struct mst_master *m, uint64_t client);
/*
 * mst_place - allocate len bytes on up to want distinct segments: preferred
 * names first, then by the configured strategy. Fills out[0..) and returns the
 * count (>= 1), or LUNAR_ERR_NO_AVAILABLE_HANDLE / -ENOMEM. Call with the
 * object's shard lock held.
 */
int mst_place(struct mst_master *m, uint64_t client, uint64_t len, unsigned want,
	      char *const *preferred, size_t npreferred, struct mst_replica *out);
/* mst_replica_free - give a replica's range back to its segment. */
void mst_replica_free(struct mst_master *m, const struct mst_replica *r);

/* objects.c */
int mst_objects_init(struct mst_master *m);
void mst_objects_fini(struct mst_master *m);
/*
 * mst_objects_drop - under each shard lock in turn: drop replicas on seg
 * (when seg is not NULL; their space is not freed: the segment is going
 * away), revoke PROCESSING puts of client started at or before before_ms
 * (when client is not 0), erase objects left without replicas.
 */
void mst_objects_drop(struct mst_master *m, const struct mst_segment *seg, uint64_t client,
		      uint64_t before_ms);

int mst_obj_put_start(struct mst_master *m, uint64_t client, const char *tenant,
		      const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n);
int mst_obj_put_end(struct mst_master *m, uint64_t client, const char *tenant, const char *key);
int mst_obj_put_revoke(struct mst_master *m, uint64_t client, const char *tenant, const char *key);
int mst_obj_get(struct mst_master *m, const char *tenant, const char *key, uint64_t *size,
		Lunar__Replica ***reps, size_t *n);
int mst_obj_exist(struct mst_master *m, const char *tenant, const char *key);
int mst_obj_remove(struct mst_master *m, const char *tenant, const char *key, int force);
int64_t mst_obj_remove_all(struct mst_master *m, const char *tenant, int force);

/* batch.c: the Batch* calls, results index-aligned with the keys. */
int mst_batch_put_start(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep);
int mst_batch_keys(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		   ProtobufCMessage **rep);

/* clients.c */
int mst_clients_init(struct mst_clients *c);
void mst_clients_fini(struct mst_clients *c);
/* mst_client_touch - mark client alive now; returns 1 if it was unknown,
 * 0 if known, -ENOMEM. */
int mst_client_touch(struct mst_master *m, uint64_t client);
int mst_client_alive(struct mst_master *m, uint64_t client);
/* mst_clients_expire - declare clients silent for client_ttl dead and drop
 * their segments and puts. Run by the housekeeping thread. */
void mst_clients_expire(struct mst_master *m);

#endif /* LUNAR_MASTER_MST_INT_H */
