/*
 * batch.c - the Batch* calls: one reply whose per-key results are
 * index-aligned with the request's keys. A batch over LUNAR_BATCH_MAX keys
 * fails whole with INVALID_PARAMS. Put and upsert share every path; the
 * method says which verb each key gets.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "failpoint.h"
#include "lunar.h"
#include "mst_int.h"
#include "mst_obj.h"
#include "rpc.h"

typedef int (*start_fn)(struct mst_master *m, uint64_t client, const char *tenant,
			const Lunar__PutStartRequest *rq, Lunar__Replica ***reps, size_t *n);

static Lunar__PutStartResult *put_start_one(struct mst_master *m, start_fn start,
					    const Lunar__BatchPutStartRequest *rq,
					    const Lunar__PutStartRequest *item)
{
	Lunar__PutStartResult *res = malloc(sizeof(*res));
	Lunar__PutStartRequest more;

	if (!res)
		return NULL;
	lunar__put_start_result__init(res);
	if (LC_FAILPOINT("master-extra-replica")) { /* tests: one replica more than asked */
		more = *item;
		more.replica_num = (item->replica_num ? item->replica_num : 1) + 1;
		item = &more;
	}
	res->code =
	    mst_code(start(m, rq->client_id, rq->tenant, item, &res->replicas, &res->n_replicas));
	res->largest_segment = mst_obj_too_large(m, res->code, item->size);
	return res;
}

int mst_batch_put_start(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
			ProtobufCMessage **rep)
{
	const Lunar__BatchPutStartRequest *rq = (const void *)req;
	int upsert = method == LUNAR__METHOD__BATCH_UPSERT_START;
	start_fn start = upsert ? mst_obj_upsert_start : mst_obj_put_start;
	int bad = rq->n_items > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS : 0;
	Lunar__BatchPutStartReply *r =
	    (void *)lp_reply_new(&lunar__batch_put_start_reply__descriptor, bad, MST_VIEW);

	if (!r)
		return -ENOMEM;
	if (!bad && rq->n_items) {
		r->results = calloc(rq->n_items, sizeof(*r->results));
		if (!r->results)
			goto err;
	}
	for (size_t i = 0; !bad && i < rq->n_items; i++) {
		r->results[i] = put_start_one(m, start, rq, rq->items[i]);
		if (!r->results[i])
			goto err;
		r->n_results = i + 1;
	}
	*rep = &r->base;
	return 0;
err:
	/* undo the writes already started: nobody will hear of them */
	for (size_t i = 0; i < r->n_results; i++)
		if (r->results[i]->code == 0)
			(upsert ? mst_obj_upsert_revoke : mst_obj_put_revoke)(
			    m, rq->client_id, rq->tenant, rq->items[i]->key, 0);
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return -ENOMEM;
}

/* A BatchCodesReply with n codes (0 when bad), or NULL on ENOMEM. */
static Lunar__BatchCodesReply *codes_reply(size_t n, int bad)
{
	Lunar__BatchCodesReply *r =
	    (void *)lp_reply_new(&lunar__batch_codes_reply__descriptor, bad, MST_VIEW);

	if (!r || bad || !n)
		return r;
	r->codes = calloc(n, sizeof(*r->codes));
	if (!r->codes) {
		protobuf_c_message_free_unpacked(&r->base, NULL);
		return NULL;
	}
	r->n_codes = n;
	return r;
}

int mst_batch_put_end(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		      ProtobufCMessage **rep)
{
	const Lunar__BatchPutEndRequest *rq = (const void *)req;
	int bad = rq->n_keys > LUNAR_BATCH_MAX || (rq->n_crc32c && rq->n_crc32c != rq->n_keys)
		      ? LUNAR_ERR_INVALID_PARAMS
		      : 0;
	Lunar__BatchCodesReply *r = codes_reply(rq->n_keys, bad);
	struct mst_prefetch a;

	if (!r)
		return -ENOMEM;
	mst_prefetch_begin(&a, m, rq->tenant, rq->keys, r->n_codes);
	for (size_t i = 0; i < r->n_codes; i++) {
		uint32_t crc = rq->n_crc32c ? rq->crc32c[i] : 0;

		mst_prefetch_step(&a, i);
		r->codes[i] = mst_code(
		    method == LUNAR__METHOD__BATCH_UPSERT_END
			? mst_obj_upsert_end(m, rq->client_id, rq->tenant, rq->keys[i], crc)
			: mst_obj_put_end(m, rq->client_id, rq->tenant, rq->keys[i], crc));
	}
	*rep = &r->base;
	return 0;
}

int mst_batch_remove(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__BatchRemoveRequest *rq = (const void *)req;
	Lunar__BatchCodesReply *r =
	    codes_reply(rq->n_keys, rq->n_keys > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS : 0);

	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_codes; i++)
		r->codes[i] = mst_code(mst_obj_remove(m, rq->tenant, rq->keys[i], rq->force));
	*rep = &r->base;
	return 0;
}

/* One key of BatchPutRevoke / BatchUpsertRevoke / BatchExistKey. */
static int32_t code_one(struct mst_master *m, uint32_t method, const Lunar__BatchKeysRequest *rq,
			const char *key)
{
	switch (method) {
	case LUNAR__METHOD__BATCH_PUT_REVOKE:
		return mst_obj_put_revoke(m, rq->client_id, rq->tenant, key, rq->late);
	case LUNAR__METHOD__BATCH_UPSERT_REVOKE:
		return mst_obj_upsert_revoke(m, rq->client_id, rq->tenant, key, rq->late);
	default:
		return mst_obj_exist(m, &(struct mst_lessee){rq->client_id, rq->reader}, rq->tenant,
				     key);
	}
}

static int batch_codes(struct mst_master *m, uint32_t method, const Lunar__BatchKeysRequest *rq,
		       ProtobufCMessage **rep)
{
	Lunar__BatchCodesReply *r =
	    codes_reply(rq->n_keys, rq->n_keys > LUNAR_BATCH_MAX ? LUNAR_ERR_INVALID_PARAMS : 0);
	struct mst_prefetch a;

	if (!r)
		return -ENOMEM;
	mst_prefetch_begin(&a, m, rq->tenant, rq->keys, r->n_codes);
	for (size_t i = 0; i < r->n_codes; i++) {
		mst_prefetch_step(&a, i);
		r->codes[i] = mst_code(code_one(m, method, rq, rq->keys[i]));
	}
	*rep = &r->base;
	return 0;
}

static int batch_get(struct mst_master *m, const Lunar__BatchKeysRequest *rq,
		     ProtobufCMessage **rep)
{
	int bad = rq->n_keys > LUNAR_BATCH_MAX || (rq->n_readers && rq->n_readers != rq->n_keys)
		      ? LUNAR_ERR_INVALID_PARAMS
		      : 0;
	Lunar__BatchGetReplicaListReply *r =
	    (void *)lp_reply_new(&lunar__batch_get_replica_list_reply__descriptor, bad, MST_VIEW);
	struct mst_lessee who = {rq->client_id, rq->reader};
	struct mst_prefetch a;

	if (!r)
		return -ENOMEM;
	if (!bad && rq->n_keys) {
		r->results = calloc(rq->n_keys, sizeof(*r->results));
		if (!r->results)
			goto err;
	}
	mst_prefetch_begin(&a, m, rq->tenant, rq->keys, bad ? 0 : rq->n_keys);
	for (size_t i = 0; !bad && i < rq->n_keys; i++) {
		Lunar__GetReplicaListResult *res = malloc(sizeof(*res));

		mst_prefetch_step(&a, i);
		if (!res)
			goto err;
		lunar__get_replica_list_result__init(res);
		r->results[i] = res;
		r->n_results = i + 1;
		who.reader = rq->n_readers ? rq->readers[i] : rq->reader;
		res->code = mst_code(mst_obj_get(m, &who, rq->tenant, rq->keys[i], res));
	}
	r->lease_ttl_ms = m->cfg.kv_lease_ttl_ms;
	*rep = &r->base;
	return 0;
err:
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return -ENOMEM;
}

int mst_batch_keys(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		   ProtobufCMessage **rep)
{
	const Lunar__BatchKeysRequest *rq = (const void *)req;

	if (method == LUNAR__METHOD__BATCH_GET_REPLICA_LIST)
		return batch_get(m, rq, rep);
	return batch_codes(m, method, rq, rep);
}

int mst_batch_lease_release(struct mst_master *m, const ProtobufCMessage *req,
			    ProtobufCMessage **rep)
{
	const Lunar__LeaseReleaseRequest *rq = (const void *)req;
	int bad = rq->n_keys > LUNAR_BATCH_MAX || rq->n_lease_seqs != rq->n_keys ||
			  rq->n_readers != rq->n_keys
		      ? LUNAR_ERR_INVALID_PARAMS
		      : 0;
	Lunar__BatchCodesReply *r = codes_reply(rq->n_keys, bad);

	if (!r)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_codes; i++)
		r->codes[i] = mst_code(
		    mst_obj_lease_release(m, &(struct mst_lessee){rq->client_id, rq->readers[i]},
					  rq->tenant, rq->keys[i], rq->lease_seqs[i]));
	*rep = &r->base;
	return 0;
}

/* Room for n segment secrets in r (each AUTH_KEY_BYTES, index-aligned
 * with the codes); 0 or -ENOMEM (r frees what was made). */
static int remount_secrets(Lunar__ReMountSegmentReply *r, size_t n)
{
	r->segment_secrets = calloc(n, sizeof(*r->segment_secrets));
	if (!r->segment_secrets)
		return -ENOMEM;
	r->n_segment_secrets = n;
	for (size_t i = 0; i < n; i++) {
		r->segment_secrets[i].data = calloc(1, AUTH_KEY_BYTES);
		if (!r->segment_secrets[i].data)
			return -ENOMEM;
		r->segment_secrets[i].len = AUTH_KEY_BYTES;
	}
	return 0;
}

int mst_batch_remount(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage **rep)
{
	const Lunar__ReMountSegmentRequest *rq = (const void *)req;
	int bad = rq->n_segments > MST_SEGMENTS_PER_CLIENT ? LUNAR_ERR_INVALID_PARAMS : 0;
	Lunar__ReMountSegmentReply *r =
	    (void *)lp_reply_new(&lunar__re_mount_segment_reply__descriptor, bad, MST_VIEW);
	size_t n = bad ? 0 : rq->n_segments;
	int rc;

	if (!r)
		return -ENOMEM;
	if (n) {
		r->codes = calloc(n, sizeof(*r->codes));
		r->mounts = calloc(n, sizeof(*r->mounts));
		if (!r->codes || !r->mounts) {
			protobuf_c_message_free_unpacked(&r->base, NULL);
			return -ENOMEM;
		}
		r->n_codes = r->n_mounts = n;
	}
	rc = bad ? 0 : mst_client_touch(m, rq->client_id);
	if (n && m->cfg.keyed && remount_secrets(r, n)) {
		protobuf_c_message_free_unpacked(&r->base, NULL);
		return -ENOMEM;
	}
	for (size_t i = 0; i < r->n_codes; i++) {
		struct auth_key *k =
		    r->n_segment_secrets ? (void *)r->segment_secrets[i].data : NULL;

		r->codes[i] = mst_code(rc < 0 ? rc
					      : mst_segment_mount(m, rq->client_id, rq->segments[i],
								  k, &r->mounts[i]));
		/* A failed mount's entries stay empty. Plain here: the RPC layer
		 * seals the secrets for the session on the wire. */
		if (k && r->codes[i])
			r->segment_secrets[i].len = 0;
	}
	if (m->cfg.keyed)
		r->clock_ms = mst_cap_clock_ms();
	*rep = &r->base;
	return 0;
}
