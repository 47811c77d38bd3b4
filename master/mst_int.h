/*
 * mst_int.h - master internals shared by the files of master/ only: the
 * master struct, segments, objects and clients, and the calls between them.
 *
 * Lock order (never take an earlier lock while holding a later one):
 *   eviction lock -> object shard lock -> segment table rwlock -> one segment's lock
 *   segment table rwlock -> reservation lock -> client table lock
 *   object shard lock -> tenant table lock
 *   object shard lock -> deferred-free lock -> one segment's lock
 *   object shard lock -> offload queue lock (only the client table lock is
 *     taken under it, by mst_offload_register)
 *   object shard lock -> segment table rwlock -> reservation lock -> deferred-free
 *     lock -> one segment's lock (resv.c; a value committed beside its write
 *     takes the reservation lock under its shard lock as it goes, and as it
 *     is read until it landed: mst_resv_hold, mst_resv_landing)
 * The hot path (object calls) takes one shard lock, the segment table for
 * reading, and briefly the allocator lock of the segments it touches.
 * Counters in struct mst_master are atomics updated without locks.
 *
 * Errors: LUNAR_ERR_* codes, and -ENOMEM for out of memory, which mst_code
 * turns into LUNAR_ERR_INTERNAL where a code leaves the library (a reply's
 * status, mst_dispatch's result). "A code" below means one of these.
 * Unless said otherwise a call takes the locks it needs itself and is
 * called with no master lock held; none blocks on I/O.
 */
#ifndef LUNAR_MASTER_MST_INT_H
#define LUNAR_MASTER_MST_INT_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "auth.h"
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
	uint64_t used;		/* written under lock, read relaxed for placement */
	uint64_t reserved;	/* of used, put-ahead reservations' (resv.c); same */
	uint64_t drain_due_ms;	/* graceful unmount: no new allocations, retired at
				 * this time; 0 when not draining. Under the table lock. */
	struct auth_key secret; /* capabilities for it are MACs under this; from mount */
	uint64_t mount;		/* this mount's token, in its replicas (lunar.proto) */
};

/* A chosen range: where one replica lives. */
struct mst_replica {
	struct mst_segment *seg;
	struct lc_range *range; /* the segment allocator's handle */
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
	uint64_t called_lead_ms;   /* the lead it last called in (touch) */
	uint64_t done_lead_ms;	   /* the lead its report's last batch came in */
	uint64_t reported_lead_ms; /* and the lead one came in while it owned a segment */
};

struct mst_clients {
	pthread_mutex_t lock;
	/* Held while a client is declared dead and its segments and puts are
	 * dropped, and by a touch that (re-)registers one: a client's next
	 * life begins after the last one is buried. Taken before lock. */
	pthread_mutex_t bury_lock;
	struct mst_client **buckets;
	size_t nbuckets, n;
};

struct mst_shard;
struct mst_deferred;
struct mst_ha_gate;
struct mst_oqueue;

/* Offload queues, one per proxy with a disk tier (registered by its first
 * DiskReplicasAdd); few proxies, so a list. */
struct mst_offload {
	pthread_mutex_t lock;
	pthread_cond_t ended; /* a task ended (its memory may be free) */
	uint64_t nended;      /* tasks ended, under lock */
	struct mst_oqueue *head;
};
struct mst_tenant;

/* Ranges whose space is given back later: discarded puts (after
 * put_start_release_timeout) and the old replicas of an upserted object
 * (after its lease deadline). */
struct mst_deferred_list {
	pthread_mutex_t lock;
	struct mst_deferred *head;
};

/* Put-ahead reservations (resv.c): few, a handful per proxy, so a list. */
struct mst_resv;
struct mst_resvtab {
	pthread_mutex_t lock;
	struct mst_resv *head;
	/* Reservations ended late, kept (without their ranges) until no byte
	 * of a write into them can land any more: a value committed beside
	 * its write there still has its range held when it goes. */
	struct mst_resv *ended;
	uint64_t bytes; /* reserved and not committed (allocator lengths), under lock */
	uint64_t held;	/* of values committed beside their writes, held (lengths), under lock */
	/* Grants between placement and insert, counted in the slot of the
	 * phase they began in (atomics); a retiring segment waits for those
	 * of the phase before its own flip (mst_resv_drop_segment). */
	unsigned placing[2], phase;
	pthread_mutex_t grace_lock; /* one such wait at a time */
};

#define MST_RESV_PER_CLIENT 4 /* reservations one client may hold at once */

struct mst_tenants {
	pthread_mutex_t lock;
	struct mst_tenant *head; /* tenants with bytes charged */
};

#define MST_METHODS_MAX	     64	 /* method ids counted by mst_dispatch */
#define MST_CODES_MAX	     32	 /* distinct error codes counted */
#define MST_HIST_BUCKETS     11	 /* value size: 1 KiB * 4^i, i < 11 (to 1 GiB), + Inf */
#define MST_SEGMENT_NAME_MAX 255 /* bytes of a segment name or endpoint */

/* Why the keyed RPC server closed a peer without an answer (SPEC §13);
 * metrics.c names them in lunar_master_rpc_rejected_total{reason}. */
enum mst_reject {
	MST_REJ_PLAIN,	     /* a request without the envelope */
	MST_REJ_MALFORMED,   /* an envelope that does not decode */
	MST_REJ_BAD_PROOF,   /* a handshake that proved no key, or a reflected hello */
	MST_REJ_NO_HELLO,    /* a PROOF for no handshake in progress */
	MST_REJ_BAD_MAC,     /* a CALL whose tag is wrong */
	MST_REJ_REPLAY,	     /* a CALL whose counter was seen before */
	MST_REJ_BAD_REQUEST, /* an authentic CALL whose request does not decode */
	MST_REJ_TABLE_FULL,  /* a HELLO with every session slot live */
	MST_REJ_MAX
};

/* Counters for /metrics: atomics, relaxed. */
/* HA rebuild figures, all atomic (rebuild.c). */
struct mst_rebuild_ctr {
	uint64_t reported;     /* objects proxies reported */
	uint64_t rebuilt;      /* objects recreated from reports */
	uint64_t merged;       /* reports that added replicas to a known object */
	uint64_t refused;      /* reports not taken (older, range taken, no segment...) */
	uint64_t proxies_done; /* segments whose owner sent its last batch */
	/* This lead's clients (mst_rebuild_lead zeroes them): those that
	 * called it (pinged, mounted), and of them those whose report's last
	 * batch came. A writer without a segment reports values in its
	 * peers' segments: the wait is for every proxy, not only owners. */
	uint64_t clients_called, clients_done;
	uint64_t lead_ms;  /* when this master began to lead (ha.c); 0 never */
	uint64_t heard_ms; /* and its latest new mount or report since */
	uint64_t first_ms; /* CLOCK_MONOTONIC ms of the first report, 0 none */
	uint64_t last_ms;  /* and of the latest */
};

/* mst_rebuild_settling - 1 while a new leader waits for the proxies'
 * reports before it places anything (reported ranges come first): until
 * every mounted segment's owner, and every client that called in this
 * lead, sent its last batch (and 300 ms passed),
 * or MST_REBUILD_GRACE_MS without a new mount or a report that rebuilt
 * something (a large report takes longer), or cfg.report_wait_ms after it
 * began to lead. Lock-free.
 * mst_rebuild_heard - a new mount, or a report that rebuilt something,
 * came (lock-free). */
#define MST_REBUILD_GRACE_MS 3000
int mst_rebuild_settling(struct mst_master *m);
/* mst_rebuild_lead - a lead begins at now_ms (ha.c, before the gate
 * admits any call of it): its wait's counts start from zero. */
void mst_rebuild_lead(struct mst_master *m, uint64_t now_ms);
void mst_rebuild_heard(struct mst_master *m);
/* mst_rebuild_report - ReportObjects (rebuild.c). 0 or -ENOMEM. */
int mst_rebuild_report(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep);

struct mst_counters {
	uint64_t rpc_rejected[MST_REJ_MAX];
	uint64_t unauthorized[MST_METHODS_MAX]; /* authentic calls refused, by method */
	uint64_t rpc_stale;			/* authentic calls too old to run, answered STALE */
	uint64_t calls[MST_METHODS_MAX];
	uint64_t errors[MST_CODES_MAX];
	uint64_t evictions, evicted_bytes, discarded_puts, evict_rounds, evict_censuses;
	uint64_t offload_queued, offload_done, offload_failed, offload_requeued, offload_skipped;
	uint64_t offload_dropped; /* evicted without a disk copy: the queue was full */
	uint64_t forget_queued, forget_dropped; /* disk records a proxy is told to delete */
	uint64_t size_hist[MST_HIST_BUCKETS + 1];
	uint64_t size_sum, size_count;
};

/* Eviction candidates (evict.c): a census of objects that may go, kept
 * from one round to the next under the eviction lock. */
struct mst_cand {
	uint64_t used_ms, id, hash;
	const void *o; /* identity only: re-found under the shard lock */
};

struct mst_cand_list {
	struct mst_cand *v;
	size_t n, cap;
	size_t off; /* v[0..off) already taken */
};

struct mst_census {
	struct mst_cand_list plain, soft; /* soft-pinned ones apart */
	uint64_t taken_ms;		  /* the round time it was taken at; 0 none */
	size_t k;			  /* a round's share: ceil(candidates * ratio) */
};

struct mst_master {
	struct mst_config cfg;
	struct mst_shard *shards; /* MST_SHARDS */
	struct mst_segtab segs;
	struct mst_clients clients;
	struct mst_deferred_list deferred;
	struct mst_resvtab resv;
	struct mst_tenants tenants;
	struct mst_offload offload;
	struct mst_counters ctr;
	struct mst_rebuild_ctr rebuild;	   /* HA: objects proxies reported (rebuild.c) */
	uint64_t n_complete, n_processing; /* atomics */
	uint64_t capacity, used;	   /* atomics, bytes over all segments */
	uint64_t next_obj_id;		   /* atomic; also numbers object versions */
	uint64_t next_lease_seq;	   /* atomic */
	pthread_mutex_t evict_lock;	   /* one eviction round at a time */
	struct mst_census census;	   /* under evict_lock */
	uint64_t evict_gen;		   /* atomic: rounds completed that freed memory */
	int alloc_failed;		   /* atomic: an allocation failed since the last round */
	pthread_t housekeeper;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cond;
	int stopping;
	struct mst_ha_gate *ha; /* HA gate (mst_ha.h); NULL without --etcd. Set
				 * before serving, then read-only */
};

/* The view reply constructors start with; mst_dispatch then stamps every
 * reply with mst_view(m) (mst_ha.h): 0 without HA. */
#define MST_VIEW 0

/* mst_code - the reply code for an internal result: ENOMEM is internal. */
static inline int mst_code(int rc)
{
	return rc == -ENOMEM ? LUNAR_ERR_INTERNAL : rc;
}

/* segments.c */
/* mst_segments_drain_sweep - retire draining segments whose grace is over.
 * Housekeeping. */
void mst_segments_drain_sweep(struct mst_master *m, uint64_t now);
/* mst_segtab_init - an empty segment table; 0 or -errno (its rwlock). */
int mst_segtab_init(struct mst_segtab *t);
/* mst_segtab_fini - free every segment still mounted (no object may refer to
 * them any more). */
void mst_segtab_fini(struct mst_master *m);
/* mst_segment_mount - mount (or remount) d for client: 0 or a code;
 * NO_AVAILABLE_HANDLE past MST_SEGMENTS_PER_CLIENT segments of one client.
 * On 0, *secret (if not NULL) is the segment's capability secret and *mount
 * (if not NULL) its mount token: random at its first mount, the same at an
 * idempotent remount. */
int mst_segment_mount(struct mst_master *m, uint64_t client, const Lunar__SegmentDesc *d,
		      struct auth_key *secret, uint64_t *mount);
/* mst_segment_secret - the capability secret of the mounted segment name;
 * 0, or -ENOENT. Takes the table's read lock. */
int mst_segment_secret(struct mst_master *m, const char *name, struct auth_key *out);

struct mst_object;

/* Capability ops: the data port's op codes (engine/eng_int.h, docs/protocol.md). */
enum { MST_CAP_READ = 1, MST_CAP_WRITE = 2, MST_CAP_READ_DISK = 3 };
/*
 * mst_caps_grant - on a keyed master, give each of the n replica messages
 * v a capability (Replica.cap, cap_expiry_ms, version): the first nrep are
 * the MEMORY replicas reps[] in order (op on their range), the rest
 * LOCAL_DISK ones of o (READ_DISK, subject o's "tenant\0key"); version and
 * expiry (mst_cap_clock_ms's clock) as given. A keyless master: 0, nothing added.
 * 0 or -ENOMEM. With o's shard lock held (takes the segment table's read
 * lock for disk replicas).
 */
int mst_caps_grant(struct mst_master *m, const struct mst_object *o, const struct mst_replica *reps,
		   unsigned nrep, Lunar__Replica **v, size_t n, uint32_t op, uint64_t version,
		   uint64_t expiry_ms);
/*
 * mst_cap_one - the capability of one replica message p (its segment,
 * offset, length) under secret; subject NULL or "tenant\0key" (READ_DISK:
 * offset 0). 0 or -ENOMEM.
 */
int mst_cap_one(Lunar__Replica *p, const struct auth_key *secret, uint32_t op, const void *subject,
		size_t subject_len, uint64_t version, uint64_t expiry_ms);
/* mst_replicas_pb_free - free n replica messages and the array v. */
void mst_replicas_pb_free(Lunar__Replica **v, size_t n);
/*
 * mst_cap_clock_ms - now on the capability clock: the master's
 * CLOCK_MONOTONIC in ms (lc_now_ms, the clock of its leases), sent to every
 * owner with its mount and each ping (clock_ms) so that the owner checks
 * expiries against its estimate of this clock. Never the wall clock: a
 * wall-clock step on either side would expire every grant at once or keep
 * grants alive an hour. Any thread.
 */
uint64_t mst_cap_clock_ms(void);
/* mst_segment_unmount - grace_ms 0: at once; otherwise mark it draining. */
int mst_segment_unmount(struct mst_master *m, uint64_t client, const char *name, uint64_t grace_ms);
/* mst_segments_list - the ListSegments reply body. */
int mst_segments_list(struct mst_master *m, Lunar__ListSegmentsReply *r);
/* mst_segments_owned - how many segments client has mounted. */
unsigned mst_segments_owned(struct mst_master *m, uint64_t client);
/* mst_segments_drop_client - unmount every segment owned by client. */
void mst_segments_drop_client(struct mst_master *m, uint64_t client);
/* mst_segments_could_hold - 1 if some segment taking new data is at least
 * len bytes, so that eviction could make room for len there. */
int mst_segments_could_hold(struct mst_master *m, uint64_t len);
/* mst_segments_largest - the size of the largest segment taking new data;
 * 0 when none does. */
uint64_t mst_segments_largest(struct mst_master *m);
/*
 * mst_place - allocate len bytes on up to want distinct segments: preferred
 * names first, then by the configured strategy. Fills out[0..) and returns the
 * count (>= 1), or LUNAR_ERR_NO_AVAILABLE_HANDLE / -ENOMEM. Call with the
 * object's shard lock held.
 */
int mst_place(struct mst_master *m, uint64_t client, uint64_t len, unsigned want,
	      char *const *preferred, size_t npreferred, struct mst_replica *out);
/* mst_segment_take_at - allocate exactly [off, off + len) on the segment
 * called name into *r (an HA rebuild: a range a proxy reports in use). 0,
 * LUNAR_ERR_SEGMENT_NOT_FOUND, -EEXIST (part of it is taken), -EINVAL or
 * -ENOMEM. Takes the segment table and segment locks. Call with the shard
 * lock of the object r is for held, until r is in the object or freed:
 * r->seg is then held by nothing else, and a segment unmounted meanwhile
 * is freed only after its retirement dropped the replicas on it, which
 * takes every shard's lock in turn. */
int mst_segment_take_at(struct mst_master *m, const char *name, uint64_t off, uint64_t len,
			struct mst_replica *r);
/* mst_segment_used - the bytes of s in use but not reserved ahead (what
 * the figures call used: objects, and ranges waiting to be given back). */
uint64_t mst_segment_used(const struct mst_segment *s);
/* mst_segment_live - 1 if s is in the segment table (not being retired).
 * With the table's lock held (read or write). */
int mst_segment_live(struct mst_master *m, const struct mst_segment *s);
/* mst_replica_free - give a replica's range back to its segment. */
void mst_replica_free(struct mst_master *m, const struct mst_replica *r);

/* objects.c, upsert.c, scan.c: see mst_obj.h for the object internals. */
/* mst_objects_init - m's MST_SHARDS empty object shards; 0 or -ENOMEM.
 * mst_objects_fini - free every object and the shards; no call may be
 * running. */
int mst_objects_init(struct mst_master *m);
void mst_objects_fini(struct mst_master *m);
/*
 * mst_objects_drop - under each shard lock in turn: drop replicas on seg
 * (when seg is not NULL; their space is not freed: the segment is going
 * away); for the n dead clients (the array is sorted in place), revoke
 * PROCESSING puts and pending upserts started at or before before_ms and
 * forget their SSD replicas; erase objects left without replicas. One sweep
 * for all.
 */
void mst_objects_drop(struct mst_master *m, const struct mst_segment *seg, uint64_t *dead, size_t n,
		      uint64_t before_ms);

/*
 * mst_obj_put_start - PutStart of rq->key for client: a PROCESSING object
 * with rq->replica_num replicas placed (mst_obj_start: when full, makes
 * room by mst_room_make, which may wait up to --offload-put-wait for disk
 * copies). On 0, *reps is a heap array of *n heap messages the
 * caller frees. Else a code: OBJECT_ALREADY_EXISTS (committed, or another
 * put started less than put_start_discard_timeout ago), INVALID_KEY,
 * INVALID_PARAMS, NO_AVAILABLE_HANDLE, TENANT_QUOTA_EXCEEDED, -ENOMEM.
 */
int mst_obj_put_start(struct mst_master *m, uint64_t client, const char *tenant,
		      const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n);
/* mst_obj_too_large - for a start that ended rc: the largest segment's
 * bytes when rc is NO_AVAILABLE_HANDLE because len exceeds every segment
 * taking new data (no eviction can help), else 0. */
uint64_t mst_obj_too_large(struct mst_master *m, int rc, uint64_t len);
/*
 * mst_obj_put_end - PutEnd: commit client's PROCESSING object with its
 * CRC32C. 0 (also for a repeat with the same crc); OBJECT_NOT_FOUND;
 * ILLEGAL_CLIENT (another writer's); CHECKSUM_MISMATCH (committed already
 * with another crc); INVALID_KEY or INVALID_PARAMS for a bad name. Takes
 * the key's shard lock.
 */
int mst_obj_put_end(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		    uint32_t crc);
/* mst_obj_put_revoke - drop the PROCESSING put; late: its writer gave up on
 * a transfer whose bytes may still land, so its ranges go back only
 * put_start_release_timeout after its PutStart (as a discarded put's). */
int mst_obj_put_revoke(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		       int late);
/* Who a read lease goes to: a caller's client_id (0 if it gave none) and
 * which of its own clients the read is for (0: the caller itself). */
struct mst_lessee {
	uint64_t holder;
	uint64_t reader;
};

/* mst_obj_get - into out (code left alone): size, crc32c and heap copies
 * of the replicas of a COMPLETE object, landing when it was committed beside
 * a write that may not have landed yet; grants a read lease to *who and
 * stores its number (unique in the master's life) in lease_seq. */
int mst_obj_get(struct mst_master *m, const struct mst_lessee *who, const char *tenant,
		const char *key, Lunar__GetReplicaListResult *out);
/* mst_obj_exist - 1 for a COMPLETE object (granting *who a read lease), 0
 * for none, or a code. */
int mst_obj_exist(struct mst_master *m, const struct mst_lessee *who, const char *tenant,
		  const char *key);
/*
 * mst_obj_lease_release - end the lease granted to *who numbered seq, if it
 * is the object's latest grant. The lease then falls back to what the
 * grants to every other (holder, reader) need. 0 when released;
 * OBJECT_HAS_LEASE when kept; OBJECT_NOT_FOUND; INVALID_PARAMS for holder 0.
 */
int mst_obj_lease_release(struct mst_master *m, const struct mst_lessee *who, const char *tenant,
			  const char *key, uint64_t seq);
/* mst_obj_remove - erase the COMPLETE object (tenant, key). 0;
 * OBJECT_NOT_FOUND; REPLICA_IS_NOT_READY while a writer is at work (even
 * forced); OBJECT_HAS_LEASE unless force; INVALID_KEY or INVALID_PARAMS
 * for a bad name. Takes its shard lock. */
int mst_obj_remove(struct mst_master *m, const char *tenant, const char *key, int force);
/* mst_obj_remove_all - mst_obj_remove of every COMPLETE object of tenant
 * (leased ones only when forced), shard by shard. The count removed, or a
 * code. */
int64_t mst_obj_remove_all(struct mst_master *m, const char *tenant, int force);
/* mst_obj_remove_regex - remove the tenant's COMPLETE keys matching a POSIX
 * ERE (leased ones only when forced); the count, or INVALID_PARAMS for a
 * pattern regcomp refuses, a back-reference or one too costly to match. */
int64_t mst_obj_remove_regex(struct mst_master *m, const char *tenant, const char *pattern,
			     int force);
/* Upsert: like put when the key is absent; otherwise new replicas that
 * replace the old ones atomically at UpsertEnd (upsert.c). */
/* mst_obj_upsert_start - UpsertStart: as mst_obj_put_start (same ownership
 * of *reps, same codes), but a committed key gets pending replicas. */
int mst_obj_upsert_start(struct mst_master *m, uint64_t client, const char *tenant,
			 const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n);
/* mst_obj_upsert_end - UpsertEnd: commit client's pending replicas (or its
 * new object) with crc, the old replicas going. 0 or a code as
 * mst_obj_put_end. Takes the key's shard lock. */
int mst_obj_upsert_end(struct mst_master *m, uint64_t client, const char *tenant, const char *key,
		       uint32_t crc);
/* mst_obj_upsert_revoke - UpsertRevoke: drop client's pending replicas (or
 * its new object); late as for mst_obj_put_revoke. 0 or a code. */
int mst_obj_upsert_revoke(struct mst_master *m, uint64_t client, const char *tenant,
			  const char *key, int late);
/* Admin queries (scan.c, objects.c). */
/* mst_obj_list - ListKeys: fill r with up to rq->limit keys (default and
 * cap in scan.c) of rq->tenant matching rq->pattern, shard by shard; r's
 * arrays are heap, freed with the reply. 0, INVALID_PARAMS (bad pattern or
 * tenant name) or -ENOMEM. */
int mst_obj_list(struct mst_master *m, const Lunar__ListKeysRequest *rq, Lunar__ListKeysReply *r);
/* mst_obj_stat - StatKey: fill r with the object's state, replicas (heap,
 * freed with the reply), size, lease, pins, crc and writer. 0,
 * OBJECT_NOT_FOUND, INVALID_KEY/INVALID_PARAMS (bad name) or -ENOMEM. Takes
 * its shard lock. */
int mst_obj_stat(struct mst_master *m, const char *tenant, const char *key, Lunar__StatKeyReply *r);

/* evict.c */
/*
 * mst_evict_round - one eviction round at time now (monotonic ms): the
 * ceil(candidates * eviction_ratio) least recently used go (soft-pinned
 * ones last), from a census of the candidates shard by shard or the one an
 * earlier round kept (evict.c), more while memory stays above the low mark
 * after a failed allocation or above the watermark. Returns the number of
 * objects evicted. Takes the eviction lock and, one at a time, the shard
 * locks: call with no master lock held.
 */
int64_t mst_evict_round(struct mst_master *m, uint64_t now);
/* mst_evict_maybe - a round if memory use is above the watermark or an
 * allocation failed since the last round. Housekeeping. */
void mst_evict_maybe(struct mst_master *m);
/* A full store's making of room for one allocation (mst_room_*). */
struct mst_room {
	uint64_t gen;	   /* eviction rounds seen before the last attempt */
	uint64_t deadline; /* monotonic ms: the end of --offload-put-wait */
	int last;	   /* what the last making of room did; 0 before any */
};
/* mst_room_begin - call before the first attempt at an allocation. */
void mst_room_begin(struct mst_master *m, struct mst_room *r);
/*
 * mst_room_make - an attempt found no room for len bytes
 * (NO_AVAILABLE_HANDLE): make room, and say whether to attempt again (1)
 * or give up (0). The first time, an eviction round, and one more attempt
 * if it freed memory. With --offload on_evict, when all that could go
 * waits for its disk copy: a wait for a copy to end, again while ended
 * copies leave no room (an object read during its copy keeps its memory),
 * for at most --offload-put-wait; then the least recently used go
 * uncopied, for one last attempt. 0 at once when no segment could ever
 * hold len. No lock held.
 */
int mst_room_make(struct mst_master *m, struct mst_room *r, uint64_t len);
/* mst_evict_fini - free the kept census (the master is going). */
void mst_evict_fini(struct mst_master *m);

/* deferred.c */
/* mst_deferred_init - an empty list; 0 or -errno (its lock). */
int mst_deferred_init(struct mst_deferred_list *d);
/* mst_deferred_fini - forget every entry (space is not given back). */
void mst_deferred_fini(struct mst_deferred_list *d);
/* mst_deferred_add - give n ranges back at due_ms; takes the heap array reps
 * (always: on ENOMEM the ranges are leaked, logged, never freed early). */
void mst_deferred_add(struct mst_master *m, struct mst_replica *reps, unsigned n, uint64_t due_ms);
/* mst_deferred_sweep - give back the ranges due at now. Housekeeping. */
void mst_deferred_sweep(struct mst_master *m, uint64_t now);
/* mst_deferred_drop_segment - forget ranges on seg (it is going away). */
void mst_deferred_drop_segment(struct mst_master *m, const struct mst_segment *seg);
/* mst_deferred_bytes - bytes waiting to be given back. */
uint64_t mst_deferred_bytes(struct mst_master *m);

/* offload.c */
/* mst_offload_init - no queues yet; 0 or -errno (its lock).
 * mst_offload_fini - free every queue and task (the master is going). */
int mst_offload_init(struct mst_offload *q);
void mst_offload_fini(struct mst_offload *q);
/* mst_offload_register - client has a disk tier: give it a queue. 0,
 * ILLEGAL_CLIENT (it is not alive: a queue made now would outlive its
 * drop) or -ENOMEM. */
int mst_offload_register(struct mst_master *m, uint64_t client);
/* mst_offload_take - for client's Ping: tasks in flight for over
 * MST_OFFLOAD_TIMEOUT_MS go back to the queue, then up to MST_OFFLOAD_BATCH
 * queued tasks are marked in flight and copied to *out (heap array of heap
 * messages, *n of them). 0 or -ENOMEM. */
#define MST_OFFLOAD_BATCH      256
#define MST_OFFLOAD_TIMEOUT_MS 30000
int mst_offload_take(struct mst_master *m, uint64_t client, uint64_t now, Lunar__OffloadTask ***out,
		     size_t *n);
/* mst_offload_forgets_take - for client's Ping: up to MST_FORGET_BATCH
 * forget records, removed from its queue (fire and forget), as a heap
 * array of heap messages in *out (*n of them; NULL when none). On ENOMEM
 * the records not copied stay queued. 0 when none stay queued, 1 when more
 * do, or -ENOMEM. */
#define MST_FORGET_BATCH 256
#define MST_FORGET_MAX	 65536 /* per proxy; when full the oldest goes */
int mst_offload_forgets_take(struct mst_master *m, uint64_t client, Lunar__DiskRecord ***out,
			     size_t *n);
/*
 * mst_offload_wait - wait up to ms for an offload task of any proxy to end
 * (its object's memory goes when its copy exists). 1 when one ended, 0
 * when none is queued or in flight, or none ended in time. Blocks; takes
 * the offload lock only: call with no other master lock held.
 */
int mst_offload_wait(struct mst_master *m, uint64_t ms);
/* mst_offload_drop_client - forget client's queue (it is dead). */
void mst_offload_drop_client(struct mst_master *m, uint64_t client);
/* mst_offload_depth - tasks queued or in flight over all proxies. */
uint64_t mst_offload_depth(struct mst_master *m);

/* segments.c, for the disk tier */
/* mst_segment_of_client - heap copies of the name and endpoint of a segment
 * client has mounted. 0, LUNAR_ERR_SEGMENT_NOT_FOUND or -ENOMEM. */
int mst_segment_of_client(struct mst_master *m, uint64_t client, char **name, char **endpoint);

/* tenants.c: per-tenant byte counts and quotas (logical value bytes, once
 * per object whatever its replica count). */
/* mst_tenants_init - an empty table; 0 or -errno (its lock).
 * mst_tenants_fini - free every tenant (the master is going). */
int mst_tenants_init(struct mst_tenants *t);
void mst_tenants_fini(struct mst_tenants *t);
/* mst_tenant_charge - find or create the tenant and add bytes to it; 0 and
 * *out, TENANT_QUOTA_EXCEEDED (nothing charged) or -ENOMEM. */
int mst_tenant_charge(struct mst_master *m, const char *name, uint64_t bytes,
		      struct mst_tenant **out);
/* mst_tenant_uncharge - take bytes off t; a tenant left with nothing
 * charged is freed (t must not be used after its last uncharge). */
void mst_tenant_uncharge(struct mst_master *m, struct mst_tenant *t, uint64_t bytes);
/* mst_tenants_count - tenants with bytes stored or being written. */
uint64_t mst_tenants_count(struct mst_master *m);

/* metrics.c: relaxed atomic counters, any thread, no lock. */
/* mst_metrics_count - count one call of method answered with code (< 0:
 * also counted by code, unknown codes together). */
void mst_metrics_count(struct mst_master *m, uint32_t method, int code);
/* mst_metrics_value_size - add a committed value of size bytes to the
 * value size histogram. */
void mst_metrics_value_size(struct mst_master *m, uint64_t size);
void mst_metrics_reject(struct mst_master *m, enum mst_reject why);
void mst_metrics_unauthorized(struct mst_master *m, uint32_t method);
void mst_metrics_stale(struct mst_master *m);

/*
 * The handlers mst_dispatch picks by method: each takes req of the method's
 * request type (only read) and, on 0, sets *rep to a heap reply with its
 * Status set (codes of single keys or calls go there); it returns -ENOMEM
 * or LUNAR_ERR_PROTOCOL when there is no reply.
 */
/* mst_admin_dispatch - the admin queries ListKeys, ListSegments,
 * ListClients and StatKey; LUNAR_ERR_PROTOCOL for any other method. */
int mst_admin_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		       ProtobufCMessage **rep);

/* batch.c: the Batch* calls, results index-aligned with the keys. */
/* mst_batch_put_start - BatchPutStart or BatchUpsertStart (method). */
int mst_batch_put_start(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
			ProtobufCMessage **rep);
/* mst_batch_keys - the BatchKeysRequest methods: BatchPutRevoke,
 * BatchUpsertRevoke, BatchGetReplicaList, BatchExistKey. */
int mst_batch_keys(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		   ProtobufCMessage **rep);
/* mst_batch_put_end - BatchPutEnd or BatchUpsertEnd (method). */
int mst_batch_put_end(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		      ProtobufCMessage **rep);
/* mst_batch_remove - BatchRemove: mst_obj_remove of each key. */
int mst_batch_remove(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep);
/* mst_batch_lease_release - BatchLeaseRelease: mst_obj_lease_release of each
 * key (INVALID_PARAMS unless there is one lease_seq and one reader per key). */
int mst_batch_lease_release(struct mst_master *m, const ProtobufCMessage *req,
			    ProtobufCMessage **rep);
/* mst_batch_remount - ReMountSegment: MountSegment of each segment, in
 * order (INVALID_PARAMS for more than MST_SEGMENTS_PER_CLIENT). */
int mst_batch_remount(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep);

/* resv.c: put-ahead reservations (docs/protocol.md, "Reservations"). */
/* mst_resvtab_init - an empty table; 0 or -errno. mst_resvtab_fini - forget
 * every entry (space is not given back: the master is going). */
int mst_resvtab_init(struct mst_resvtab *t);
void mst_resvtab_fini(struct mst_resvtab *t);
/*
 * mst_resv_grant - Reserve: set aside up to size bytes on one segment for
 * client (at most --reserve-max and a sixteenth of the largest segment,
 * from room under the eviction watermark: when there is none, one
 * eviction round as for a put, and a second try). On 0, *out is
 * a heap Reservation (the extent with a WRITE capability when keyed). Else
 * UNAVAILABLE_IN_CURRENT_STATUS (put-ahead off, HA settling), ILLEGAL_CLIENT
 * (client not alive), NO_AVAILABLE_HANDLE, BUSY (MST_RESV_PER_CLIENT held),
 * INVALID_PARAMS, -ENOMEM. Takes the table, list and segment locks.
 */
int mst_resv_grant(struct mst_master *m, uint64_t client, uint64_t size, Lunar__Reservation **out);
/* mst_resv_release - ReserveRelease: end client's reservations ids[0..n),
 * their space given back now, or late (due + put_start_release_timeout:
 * bytes may still land there); codes[i] (if not NULL) 0 or ILLEGAL_CLIENT. */
void mst_resv_release(struct mst_master *m, uint64_t client, const uint64_t *ids, size_t n,
		      int late, int32_t *codes);
/*
 * mst_resv_carve - take [off, off + len) out of client's reservation id into
 * *out, a replica of its own (still counted as used; no longer reserved).
 * 0; ILLEGAL_CLIENT when id is not client's, is due, its segment is
 * draining or going, or the range is not inside what it still holds;
 * -ENOMEM. Call with the key's shard lock held.
 */
int mst_resv_carve(struct mst_master *m, uint64_t client, uint64_t id, uint64_t off, uint64_t len,
		   struct mst_replica *out);
/* mst_resv_expire - end, late, the reservations due at now. Housekeeping.
 * mst_resv_drop_client - end client's, late (it was declared dead).
 * mst_resv_drop_all - end every one, late (a new term: ha.c).
 * mst_resv_drop_segment - forget those on seg (it is going away: its
 * ranges go with it), and wait for grants placed on it but not yet
 * inserted (they find it gone); before the segment is freed, once it is
 * out of the table. */
void mst_resv_expire(struct mst_master *m, uint64_t now);
void mst_resv_drop_client(struct mst_master *m, uint64_t client);
void mst_resv_drop_all(struct mst_master *m);
void mst_resv_drop_segment(struct mst_master *m, const struct mst_segment *seg);
/*
 * mst_resv_hold - keep reps[0..n) (copied), the ranges of a value client
 * committed beside its write into its reservation id, out of use while its
 * bytes may still be landing, and no sooner than until_ms (a read lease
 * over them): until the reservation ends, or, ended late, until its other
 * ranges go back (the deferred list). 1; 0 when no byte can land there any
 * more (the writer released the reservation, or said the writes there are
 * done: mst_resv_landed; or its late end is over): the caller frees them.
 * Takes the list lock; callable under a shard lock.
 * mst_resv_landing - whether reps[0..n), committed beside their write into
 * client's reservation id, may still be landing, by the same rule.
 */
int mst_resv_hold(struct mst_master *m, uint64_t client, uint64_t id,
		  const struct mst_replica *reps, unsigned n, uint64_t until_ms);
int mst_resv_landing(struct mst_master *m, uint64_t client, uint64_t id,
		     const struct mst_replica *reps, unsigned n);
/* mst_resv_landed - client's word (its Landed call, n of them; the
 * caller's own reservations only, at most MST_RESV_PER_CLIENT looked at)
 * that its writes below each offset are done: the ranges held there below
 * it go back (after their read leases), and none below it is held again. */
void mst_resv_landed(struct mst_master *m, uint64_t client, Lunar__Landed *const *v, size_t n);
/* mst_resv_bytes - bytes reserved and not committed.
 * mst_resv_held_bytes - bytes of values committed beside their writes
 * that went while those may still land, held out of use (mst_resv_hold). */
uint64_t mst_resv_bytes(struct mst_master *m);
uint64_t mst_resv_held_bytes(struct mst_master *m);

/* commit.c */
/* mst_batch_put_commit - BatchPutCommit (a BatchPutStartReply). */
int mst_batch_put_commit(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep);
/* mst_batch_put_uncommit - BatchPutUncommit (a BatchCodesReply). */
int mst_batch_put_uncommit(struct mst_master *m, const ProtobufCMessage *req,
			   ProtobufCMessage **rep);

/* clients.c */
/* mst_clients_init - an empty client table; 0 or -ENOMEM.
 * mst_clients_fini - free it (the master is going). */
int mst_clients_init(struct mst_clients *c);
void mst_clients_fini(struct mst_clients *c);
/* mst_client_touch - mark client alive now; returns 1 if it was unknown
 * (or silent for client_ttl: then it is declared dead first, as
 * mst_clients_expire would have, whichever thread runs first after a
 * stall), 0 if known, -ENOMEM. */
int mst_client_touch(struct mst_master *m, uint64_t client);
/* mst_client_alive - 1 if client is known (not expired), else 0. Takes the
 * client table lock, innermost (resv.c calls it under the reservation lock). */
int mst_client_alive(struct mst_master *m, uint64_t client);
/* mst_client_last_batch - client sent its report's last batch in the lead
 * that began at lead_ms, while owning a segment or not (owns). Counts it
 * in rebuild.clients_done the first time in that lead if the client
 * called in it; returns 1 the first time in that lead it owns a segment,
 * else 0 (again, an unknown client). Takes the client table lock. */
int mst_client_last_batch(struct mst_master *m, uint64_t client, uint64_t lead_ms, int owns);
/* mst_clients_expire - declare clients silent for client_ttl dead and drop
 * their segments and puts. Run by the housekeeping thread. */
void mst_clients_expire(struct mst_master *m);
/* mst_clients_list - the ListClients reply body. */
int mst_clients_list(struct mst_master *m, Lunar__ListClientsReply *r);

#endif /* LUNAR_MASTER_MST_INT_H */
