/*
 * mst_obj.h - the object record and its shard table, shared by the files of
 * master/ that work on objects (objects.c, upsert.c, scan.c, evict.c,
 * batch.c, prefetch.c).
 * Everything here is called with the object's shard lock held unless said
 * otherwise.
 */
#ifndef LUNAR_MASTER_MST_OBJ_H
#define LUNAR_MASTER_MST_OBJ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "lunar.h"
#include "mst_int.h"

#define MST_MAX_REPLICAS  64 /* replica_num above this is clamped (best effort anyway) */
#define MST_TENANT_MAX	  63
#define MST_PREFERRED_MAX 64 /* preferred segments a put may name */

enum { MST_ST_PROCESSING, MST_ST_COMPLETE };

/* An upsert in flight on a COMPLETE object: the new replicas being written. */
struct mst_upsert {
	uint64_t writer, size, start_ms;
	uint64_t version;	  /* the new value's, from next_obj_id */
	struct mst_replica *reps; /* heap */
	unsigned nrep;
	int hard_pin, soft_pin;
	uint64_t soft_pin_ttl_ms;
};

/* A LOCAL_DISK replica: a record in the SSD tier of the proxy owner. */
struct mst_disk_replica {
	uint64_t owner;	   /* client_id of the proxy holding the record */
	uint64_t location; /* the owner's record id, opaque to the master */
	char *segment;	   /* the owner's segment name (heap) */
	char *endpoint;	   /* the owner's data port (heap) */
};

struct mst_object {
	uint64_t hash;
	uint64_t id;	  /* unique for the master's life: eviction re-finds by (pointer, id) */
	uint64_t version; /* the value's identity (capabilities): new at put and upsert */
	uint64_t size;
	uint64_t writer;	   /* client_id of the PutStart (or last UpsertEnd) */
	uint64_t lease_ms;	   /* read lease deadline, monotonic ms; commit time at first */
	uint64_t lease_holder;	   /* client_id of the latest grant's caller; 0 none */
	uint64_t lease_reader;	   /* and the reader it named */
	uint64_t lease_prior_ms;   /* covers every grant to another (holder, reader) */
	uint64_t lease_seq;	   /* the latest grant's number */
	uint64_t used_ms;	   /* last use (commit, read, put again): eviction order */
	uint64_t put_start_ms;	   /* when PutStart ran */
	uint64_t soft_pin_ttl_ms;  /* requested TTL, 0 if no soft pin */
	uint64_t soft_pin_ms;	   /* soft pin deadline, set at commit */
	struct mst_tenant *tenant; /* charged with size */
	struct mst_upsert *up;	   /* NULL unless an upsert is in flight */
	struct mst_replica *reps;  /* heap, nrep entries: MEMORY replicas */
	unsigned nrep;
	unsigned ndisk;
	struct mst_disk_replica *disk; /* heap, ndisk entries: LOCAL_DISK replicas */
	uint64_t offload_to;	       /* proxy with a task for it queued or in flight; 0 none */
	uint64_t beside_resv; /* committed beside its write into the writer's reservation; 0 */
	uint32_t crc;
	uint8_t state;
	uint8_t hard_pin;
	uint8_t offload_evict;	/* that task came from eviction: MEMORY goes once on disk */
	uint8_t offload_failed; /* a proxy could not write it: eviction drops it */
	size_t tlen;		/* tenant length + 1: the key starts at kbuf + tlen */
	size_t klen;		/* tenant "\0" key, NUL-terminated after klen */
	char kbuf[];
};

/* A slot of a shard's table. A lookup compares hashes here and reads an
 * object only on a match, so a miss touches no object at all. */
struct mst_slot {
	struct mst_object *o; /* first: a slot is handed out as &slot->o */
	uint64_t hash;	      /* o->hash; unused while o is NULL */
};

/* Open addressing with linear probing from (hash / MST_SHARDS) & (cap - 1),
 * at most half full; erasing shifts the rest of the run back, so there are
 * no tombstones and a lookup stops at the first empty slot. */
struct mst_shard {
	pthread_mutex_t lock;
	struct mst_slot *slots;
	size_t cap, n; /* cap a power of two */
};

/* A lookup key: tenant "\0" key and its hash. */
struct mst_okey {
	char buf[MST_TENANT_MAX + 1 + LUNAR_KEY_MAX];
	size_t len, tlen;
	uint64_t hash;
};

static inline const char *mst_obj_key(const struct mst_object *o)
{
	return o->kbuf + o->tlen;
}

/* How many objects ahead a walk over many asks memory for: each is a cache
 * miss of its own, and so they overlap instead of coming one by one. */
#define MST_PREFETCH_AHEAD 8

/* mst_obj_home - where the probe for hash starts in a table of cap slots
 * (the low bits chose the shard). */
static inline size_t mst_obj_home(uint64_t hash, size_t cap)
{
	return (size_t)(hash / MST_SHARDS) & (cap - 1);
}

/*
 * A batch's walk over its keys in order, asking memory ahead for what each
 * key's lookup reads: the slot its probe starts at (MST_PREFETCH_SLOT keys
 * ahead, no lock), then the object in that slot (MST_PREFETCH_OBJ keys
 * ahead, under the shard's lock if it is free at once). At a million
 * objects each is a cache miss of its own; asked for ahead, a batch's
 * misses overlap instead of coming one key at a time. The first
 * MST_PREFETCH_OBJ keys have their slots asked for only. Keys the walk
 * cannot hash (not valid) are skipped, and refused at their lookups.
 * Kept short: further ahead the prefetches themselves stall (perf put
 * 78 % of ask_slot's samples on the instruction after its prefetch at 16
 * and 8 ahead), most likely waiting for the core's miss buffers: 0.79M
 * keys/s at a million objects here, against 0.98M at 8 and 4 and 0.86M
 * at 4 and 2 (BatchExistKey, one requester, medians of 4 runs).
 */
#define MST_PREFETCH_SLOT 8
#define MST_PREFETCH_OBJ  4
_Static_assert(MST_PREFETCH_OBJ < MST_PREFETCH_SLOT, "an object is asked for after its slot");

struct mst_prefetch {
	struct mst_master *m;
	const char *tenant;
	char *const *keys;
	size_t n;
	uint64_t hash[MST_PREFETCH_SLOT]; /* key j's at j % MST_PREFETCH_SLOT, 0: none */
};

/* mst_prefetch_begin - a walk over keys[0..n) of tenant, the first slots
 * asked for. No lock held, and none waited for; keys stay as they are
 * until the walk's last step. */
void mst_prefetch_begin(struct mst_prefetch *a, struct mst_master *m, const char *tenant,
			char *const *keys, size_t n);

/* mst_prefetch_step - call before looking up key i (i = 0, 1, ... in
 * order), with no shard lock held: it takes one only if it is free. */
void mst_prefetch_step(struct mst_prefetch *a, size_t i);

/* mst_obj_prefetch - start loading o's fields (not its name), if o is not
 * NULL. No lock needed, and o may be gone: a prefetch never faults. */
static inline void mst_obj_prefetch(const void *o)
{
	if (o)
		for (size_t off = 0; off < offsetof(struct mst_object, kbuf); off += 64)
			__builtin_prefetch((const char *)o + off);
}

/* mst_tenant_name - the tenant a request means: "default" when empty. */
const char *mst_tenant_name(const char *tenant);
/* mst_okey_make - validate tenant and key; 0 or INVALID_PARAMS/INVALID_KEY. */
int mst_okey_make(struct mst_okey *k, const char *tenant, const char *key);

/* mst_okey_hash - mst_okey_make's checks and hash alone, into *hash. No
 * lock needed. */
int mst_okey_hash(const char *tenant, const char *key, uint64_t *hash);

/* One attempt at a two-phase write's start for key k, under its shard lock. */
typedef int (*mst_start_try_fn)(struct mst_master *m, uint64_t client, const struct mst_okey *k,
				const Lunar__PutStartRequest *rq, Lunar__Replica ***reps,
				size_t *n);
/*
 * mst_obj_start - validate, then try_start; when the store is full, make
 * room and try again (mst_room_make; no shard lock held). PutStart and
 * UpsertStart differ only in try_start.
 */
int mst_obj_start(struct mst_master *m, uint64_t client, const char *tenant,
		  const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n,
		  mst_start_try_fn try_start);
/* mst_obj_lookup - lock the shard of (tenant, key), find its slot. On a bad
 * key nothing is locked and the code is returned. */
int mst_obj_lookup(struct mst_master *m, const char *tenant, const char *key, struct mst_shard **s,
		   struct mst_object ***pp);
/* mst_obj_name - give o, allocated with room for k's bytes, k's key and a
 * fresh id, which is also its first version. Any thread. */
void mst_obj_name(struct mst_master *m, struct mst_object *o, const struct mst_okey *k);
/* mst_obj_find_key - the slot of k in shard s: the object, or the empty
 * slot where its probe ended. A slot stays valid until the shard changes
 * (an insert or an erase). */
struct mst_object **mst_obj_find_key(struct mst_shard *s, const struct mst_okey *k);
/* mst_upsert_cancel - end o's upsert without effect, its ranges given back
 * now (revoked: its writer is done with them). */
void mst_upsert_cancel(struct mst_master *m, struct mst_object *o);
/* mst_upsert_abandon - as mst_upsert_cancel for an upsert whose writer was
 * declared dead: it may only be asleep and write on when it wakes, so its
 * ranges go back after put_start_release_timeout. */
void mst_upsert_abandon(struct mst_master *m, struct mst_object *o);
/* mst_obj_find_id - the slot of the object o with id in shard s (hash is its
 * hash), or NULL when it is gone; o is only compared, never read. */
struct mst_object **mst_obj_find_id(struct mst_shard *s, uint64_t hash, const void *o, uint64_t id);
/* mst_obj_erase - take *pp out of the table (a later object of its probe
 * run may move into *pp), give back its ranges and quota, free it;
 * the owners of LOCAL_DISK replicas it still has are told to delete them. */
void mst_obj_erase(struct mst_master *m, struct mst_shard *s, struct mst_object **pp);
/* mst_obj_busy - a COMPLETE object that must not be removed or evicted now
 * (an upsert in flight). */
static inline int mst_obj_busy(const struct mst_object *o)
{
	return o->up != NULL;
}
/* mst_replicas_pb - heap protobuf copies of n replicas in state st. */
int mst_replicas_pb(const struct mst_replica *r, unsigned n, Lunar__ReplicaState st,
		    Lunar__Replica ***out, size_t *nout);
/* mst_replicas_free - give n ranges back to their segments now. */
void mst_replicas_free(struct mst_master *m, const struct mst_replica *r, unsigned n);
/* mst_obj_reps_free - o's MEMORY ranges leave it (its array freed, nrep 0)
 * and go back to their segments: at not_before_ms (a read lease over them;
 * 0: now), and for a value committed beside its write whose bytes may still
 * land, no sooner than they cannot (mst_resv_hold). */
void mst_obj_reps_free(struct mst_master *m, struct mst_object *o, uint64_t not_before_ms);
/* mst_soft_pin_ttl - the soft pin TTL a request gets, 0 if none. */
uint64_t mst_soft_pin_ttl(const struct mst_master *m, int soft_pin, uint64_t ttl_ms);

/* mst_obj_put_locked - PutStart of k, which s does not hold, under the
 * shard lock: make room, charge the tenant, place, insert. 0 with the reply
 * replicas, or a code. */
int mst_obj_put_locked(struct mst_master *m, struct mst_shard *s, uint64_t client,
		       const struct mst_okey *k, const Lunar__PutStartRequest *rq,
		       Lunar__Replica ***reps, size_t *n);
/* How a two-phase write ends. */
enum mst_end {
	MST_END_REVOKE,
	MST_END_REVOKE_LATE, /* its bytes may still land: ranges given back late */
	MST_END_COMMIT,
};
/* mst_obj_finish - PutEnd or PutRevoke of the PROCESSING object *pp by
 * client; the shard lock stays held. */
int mst_obj_finish(struct mst_master *m, struct mst_shard *s, struct mst_object **pp,
		   uint64_t client, enum mst_end how, uint32_t crc);
/* mst_obj_discard - a stale PROCESSING put pre-empted: its ranges are given
 * back after put_start_release_timeout, the object goes now. */
void mst_obj_discard(struct mst_master *m, struct mst_shard *s, struct mst_object **pp);
/* mst_obj_release_late - hand the ranges of the PROCESSING object o to the
 * deferred list, due put_start_release_timeout after its PutStart: its
 * writer may still be writing there. o keeps no replica. */
void mst_obj_release_late(struct mst_master *m, struct mst_object *o);

/* mst_shard_sweep - apply fn to every object of shard i under its lock,
 * once each; fn returns 1 to erase the object, -1 to stop the sweep, and
 * must not change the shard itself. Returns the number erased. Call with
 * no shard lock held. */
typedef int (*mst_visit_fn)(struct mst_master *m, struct mst_object *o, void *arg);
int64_t mst_shard_sweep(struct mst_master *m, size_t i, mst_visit_fn fn, void *arg);

/* mst_obj_room - make room in shard s for one more object; 0, or -ENOMEM
 * (then nothing may be inserted). */
int mst_obj_room(struct mst_shard *s);
/* mst_obj_insert - put the new COMPLETE object o into shard s, which
 * mst_obj_room made room in, and count it. */
void mst_obj_insert(struct mst_master *m, struct mst_shard *s, struct mst_object *o);

/* disk.c: LOCAL_DISK replicas. */
/* mst_obj_replicas_pb - heap protobuf copies of o's replicas in state st:
 * MEMORY first, then LOCAL_DISK. */
int mst_obj_replicas_pb(const struct mst_object *o, Lunar__ReplicaState st, Lunar__Replica ***out,
			size_t *nout);
/* mst_disk_reps_free - free o's LOCAL_DISK replica list (no master state). */
void mst_disk_reps_free(struct mst_object *o);
/* mst_obj_drop_memory - give o's MEMORY ranges back now and count an
 * eviction; o lives on its LOCAL_DISK replicas. */
void mst_obj_drop_memory(struct mst_master *m, struct mst_object *o);
/* mst_disk_forget_client - drop o's LOCAL_DISK replica on client and end
 * an offload task of client for o (the proxy is dead). 1 if a replica went. */
int mst_disk_forget_client(struct mst_object *o, uint64_t client);
/* mst_disk_dispatch - OFFLOAD_DONE, DISK_REPLICAS_REMOVE, DISK_REPLICAS_ADD:
 * per record codes in a BatchCodesReply. LUNAR_ERR_PROTOCOL for another method. */
int mst_disk_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		      ProtobufCMessage **rep);

/* offload.c: per-proxy offload queues (see mst_int.h for the lock). */
/*
 * mst_offload_queue - queue a task for o (COMPLETE, shard lock held) with a
 * proxy that owns one of its MEMORY replicas and has a disk tier; sets
 * o->offload_to and o->offload_evict = evict. 0, -ENOSPC (such a proxy's
 * queue is full), -ENOENT (no such proxy) or -ENOMEM.
 */
int mst_offload_queue(struct mst_master *m, struct mst_object *o, int evict);
/* mst_offload_on_commit - with --offload on_put, queue o just committed
 * (shard lock held); a full queue skips it. */
void mst_offload_on_commit(struct mst_master *m, struct mst_object *o);
/* mst_offload_forget - o's LOCAL_DISK replicas are being dropped while
 * their owners keep the records (o is removed or its value replaced): queue
 * a forget record (tenant, key, location) for each owner with a queue, to
 * go out with its next Ping. Shard lock held; ENOMEM loses a record (the
 * proxy keeps it until its bucket goes; logged). */
void mst_offload_forget(struct mst_master *m, const struct mst_object *o);
/* mst_offload_end - forget client's task for the key k (done or failed). */
void mst_offload_end(struct mst_master *m, uint64_t client, const struct mst_okey *k);

#endif /* LUNAR_MASTER_MST_OBJ_H */
