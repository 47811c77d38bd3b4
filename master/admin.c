/*
 * admin.c - the admin queries (lunarctl, HTTP): ListKeys, ListSegments,
 * ListClients, StatKey. Each fills its reply from a snapshot taken shard by
 * shard or under the table's lock; none blocks the object calls for long.
 */
#include <errno.h>

#include "lunar.h"
#include "mst_int.h"
#include "rpc.h"

/* A reply of descriptor d; fill runs when it is allocated. On a code from
 * fill the reply carries that code and whatever fill already added. */
static int reply(const ProtobufCMessageDescriptor *d, ProtobufCMessage **rep,
		 int (*fill)(struct mst_master *m, const ProtobufCMessage *req,
			     ProtobufCMessage *r),
		 struct mst_master *m, const ProtobufCMessage *req)
{
	ProtobufCMessage *r = lp_reply_new(d, 0, MST_VIEW);
	int rc;

	if (!r)
		return -ENOMEM;
	rc = fill(m, req, r);
	if (rc == -ENOMEM) {
		protobuf_c_message_free_unpacked(r, NULL);
		return -ENOMEM;
	}
	if (rc) {
		ProtobufCMessage *e = lp_reply_new(d, mst_code(rc), MST_VIEW);

		protobuf_c_message_free_unpacked(r, NULL);
		if (!e)
			return -ENOMEM;
		r = e;
	}
	*rep = r;
	return 0;
}

static int fill_keys(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage *r)
{
	return mst_obj_list(m, (const void *)req, (void *)r);
}

static int fill_segments(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage *r)
{
	return mst_segments_list(m, (void *)r);
}

static int fill_clients(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage *r)
{
	return mst_clients_list(m, (void *)r);
}

static int fill_stat(struct mst_master *m, const ProtobufCMessage *req, ProtobufCMessage *r)
{
	const Lunar__StatKeyRequest *rq = (const void *)req;

	return mst_obj_stat(m, rq->tenant, rq->key, (void *)r);
}

int mst_admin_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		       ProtobufCMessage **rep)
{
	switch (method) {
	case LUNAR__METHOD__LIST_KEYS:
		return reply(&lunar__list_keys_reply__descriptor, rep, fill_keys, m, req);
	case LUNAR__METHOD__LIST_SEGMENTS:
		return reply(&lunar__list_segments_reply__descriptor, rep, fill_segments, m, req);
	case LUNAR__METHOD__LIST_CLIENTS:
		return reply(&lunar__list_clients_reply__descriptor, rep, fill_clients, m, req);
	case LUNAR__METHOD__STAT_KEY:
		return reply(&lunar__stat_key_reply__descriptor, rep, fill_stat, m, req);
	default: return LUNAR_ERR_PROTOCOL;
	}
}
