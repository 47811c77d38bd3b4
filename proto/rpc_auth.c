/*
 * rpc_auth.c - the master RPC's authenticated envelope: fixed layouts per
 * kind, their tags, and the segment secrets sealed inside (Re)Mount
 * replies; see rpc_auth.h. Decoding trusts nothing: every length is
 * checked before any field is read.
 */
#include "rpc_auth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "lunar.h"
#include "rpc.h"

/* Offsets of each kind's fields after the 8-byte header; -1: absent. */
struct layout {
	int role, sid, ctr, hello, proof, tag;
	size_t fixed;	 /* bytes before the body */
	size_t min_body; /* a body of at least this; bodies only for CALL, REPLY */
	int has_body;
};

static const struct layout layouts[] = {
    [LP_KIND_HELLO] = {8, -1, -1, 12, -1, -1, 12 + AUTH_HELLO_BYTES, 0, 0},
    [LP_KIND_HELLO_REPLY] = {-1, 8, -1, 16, 16 + AUTH_HELLO_BYTES, -1,
			     16 + AUTH_HELLO_BYTES + AUTH_PROOF_BYTES, 0, 0},
    [LP_KIND_PROOF] = {-1, 8, -1, -1, 16, -1, 16 + AUTH_PROOF_BYTES, 0, 0},
    [LP_KIND_PROOF_REPLY] = {-1, 8, -1, -1, -1, 16, 16 + AUTH_TAG_BYTES, 0, 0},
    [LP_KIND_CALL] = {-1, 8, 16, -1, -1, 24, 24 + AUTH_TAG_BYTES, LP_HDR_SIZE, 1},
    [LP_KIND_REPLY] = {-1, -1, 8, -1, -1, 16, 16 + AUTH_TAG_BYTES, 0, 1},
    [LP_KIND_NO_SESSION] = {-1, 8, -1, -1, -1, -1, 16, 0, 0},
    [LP_KIND_STALE] = {-1, -1, 8, -1, -1, 16, 16 + AUTH_TAG_BYTES, 0, 0},
};

static const struct layout *layout_of(uint32_t kind)
{
	if (kind < LP_KIND_HELLO || kind > LP_KIND_STALE)
		return NULL;
	return &layouts[kind];
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int n)
{
	uint64_t v = 0;

	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

int lp_env_is(const void *buf, size_t len)
{
	return len >= 4 && get_le(buf, 4) == LP_ENV_MAGIC;
}

int lp_env_decode(const void *buf, size_t len, struct lp_env *e)
{
	const unsigned char *b = buf;
	const struct layout *l;

	if (len < LP_ENV_HDR || len > LP_MAX_MSG || !lp_env_is(buf, len))
		return LUNAR_ERR_PROTOCOL;
	memset(e, 0, sizeof(*e));
	e->kind = (uint32_t)get_le(b + 4, 4);
	l = layout_of(e->kind);
	if (!l || len < l->fixed + l->min_body || (!l->has_body && len != l->fixed))
		return LUNAR_ERR_PROTOCOL;
	if (l->role >= 0) {
		e->role = (uint32_t)get_le(b + l->role, 4);
		if (!auth_role_valid(e->role))
			return LUNAR_ERR_PROTOCOL;
	}
	if (l->sid >= 0)
		e->sid = get_le(b + l->sid, 8);
	if (l->ctr >= 0)
		e->ctr = get_le(b + l->ctr, 8);
	e->hello = l->hello >= 0 ? b + l->hello : NULL;
	e->proof = l->proof >= 0 ? b + l->proof : NULL;
	e->tag = l->tag >= 0 ? b + l->tag : NULL;
	if (l->has_body) {
		e->body = b + l->fixed;
		e->body_len = len - l->fixed;
	}
	return 0;
}

size_t lp_env_size(const struct lp_env *e)
{
	const struct layout *l = layout_of(e->kind);

	return l ? l->fixed + (l->has_body ? e->body_len : 0) : 0;
}

int lp_env_encode(const struct lp_env *e, void *out, size_t cap)
{
	const struct layout *l = layout_of(e->kind);
	unsigned char *b = out;
	size_t n = lp_env_size(e);

	if (!l)
		return -EINVAL;
	if (n > cap || n > LP_MAX_MSG || e->body_len > LP_MAX_MSG)
		return -EMSGSIZE;
	put_le(b, LP_ENV_MAGIC, 4);
	put_le(b + 4, e->kind, 4);
	if (l->role >= 0)
		put_le(b + l->role, e->role, 4);
	if (l->sid >= 0)
		put_le(b + l->sid, e->sid, 8);
	if (l->ctr >= 0)
		put_le(b + l->ctr, e->ctr, 8);
	if (l->hello >= 0)
		memcpy(b + l->hello, e->hello, AUTH_HELLO_BYTES);
	if (l->proof >= 0)
		memcpy(b + l->proof, e->proof, AUTH_PROOF_BYTES);
	if (l->tag >= 0)
		memcpy(b + l->tag, e->tag, AUTH_TAG_BYTES);
	if (l->has_body && e->body_len)
		memcpy(b + l->fixed, e->body, e->body_len);
	return (int)n;
}

/* The tag covers the header, the session id when the kind has one, and the
 * body; the counter goes to auth_mac on its own. */
void lp_env_tag(const unsigned char key[AUTH_KEY_BYTES], const struct lp_env *e,
		unsigned char tag[AUTH_TAG_BYTES])
{
	const struct layout *l = layout_of(e->kind);
	unsigned char head[16];
	struct iovec iov[2];
	int n = 1;

	put_le(head, LP_ENV_MAGIC, 4);
	put_le(head + 4, e->kind, 4);
	put_le(head + 8, e->sid, 8);
	iov[0].iov_base = head;
	iov[0].iov_len = l && l->sid >= 0 ? 16 : 8;
	if (l && l->has_body && e->body_len) {
		iov[1].iov_base = (void *)e->body;
		iov[1].iov_len = e->body_len;
		n = 2;
	}
	auth_mac(key, e->kind == LP_KIND_PROOF_REPLY ? LP_CTR_HANDSHAKE : e->ctr, iov, n, tag);
}

int lp_env_tag_check(const unsigned char key[AUTH_KEY_BYTES], const struct lp_env *e)
{
	const struct layout *l = layout_of(e->kind);
	unsigned char want[AUTH_TAG_BYTES];

	if (!l || l->tag < 0 || !e->tag)
		return LUNAR_ERR_UNAUTHORIZED;
	lp_env_tag(key, e, want);
	return sodium_memcmp(want, e->tag, AUTH_TAG_BYTES) ? LUNAR_ERR_UNAUTHORIZED : 0;
}

/* Replace *d (len AUTH_KEY_BYTES or AUTH_SEALED_BYTES) with its sealed or
 * opened form; other lengths are left to the caller. */
static int swap_secret(const struct auth_session *s, ProtobufCBinaryData *d, int seal)
{
	size_t n = seal ? AUTH_SEALED_BYTES : AUTH_KEY_BYTES;
	unsigned char *p = malloc(n);

	if (!p)
		return -ENOMEM;
	if (seal) {
		auth_seal(s, d->data, p);
	} else if (auth_unseal(s, d->data, p)) {
		free(p);
		return LUNAR_ERR_UNAUTHORIZED;
	}
	sodium_memzero(d->data, d->len);
	free(d->data);
	d->data = p;
	d->len = n;
	return 0;
}

static int each_secret(const struct auth_session *s, ProtobufCBinaryData *d, size_t n, int seal)
{
	size_t from = seal ? AUTH_KEY_BYTES : AUTH_SEALED_BYTES;
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (!d[i].len)
			continue; /* a keyless or failed mount: nothing to hide */
		if (d[i].len != from)
			return seal ? LUNAR_ERR_INTERNAL : LUNAR_ERR_UNAUTHORIZED;
		if ((rc = swap_secret(s, &d[i], seal)))
			return rc;
	}
	return 0;
}

static int secrets(const struct auth_session *s, uint32_t method, ProtobufCMessage *rep, int seal)
{
	if (method == LUNAR__METHOD__MOUNT_SEGMENT &&
	    rep->descriptor == &lunar__mount_segment_reply__descriptor) {
		Lunar__MountSegmentReply *r = (Lunar__MountSegmentReply *)rep;

		return each_secret(s, &r->segment_secret, 1, seal);
	}
	if (method == LUNAR__METHOD__REMOUNT_SEGMENT &&
	    rep->descriptor == &lunar__re_mount_segment_reply__descriptor) {
		Lunar__ReMountSegmentReply *r = (Lunar__ReMountSegmentReply *)rep;

		return each_secret(s, r->segment_secrets, r->n_segment_secrets, seal);
	}
	return 0;
}

int lp_secrets_seal(const struct auth_session *s, uint32_t method, ProtobufCMessage *rep)
{
	return secrets(s, method, rep, 1);
}

int lp_secrets_unseal(const struct auth_session *s, uint32_t method, ProtobufCMessage *rep)
{
	return secrets(s, method, rep, 0);
}
