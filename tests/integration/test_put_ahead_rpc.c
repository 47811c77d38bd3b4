/*
 * test_put_ahead_rpc.c - Reserve, BatchPutCommit and ReserveRelease as
 * untrusted input, spoken to a real lunar-master over its keyed RPC by two
 * sessions of our own (X and Y), beside a real owner proxy O: a commit
 * claiming space it was not granted (another id, another client's
 * reservation, a range outside or across what is left, unaligned, wrapping,
 * already committed) is refused with ILLEGAL_CLIENT and changes nothing; a
 * fuzzed stream of commits never overlaps two objects, never places one
 * outside the reservation, and leaves the accounting exact.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"
#include "case_util.h"
#include "harness.h"
#include "lunar.h"
#include "rpc.h"
#include "rpc_client.h"
#include "tests/cmocka_main.h"

#define RESERVED "lunar_master_reserved_bytes"
#define SEG_USED "lunar_master_segment_used_bytes"
#define ALIGN	 64u
#define X_ID	 0x7e57000000000001ull
#define Y_ID	 0x7e57000000000002ull

static int mport, mhttp;
static char url[64], sock_o[PATH_MAX], seg_o[H_SEG_NAME];
static struct lp_client *x, *y;

static struct lp_client *session(uint64_t id)
{
	Lunar__PingRequest pg = LUNAR__PING_REQUEST__INIT;
	struct lp_client *c = NULL;
	ProtobufCMessage *rep;
	struct auth_key key;
	char hp[16];

	H_ASSERT_EQ(auth_key_load(h_cluster_key(), &key, hp, sizeof(hp)), 0);
	H_ASSERT_EQ(lp_client_create(url, &key, AUTH_ROLE_NODE, LP_CLIENT_DIAL_NOW, &c), 0);
	auth_key_wipe(&key);
	pg.client_id = id; /* binds the id to this session, and makes it alive */
	H_ASSERT_EQ(lp_client_call(c, lp_method_find(LUNAR__METHOD__PING), &pg.base, &rep, 5000),
		    0);
	H_ASSERT_EQ(lp_status(rep)->code, 0);
	protobuf_c_message_free_unpacked(rep, NULL);
	return c;
}

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	mport = h_free_port();
	if (!track(h_start_master("master", mport, "--reserve-ttl", "60s", NULL)))
		return -1;
	mhttp = http_port_of(tracked[0]);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", mport);
	h_named_sock(sock_o, "o");
	if (!track(h_start_peer("proxyO", sock_o, mport, seg_o, "--segment-size", "64MiB",
				"--reserve-size", "0", NULL)))
		return -1;
	x = session(X_ID);
	y = session(Y_ID);
	return 0;
}

static int teardown(void **state)
{
	lp_client_destroy(x);
	lp_client_destroy(y);
	x = y = NULL;
	return case_teardown(state);
}

/* One call; the reply (caller frees), failing the test on no reply. */
static ProtobufCMessage *call(struct lp_client *c, uint32_t method, const ProtobufCMessage *req)
{
	ProtobufCMessage *rep = NULL;

	H_ASSERT_EQ(lp_client_call(c, lp_method_find(method), req, &rep, 5000), 0);
	return rep;
}

/* A reservation of size for id through c: its code, *out the grant. */
static int reserve(struct lp_client *c, uint64_t id, uint64_t size, Lunar__ReserveReply **out)
{
	Lunar__ReserveRequest rq = LUNAR__RESERVE_REQUEST__INIT;
	ProtobufCMessage *rep;
	int rc;

	rq.client_id = id;
	rq.size = size;
	rep = call(c, LUNAR__METHOD__RESERVE, &rq.base);
	rc = lp_status(rep)->code;
	if (!rc && out)
		*out = (Lunar__ReserveReply *)rep;
	else
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* Commit n items as id through c; the call's code, and per item codes in
 * codes[] (and the reply in *out when asked for). */
static int commit(struct lp_client *c, uint64_t id, Lunar__PutCommitItem **items, size_t n,
		  int *codes, Lunar__BatchPutStartReply **out)
{
	Lunar__BatchPutCommitRequest rq = LUNAR__BATCH_PUT_COMMIT_REQUEST__INIT;
	const Lunar__BatchPutStartReply *r;
	ProtobufCMessage *rep;
	int rc;

	rq.client_id = id;
	rq.items = items;
	rq.n_items = n;
	rep = call(c, LUNAR__METHOD__BATCH_PUT_COMMIT, &rq.base);
	r = (const Lunar__BatchPutStartReply *)rep;
	rc = lp_status(rep)->code;
	if (!rc) {
		H_ASSERT_EQ(r->n_results, n);
		for (size_t i = 0; i < n; i++)
			codes[i] = r->results[i]->code;
	}
	if (out && !rc)
		*out = (Lunar__BatchPutStartReply *)rep;
	else
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* One item's code. */
static int commit1(struct lp_client *c, uint64_t id, const char *key, uint64_t resv, uint64_t off,
		   uint64_t size)
{
	Lunar__PutCommitItem it = LUNAR__PUT_COMMIT_ITEM__INIT, *p = &it;
	int code = 0, rc;

	it.key = (char *)key;
	it.reservation = resv;
	it.offset = off;
	it.size = size;
	rc = commit(c, id, &p, 1, &code, NULL);
	return rc ? rc : code;
}

static int release(struct lp_client *c, uint64_t id, uint64_t resv)
{
	Lunar__ReserveReleaseRequest rq = LUNAR__RESERVE_RELEASE_REQUEST__INIT;
	const Lunar__BatchCodesReply *r;
	ProtobufCMessage *rep;
	int rc;

	rq.client_id = id;
	rq.ids = &resv;
	rq.n_ids = 1;
	rep = call(c, LUNAR__METHOD__RESERVE_RELEASE, &rq.base);
	r = (const Lunar__BatchCodesReply *)rep;
	rc = lp_status(rep)->code ? lp_status(rep)->code : r->n_codes == 1 ? r->codes[0] : -1;
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

static int64_t seg_used(void)
{
	char sample[128];

	snprintf(sample, sizeof(sample), SEG_USED "{segment=\"%s\"}", seg_o);
	return metric(mhttp, sample);
}

static uint64_t up(uint64_t v)
{
	return (v + ALIGN - 1) / ALIGN * ALIGN;
}

static void test_put_ahead_rpc_claims_refused(void **state)
{
	Lunar__PutCommitItem *many[LUNAR_BATCH_MAX + 1], one = LUNAR__PUT_COMMIT_ITEM__INIT;
	Lunar__BatchPutStartReply *ok = NULL;
	Lunar__ReserveReply *g = NULL, *more[4];
	uint64_t id, off, len, used0 = (uint64_t)seg_used();
	int codes[LUNAR_BATCH_MAX + 1], n = 0;
	const Lunar__Replica *e;

	(void)state;
	H_ASSERT_EQ(reserve(x, X_ID, 0, NULL), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(reserve(x, Y_ID, 1 << 20, NULL), LUNAR_ERR_UNAUTHORIZED); /* not its id */
	H_ASSERT_EQ(reserve(x, X_ID, 1 << 20, &g), 0);
	e = g->reservation->extent;
	id = g->reservation->id;
	off = e->offset;
	len = e->length;
	H_ASSERT(!strcmp(e->segment, seg_o));
	H_ASSERT(len > 0 && len <= (1 << 20));
	H_ASSERT_EQ(g->reservation->align, ALIGN);
	H_ASSERT_EQ(e->cap.len, AUTH_CAP_BYTES); /* keyed: a WRITE capability over it */
	H_ASSERT_EQ(metric(mhttp, RESERVED), up(len));

	/* Space not granted to X, one way or another. */
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id + 12345, off, 100), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, off + up(len), 100), LUNAR_ERR_ILLEGAL_CLIENT);
	if (off >= ALIGN)
		H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, off - ALIGN, 100),
			    LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, off + 1, 100), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, off, up(len) + 1), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, off + up(len) - ALIGN, UINT64_MAX - 10),
		    LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, UINT64_MAX - 63, 128), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(y, Y_ID, "rpc/a", id, off, 100), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(y, X_ID, "rpc/a", id, off, 100), LUNAR_ERR_UNAUTHORIZED);
	/* Bad values, as for a PutStart. */
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/a", id, off, 0), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(commit1(x, X_ID, "", id, off, 100), LUNAR_ERR_INVALID_KEY);
	one.key = "rpc/many";
	one.reservation = id;
	one.offset = off;
	one.size = 100;
	for (size_t i = 0; i <= LUNAR_BATCH_MAX; i++)
		many[i] = &one;
	H_ASSERT_EQ(commit(x, X_ID, many, LUNAR_BATCH_MAX + 1, codes, NULL),
		    LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(metric(mhttp, RESERVED), up(len)); /* nothing taken */
	H_ASSERT_EQ((uint64_t)seg_used(), used0);

	/* What X was granted it may commit, once. */
	one.key = "rpc/ok";
	many[0] = &one;
	H_ASSERT_EQ(commit(x, X_ID, many, 1, codes, &ok), 0);
	H_ASSERT_EQ(codes[0], 0);
	H_ASSERT_EQ(ok->results[0]->n_replicas, 1);
	H_ASSERT_EQ(ok->results[0]->replicas[0]->offset, off);
	H_ASSERT_EQ(ok->results[0]->replicas[0]->length, 100);
	H_ASSERT_EQ(ok->results[0]->replicas[0]->state, LUNAR__REPLICA_STATE__COMPLETE);
	H_ASSERT(ok->results[0]->replicas[0]->version > 0);
	protobuf_c_message_free_unpacked(&ok->base, NULL);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/again", id, off, 100), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/ok", id, off + 128, 100),
		    LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/ok2", id, off + 128, 100), 0); /* that piece is left */
	H_ASSERT_EQ(metric(mhttp, RESERVED), up(len) - 256);
	H_ASSERT_EQ((uint64_t)seg_used(), used0 + 256);

	/* At most four at once. */
	for (n = 0; n < 4; n++)
		if (reserve(x, X_ID, 1 << 20, &more[n]))
			break;
	H_ASSERT_EQ(n, 3);
	H_ASSERT_EQ(reserve(x, X_ID, 1 << 20, NULL), LUNAR_ERR_BUSY);
	for (int i = 0; i < n; i++) {
		H_ASSERT_EQ(release(x, X_ID, more[i]->reservation->id), 0);
		protobuf_c_message_free_unpacked(&more[i]->base, NULL);
	}

	/* Released only by its holder; then gone. */
	H_ASSERT_EQ(release(y, Y_ID, id), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(release(x, X_ID, id), 0);
	H_ASSERT_EQ(release(x, X_ID, id), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(commit1(x, X_ID, "rpc/late", id, off + 256, 100), LUNAR_ERR_ILLEGAL_CLIENT);
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
	H_ASSERT_EQ((uint64_t)seg_used(), used0 + 256);
	protobuf_c_message_free_unpacked(&g->base, NULL);
}

/* A cheap deterministic generator. */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* An offset near the reservation's edges, or anywhere. */
static uint64_t fuzz_off(uint64_t *s, uint64_t off, uint64_t len)
{
	switch (rnd(s) % 6) {
	case 0: return off + rnd(s) % (len + 256);
	case 1: return off + (rnd(s) % (len / ALIGN + 2)) * ALIGN;
	case 2: return off + (rnd(s) % (len / ALIGN + 2)) * ALIGN;
	case 3: return off - (rnd(s) % 4) * ALIGN;
	case 4: return UINT64_MAX - rnd(s) % 4096;
	default: return rnd(s);
	}
}

static uint64_t fuzz_size(uint64_t *s, uint64_t len)
{
	switch (rnd(s) % 5) {
	case 0: return 0;
	case 1: return UINT64_MAX - rnd(s) % 128;
	case 2: return rnd(s) % (len + ALIGN);
	default: return 1 + rnd(s) % 4096;
	}
}

struct piece {
	uint64_t off, len;
};

/* Thousands of random commits: every code one a commit may give, every
 * object inside the reservation and apart from every other, and the space
 * accounted to the byte once the reservation is released. */
static void test_put_ahead_rpc_fuzz(void **state)
{
	static struct piece got[4096];
	Lunar__PutCommitItem items[8], *ptrs[8];
	Lunar__BatchPutStartReply *rep = NULL;
	Lunar__ReserveReply *g = NULL;
	uint64_t s = 0x9e3779b97f4a7c15ull, id, off, len, sum = 0;
	uint64_t used0 = (uint64_t)seg_used();
	char keys[8][48];
	int codes[8], ngot = 0;

	(void)state;
	H_ASSERT_EQ(reserve(x, X_ID, 1 << 20, &g), 0);
	id = g->reservation->id;
	off = g->reservation->extent->offset;
	len = g->reservation->extent->length;
	for (int round = 0; round < 500; round++) {
		size_t n = 1 + rnd(&s) % 8;

		for (size_t i = 0; i < n; i++) {
			lunar__put_commit_item__init(&items[i]);
			snprintf(keys[i], sizeof(keys[i]), "fuzz/%llu",
				 (unsigned long long)(rnd(&s) % 3000));
			if (rnd(&s) % 50 == 0)
				keys[i][0] = '\0';
			items[i].key = keys[i];
			items[i].reservation = rnd(&s) % 10 ? id : rnd(&s);
			items[i].offset = fuzz_off(&s, off, len);
			items[i].size = fuzz_size(&s, len);
			items[i].crc32c = (uint32_t)rnd(&s);
			ptrs[i] = &items[i];
		}
		rep = NULL;
		H_ASSERT_EQ(commit(x, X_ID, ptrs, n, codes, &rep), 0);
		for (size_t i = 0; i < n; i++) {
			const Lunar__Replica *p;

			H_ASSERT_MSG(codes[i] == 0 || codes[i] == LUNAR_ERR_ILLEGAL_CLIENT ||
					 codes[i] == LUNAR_ERR_OBJECT_ALREADY_EXISTS ||
					 codes[i] == LUNAR_ERR_INVALID_PARAMS ||
					 codes[i] == LUNAR_ERR_INVALID_KEY,
				     "commit code %d", codes[i]);
			if (codes[i])
				continue;
			H_ASSERT_EQ(rep->results[i]->n_replicas, 1);
			p = rep->results[i]->replicas[0];
			H_ASSERT(p->offset >= off && p->offset - off < len);
			H_ASSERT(up(p->length) <= up(len) - (p->offset - off));
			for (int j = 0; j < ngot; j++)
				H_ASSERT_MSG(p->offset + up(p->length) <= got[j].off ||
						 got[j].off + got[j].len <= p->offset,
					     "two objects share [%llu, +%llu)",
					     (unsigned long long)p->offset,
					     (unsigned long long)p->length);
			H_ASSERT(ngot < 4096);
			got[ngot++] = (struct piece){p->offset, up(p->length)};
			sum += up(p->length);
		}
		protobuf_c_message_free_unpacked(&rep->base, NULL);
	}
	H_ASSERT(ngot > 0);
	H_ASSERT_EQ(metric(mhttp, RESERVED), up(len) - sum);
	H_ASSERT_EQ(release(x, X_ID, id), 0);
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
	H_ASSERT_EQ((uint64_t)seg_used(), used0 + sum);
	protobuf_c_message_free_unpacked(&g->base, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_put_ahead_rpc_claims_refused, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_put_ahead_rpc_fuzz, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
