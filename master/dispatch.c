/*
 * dispatch.c - mst_dispatch: one control-plane call from its protobuf request
 * to its protobuf reply. Handlers only translate; the work is in objects.c,
 * upsert.c, scan.c, segments.c and clients.c. Every string a reply carries is
 * its own heap copy, so protobuf_c_message_free_unpacked(rep, NULL) frees the
 * whole reply. Every call and its status code are counted for /metrics.
 */
#include "master.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "failpoint.h"
#include "lunar.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "mst_obj.h"
#include "rpc.h"

/* A reply of req's method with status code; NULL on ENOMEM. */
#define REPLY(type, desc, rc) ((type *)lp_reply_new(&desc, mst_code(rc), MST_VIEW))

/* Set *rep to a reply of descriptor d carrying only a status. */
static int status_only(const ProtobufCMessageDescriptor *d, int rc, ProtobufCMessage **rep)
{
	*rep = lp_reply_new(d, mst_code(rc), MST_VIEW);
	return *rep ? 0 : -ENOMEM;
}

static int h_mount(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__MountSegmentRequest *rq = (const void *)req;
	struct auth_key secret;
	Lunar__MountSegmentReply *r;
	uint64_t mount = 0;
	int rc = mst_client_touch(m, rq->client_id);

	if (rc >= 0)
		rc = mst_segment_mount(m, rq->client_id, rq->segment, &secret, &mount);
	r = REPLY(Lunar__MountSegmentReply, lunar__mount_segment_reply__descriptor, rc);
	if (r && rc >= 0)
		r->mount = mount;
	/* Plain here: the RPC layer seals it for the session on the wire. */
	if (r && rc >= 0 && m->cfg.keyed) {
		r->segment_secret.data = malloc(sizeof(secret.k));
		if (!r->segment_secret.data) {
			protobuf_c_message_free_unpacked(&r->base, NULL);
			r = NULL;
		} else {
			memcpy(r->segment_secret.data, secret.k, sizeof(secret.k));
			r->segment_secret.len = sizeof(secret.k);
			r->clock_ms = mst_cap_clock_ms();
		}
	}
	auth_key_wipe(&secret);
	*rep = r ? &r->base : NULL;
	return r ? 0 : -ENOMEM;
}

static int h_unmount(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__UnmountSegmentRequest *rq = (const void *)req;
	int rc = mst_segment_unmount(m, rq->client_id, rq->name, rq->grace_ms);

	return status_only(&lunar__unmount_segment_reply__descriptor, rc, rep);
}

static int h_ping(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PingRequest *rq = (const void *)req;
	int fresh = mst_client_touch(m, rq->client_id);
	Lunar__PingReply *r =
	    REPLY(Lunar__PingReply, lunar__ping_reply__descriptor, fresh < 0 ? fresh : 0);

	if (!r)
		return -ENOMEM;
	r->need_remount = fresh == 1;
	if (m->cfg.keyed)
		r->clock_ms = mst_cap_clock_ms();
	/* Forgets first, tasks only once none are left: a task must not reach
	 * the proxy before the forget of an older copy of its key, which it
	 * could otherwise adopt as its own copy just before it goes. Tasks lost
	 * to ENOMEM go back to the queue after their timeout. */
	if (fresh == 0 && !mst_offload_forgets_take(m, rq->client_id, &r->forget, &r->n_forget)) {
		/* A proxy busy offloading pings every few ms: the watermark
		 * round runs then too, so eviction queues the next tasks as
		 * memory fills rather than at the next housekeeping tick. */
		if (m->cfg.enable_offload && m->cfg.offload == MST_OFFLOAD_ON_EVICT)
			mst_evict_maybe(m);
		mst_offload_take(m, rq->client_id, lc_now_ms(), &r->offload, &r->n_offload);
	}
	*rep = &r->base;
	return 0;
}

static int h_landed(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__LandedRequest *rq = (const void *)req;

	mst_resv_landed(m, rq->client_id, rq->landed, rq->n_landed);
	return status_only(&lunar__status_reply__descriptor, 0, rep);
}

/* PutStart and UpsertStart. */
static int start(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep,
		 int upsert)
{
	const Lunar__PutStartRequest *rq = (const void *)req;
	Lunar__Replica **reps = NULL;
	size_t n = 0;
	int rc = (upsert ? mst_obj_upsert_start : mst_obj_put_start)(m, rq->client_id, rq->tenant,
								     rq, &reps, &n);
	Lunar__PutStartReply *r =
	    REPLY(Lunar__PutStartReply, lunar__put_start_reply__descriptor, rc);

	if (!r) {
		if (!rc)
			(upsert ? mst_obj_upsert_revoke
				: mst_obj_put_revoke)(m, rq->client_id, rq->tenant, rq->key, 0);
		for (size_t i = 0; i < n; i++)
			protobuf_c_message_free_unpacked(&reps[i]->base, NULL);
		free(reps);
		return -ENOMEM;
	}
	r->replicas = reps;
	r->n_replicas = n;
	r->largest_segment = mst_obj_too_large(m, rc, rq->size);
	*rep = &r->base;
	return 0;
}

static int h_put_start(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	return start(m, req, rep, 0);
}

static int h_upsert_start(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	return start(m, req, rep, 1);
}

static int h_put_end(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PutEndRequest *rq = (const void *)req;
	int rc = mst_obj_put_end(m, rq->client_id, rq->tenant, rq->key, rq->crc32c);

	return status_only(&lunar__put_end_reply__descriptor, rc, rep);
}

static int h_upsert_end(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PutEndRequest *rq = (const void *)req;
	int rc = mst_obj_upsert_end(m, rq->client_id, rq->tenant, rq->key, rq->crc32c);

	return status_only(&lunar__put_end_reply__descriptor, rc, rep);
}

static int h_put_revoke(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PutRevokeRequest *rq = (const void *)req;
	int rc = mst_obj_put_revoke(m, rq->client_id, rq->tenant, rq->key, rq->late);

	return status_only(&lunar__put_revoke_reply__descriptor, rc, rep);
}

static int h_upsert_revoke(struct mst_master *m, const ProtobufCMessage *req,
			   ProtobufCMessage **rep)
{
	const Lunar__PutRevokeRequest *rq = (const void *)req;
	int rc = mst_obj_upsert_revoke(m, rq->client_id, rq->tenant, rq->key, rq->late);

	return status_only(&lunar__put_revoke_reply__descriptor, rc, rep);
}

static int h_get(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__GetReplicaListRequest *rq = (const void *)req;
	Lunar__GetReplicaListResult got = LUNAR__GET_REPLICA_LIST_RESULT__INIT;
	/* No client_id in this request: a lease nobody can release early. */
	int rc = mst_obj_get(m, &(struct mst_lessee){0, 0}, rq->tenant, rq->key, &got);
	Lunar__GetReplicaListReply *r =
	    REPLY(Lunar__GetReplicaListReply, lunar__get_replica_list_reply__descriptor, rc);

	if (!r) {
		mst_replicas_pb_free(got.replicas, got.n_replicas);
		return -ENOMEM;
	}
	r->size = got.size;
	r->crc32c = got.crc32c;
	r->replicas = got.replicas;
	r->n_replicas = got.n_replicas;
	r->lease_ttl_ms = rc ? 0 : m->cfg.kv_lease_ttl_ms;
	*rep = &r->base;
	return 0;
}

static int h_exist(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__ExistKeyRequest *rq = (const void *)req;
	int rc = mst_obj_exist(m, &(struct mst_lessee){0, 0}, rq->tenant, rq->key);
	Lunar__ExistKeyReply *r =
	    REPLY(Lunar__ExistKeyReply, lunar__exist_key_reply__descriptor, rc < 0 ? rc : 0);

	if (!r)
		return -ENOMEM;
	r->exists = rc == 1;
	*rep = &r->base;
	return 0;
}

static int h_remove(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__RemoveRequest *rq = (const void *)req;
	int rc = mst_obj_remove(m, rq->tenant, rq->key, rq->force);

	return status_only(&lunar__remove_reply__descriptor, rc, rep);
}

static int count_reply(int64_t n, ProtobufCMessage **rep)
{
	Lunar__RemoveAllReply *r =
	    REPLY(Lunar__RemoveAllReply, lunar__remove_all_reply__descriptor, n < 0 ? (int)n : 0);

	if (!r)
		return -ENOMEM;
	r->count = n < 0 ? 0 : n;
	*rep = &r->base;
	return 0;
}

static int h_remove_all(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__RemoveAllRequest *rq = (const void *)req;

	return count_reply(mst_obj_remove_all(m, rq->tenant, rq->force), rep);
}

static int h_remove_regex(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__RemoveByRegexRequest *rq = (const void *)req;

	return count_reply(mst_obj_remove_regex(m, rq->tenant, rq->pattern, rq->force), rep);
}

static int h_reserve(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__ReserveRequest *rq = (const void *)req;
	Lunar__Reservation *res = NULL;
	/* a test's slow master (sleep: the failpoint build only, where this
	 * call may block an RPC worker) or a failed grant (return) */
	int rc = LC_FAILPOINT("master-reserve") ? LUNAR_ERR_INTERNAL
						: mst_resv_grant(m, rq->client_id, rq->size, &res);
	Lunar__ReserveReply *r = REPLY(Lunar__ReserveReply, lunar__reserve_reply__descriptor, rc);

	if (!r) {
		if (res) {
			mst_resv_release(m, rq->client_id, &res->id, 1, 0, NULL);
			protobuf_c_message_free_unpacked(&res->base, NULL);
		}
		return -ENOMEM;
	}
	r->reservation = res;
	*rep = &r->base;
	return 0;
}

static int h_reserve_release(struct mst_master *m, const ProtobufCMessage *req,
			     ProtobufCMessage **rep)
{
	const Lunar__ReserveReleaseRequest *rq = (const void *)req;
	int bad = rq->n_ids > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS : 0;
	Lunar__BatchCodesReply *r =
	    REPLY(Lunar__BatchCodesReply, lunar__batch_codes_reply__descriptor, bad);

	if (!r)
		return -ENOMEM;
	if (!bad && rq->n_ids) {
		if (!(r->codes = calloc(rq->n_ids, sizeof(*r->codes)))) {
			protobuf_c_message_free_unpacked(&r->base, NULL);
			return -ENOMEM;
		}
		r->n_codes = rq->n_ids;
		mst_resv_release(m, rq->client_id, rq->ids, rq->n_ids, rq->late, r->codes);
	}
	*rep = &r->base;
	return 0;
}

/* Calls whose handler does not need the method id. */
static int call(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		ProtobufCMessage **rep)
{
	switch (method) {
	case LUNAR__METHOD__MOUNT_SEGMENT: return h_mount(m, req, rep);
	case LUNAR__METHOD__UNMOUNT_SEGMENT: return h_unmount(m, req, rep);
	case LUNAR__METHOD__REMOUNT_SEGMENT: return mst_batch_remount(m, req, rep);
	case LUNAR__METHOD__PING: return h_ping(m, req, rep);
	case LUNAR__METHOD__PUT_START: return h_put_start(m, req, rep);
	case LUNAR__METHOD__PUT_END: return h_put_end(m, req, rep);
	case LUNAR__METHOD__PUT_REVOKE: return h_put_revoke(m, req, rep);
	case LUNAR__METHOD__UPSERT_START: return h_upsert_start(m, req, rep);
	case LUNAR__METHOD__UPSERT_END: return h_upsert_end(m, req, rep);
	case LUNAR__METHOD__UPSERT_REVOKE: return h_upsert_revoke(m, req, rep);
	case LUNAR__METHOD__GET_REPLICA_LIST: return h_get(m, req, rep);
	case LUNAR__METHOD__EXIST_KEY: return h_exist(m, req, rep);
	case LUNAR__METHOD__REMOVE: return h_remove(m, req, rep);
	case LUNAR__METHOD__REMOVE_ALL: return h_remove_all(m, req, rep);
	case LUNAR__METHOD__REMOVE_BY_REGEX: return h_remove_regex(m, req, rep);
	case LUNAR__METHOD__BATCH_REMOVE: return mst_batch_remove(m, req, rep);
	case LUNAR__METHOD__BATCH_PUT_START:
	case LUNAR__METHOD__BATCH_UPSERT_START: return mst_batch_put_start(m, method, req, rep);
	case LUNAR__METHOD__BATCH_PUT_END:
	case LUNAR__METHOD__BATCH_UPSERT_END: return mst_batch_put_end(m, method, req, rep);
	case LUNAR__METHOD__BATCH_PUT_REVOKE:
	case LUNAR__METHOD__BATCH_UPSERT_REVOKE:
	case LUNAR__METHOD__BATCH_GET_REPLICA_LIST:
	case LUNAR__METHOD__BATCH_EXIST_KEY: return mst_batch_keys(m, method, req, rep);
	case LUNAR__METHOD__BATCH_LEASE_RELEASE: return mst_batch_lease_release(m, req, rep);
	case LUNAR__METHOD__REPORT_OBJECTS: return mst_rebuild_report(m, req, rep);
	case LUNAR__METHOD__RESERVE: return h_reserve(m, req, rep);
	case LUNAR__METHOD__RESERVE_RELEASE: return h_reserve_release(m, req, rep);
	case LUNAR__METHOD__BATCH_PUT_COMMIT: return mst_batch_put_commit(m, req, rep);
	case LUNAR__METHOD__BATCH_PUT_UNCOMMIT: return mst_batch_put_uncommit(m, req, rep);
	case LUNAR__METHOD__LANDED: return h_landed(m, req, rep);
	case LUNAR__METHOD__OFFLOAD_DONE:
	case LUNAR__METHOD__DISK_REPLICAS_REMOVE:
	case LUNAR__METHOD__DISK_REPLICAS_ADD: return mst_disk_dispatch(m, method, req, rep);
	default: return mst_admin_dispatch(m, method, req, rep);
	}
}

int mst_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		 ProtobufCMessage **rep)
{
	const struct lp_method *mt = lp_method_find(method);
	uint64_t view;
	int rc, refused;

	if (!mt || !req || req->descriptor != mt->req)
		return LUNAR_ERR_PROTOCOL;
	/* a standby, or a fenced leader (SPEC §14): the refusal says the
	 * view it knows now, with the leader it names */
	refused = mst_ha_admit(m, method, &view);
	rc = refused ? mst_ha_refuse(m, mt->rep, rep) : call(m, method, req, rep);
	if (rc == LUNAR_ERR_PROTOCOL) /* in the schema, not served yet (disk tier) */
		rc = status_only(mt->rep, LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS, rep);
	if (!rc) {
		if (!refused)
			lp_status(*rep)->view = view;
		mst_metrics_count(m, method, lp_status(*rep)->code);
	}
	return mst_code(rc); /* the module's edge: -ENOMEM leaves as INTERNAL */
}
