/*
 * wire.c - the TCP frame headers (eng_int.h): byte order, the server's
 * check of a request against its segment, and for keyed frames their MACs,
 * counters and the capability check. Everything here reads untrusted bytes
 * of fixed size and decides in O(1).
 */
#include "eng_int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "lunar.h"

void eng_wire_req_encode(struct eng_wire_req *r)
{
	r->magic = htole32(r->magic);
	r->version = htole16(r->version);
	r->op = htole16(r->op);
	r->offset = htole64(r->offset);
	r->length = htole64(r->length);
	r->id = htole64(r->id);
}

void eng_wire_req_decode(struct eng_wire_req *r)
{
	r->magic = le32toh(r->magic);
	r->version = le16toh(r->version);
	r->op = le16toh(r->op);
	r->offset = le64toh(r->offset);
	r->length = le64toh(r->length);
	r->id = le64toh(r->id);
}

void eng_wire_rep_encode(struct eng_wire_rep *r)
{
	r->magic = htole32(r->magic);
	r->status = (int32_t)htole32((uint32_t)r->status);
	r->id = htole64(r->id);
	r->length = htole64(r->length);
}

void eng_wire_rep_decode(struct eng_wire_rep *r)
{
	r->magic = le32toh(r->magic);
	r->status = (int32_t)le32toh((uint32_t)r->status);
	r->id = le64toh(r->id);
	r->length = le64toh(r->length);
}

int eng_wire_req_check(const struct eng_wire_req *r, uint64_t seg_size, uint16_t version,
		       unsigned ops)
{
	if (r->magic != ENG_WIRE_REQ_MAGIC)
		return LUNAR_ERR_PROTOCOL;
	if (r->version != version)
		return LUNAR_ERR_VERSION_MISMATCH;
	if (r->op >= 32 || !(ops & ENG_OP_SET(r->op)))
		return LUNAR_ERR_PROTOCOL;
	/* Written so that no sum can wrap: offset <= size first, then the room. */
	if (r->length == 0 || r->offset > seg_size || r->length > seg_size - r->offset)
		return LUNAR_ERR_INVALID_PARAMS;
	return 0;
}

void eng_wire_kreq_encode(struct eng_wire_kreq *r)
{
	eng_wire_req_encode(&r->h);
	r->ctr = htole64(r->ctr);
	r->crc = htole32(r->crc);
	r->reserved = htole32(r->reserved);
	r->cap_offset = htole64(r->cap_offset);
	r->cap_length = htole64(r->cap_length);
	r->cap_version = htole64(r->cap_version);
	r->cap_expiry_ms = htole64(r->cap_expiry_ms);
}

void eng_wire_kreq_decode(struct eng_wire_kreq *r)
{
	eng_wire_req_decode(&r->h);
	r->ctr = le64toh(r->ctr);
	r->crc = le32toh(r->crc);
	r->reserved = le32toh(r->reserved);
	r->cap_offset = le64toh(r->cap_offset);
	r->cap_length = le64toh(r->cap_length);
	r->cap_version = le64toh(r->cap_version);
	r->cap_expiry_ms = le64toh(r->cap_expiry_ms);
}

void eng_wire_krep_encode(struct eng_wire_krep *r)
{
	eng_wire_rep_encode(&r->h);
	r->ctr = htole64(r->ctr);
}

void eng_wire_krep_decode(struct eng_wire_krep *r)
{
	eng_wire_rep_decode(&r->h);
	r->ctr = le64toh(r->ctr);
}

/* The MAC'd parts of a keyed request: its header before the MAC, a name. */
static int kreq_parts(const struct eng_wire_kreq *raw, const void *name, size_t nlen,
		      struct iovec v[2])
{
	v[0].iov_base = (void *)raw;
	v[0].iov_len = ENG_WIRE_KREQ_MACD;
	v[1].iov_base = (void *)name;
	v[1].iov_len = nlen;
	return name && nlen ? 2 : 1;
}

void eng_wire_kreq_seal(struct eng_wire_kreq *raw, struct auth_session *s, const void *name,
			size_t nlen, uint64_t *ctr)
{
	struct iovec v[2];
	int n = kreq_parts(raw, name, nlen, v);

	*ctr = auth_tx_next(s);
	raw->ctr = htole64(*ctr);
	auth_mac(s->tx_key, *ctr, v, n, raw->mac);
}

int eng_wire_kreq_open(struct eng_wire_kreq *raw, struct auth_session *s, const void *name,
		       size_t nlen)
{
	uint64_t ctr = le64toh(raw->ctr);
	struct iovec v[2];
	int n = kreq_parts(raw, name, nlen, v);

	if (auth_mac_check(s->rx_key, ctr, v, n, raw->mac))
		return ENG_REJ_MAC;
	/* TCP keeps order: exactly the next counter, never one seen before. */
	if (ctr != s->rx_top || auth_replay_accept(s, ctr))
		return ENG_REJ_REPLAY;
	eng_wire_kreq_decode(raw);
	return 0;
}

/* The MAC'd parts of a reply: its bytes before the MAC, then any body. */
static int rep_parts(struct eng_wire_krep *raw, const unsigned char *body, size_t blen,
		     struct iovec v[2])
{
	v[0].iov_base = raw;
	v[0].iov_len = offsetof(struct eng_wire_krep, mac);
	v[1].iov_base = (void *)body;
	v[1].iov_len = blen;
	return body && blen ? 2 : 1;
}

void eng_wire_krep_seal(struct eng_wire_krep *raw, const struct auth_session *s, uint64_t ctr,
			const unsigned char *body, size_t blen)
{
	struct iovec v[2];
	int n;

	raw->ctr = htole64(ctr);
	n = rep_parts(raw, body, blen, v);
	auth_mac(s->tx_key, ctr, v, n, raw->mac);
}

int eng_wire_krep_open(struct eng_wire_krep *raw, const struct auth_session *s, uint64_t ctr,
		       const unsigned char *body, size_t blen)
{
	struct iovec v[2];
	int n = rep_parts(raw, body, blen, v);

	if (le64toh(raw->ctr) != ctr || auth_mac_check(s->rx_key, ctr, v, n, raw->mac))
		return -EPROTO;
	eng_wire_krep_decode(raw);
	return 0;
}

int eng_wire_cap_check(const struct eng_wire_kreq *r, const unsigned char *secret,
		       const char *segment, const void *subject, size_t subject_len,
		       uint64_t now_ms)
{
	const struct eng_wire_req *h = &r->h;
	struct auth_cap c = {
	    .segment = segment,
	    .segment_len = strlen(segment),
	    .subject = subject,
	    .subject_len = subject_len,
	    .op = h->op,
	    .offset = r->cap_offset,
	    .length = r->cap_length,
	    .version = r->cap_version,
	    .expiry_ms = r->cap_expiry_ms,
	};

	if (!secret)
		return LUNAR_ERR_UNAUTHORIZED;
	if (h->op == ENG_OP_READ_DISK) {
		if (!subject || r->cap_offset || h->length > r->cap_length)
			return LUNAR_ERR_UNAUTHORIZED;
	} else if (subject || h->offset < r->cap_offset ||
		   h->offset - r->cap_offset > r->cap_length ||
		   h->length > r->cap_length - (h->offset - r->cap_offset)) {
		return LUNAR_ERR_UNAUTHORIZED; /* written so that nothing wraps */
	}
	now_ms = now_ms > ENG_CAP_SKEW_MS ? now_ms - ENG_CAP_SKEW_MS : 0;
	return auth_cap_check(secret, &c, r->cap, now_ms);
}
