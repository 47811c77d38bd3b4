/*
 * test_rpc_auth.c - a keyed master (SPEC §13) with two keyed proxies holding
 * values, attacked as in the report that motivated it: a keyless raw client
 * gets no answer to ListSegments, RemoveAll, an unmount with the owner's id
 * or a fake mount, and every value still reads byte-exact; a NODE session
 * holding the key is refused admin calls and other nodes' client ids; a
 * recorded CALL replayed or with one bit flipped is refused; a proxy with
 * the wrong key never joins; an ADMIN session may remove everything.
 */
#include <inttypes.h>
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

#include "auth.h"
#include "harness.h"
#include "http_get.h"
#include "lunar.h"
#include "rpc.h"
#include "rpc_auth.h"
#include "rpc_client.h"
#include "tests/cmocka_main.h"

#define NVAL	     8
#define NO_ANSWER_MS 1500 /* how long a refused request waits for nothing */

static char key_path[PATH_MAX], wrong_path[PATH_MAX], sock_a[PATH_MAX], sock_b[PATH_MAX];
static char seg_a[H_SEG_NAME], seg_b[H_SEG_NAME], url[64];
static int mport, mhttp;
static struct auth_key key;
static struct lunar_client *ca, *cb;
static uint8_t *rbuf;

static size_t val_size(int i)
{
	return 1000 + (size_t)i * 40999;
}

static void val_key(int i, char *k, size_t cap)
{
	snprintf(k, cap, "auth/v%d", i);
}

/* Put value i through c onto seg (preferred). */
static int put_on(struct lunar_client *c, const char *k, size_t len, const char *seg)
{
	const char *pref[1] = {seg};
	struct lunar_put_cfg cfg = {
	    .replica_num = 1, .preferred_segments = pref, .preferred_count = 1};
	uint8_t *buf = malloc(len);
	int rc;

	assert_non_null(buf);
	h_fill(buf, len, h_seed(k));
	rc = lunar_put(c, k, buf, len, &cfg);
	free(buf);
	return rc;
}

static int setup(void **state)
{
	char hp[16];
	struct h_proc *m;

	(void)state;
	h_keyless(); /* this test makes and hands out its keys itself */
	if (h_init() != 0 || auth_init() != 0)
		return -1;
	snprintf(key_path, sizeof(key_path), "%s", h_path("cluster.key"));
	snprintf(wrong_path, sizeof(wrong_path), "%s", h_path("wrong.key"));
	if (auth_keygen(key_path) || auth_keygen(wrong_path))
		return -1;
	if (auth_key_load(key_path, &key, hp, sizeof(hp)))
		return -1;
	mhttp = h_free_port();
	snprintf(hp, sizeof(hp), "%d", mhttp);
	m = h_cluster_master(&mport, "--cluster-key", key_path, "--http-port", hp, NULL);
	if (!m)
		return -1;
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", mport);
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	if (!h_start_peer("proxyA", sock_a, mport, seg_a, "--cluster-key", key_path,
			  "--segment-size", "16MiB", NULL) ||
	    !h_start_peer("proxyB", sock_b, mport, seg_b, "--cluster-key", key_path,
			  "--segment-size", "16MiB", NULL))
		return -1;
	ca = h_client_try(sock_a, H_CLIENT_TIMEOUT_MS, NULL);
	cb = h_client_try(sock_b, H_CLIENT_TIMEOUT_MS, NULL);
	rbuf = malloc(val_size(NVAL));
	if (!ca || !cb || !rbuf)
		return -1;
	for (int i = 0; i < NVAL; i++) {
		char k[32];

		val_key(i, k, sizeof(k));
		if (put_on(i % 2 ? cb : ca, k, val_size(i), i % 2 ? seg_b : seg_a)) {
			h_dump_logs();
			return -1;
		}
	}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (ca)
		lunar_close(ca);
	if (cb)
		lunar_close(cb);
	free(rbuf);
	auth_key_wipe(&key);
	h_cleanup();
	return 0;
}

/* Every value reads byte-exact through both proxies. */
static void verify_all(void)
{
	for (int i = 0; i < NVAL; i++) {
		struct lunar_client *c[2] = {ca, cb};
		char k[32];

		val_key(i, k, sizeof(k));
		for (int j = 0; j < 2; j++) {
			int64_t n = lunar_get_into(c[j], k, rbuf, val_size(NVAL));

			H_ASSERT_MSG(n == (int64_t)val_size(i), "%s through %c: %s", k, 'A' + j,
				     h_code(n));
			H_ASSERT_EQ(h_verify(rbuf, val_size(i), h_seed(k)), -1);
		}
	}
}

static int64_t metric(const char *sample)
{
	static char text[1 << 16];

	H_ASSERT_EQ(hg_get(mhttp, "/metrics", text, sizeof(text)), 200);
	return hg_metric(text, sample);
}

static int64_t unauthorized_total(void)
{
	static char text[1 << 16];
	const char *p = text, *tag = "lunar_master_unauthorized_total{";
	int64_t sum = 0;

	H_ASSERT_EQ(hg_get(mhttp, "/metrics", text, sizeof(text)), 200);
	while ((p = strstr(p, tag))) {
		p = strchr(p, ' ');
		sum += strtoll(p + 1, NULL, 10);
	}
	return sum;
}

/* The master's segment list (loopback /admin): the owner of seg, 0 when
 * seg is not mounted; *n the number of segments. */
static uint64_t owner_of(const char *seg, int *n)
{
	static char json[1 << 16];
	char pat[64];
	const char *p;

	H_ASSERT_EQ(hg_get(mhttp, "/admin/segments", json, sizeof(json)), 200);
	if (n)
		*n = hg_count(json, "\"owner\":");
	snprintf(pat, sizeof(pat), "\"name\":\"%s\"", seg);
	p = strstr(json, pat);
	if (!p || !(p = strstr(p, "\"owner\":")))
		return 0;
	return strtoull(p + strlen("\"owner\":"), NULL, 10);
}

/* A REQ socket on the master that never resends, and waits ms for a reply. */
static nng_socket raw_socket(unsigned ms)
{
	nng_socket s;

	assert_int_equal(nng_req0_open(&s), 0);
	assert_int_equal(nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE), 0);
	assert_int_equal(nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, (nng_duration)ms), 0);
	assert_int_equal(nng_dial(s, url, NULL, 0), 0);
	return s;
}

/* Send buf on a fresh socket: 1 and the reply in *rep (free with
 * nng_free(*rep, *rlen)) when one came, else 0. */
static int raw_send(const void *buf, size_t len, void **rep, size_t *rlen)
{
	nng_socket s = raw_socket(NO_ANSWER_MS);
	int got;

	assert_int_equal(nng_send(s, (void *)buf, len, 0), 0);
	got = nng_recv(s, rep, rlen, NNG_FLAG_ALLOC) == 0;
	nng_close(s);
	return got;
}

/* A plain (keyless) request: 1 when the master answered at all. */
static int plain_answered(uint32_t method, const ProtobufCMessage *req)
{
	void *buf, *rep;
	size_t len, rlen;
	int got;

	assert_int_equal(lp_request_pack(method, req, &buf, &len), 0);
	got = raw_send(buf, len, &rep, &rlen);
	free(buf);
	if (got)
		nng_free(rep, rlen);
	return got;
}

/* (a) No key: nothing is answered and nothing changes. */
static void test_rpc_auth_keyless_client_gets_nothing(void **state)
{
	Lunar__ListSegmentsRequest ls = LUNAR__LIST_SEGMENTS_REQUEST__INIT;
	Lunar__RemoveAllRequest ra = LUNAR__REMOVE_ALL_REQUEST__INIT;
	Lunar__UnmountSegmentRequest um = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;
	Lunar__MountSegmentRequest mo = LUNAR__MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc fake = LUNAR__SEGMENT_DESC__INIT;
	const char *rej = "lunar_master_rpc_rejected_total{reason=\"unauthenticated\"}";
	int64_t before = metric(rej);
	uint64_t owner_a = owner_of(seg_a, NULL);
	int nseg;

	(void)state;
	H_ASSERT(owner_a != 0 && before >= 0);
	H_ASSERT(!plain_answered(LUNAR__METHOD__LIST_SEGMENTS, &ls.base));
	ra.force = 1;
	H_ASSERT(!plain_answered(LUNAR__METHOD__REMOVE_ALL, &ra.base));
	um.client_id = owner_a;
	um.name = seg_a;
	H_ASSERT(!plain_answered(LUNAR__METHOD__UNMOUNT_SEGMENT, &um.base));
	fake.name = "evil";
	fake.endpoint = "127.0.0.1:1";
	fake.size = 1ull << 30;
	mo.client_id = owner_a;
	mo.segment = &fake;
	H_ASSERT(!plain_answered(LUNAR__METHOD__MOUNT_SEGMENT, &mo.base));

	H_ASSERT(metric(rej) >= before + 4);
	H_ASSERT(owner_of(seg_a, &nseg) == owner_a);
	H_ASSERT(owner_of(seg_b, NULL) != 0);
	H_ASSERT_EQ(nseg, 2); /* no "evil" */
	verify_all();
	H_ASSERT_EQ(put_on(ca, "auth/after-a", 5000, seg_b), 0);
	H_ASSERT_EQ(put_on(cb, "auth/after-b", 7000, seg_a), 0);
	H_ASSERT_EQ(lunar_get_into(ca, "auth/after-b", rbuf, 7000), 7000);
	H_ASSERT_EQ(h_verify(rbuf, 7000, h_seed("auth/after-b")), -1);
}

/* One call through the real client; the reply's code. */
static int call_code(struct lp_client *c, uint32_t method, const ProtobufCMessage *req)
{
	ProtobufCMessage *rep;
	int rc = lp_client_call(c, lp_method_find(method), req, &rep, 5000);

	if (rc)
		return rc;
	rc = lp_status(rep)->code;
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* (b) The key, but a NODE: no admin calls, no other node's client id. */
static void test_rpc_auth_node_session_is_confined(void **state)
{
	Lunar__RemoveAllRequest ra = LUNAR__REMOVE_ALL_REQUEST__INIT;
	Lunar__RemoveRequest rm = LUNAR__REMOVE_REQUEST__INIT;
	Lunar__ListSegmentsRequest ls = LUNAR__LIST_SEGMENTS_REQUEST__INIT;
	Lunar__UnmountSegmentRequest um = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;
	Lunar__PutStartRequest ps = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PingRequest pg = LUNAR__PING_REQUEST__INIT;
	struct lp_client *cl;
	int64_t before = unauthorized_total();

	(void)state;
	H_ASSERT_EQ(lp_client_create(url, &key, AUTH_ROLE_NODE, LP_CLIENT_DIAL_NOW, &cl), 0);
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__REMOVE_ALL, &ra.base), LUNAR_ERR_UNAUTHORIZED);
	rm.key = "auth/v0";
	rm.force = 1;
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__REMOVE, &rm.base), LUNAR_ERR_UNAUTHORIZED);
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__LIST_SEGMENTS, &ls.base), LUNAR_ERR_UNAUTHORIZED);
	um.client_id = owner_of(seg_a, NULL);
	um.name = seg_a;
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__UNMOUNT_SEGMENT, &um.base),
		    LUNAR_ERR_UNAUTHORIZED);
	ps.client_id = owner_of(seg_b, NULL);
	ps.key = "auth/stolen";
	ps.size = 100;
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__PUT_START, &ps.base), LUNAR_ERR_UNAUTHORIZED);
	/* Its own fresh id is its own: the session works, it is only confined. */
	pg.client_id = 0x5eed;
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__PING, &pg.base), 0);
	lp_client_destroy(cl);
	H_ASSERT(unauthorized_total() >= before + 5);

	/* An app behind a NODE proxy: the same refusals, told as such. */
	H_ASSERT_EQ(lunar_remove_all(ca, 0), LUNAR_ERR_UNAUTHORIZED);
	H_ASSERT_EQ(lunar_remove(cb, "auth/v1", 1), LUNAR_ERR_UNAUTHORIZED);
	H_ASSERT_EQ(owner_of(seg_a, NULL) != 0, 1);
	verify_all();
}

/* A session opened by hand, to record and tamper with its messages. */
struct tsess {
	struct auth_session s;
	uint64_t sid;
};

/* Exchange e over sock; the reply decoded into *r, its bytes in *keep. */
static void t_step(nng_socket sock, const struct lp_env *e, struct lp_env *r, void **keep,
		   size_t *klen)
{
	unsigned char buf[256];
	int n = lp_env_encode(e, buf, sizeof(buf));

	H_ASSERT(n > 0);
	H_ASSERT_EQ(nng_send(sock, buf, (size_t)n, 0), 0);
	H_ASSERT_EQ(nng_recv(sock, keep, klen, NNG_FLAG_ALLOC), 0);
	H_ASSERT_EQ(lp_env_decode(*keep, *klen, r), 0);
}

static void t_open(struct tsess *t)
{
	unsigned char hello[AUTH_HELLO_BYTES], proof[AUTH_PROOF_BYTES];
	struct lp_env e = {.kind = LP_KIND_HELLO, .role = AUTH_ROLE_NODE, .hello = hello}, r;
	nng_socket sock = raw_socket(5000);
	struct auth_hs hs;
	void *keep;
	size_t klen;

	auth_hs_start(&hs, 1, hello);
	t_step(sock, &e, &r, &keep, &klen);
	H_ASSERT_EQ(r.kind, LP_KIND_HELLO_REPLY);
	t->sid = r.sid;
	H_ASSERT_EQ(auth_hs_peer(&hs, r.hello), 0);
	H_ASSERT_EQ(auth_hs_verify(&hs, &key, AUTH_ROLE_SERVER, r.proof), 0);
	nng_free(keep, klen);
	auth_hs_proof(&hs, &key, AUTH_ROLE_NODE, proof);
	H_ASSERT_EQ(auth_hs_finish(&hs, &key, AUTH_ROLE_NODE, &t->s), 0);
	e = (struct lp_env){.kind = LP_KIND_PROOF, .sid = t->sid, .proof = proof};
	t_step(sock, &e, &r, &keep, &klen);
	H_ASSERT_EQ(r.kind, LP_KIND_PROOF_REPLY);
	H_ASSERT_EQ(lp_env_tag_check(t->s.rx_key, &r), 0);
	nng_free(keep, klen);
	nng_close(sock);
}

/* A CALL of method with req on t, encoded into buf; its length. */
static size_t t_call(struct tsess *t, uint32_t method, const ProtobufCMessage *req,
		     unsigned char *buf, size_t cap)
{
	unsigned char tag[AUTH_TAG_BYTES];
	struct lp_env e = {.kind = LP_KIND_CALL, .sid = t->sid};
	void *body;
	int n;

	H_ASSERT_EQ(lp_request_pack(method, req, &body, &e.body_len), 0);
	e.body = body;
	e.ctr = auth_tx_next(&t->s);
	lp_env_tag(t->s.tx_key, &e, tag);
	e.tag = tag;
	n = lp_env_encode(&e, buf, cap);
	free(body);
	H_ASSERT(n > 0);
	return (size_t)n;
}

/* (d) A recorded CALL does not run twice, nor altered in any part. */
static void test_rpc_auth_replayed_or_flipped_call_refused(void **state)
{
	const char *calls = "lunar_master_calls_total{method=\"ExistKey\"}";
	const char *replay = "lunar_master_rpc_rejected_total{reason=\"replay\"}";
	const char *bad_mac = "lunar_master_rpc_rejected_total{reason=\"bad_mac\"}";
	Lunar__ExistKeyRequest ek = LUNAR__EXIST_KEY_REQUEST__INIT;
	static const size_t flips[] = {16, 24 + 3, 0}; /* counter, tag, body (set below) */
	unsigned char buf[512], bad[512];
	struct tsess t;
	struct lp_env r;
	int64_t c0 = metric(calls), r0 = metric(replay), m0 = metric(bad_mac);
	void *rep;
	size_t len, rlen;

	(void)state;
	t_open(&t);
	ek.key = "auth/v2";
	len = t_call(&t, LUNAR__METHOD__EXIST_KEY, &ek.base, buf, sizeof(buf));
	H_ASSERT(raw_send(buf, len, &rep, &rlen));
	H_ASSERT_EQ(lp_env_decode(rep, rlen, &r), 0);
	H_ASSERT_EQ(r.kind, LP_KIND_REPLY);
	H_ASSERT_EQ(lp_env_tag_check(t.s.rx_key, &r), 0);
	nng_free(rep, rlen);
	H_ASSERT_EQ(metric(calls), c0 + 1);

	H_ASSERT(!raw_send(buf, len, &rep, &rlen)); /* the same bytes again */
	H_ASSERT_EQ(metric(replay), r0 + 1);
	for (size_t i = 0; i < sizeof(flips) / sizeof(flips[0]); i++) {
		size_t at = flips[i] ? flips[i] : len - 1;

		memcpy(bad, buf, len);
		bad[at] ^= 0x10;
		H_ASSERT_MSG(!raw_send(bad, len, &rep, &rlen), "byte %zu flipped was answered", at);
	}
	H_ASSERT_EQ(metric(bad_mac), m0 + 3);
	H_ASSERT_EQ(metric(calls), c0 + 1); /* nothing but the first ran */

	/* The session itself still works with a fresh counter. */
	len = t_call(&t, LUNAR__METHOD__EXIST_KEY, &ek.base, buf, sizeof(buf));
	H_ASSERT(raw_send(buf, len, &rep, &rlen));
	nng_free(rep, rlen);
	H_ASSERT_EQ(metric(calls), c0 + 2);
}

/* (e) A proxy with another key never mounts, and says why. */
static void test_rpc_auth_wrong_key_proxy_cannot_join(void **state)
{
	char master[64], sock[PATH_MAX], line[256], body[256];
	char *argv[] = {(char *)h_bin("lunar-proxy"),
			"--socket",
			sock,
			"--master",
			master,
			"--host",
			"127.0.0.1",
			"--data-port",
			"0",
			"--http-port",
			"0",
			"--segment-size",
			"16MiB",
			"--cluster-key",
			wrong_path,
			NULL};
	struct auth_key wrong;
	struct lp_client *cl;
	Lunar__PingRequest pg = LUNAR__PING_REQUEST__INIT;
	struct h_proc *p;
	uint64_t t0 = h_now_ms();
	int port = -1, nseg, logged = 0;

	(void)state;
	snprintf(master, sizeof(master), "%s", url);
	snprintf(sock, sizeof(sock), "%s", h_path("wrong.sock"));
	p = h_spawn("wrongkey", argv);
	H_ASSERT(p != NULL);
	while (h_now_ms() - t0 < H_READY_TIMEOUT_MS && h_alive(p) && (!logged || port <= 0)) {
		logged = !hg_log_find(p->log, "master refused our cluster key", line, sizeof(line));
		port = hg_log_http_port(p->log);
		h_sleep_ms(100);
	}
	H_ASSERT_MSG(logged, "the proxy with the wrong key did not say why it cannot join");
	H_ASSERT(port > 0);
	H_ASSERT(hg_get(port, "/ready", body, sizeof(body)) != 200);
	H_ASSERT(strstr(body, "not ready") != NULL);
	owner_of(seg_a, &nseg);
	H_ASSERT_EQ(nseg, 2);
	h_stop(p);

	/* The shared client says the same to any tool holding the wrong key. */
	H_ASSERT_EQ(auth_key_load(wrong_path, &wrong, line, sizeof(line)), 0);
	H_ASSERT_EQ(lp_client_create(url, &wrong, AUTH_ROLE_NODE, LP_CLIENT_DIAL_NOW, &cl), 0);
	pg.client_id = 0xbad;
	H_ASSERT_EQ(call_code(cl, LUNAR__METHOD__PING, &pg.base), LUNAR_ERR_UNAUTHORIZED);
	lp_client_destroy(cl);
	auth_key_wipe(&wrong);
}

/* Whether the master holds key (tenant "default", as the apps'). */
static int master_has(struct lp_client *cl, const char *k)
{
	Lunar__ExistKeyRequest ek = LUNAR__EXIST_KEY_REQUEST__INIT;
	ProtobufCMessage *rep;
	int has;

	ek.tenant = "default";
	ek.key = (char *)k;
	H_ASSERT_EQ(
	    lp_client_call(cl, lp_method_find(LUNAR__METHOD__EXIST_KEY), &ek.base, &rep, 5000), 0);
	has = ((Lunar__ExistKeyReply *)rep)->exists;
	protobuf_c_message_free_unpacked(rep, NULL);
	return has;
}

/* (c) ADMIN: listings, and an app behind an --admin-calls proxy removes all. */
static void test_rpc_auth_admin_session_may_remove_all(void **state)
{
	Lunar__ListSegmentsRequest ls = LUNAR__LIST_SEGMENTS_REQUEST__INIT;
	ProtobufCMessage *rep;
	struct lp_client *cl;
	struct lunar_client *cc;
	char sock_c[PATH_MAX];
	int64_t n;

	(void)state;
	H_ASSERT_EQ(lp_client_create(url, &key, AUTH_ROLE_ADMIN, LP_CLIENT_DIAL_NOW, &cl), 0);
	H_ASSERT(master_has(cl, "auth/v0"));
	H_ASSERT_EQ(
	    lp_client_call(cl, lp_method_find(LUNAR__METHOD__LIST_SEGMENTS), &ls.base, &rep, 5000),
	    0);
	H_ASSERT_EQ(lp_status(rep)->code, 0);
	H_ASSERT_EQ(((Lunar__ListSegmentsReply *)rep)->n_segments, 2);
	protobuf_c_message_free_unpacked(rep, NULL);
	lp_client_destroy(cl);

	snprintf(sock_c, sizeof(sock_c), "%s", h_path("c.sock"));
	H_ASSERT(h_start_proxy("proxyC", sock_c, mport, "--cluster-key", key_path, "--admin-calls",
			       "--segment-size", "16MiB", NULL) != NULL);
	cc = h_client(sock_c);
	n = lunar_remove_all(cc, 1); /* forced: the reads above hold leases */
	H_ASSERT_MSG(n >= NVAL, "RemoveAll through an --admin-calls proxy: %s", h_code(n));
	lunar_close(cc);
	/* Asked of the master: the proxies may still hold leased replica lists. */
	H_ASSERT_EQ(lp_client_create(url, &key, AUTH_ROLE_NODE, LP_CLIENT_DIAL_NOW, &cl), 0);
	for (int i = 0; i < NVAL; i++) {
		char k[32];

		val_key(i, k, sizeof(k));
		H_ASSERT_MSG(!master_has(cl, k), "%s survived RemoveAll", k);
	}
	lp_client_destroy(cl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_rpc_auth_keyless_client_gets_nothing),
	    cmocka_unit_test(test_rpc_auth_node_session_is_confined),
	    cmocka_unit_test(test_rpc_auth_replayed_or_flipped_call_refused),
	    cmocka_unit_test(test_rpc_auth_wrong_key_proxy_cannot_join),
	    cmocka_unit_test(test_rpc_auth_admin_session_may_remove_all),
	};

	int failed = cmocka_run_group_tests(tests, setup, teardown);

	nng_fini(); /* nng's threads and what they free late: leak checkers see a clean exit */
	return failed;
}
