/*
 * dispatch.c - mst_dispatch: one control-plane call from its protobuf request
 * to its protobuf reply. Handlers only translate; the work is in objects.c,
 * segments.c and clients.c. Every string a reply carries is its own heap copy,
 * so protobuf_c_message_free_unpacked(rep, NULL) frees the whole reply.
 */
#include "master.h"

#include <errno.h>
#include <stdlib.h>

#include "lunar.h"
#include "mst_int.h"
#include "rpc.h"

typedef int (*handler_fn)(struct mst_master *m, const ProtobufCMessage *req,
			  ProtobufCMessage **rep);

/* A reply of req's method with status code; NULL on ENOMEM. */
#define REPLY(type, desc, rc) ((type *)lp_reply_new(&desc, mst_code(rc), MST_VIEW))

static int h_mount(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__MountSegmentRequest *rq = (const void *)req;
	int rc = mst_client_touch(m, rq->client_id);

	if (rc >= 0)
		rc = mst_segment_mount(m, rq->client_id, rq->segment);
	*rep = (ProtobufCMessage *)REPLY(Lunar__MountSegmentReply,
					 lunar__mount_segment_reply__descriptor, rc);
	return *rep ? 0 : -ENOMEM;
}

static int h_unmount(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__UnmountSegmentRequest *rq = (const void *)req;
	int rc = mst_segment_unmount(m, rq->client_id, rq->name);

	*rep = (ProtobufCMessage *)REPLY(Lunar__UnmountSegmentReply,
					 lunar__unmount_segment_reply__descriptor, rc);
	return *rep ? 0 : -ENOMEM;
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
	*rep = &r->base;
	return 0;
}

static int h_put_start(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PutStartRequest *rq = (const void *)req;
	Lunar__Replica **reps = NULL;
	size_t n = 0;
	int rc = mst_obj_put_start(m, rq->client_id, rq->tenant, rq, &reps, &n);
	Lunar__PutStartReply *r =
	    REPLY(Lunar__PutStartReply, lunar__put_start_reply__descriptor, rc);

	if (!r) {
		if (!rc)
			mst_obj_put_revoke(m, rq->client_id, rq->tenant, rq->key);
		for (size_t i = 0; i < n; i++)
			protobuf_c_message_free_unpacked(&reps[i]->base, NULL);
		free(reps);
		return -ENOMEM;
	}
	r->replicas = reps;
	r->n_replicas = n;
	*rep = &r->base;
	return 0;
}

static int h_put_end(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PutEndRequest *rq = (const void *)req;
	int rc = mst_obj_put_end(m, rq->client_id, rq->tenant, rq->key);

	*rep = (ProtobufCMessage *)REPLY(Lunar__PutEndReply, lunar__put_end_reply__descriptor, rc);
	return *rep ? 0 : -ENOMEM;
}

static int h_put_revoke(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__PutRevokeRequest *rq = (const void *)req;
	int rc = mst_obj_put_revoke(m, rq->client_id, rq->tenant, rq->key);

	*rep = (ProtobufCMessage *)REPLY(Lunar__PutRevokeReply, lunar__put_revoke_reply__descriptor,
					 rc);
	return *rep ? 0 : -ENOMEM;
}

static int h_get(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__GetReplicaListRequest *rq = (const void *)req;
	Lunar__Replica **reps = NULL;
	size_t n = 0;
	uint64_t size = 0;
	int rc = mst_obj_get(m, rq->tenant, rq->key, &size, &reps, &n);
	Lunar__GetReplicaListReply *r =
	    REPLY(Lunar__GetReplicaListReply, lunar__get_replica_list_reply__descriptor, rc);

	if (!r) {
		for (size_t i = 0; i < n; i++)
			protobuf_c_message_free_unpacked(&reps[i]->base, NULL);
		free(reps);
		return -ENOMEM;
	}
	r->size = size;
	r->replicas = reps;
	r->n_replicas = n;
	r->lease_ttl_ms = rc ? 0 : m->cfg.kv_lease_ttl_ms;
	*rep = &r->base;
	return 0;
}

static int h_exist(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__ExistKeyRequest *rq = (const void *)req;
	int rc = mst_obj_exist(m, rq->tenant, rq->key);
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

	*rep = (ProtobufCMessage *)REPLY(Lunar__RemoveReply, lunar__remove_reply__descriptor, rc);
	return *rep ? 0 : -ENOMEM;
}

static int h_remove_all(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__RemoveAllRequest *rq = (const void *)req;
	int64_t n = mst_obj_remove_all(m, rq->tenant, rq->force);
	Lunar__RemoveAllReply *r =
	    REPLY(Lunar__RemoveAllReply, lunar__remove_all_reply__descriptor, n < 0 ? (int)n : 0);

	if (!r)
		return -ENOMEM;
	r->count = n < 0 ? 0 : n;
	*rep = &r->base;
	return 0;
}

int mst_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		 ProtobufCMessage **rep)
{
	const struct lp_method *mt = lp_method_find(method);
	handler_fn fn;

	if (!mt || !req || req->descriptor != mt->req)
		return LUNAR_ERR_PROTOCOL;
	switch (method) {
	case LUNAR__METHOD__MOUNT_SEGMENT: fn = h_mount; break;
	case LUNAR__METHOD__UNMOUNT_SEGMENT: fn = h_unmount; break;
	case LUNAR__METHOD__PING: fn = h_ping; break;
	case LUNAR__METHOD__PUT_START: fn = h_put_start; break;
	case LUNAR__METHOD__PUT_END: fn = h_put_end; break;
	case LUNAR__METHOD__PUT_REVOKE: fn = h_put_revoke; break;
	case LUNAR__METHOD__GET_REPLICA_LIST: fn = h_get; break;
	case LUNAR__METHOD__EXIST_KEY: fn = h_exist; break;
	case LUNAR__METHOD__REMOVE: fn = h_remove; break;
	case LUNAR__METHOD__REMOVE_ALL: fn = h_remove_all; break;
	case LUNAR__METHOD__BATCH_PUT_START: fn = mst_batch_put_start; break;
	case LUNAR__METHOD__BATCH_PUT_END:
	case LUNAR__METHOD__BATCH_PUT_REVOKE:
	case LUNAR__METHOD__BATCH_GET_REPLICA_LIST:
	case LUNAR__METHOD__BATCH_EXIST_KEY: return mst_batch_keys(m, method, req, rep);
	default: return LUNAR_ERR_PROTOCOL;
	}
	return fn(m, req, rep);
}
