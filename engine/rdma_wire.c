/*
 * rdma_wire.c - the RDMA connect and transfer frames (rdma_int.h): their
 * bodies' byte layout, the validation of a body that came from the network
 * (a fixed size, every field bounded, nothing read past the buffer), and
 * the MAC of a keyed connect reply, which unlike other replies covers a
 * body too.
 */
#include "rdma_int.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "lunar.h"

static void put16(unsigned char *p, uint16_t v)
{
	v = htole16(v);
	memcpy(p, &v, 2);
}

static void put32(unsigned char *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static void put64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

static uint16_t get16(const unsigned char *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return le16toh(v);
}

static uint32_t get32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static uint64_t get64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

void eng_rdma_hs_encode(const struct eng_rdma_hs *h, unsigned char *out)
{
	memset(out, 0, ENG_RDMA_HS_SIZE);
	put32(out, ENG_RDMA_HS_MAGIC);
	put16(out + 4, ENG_RDMA_HS_VERSION);
	put16(out + 6, h->nqp);
	out[8] = h->mtu;
	out[9] = h->port;
	put16(out + 10, h->lid);
	put16(out + 12, h->cap_op);
	memcpy(out + 16, h->gid, 16);
	put64(out + 32, h->addr);
	put64(out + 40, h->length);
	put32(out + 48, h->rkey);
	for (unsigned i = 0; i < h->nqp && i < ENG_RDMA_QP_MAX; i++) {
		put32(out + ENG_RDMA_HS_HEAD + 8 * i, h->qpn[i]);
		put32(out + ENG_RDMA_HS_HEAD + 8 * i + 4, h->psn[i]);
	}
}

/* Whether n bytes at p are all zero. */
static int all_zero(const unsigned char *p, size_t n)
{
	unsigned char acc = 0;

	while (n--)
		acc |= *p++;
	return !acc;
}

/* The QP table of buf into h (h->nqp set): used slots valid and distinct,
 * the rest zero. 0 or LUNAR_ERR_PROTOCOL. */
static int decode_qps(const unsigned char *buf, struct eng_rdma_hs *h)
{
	const unsigned char *t = buf + ENG_RDMA_HS_HEAD;

	for (unsigned i = 0; i < ENG_RDMA_QP_MAX; i++) {
		uint32_t qpn = get32(t + 8 * i), psn = get32(t + 8 * i + 4);

		if (i >= h->nqp) {
			if (qpn || psn)
				return LUNAR_ERR_PROTOCOL;
			continue;
		}
		if (!qpn || qpn > ENG_RDMA_QPN_MAX || psn > ENG_RDMA_QPN_MAX)
			return LUNAR_ERR_PROTOCOL;
		for (unsigned j = 0; j < i; j++)
			if (h->qpn[j] == qpn)
				return LUNAR_ERR_PROTOCOL;
		h->qpn[i] = qpn;
		h->psn[i] = psn;
	}
	return 0;
}

/* The fields one side must set and the other leave zero. */
static int check_side(const struct eng_rdma_hs *h, int from_owner)
{
	if (!from_owner)
		return h->addr || h->length || h->rkey ||
			       (h->cap_op != ENG_OP_READ && h->cap_op != ENG_OP_WRITE)
			   ? LUNAR_ERR_PROTOCOL
			   : 0;
	/* The owner's segment must be a range that does not wrap. */
	if (h->cap_op || !h->length || h->addr > UINT64_MAX - h->length)
		return LUNAR_ERR_PROTOCOL;
	return 0;
}

int eng_rdma_hs_decode(const unsigned char *buf, size_t len, int from_owner,
		       struct eng_rdma_hs *out)
{
	struct eng_rdma_hs h = {0};
	int rc;

	if (!buf || len != ENG_RDMA_HS_SIZE || get32(buf) != ENG_RDMA_HS_MAGIC)
		return LUNAR_ERR_PROTOCOL;
	if (get16(buf + 4) != ENG_RDMA_HS_VERSION)
		return LUNAR_ERR_VERSION_MISMATCH;
	h.nqp = get16(buf + 6);
	h.mtu = buf[8];
	h.port = buf[9];
	h.lid = get16(buf + 10);
	h.cap_op = get16(buf + 12);
	memcpy(h.gid, buf + 16, 16);
	h.addr = get64(buf + 32);
	h.length = get64(buf + 40);
	h.rkey = get32(buf + 48);
	/* mtu: IBV_MTU_256 (1) .. IBV_MTU_4096 (5). */
	if (!h.nqp || h.nqp > ENG_RDMA_QP_MAX || h.mtu < 1 || h.mtu > 5 || !h.port ||
	    get16(buf + 14) || get32(buf + 52))
		return LUNAR_ERR_PROTOCOL;
	/* An address to reach the sender by: a LID or a GID. */
	if (!h.lid && all_zero(h.gid, sizeof(h.gid)))
		return LUNAR_ERR_PROTOCOL;
	rc = check_side(&h, from_owner);
	if (!rc)
		rc = decode_qps(buf, &h);
	if (!rc)
		*out = h;
	return rc;
}

void eng_rdma_xf_encode(const struct eng_rdma_xf *x, unsigned char *out)
{
	memset(out, 0, ENG_RDMA_XF_SIZE);
	put16(out, x->cap_op);
	put16(out + 2, x->nsge);
	for (unsigned i = 0; i < x->nsge && i < ENG_RDMA_SGE_MAX; i++) {
		unsigned char *e = out + ENG_RDMA_XF_HEAD + 16 * i;

		put64(e, x->sge[i].addr);
		put32(e + 8, x->sge[i].len);
		put32(e + 12, x->sge[i].rkey);
	}
}

int eng_rdma_xf_decode(const unsigned char *buf, size_t len, uint64_t total,
		       struct eng_rdma_xf *out)
{
	struct eng_rdma_xf x = {0};
	uint64_t sum = 0;

	if (!buf || len != ENG_RDMA_XF_SIZE)
		return LUNAR_ERR_PROTOCOL;
	x.cap_op = get16(buf);
	x.nsge = get16(buf + 2);
	if ((x.cap_op != ENG_OP_READ && x.cap_op != ENG_OP_WRITE) || !x.nsge ||
	    x.nsge > ENG_RDMA_SGE_MAX || get32(buf + 4))
		return LUNAR_ERR_PROTOCOL;
	for (unsigned i = 0; i < x.nsge; i++) {
		const unsigned char *e = buf + ENG_RDMA_XF_HEAD + 16 * i;
		struct eng_rdma_sge *g = &x.sge[i];

		g->addr = get64(e);
		g->len = get32(e + 8);
		g->rkey = get32(e + 12);
		if (!g->len || g->addr > UINT64_MAX - g->len)
			return LUNAR_ERR_PROTOCOL;
		sum += g->len; /* at most 16 * 2^32: no wrap */
	}
	if (sum != total || !all_zero(buf + ENG_RDMA_XF_HEAD + 16 * x.nsge,
				      16 * (size_t)(ENG_RDMA_SGE_MAX - x.nsge)))
		return LUNAR_ERR_PROTOCOL;
	*out = x;
	return 0;
}
