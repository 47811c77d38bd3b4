/*
 * test_master_rpc.c - the master served over nng: real REQ sockets on
 * loopback send packed requests and read packed replies; garbage does not
 * stop the server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "lunar.h"
#include "master/master.h"
#include "master/rpc_server.h"
#include "rpc.h"

struct fixture {
	struct mst_master *m;
	struct mst_server *s;
	nng_socket req;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct mst_config cfg;
	char url[64];

	assert_non_null(f);
	mst_config_defaults(&cfg);
	assert_int_equal(mst_master_create(&cfg, &f->m), 0);
	assert_int_equal(mst_server_start(f->m, "tcp://127.0.0.1:0", 4, NULL, &f->s), 0);
	assert_true(mst_server_port(f->s) > 0);
	assert_int_equal(nng_req0_open(&f->req), 0);
	/* no resend: a retry must never run a call twice */
	assert_int_equal(nng_socket_set_ms(f->req, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE),
			 0);
	assert_int_equal(nng_socket_set_ms(f->req, NNG_OPT_RECVTIMEO, 2000), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)mst_server_port(f->s));
	assert_int_equal(nng_dial(f->req, url, NULL, 0), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	nng_close(f->req);
	mst_server_stop(f->s);
	mst_master_destroy(f->m);
	free(f);
	return 0;
}

/* Send one request, return the unpacked reply of the method's type. */
static ProtobufCMessage *rpc(struct fixture *f, uint32_t method, const void *req)
{
	void *buf, *in = NULL;
	size_t len, inlen = 0;
	ProtobufCMessage *rep;

	assert_int_equal(lp_request_pack(method, req, &buf, &len), 0);
	assert_int_equal(nng_send(f->req, buf, len, 0), 0);
	free(buf);
	assert_int_equal(nng_recv(f->req, &in, &inlen, NNG_FLAG_ALLOC), 0);
	rep = protobuf_c_message_unpack(lp_method_find(method)->rep, NULL, inlen, in);
	nng_free(in, inlen);
	assert_non_null(rep);
	assert_non_null(lp_status(rep));
	return rep;
}

static int ping(struct fixture *f, uint64_t client)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	Lunar__PingReply *r;
	int need;

	rq.client_id = client;
	r = (Lunar__PingReply *)rpc(f, LUNAR__METHOD__PING, &rq);
	assert_int_equal(r->status->code, 0);
	need = r->need_remount;
	protobuf_c_message_free_unpacked(&r->base, NULL);
	return need;
}

static void test_master_rpc_ping_and_put(void **state)
{
	/* Given: a served master and a mounted segment */
	struct fixture *f = *state;
	Lunar__MountSegmentRequest mq = LUNAR__MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc d = LUNAR__SEGMENT_DESC__INIT;
	Lunar__PutStartRequest pq = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PutStartReply *pr;
	ProtobufCMessage *rep;

	/* When/Then: an unknown client's ping asks for a remount */
	assert_int_equal(ping(f, 7), 1);
	assert_int_equal(ping(f, 7), 0);
	d.name = "seg";
	d.endpoint = "127.0.0.1:1";
	d.size = 1 << 20;
	mq.client_id = 7;
	mq.segment = &d;
	rep = rpc(f, LUNAR__METHOD__MOUNT_SEGMENT, &mq);
	assert_int_equal(lp_status(rep)->code, 0);
	protobuf_c_message_free_unpacked(rep, NULL);
	/* When: a put starts; Then: the reply carries the placed replica */
	pq.client_id = 7;
	pq.key = "key";
	pq.size = 4096;
	pr = (Lunar__PutStartReply *)rpc(f, LUNAR__METHOD__PUT_START, &pq);
	assert_int_equal(pr->status->code, 0);
	assert_string_equal(pr->status->message, "OK");
	assert_int_equal(pr->n_replicas, 1);
	assert_string_equal(pr->replicas[0]->segment, "seg");
	assert_string_equal(pr->replicas[0]->endpoint, "127.0.0.1:1");
	assert_int_equal(pr->replicas[0]->length, 4096);
	protobuf_c_message_free_unpacked(&pr->base, NULL);
	/* and a second start of the key is refused with its code and name */
	pr = (Lunar__PutStartReply *)rpc(f, LUNAR__METHOD__PUT_START, &pq);
	assert_int_equal(pr->status->code, LUNAR_ERR_OBJECT_ALREADY_EXISTS);
	assert_string_equal(pr->status->message, "OBJECT_ALREADY_EXISTS");
	protobuf_c_message_free_unpacked(&pr->base, NULL);
}

static void test_master_rpc_survives_garbage(void **state)
{
	/* Given: a served master and a second, raw REQ socket */
	struct fixture *f = *state;
	static const char junk[] = "definitely not a request";
	/* magic "LMRQ" little-endian, then a method id, then the body */
	static const unsigned char bad_method[] = {0x4c, 0x4d, 0x52, 0x51, 0xe7, 0x03, 0, 0};
	static const unsigned char bad_body[] = {0x4c, 0x4d, 0x52, 0x51, 4, 0, 0, 0, 0xff, 0xff};
	Lunar__StatusReply *st;
	nng_socket raw;
	char url[64];
	void *in = NULL;
	size_t inlen = 0;

	assert_int_equal(nng_req0_open(&raw), 0);
	assert_int_equal(nng_socket_set_ms(raw, NNG_OPT_RECVTIMEO, 300), 0);
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)mst_server_port(f->s));
	assert_int_equal(nng_dial(raw, url, NULL, 0), 0);
	/* When: it sends garbage, an unknown method, an undecodable body */
	assert_int_equal(nng_send(raw, (void *)junk, sizeof(junk), 0), 0);
	assert_int_equal(nng_recv(raw, &in, &inlen, NNG_FLAG_ALLOC), NNG_ETIMEDOUT);
	assert_int_equal(nng_send(raw, (void *)bad_method, sizeof(bad_method), 0), 0);
	/* (a method it does not know, as a newer proxy's would be, is told so
	 * at once: a status-only reply, which unpacks as any reply) */
	assert_int_equal(nng_recv(raw, &in, &inlen, NNG_FLAG_ALLOC), 0);
	st = lunar__status_reply__unpack(NULL, inlen, in);
	nng_free(in, inlen);
	assert_non_null(st);
	assert_non_null(st->status);
	assert_int_equal(st->status->code, LUNAR_ERR_PROTOCOL);
	lunar__status_reply__free_unpacked(st, NULL);
	assert_int_equal(nng_send(raw, (void *)bad_body, sizeof(bad_body), 0), 0);
	assert_int_equal(nng_recv(raw, &in, &inlen, NNG_FLAG_ALLOC), NNG_ETIMEDOUT);
	/* Then: no answer to the rest, and valid requests still get answers */
	assert_int_equal(ping(f, 9), 1);
	assert_int_equal(ping(f, 9), 0);
	nng_close(raw);
}

/* Failures to listen come back as the public codes, not nng's or errno's */
static void test_master_rpc_listen_failures_are_lunar_codes(void **state)
{
	struct fixture *f = *state;
	struct mst_server *s = NULL;
	char url[64];

	/* Given: the server's own port, taken */
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)mst_server_port(f->s));
	/* When: another server listens there, or on a url nng cannot parse */
	/* Then: BUSY and INVALID_PARAMS, with nothing returned */
	assert_int_equal(mst_server_start(f->m, url, 1, NULL, &s), LUNAR_ERR_BUSY);
	assert_int_equal(mst_server_start(f->m, "nonsense://x", 1, NULL, &s),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_null(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_master_rpc_ping_and_put, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_master_rpc_survives_garbage, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_master_rpc_listen_failures_are_lunar_codes, setup,
					    teardown),
	};

	int failed = cmocka_run_group_tests(tests, NULL, NULL);

	nng_fini(); /* nng's worker threads, so leak checkers see a clean exit */
	return failed;
}
