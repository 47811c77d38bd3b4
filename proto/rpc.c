/*
 * rpc.c - method table, request framing and reply helpers; see rpc.h.
 */
#include "rpc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lunar.h"

#define M(id, name, rq, rp)                                                                        \
	{                                                                                          \
		LUNAR__METHOD__##id, name, &lunar__##rq##__descriptor, &lunar__##rp##__descriptor  \
	}

static const struct lp_method methods[] = {
    M(MOUNT_SEGMENT, "MountSegment", mount_segment_request, mount_segment_reply),
    M(UNMOUNT_SEGMENT, "UnmountSegment", unmount_segment_request, unmount_segment_reply),
    M(REMOUNT_SEGMENT, "ReMountSegment", re_mount_segment_request, re_mount_segment_reply),
    M(PING, "Ping", ping_request, ping_reply),
    M(PUT_START, "PutStart", put_start_request, put_start_reply),
    M(PUT_END, "PutEnd", put_end_request, put_end_reply),
    M(PUT_REVOKE, "PutRevoke", put_revoke_request, put_revoke_reply),
    M(GET_REPLICA_LIST, "GetReplicaList", get_replica_list_request, get_replica_list_reply),
    M(EXIST_KEY, "ExistKey", exist_key_request, exist_key_reply),
    M(REMOVE, "Remove", remove_request, remove_reply),
    M(REMOVE_ALL, "RemoveAll", remove_all_request, remove_all_reply),
    M(BATCH_PUT_START, "BatchPutStart", batch_put_start_request, batch_put_start_reply),
    M(BATCH_PUT_END, "BatchPutEnd", batch_put_end_request, batch_codes_reply),
    M(BATCH_GET_REPLICA_LIST, "BatchGetReplicaList", batch_keys_request,
      batch_get_replica_list_reply),
    M(BATCH_EXIST_KEY, "BatchExistKey", batch_keys_request, batch_codes_reply),
    M(BATCH_PUT_REVOKE, "BatchPutRevoke", batch_keys_request, batch_codes_reply),
    M(UPSERT_START, "UpsertStart", put_start_request, put_start_reply),
    M(UPSERT_END, "UpsertEnd", put_end_request, put_end_reply),
    M(UPSERT_REVOKE, "UpsertRevoke", put_revoke_request, put_revoke_reply),
    M(BATCH_UPSERT_START, "BatchUpsertStart", batch_put_start_request, batch_put_start_reply),
    M(BATCH_UPSERT_END, "BatchUpsertEnd", batch_put_end_request, batch_codes_reply),
    M(BATCH_UPSERT_REVOKE, "BatchUpsertRevoke", batch_keys_request, batch_codes_reply),
    M(REMOVE_BY_REGEX, "RemoveByRegex", remove_by_regex_request, remove_all_reply),
    M(BATCH_REMOVE, "BatchRemove", batch_remove_request, batch_codes_reply),
    M(LIST_KEYS, "ListKeys", list_keys_request, list_keys_reply),
    M(LIST_SEGMENTS, "ListSegments", list_segments_request, list_segments_reply),
    M(LIST_CLIENTS, "ListClients", list_clients_request, list_clients_reply),
    M(STAT_KEY, "StatKey", stat_key_request, stat_key_reply),
    M(OFFLOAD_DONE, "OffloadDone", disk_records_request, batch_codes_reply),
    M(DISK_REPLICAS_REMOVE, "DiskReplicasRemove", disk_records_request, batch_codes_reply),
    M(DISK_REPLICAS_ADD, "DiskReplicasAdd", disk_records_request, batch_codes_reply),
    M(BATCH_LEASE_RELEASE, "BatchLeaseRelease", lease_release_request, batch_codes_reply),
    M(REPORT_OBJECTS, "ReportObjects", report_objects_request, report_objects_reply),
    M(RESERVE, "Reserve", reserve_request, reserve_reply),
    M(RESERVE_RELEASE, "ReserveRelease", reserve_release_request, batch_codes_reply),
    M(BATCH_PUT_COMMIT, "BatchPutCommit", batch_put_commit_request, batch_put_start_reply),
    M(BATCH_PUT_UNCOMMIT, "BatchPutUncommit", batch_put_commit_request, batch_codes_reply),
    M(LANDED, "Landed", landed_request, status_reply),
};

const struct lp_method *lp_method_find(uint32_t id)
{
	for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
		if (methods[i].id == id)
			return &methods[i];
	return NULL;
}

static void put_le32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int lp_request_pack(uint32_t method, const ProtobufCMessage *req, void **buf, size_t *len)
{
	size_t n = protobuf_c_message_get_packed_size(req);
	uint8_t *b;

	if (n > LP_MAX_MSG - LP_HDR_SIZE)
		return -EMSGSIZE;
	b = malloc(LP_HDR_SIZE + n);
	if (!b)
		return -ENOMEM;
	put_le32(b, LP_REQ_MAGIC);
	put_le32(b + 4, method);
	protobuf_c_message_pack(req, b + LP_HDR_SIZE);
	*buf = b;
	*len = LP_HDR_SIZE + n;
	return 0;
}

/*
 * Unpacking may cost many times the bytes received: an empty string of a
 * repeated field is two bytes packed, a pointer and an allocation unpacked.
 * A message may take this much memory, each allocation counted with its
 * overhead. The largest request a proxy sends (1024 puts with 4 KiB keys and
 * their preferred segments) unpacks into less than a fifth of the request
 * budget; the largest reply (replica lists of 1024 keys, 64 replicas each,
 * with 255-byte names) into about a third of the reply budget.
 */
#define LP_REQUEST_BUDGET (32u << 20)
#define LP_REPLY_BUDGET	  (128u << 20)
#define LP_ALLOC_COST	  16 /* what malloc spends on an allocation beyond its size */

static void *budget_alloc(void *data, size_t size)
{
	size_t *left = data, cost = size + LP_ALLOC_COST;

	if (cost > *left)
		return NULL; /* the unpack fails and frees what it took */
	*left -= cost;
	return malloc(size);
}

static void budget_free(void *data, void *p)
{
	(void)data;
	free(p);
}

/* Unpack within budget bytes; free the result with the default allocator
 * (both are malloc and free). NULL if undecodable or over budget. */
static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *d, size_t budget,
				const uint8_t *buf, size_t len)
{
	ProtobufCAllocator a = {budget_alloc, budget_free, &budget};

	return protobuf_c_message_unpack(d, &a, len, buf);
}

ProtobufCMessage *lp_reply_unpack(const struct lp_method *mt, const void *buf, size_t len)
{
	return len > LP_MAX_MSG ? NULL : unpack(mt->rep, LP_REPLY_BUDGET, buf, len);
}

int lp_request_unpack(const void *buf, size_t len, const struct lp_method **m,
		      ProtobufCMessage **req)
{
	const uint8_t *b = buf;
	const struct lp_method *mt;
	ProtobufCMessage *msg;

	if (len < LP_HDR_SIZE || len > LP_MAX_MSG || get_le32(b) != LP_REQ_MAGIC)
		return LUNAR_ERR_PROTOCOL;
	mt = lp_method_find(get_le32(b + 4));
	if (!mt)
		return -ENOSYS;
	msg = unpack(mt->req, LP_REQUEST_BUDGET, b + LP_HDR_SIZE, len - LP_HDR_SIZE);
	if (!msg)
		return LUNAR_ERR_PROTOCOL;
	*m = mt;
	*req = msg;
	return 0;
}

Lunar__Status *lp_status(const ProtobufCMessage *rep)
{
	const ProtobufCFieldDescriptor *f =
	    protobuf_c_message_descriptor_get_field(rep->descriptor, 1);

	if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE || f->descriptor != &lunar__status__descriptor)
		return NULL;
	return *(Lunar__Status **)((char *)rep + f->offset);
}

ProtobufCMessage *lp_reply_new(const ProtobufCMessageDescriptor *d, int code, uint64_t view)
{
	const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, 1);
	ProtobufCMessage *rep = calloc(1, d->sizeof_message);
	Lunar__Status *st = malloc(sizeof(*st));

	if (!rep || !st || !f)
		goto err;
	d->message_init(rep);
	lunar__status__init(st);
	st->code = code;
	st->view = view;
	st->message = strdup(lunar_strerror(code));
	if (!st->message)
		goto err;
	*(Lunar__Status **)((char *)rep + f->offset) = st;
	return rep;
err:
	free(st);
	free(rep);
	return NULL;
}
