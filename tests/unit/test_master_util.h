/*
 * test_master_util.h - helpers shared by the test_master*.c binaries: a
 * master from flags, and one call per control-plane verb through
 * mst_dispatch, as lunar-proxy --embedded-master makes them.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_MASTER_UTIL_H
#define LUNAR_TESTS_UNIT_TEST_MASTER_UTIL_H

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "lunar.h"
#include "master/master.h"
#include "rpc.h"

#define MIB	 (1ull << 20)
#define CLIENT_A 0xa1
#define CLIENT_B 0xb2

static inline struct mst_master *master_new(const char *flag, const char *val)
{
	struct mst_config cfg;
	struct mst_master *m;

	mst_config_defaults(&cfg);
	if (flag)
		assert_int_equal(mst_config_set(&cfg, flag, val), 0);
	assert_int_equal(mst_master_create(&cfg, &m), 0);
	return m;
}

/* Dispatch and return the reply; the caller frees it. */
/* A master with n flags {name, value}. */
static inline struct mst_master *master_with(const char *const flags[][2], size_t n)
{
	struct mst_config cfg;
	struct mst_master *m;

	mst_config_defaults(&cfg);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(mst_config_set(&cfg, flags[i][0], flags[i][1]), 0);
	assert_int_equal(mst_master_create(&cfg, &m), 0);
	return m;
}

/* Dispatch and return the reply; the caller frees it. */
static inline ProtobufCMessage *call(struct mst_master *m, uint32_t method, const void *req)
{
	ProtobufCMessage *rep = NULL;

	assert_int_equal(mst_dispatch(m, method, req, &rep), 0);
	assert_non_null(rep);
	assert_non_null(lp_status(rep));
	return rep;
}

/* Dispatch, free the reply, return its status code. */
static inline int call_code(struct mst_master *m, uint32_t method, const void *req)
{
	ProtobufCMessage *rep = call(m, method, req);
	int code = lp_status(rep)->code;

	protobuf_c_message_free_unpacked(rep, NULL);
	return code;
}

static inline int mount(struct mst_master *m, uint64_t client, const char *name, uint64_t size)
{
	Lunar__MountSegmentRequest rq = LUNAR__MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc d = LUNAR__SEGMENT_DESC__INIT;

	d.name = (char *)name;
	d.endpoint = "127.0.0.1:12345";
	d.size = size;
	rq.client_id = client;
	rq.segment = &d;
	return call_code(m, LUNAR__METHOD__MOUNT_SEGMENT, &rq);
}

/* Reserve size bytes for client: the reply's code, and its view into
 * *view (NULL: not wanted). */
static inline int reserve_code(struct mst_master *m, uint64_t client, uint64_t size, uint64_t *view)
{
	Lunar__ReserveRequest rq = LUNAR__RESERVE_REQUEST__INIT;
	Lunar__ReserveReply *r;
	int code;

	rq.client_id = client;
	rq.size = size;
	r = (Lunar__ReserveReply *)call(m, LUNAR__METHOD__RESERVE, &rq);
	code = r->status->code;
	if (view)
		*view = r->status->view;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

/* PutStart; returns the reply (caller frees). */
static inline Lunar__PutStartReply *put_start_pref(struct mst_master *m, uint64_t client,
						   const char *key, uint64_t size,
						   unsigned replicas, const char *pref)
{
	Lunar__PutStartRequest rq = LUNAR__PUT_START_REQUEST__INIT;
	char *prefs[1] = {(char *)pref};

	rq.client_id = client;
	rq.key = (char *)key;
	rq.size = size;
	rq.replica_num = replicas;
	if (pref) {
		rq.preferred_segments = prefs;
		rq.n_preferred_segments = 1;
	}
	return (Lunar__PutStartReply *)call(m, LUNAR__METHOD__PUT_START, &rq);
}

static inline int put_start(struct mst_master *m, uint64_t client, const char *key, uint64_t size,
			    unsigned replicas)
{
	Lunar__PutStartReply *r = put_start_pref(m, client, key, size, replicas, NULL);
	int code = r->status->code;

	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

static inline int put_finish(struct mst_master *m, uint64_t client, const char *key, int commit)
{
	Lunar__PutEndRequest rq = LUNAR__PUT_END_REQUEST__INIT;
	Lunar__PutRevokeRequest rv = LUNAR__PUT_REVOKE_REQUEST__INIT;

	rq.client_id = rv.client_id = client;
	rq.key = rv.key = (char *)key;
	if (commit)
		return call_code(m, LUNAR__METHOD__PUT_END, &rq);
	return call_code(m, LUNAR__METHOD__PUT_REVOKE, &rv);
}

static inline int put(struct mst_master *m, uint64_t client, const char *key, uint64_t size,
		      unsigned replicas)
{
	int code = put_start(m, client, key, size, replicas);

	return code ? code : put_finish(m, client, key, 1);
}

/* ExistKey: 1, 0 or the status code. */
static inline int exist(struct mst_master *m, const char *tenant, const char *key)
{
	Lunar__ExistKeyRequest rq = LUNAR__EXIST_KEY_REQUEST__INIT;
	Lunar__ExistKeyReply *r;
	int code;

	rq.tenant = (char *)tenant;
	rq.key = (char *)key;
	r = (Lunar__ExistKeyReply *)call(m, LUNAR__METHOD__EXIST_KEY, &rq);
	code = r->status->code ? r->status->code : r->exists;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

static inline Lunar__GetReplicaListReply *get(struct mst_master *m, const char *key)
{
	Lunar__GetReplicaListRequest rq = LUNAR__GET_REPLICA_LIST_REQUEST__INIT;

	rq.key = (char *)key;
	return (Lunar__GetReplicaListReply *)call(m, LUNAR__METHOD__GET_REPLICA_LIST, &rq);
}

static inline int get_code(struct mst_master *m, const char *key)
{
	Lunar__GetReplicaListReply *r = get(m, key);
	int code = r->status->code;

	protobuf_c_message_free_unpacked(&r->base, NULL);
	return code;
}

/* BatchGetReplicaList of one key by client (for reader; 0: itself): the
 * reply, which holds exactly one result. */
static inline Lunar__BatchGetReplicaListReply *batch_get_one(struct mst_master *m, uint64_t client,
							     uint64_t reader, const char *key)
{
	Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
	Lunar__BatchGetReplicaListReply *r;
	char *k = (char *)key;

	rq.client_id = client;
	rq.reader = reader;
	rq.keys = &k;
	rq.n_keys = 1;
	r = (Lunar__BatchGetReplicaListReply *)call(m, LUNAR__METHOD__BATCH_GET_REPLICA_LIST, &rq);
	assert_int_equal(r->n_results, 1);
	return r;
}

static inline int remove_key(struct mst_master *m, const char *key, int force)
{
	Lunar__RemoveRequest rq = LUNAR__REMOVE_REQUEST__INIT;

	rq.key = (char *)key;
	rq.force = force;
	return call_code(m, LUNAR__METHOD__REMOVE, &rq);
}

static inline int64_t remove_all(struct mst_master *m, const char *tenant, int force)
{
	Lunar__RemoveAllRequest rq = LUNAR__REMOVE_ALL_REQUEST__INIT;
	Lunar__RemoveAllReply *r;
	int64_t n;

	rq.tenant = (char *)tenant;
	rq.force = force;
	r = (Lunar__RemoveAllReply *)call(m, LUNAR__METHOD__REMOVE_ALL, &rq);
	assert_int_equal(r->status->code, 0);
	n = r->count;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return n;
}

/* Ping: need_remount. */
static inline int ping(struct mst_master *m, uint64_t client)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	Lunar__PingReply *r;
	int need;

	rq.client_id = client;
	r = (Lunar__PingReply *)call(m, LUNAR__METHOD__PING, &rq);
	assert_int_equal(r->status->code, 0);
	need = r->need_remount;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return need;
}

#endif /* LUNAR_TESTS_UNIT_TEST_MASTER_UTIL_H */
