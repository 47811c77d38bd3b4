/*
 * fuzz_envelope.c - libFuzzer target for what the master reads from a
 * caller before anything else (proto/rpc_auth.c, proto/rpc.c): the
 * authenticated envelope's decoder, its tag check, and, for a CALL, the
 * framed request inside it as lp_request_unpack takes it. The target checks
 * the decoder's promises: every pointer it returns lies inside the input,
 * a decoded message encodes back to the same bytes, and an unpacked
 * request is of the method's type.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"
#include "rpc_auth.h"
#include "fuzz_check.h"

#define INSIDE(p, len, d, n)                                                                       \
	(!(p) || ((const uint8_t *)(p) >= (d) && (const uint8_t *)(p) + (len) <= (d) + (n)))

static void request(const void *body, size_t len)
{
	const struct lp_method *mt;
	ProtobufCMessage *req;

	if (lp_request_unpack(body, len, &mt, &req))
		return;
	FZ_CHECK(req->descriptor == mt->req);
	protobuf_c_message_free_unpacked(req, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	static const unsigned char key[AUTH_KEY_BYTES] = {7};
	static uint8_t out[1 << 17];
	struct lp_env e;
	int len;

	/* A plain request, as a keyless master reads it. */
	request(d, n);
	if (lp_env_decode(d, n, &e))
		return 0;
	FZ_CHECK(lp_env_is(d, n));
	FZ_CHECK(INSIDE(e.hello, AUTH_HELLO_BYTES, d, n));
	FZ_CHECK(INSIDE(e.proof, AUTH_PROOF_BYTES, d, n));
	FZ_CHECK(INSIDE(e.tag, AUTH_TAG_BYTES, d, n));
	FZ_CHECK(INSIDE(e.body, e.body_len, d, n));
	if (e.tag)
		(void)lp_env_tag_check(key, &e);
	if (e.kind == LP_KIND_CALL)
		request(e.body, e.body_len);
	len = lp_env_encode(&e, out, sizeof(out));
	if (len >= 0)
		FZ_CHECK((size_t)len == n && !memcmp(out, d, n));
	return 0;
}
