/*
 * rpc_auth.h - the authenticated envelope of the master RPC (SPEC §13), for
 * a master started with a cluster key: a three-message handshake that opens
 * a session, then every request and reply wrapped with a counter and a MAC
 * under the session's per-direction keys. Encoding and decoding only; no
 * I/O, no state. docs/protocol.md has the layouts byte by byte.
 *
 * Every message starts with LP_ENV_MAGIC and a kind (both uint32 LE); the
 * tag of a message covers every byte before the tag except the counter
 * (which auth_mac takes on its own), then every byte after the tag.
 */
#ifndef LUNAR_PROTO_RPC_AUTH_H
#define LUNAR_PROTO_RPC_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "auth.h"

#define LP_ENV_MAGIC 0x55414d4cu /* "LMAU" little-endian */
#define LP_ENV_HDR   8		 /* magic, kind */

/* The counter the handshake's last reply is tagged with; never a CALL's. */
#define LP_CTR_HANDSHAKE UINT64_MAX

enum lp_kind {
	LP_KIND_HELLO = 1,	 /* c->s: role, client hello */
	LP_KIND_HELLO_REPLY = 2, /* s->c: session id, server hello, server proof */
	LP_KIND_PROOF = 3,	 /* c->s: session id, client proof */
	LP_KIND_PROOF_REPLY = 4, /* s->c: session id, tag: the session is open */
	LP_KIND_CALL = 5,	 /* c->s: session id, counter, tag, request */
	LP_KIND_REPLY = 6,	 /* s->c: counter, tag, reply */
	LP_KIND_NO_SESSION = 7,	 /* s->c: session id the master does not know */
	LP_KIND_STALE = 8,	 /* s->c: counter, tag: that CALL is too old, not run */
};

/*
 * One message, decoded or to encode. Which fields a kind uses is in enum
 * lp_kind; pointers point into the decoded buffer (or, to encode, at the
 * caller's bytes) and live as long as it.
 */
struct lp_env {
	uint32_t kind;
	uint32_t role;		    /* HELLO: enum auth_role claimed */
	uint64_t sid;		    /* session id */
	uint64_t ctr;		    /* CALL, REPLY, STALE: the request's counter */
	const unsigned char *hello; /* AUTH_HELLO_BYTES */
	const unsigned char *proof; /* AUTH_PROOF_BYTES */
	const unsigned char *tag;   /* AUTH_TAG_BYTES */
	const void *body;	    /* CALL: framed request (rpc.h); REPLY: reply */
	size_t body_len;
};

/* lp_env_is - 1 when buf (len bytes) starts with LP_ENV_MAGIC, else 0. */
int lp_env_is(const void *buf, size_t len);
/*
 * lp_env_decode - parse untrusted bytes into *e. Every fixed-size kind must
 * be exactly its size; a CALL's body is at least a request header and the
 * whole message at most LP_MAX_MSG. 0, or LUNAR_ERR_PROTOCOL (bad magic,
 * unknown kind, wrong length, a HELLO's role not one a client may claim).
 * Checks no tag: see lp_env_tag_check.
 */
int lp_env_decode(const void *buf, size_t len, struct lp_env *e);
/* lp_env_size - the bytes lp_env_encode writes for e (0 for an unknown kind). */
size_t lp_env_size(const struct lp_env *e);
/*
 * lp_env_encode - write e into out (cap bytes): the fixed part, then the
 * body. Returns the bytes written, or -EMSGSIZE when cap is short or the
 * message would exceed LP_MAX_MSG, -EINVAL for an unknown kind.
 */
int lp_env_encode(const struct lp_env *e, void *out, size_t cap);
/*
 * lp_env_tag - the tag of e (PROOF_REPLY, CALL, REPLY or STALE) under key: the
 * sender's tx_key, or the receiver's rx_key to check. lp_env_tag_check - 0
 * when e->tag is that tag (constant time), else LUNAR_ERR_UNAUTHORIZED.
 */
void lp_env_tag(const unsigned char key[AUTH_KEY_BYTES], const struct lp_env *e,
		unsigned char tag[AUTH_TAG_BYTES]);
int lp_env_tag_check(const unsigned char key[AUTH_KEY_BYTES], const struct lp_env *e);

/*
 * lp_secrets_seal - in a MountSegment or ReMountSegment reply rep (other
 * methods: untouched), replace each 32-byte segment secret with its
 * auth_seal box for session s; empty secrets stay empty. rep is heap-owned
 * as mst_dispatch returns it (buffers malloc'd). 0, -ENOMEM, or
 * LUNAR_ERR_INTERNAL for a secret of another length.
 * lp_secrets_unseal - the reverse on the client, so callers see the plain
 * 32 bytes an embedded master gives. 0, -ENOMEM, or LUNAR_ERR_UNAUTHORIZED
 * for a box that does not open or a secret that is not sealed.
 */
int lp_secrets_seal(const struct auth_session *s, uint32_t method, ProtobufCMessage *rep);
int lp_secrets_unseal(const struct auth_session *s, uint32_t method, ProtobufCMessage *rep);

#endif /* LUNAR_PROTO_RPC_AUTH_H */
