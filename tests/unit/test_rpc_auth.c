/*
 * test_rpc_auth.c - the master RPC's authenticated envelope as untrusted
 * input: every kind encodes and decodes back; every truncation, an extra
 * byte, a bad magic, an unknown kind, a short CALL body or a role no client
 * may claim is refused; any flipped bit of a CALL fails its tag; sealed
 * segment secrets open only for their session and only when sealed.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "auth.h"
#include "lunar.h"
#include "rpc.h"
#include "rpc_auth.h"
#include "tests/cmocka_main.h"

static unsigned char hello[AUTH_HELLO_BYTES], proof[AUTH_PROOF_BYTES], tag[AUTH_TAG_BYTES];
static unsigned char body[64];

static int setup(void **state)
{
	assert_int_equal(auth_init(), 0);
	auth_random(hello, sizeof(hello));
	auth_random(proof, sizeof(proof));
	auth_random(tag, sizeof(tag));
	/* A CALL body starts with a request header; its content is opaque here. */
	auth_random(body, sizeof(body));
	return 0;
}

/* One well-formed message of each kind. */
static struct lp_env sample(uint32_t kind)
{
	struct lp_env e = {.kind = kind,
			   .role = AUTH_ROLE_NODE,
			   .sid = 0x1122334455667788ull,
			   .ctr = 42,
			   .hello = hello,
			   .proof = proof,
			   .tag = tag,
			   .body = body,
			   .body_len = sizeof(body)};
	return e;
}

static size_t encode(const struct lp_env *e, unsigned char *buf, size_t cap)
{
	int n = lp_env_encode(e, buf, cap);

	assert_true(n > 0);
	assert_int_equal((size_t)n, lp_env_size(e));
	return (size_t)n;
}

static void test_rpc_auth_every_kind_round_trips(void **state)
{
	unsigned char buf[256];
	struct lp_env d;

	for (uint32_t k = LP_KIND_HELLO; k <= LP_KIND_STALE; k++) {
		struct lp_env e = sample(k);
		size_t n = encode(&e, buf, sizeof(buf));

		assert_true(lp_env_is(buf, n));
		assert_int_equal(lp_env_decode(buf, n, &d), 0);
		assert_int_equal(d.kind, k);
		if (k == LP_KIND_HELLO) {
			assert_int_equal(d.role, AUTH_ROLE_NODE);
			assert_memory_equal(d.hello, hello, sizeof(hello));
		}
		if (k == LP_KIND_HELLO_REPLY || k == LP_KIND_PROOF)
			assert_memory_equal(d.proof, proof, sizeof(proof));
		if (k != LP_KIND_HELLO && k != LP_KIND_REPLY && k != LP_KIND_STALE)
			assert_true(d.sid == e.sid);
		if (k == LP_KIND_CALL || k == LP_KIND_REPLY || k == LP_KIND_STALE) {
			assert_true(d.ctr == 42);
			assert_memory_equal(d.tag, tag, sizeof(tag));
		}
		if (k == LP_KIND_CALL || k == LP_KIND_REPLY) {
			assert_int_equal(d.body_len, sizeof(body));
			assert_memory_equal(d.body, body, sizeof(body));
		}
	}
	/* The sizes docs/protocol.md gives. */
	{
		static const size_t want[] = {0, 76, 112, 48, 32, 40 + 64, 32 + 64, 16, 32};

		for (uint32_t k = LP_KIND_HELLO; k <= LP_KIND_STALE; k++) {
			struct lp_env e = sample(k);

			assert_int_equal(lp_env_size(&e), want[k]);
		}
	}
}

static void test_rpc_auth_truncated_and_padded_refused(void **state)
{
	unsigned char buf[256], pad[257];
	struct lp_env d;

	for (uint32_t k = LP_KIND_HELLO; k <= LP_KIND_STALE; k++) {
		struct lp_env e = sample(k);
		size_t n;

		if (k == LP_KIND_REPLY)
			e.body_len = 0; /* an empty reply is whole: every prefix is short */
		if (k == LP_KIND_CALL)
			e.body_len = LP_HDR_SIZE; /* the shortest CALL */
		n = encode(&e, buf, sizeof(buf));
		for (size_t cut = 0; cut < n; cut++)
			assert_int_equal(lp_env_decode(buf, cut, &d), LUNAR_ERR_PROTOCOL);
		memcpy(pad, buf, n);
		pad[n] = 0;
		/* One byte more: a body for CALL and REPLY, garbage elsewhere. */
		if (k == LP_KIND_CALL || k == LP_KIND_REPLY)
			assert_int_equal(lp_env_decode(pad, n + 1, &d), 0);
		else
			assert_int_equal(lp_env_decode(pad, n + 1, &d), LUNAR_ERR_PROTOCOL);
	}
}

static void test_rpc_auth_bad_magic_kind_role_refused(void **state)
{
	unsigned char buf[256];
	struct lp_env e = sample(LP_KIND_HELLO), d;
	size_t n = encode(&e, buf, sizeof(buf));
	static const uint32_t kinds[] = {0, LP_KIND_STALE + 1, 0x100, 0xffffffffu};

	buf[0] ^= 1;
	assert_false(lp_env_is(buf, n));
	assert_int_equal(lp_env_decode(buf, n, &d), LUNAR_ERR_PROTOCOL);
	buf[0] ^= 1;
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		unsigned char c[256];

		memcpy(c, buf, n);
		c[4] = (unsigned char)kinds[i];
		c[5] = (unsigned char)(kinds[i] >> 8);
		c[6] = (unsigned char)(kinds[i] >> 16);
		c[7] = (unsigned char)(kinds[i] >> 24);
		assert_int_equal(lp_env_decode(c, n, &d), LUNAR_ERR_PROTOCOL);
	}
	/* A client may claim NODE or ADMIN only, never SERVER or anything else. */
	for (uint32_t role = 0; role < 8; role++) {
		e.role = role;
		n = encode(&e, buf, sizeof(buf));
		assert_int_equal(lp_env_decode(buf, n, &d),
				 auth_role_valid(role) ? 0 : LUNAR_ERR_PROTOCOL);
	}
	/* Too big to be a message at all; an unknown kind does not encode. */
	assert_int_equal(lp_env_decode(buf, (size_t)LP_MAX_MSG + 1, &d), LUNAR_ERR_PROTOCOL);
	e.kind = LP_KIND_STALE + 1;
	assert_int_equal(lp_env_size(&e), 0);
	assert_int_equal(lp_env_encode(&e, buf, sizeof(buf)), -EINVAL);
	e = sample(LP_KIND_CALL);
	assert_int_equal(lp_env_encode(&e, buf, lp_env_size(&e) - 1), -EMSGSIZE);
}

/* Every bit of a tagged CALL matters: flipped, it no longer decodes, or it
 * names another session or kind, or its tag fails. */
static void test_rpc_auth_call_tag_covers_every_bit(void **state)
{
	unsigned char key[AUTH_KEY_BYTES], buf[256], mytag[AUTH_TAG_BYTES];
	struct lp_env e = sample(LP_KIND_CALL), d;
	size_t n;

	auth_random(key, sizeof(key));
	e.tag = NULL;
	lp_env_tag(key, &e, mytag);
	e.tag = mytag;
	n = encode(&e, buf, sizeof(buf));
	assert_int_equal(lp_env_decode(buf, n, &d), 0);
	assert_int_equal(lp_env_tag_check(key, &d), 0);
	for (size_t bit = 0; bit < n * 8; bit++) {
		buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		if (!lp_env_decode(buf, n, &d))
			assert_int_equal(lp_env_tag_check(key, &d), LUNAR_ERR_UNAUTHORIZED);
		buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
	}
	/* Kinds without a tag never check. */
	e = sample(LP_KIND_HELLO);
	assert_int_equal(lp_env_tag_check(key, &e), LUNAR_ERR_UNAUTHORIZED);
}

static void session_pair(struct auth_session *c, struct auth_session *s)
{
	struct auth_key k;
	struct auth_hs hc, hs;
	unsigned char a[AUTH_HELLO_BYTES], b[AUTH_HELLO_BYTES];

	auth_random(k.k, sizeof(k.k));
	auth_hs_start(&hc, 1, a);
	auth_hs_start(&hs, 0, b);
	assert_int_equal(auth_hs_peer(&hc, b), 0);
	assert_int_equal(auth_hs_peer(&hs, a), 0);
	assert_int_equal(auth_hs_finish(&hc, &k, AUTH_ROLE_NODE, c), 0);
	assert_int_equal(auth_hs_finish(&hs, &k, AUTH_ROLE_NODE, s), 0);
}

static ProtobufCBinaryData secret_dup(const unsigned char *p, size_t n)
{
	ProtobufCBinaryData d = {n, malloc(n)};

	assert_non_null(d.data);
	memcpy(d.data, p, n);
	return d;
}

static void test_rpc_auth_secrets_sealed_for_the_session(void **state)
{
	struct auth_session c, s, other, o2;
	unsigned char secret[AUTH_KEY_BYTES];
	Lunar__MountSegmentReply *m = calloc(1, sizeof(*m));
	Lunar__ReMountSegmentReply *r = calloc(1, sizeof(*r));

	session_pair(&c, &s);
	session_pair(&other, &o2);
	auth_random(secret, sizeof(secret));
	lunar__mount_segment_reply__init(m);
	m->segment_secret = secret_dup(secret, sizeof(secret));
	assert_int_equal(lp_secrets_seal(&s, LUNAR__METHOD__MOUNT_SEGMENT, &m->base), 0);
	assert_int_equal(m->segment_secret.len, AUTH_SEALED_BYTES);
	assert_memory_not_equal(m->segment_secret.data + 24 + 16, secret, sizeof(secret));
	/* Another session's box key does not open it; ours does, once. */
	assert_int_equal(lp_secrets_unseal(&other, LUNAR__METHOD__MOUNT_SEGMENT, &m->base),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(lp_secrets_unseal(&c, LUNAR__METHOD__MOUNT_SEGMENT, &m->base), 0);
	assert_int_equal(m->segment_secret.len, AUTH_KEY_BYTES);
	assert_memory_equal(m->segment_secret.data, secret, sizeof(secret));
	/* A plain secret where a sealed one belongs is refused. */
	assert_int_equal(lp_secrets_unseal(&c, LUNAR__METHOD__MOUNT_SEGMENT, &m->base),
			 LUNAR_ERR_UNAUTHORIZED);
	protobuf_c_message_free_unpacked(&m->base, NULL);

	/* ReMount: each secret sealed; an empty one stays empty. */
	lunar__re_mount_segment_reply__init(r);
	r->n_segment_secrets = 2;
	r->segment_secrets = calloc(2, sizeof(*r->segment_secrets));
	r->segment_secrets[0] = secret_dup(secret, sizeof(secret));
	assert_int_equal(lp_secrets_seal(&s, LUNAR__METHOD__REMOUNT_SEGMENT, &r->base), 0);
	assert_int_equal(r->segment_secrets[0].len, AUTH_SEALED_BYTES);
	assert_int_equal(r->segment_secrets[1].len, 0);
	r->segment_secrets[0].data[30] ^= 1; /* a changed box does not open */
	assert_int_equal(lp_secrets_unseal(&c, LUNAR__METHOD__REMOUNT_SEGMENT, &r->base),
			 LUNAR_ERR_UNAUTHORIZED);
	r->segment_secrets[0].data[30] ^= 1;
	assert_int_equal(lp_secrets_unseal(&c, LUNAR__METHOD__REMOUNT_SEGMENT, &r->base), 0);
	assert_memory_equal(r->segment_secrets[0].data, secret, sizeof(secret));
	protobuf_c_message_free_unpacked(&r->base, NULL);
}

LUNAR_TEST_MAIN(setup, NULL, test_rpc_auth_every_kind_round_trips,
		test_rpc_auth_truncated_and_padded_refused,
		test_rpc_auth_bad_magic_kind_role_refused, test_rpc_auth_call_tag_covers_every_bit,
		test_rpc_auth_secrets_sealed_for_the_session)
