/*
 * test_rdma_wire.c - the RDMA connect and transfer frames as untrusted
 * input (engine/rdma_wire.c): a body round-trips; every truncation, a
 * longer buffer, each bad field and absurd value is refused without reading
 * past the buffer; random bytes never pass as a valid body by accident of a
 * missing check; a keyed reply's MAC covers its body. A transfer body's
 * pieces must be non-empty, not wrap, leave unused entries zero and sum to
 * the request's length.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rdma_int.h"
#include "lunar.h"
#include "tests/cmocka_main.h"

static struct eng_rdma_hs client_hs(void)
{
	struct eng_rdma_hs h = {.nqp = 4, .mtu = 3, .port = 1, .cap_op = ENG_OP_READ};

	h.gid[0] = 0xfe;
	h.gid[15] = 1;
	for (int i = 0; i < 4; i++) {
		h.qpn[i] = 0x11 + (uint32_t)i;
		h.psn[i] = 0xabcde + (uint32_t)i;
	}
	return h;
}

static struct eng_rdma_hs owner_hs(void)
{
	struct eng_rdma_hs h = client_hs();

	h.cap_op = 0;
	h.addr = 0x7f0000000000ull;
	h.length = 1ull << 30;
	h.rkey = 0x1234;
	h.lid = 7;
	return h;
}

static int dec(const unsigned char *b, size_t len, int from_owner)
{
	struct eng_rdma_hs out;

	return eng_rdma_hs_decode(b, len, from_owner, &out);
}

static void test_rdma_wire_round_trip(void **state)
{
	unsigned char b[ENG_RDMA_HS_SIZE];
	struct eng_rdma_hs in = owner_hs(), out;

	(void)state;
	eng_rdma_hs_encode(&in, b);
	assert_int_equal(eng_rdma_hs_decode(b, sizeof(b), 1, &out), 0);
	assert_memory_equal(&in, &out, sizeof(in));
	/* A body is valid from one side only. */
	assert_int_equal(dec(b, sizeof(b), 0), LUNAR_ERR_PROTOCOL);
	in = client_hs();
	eng_rdma_hs_encode(&in, b);
	assert_int_equal(eng_rdma_hs_decode(b, sizeof(b), 0, &out), 0);
	assert_memory_equal(&in, &out, sizeof(in));
	assert_int_equal(dec(b, sizeof(b), 1), LUNAR_ERR_PROTOCOL);
	/* Little-endian layout as documented. */
	assert_int_equal(b[0], 0x4c);
	assert_int_equal(b[6], 4);
	assert_int_equal(b[ENG_RDMA_HS_HEAD], 0x11);
}

static void test_rdma_wire_truncations(void **state)
{
	struct eng_rdma_hs h = client_hs();
	unsigned char b[ENG_RDMA_HS_SIZE + 16] = {0};

	(void)state;
	eng_rdma_hs_encode(&h, b);
	/* Each shorter length, from a heap copy of exactly that size: ASan
	 * catches a read past it. */
	for (size_t len = 0; len < ENG_RDMA_HS_SIZE; len++) {
		unsigned char *p = malloc(len ? len : 1);

		memcpy(p, b, len);
		assert_int_equal(dec(p, len, 0), LUNAR_ERR_PROTOCOL);
		free(p);
	}
	assert_int_equal(dec(b, ENG_RDMA_HS_SIZE + 1, 0), LUNAR_ERR_PROTOCOL);
	assert_int_equal(dec(b, ENG_RDMA_HS_SIZE + 16, 0), LUNAR_ERR_PROTOCOL);
	assert_int_equal(dec(NULL, ENG_RDMA_HS_SIZE, 0), LUNAR_ERR_PROTOCOL);
}

/* Encode h, apply one byte-level change, expect rc. */
static void expect_bad(struct eng_rdma_hs h, int from_owner, size_t at, unsigned char v, int rc)
{
	unsigned char b[ENG_RDMA_HS_SIZE];

	eng_rdma_hs_encode(&h, b);
	if (at < sizeof(b))
		b[at] = v;
	assert_int_equal(dec(b, sizeof(b), from_owner), rc);
}

static void test_rdma_wire_bad_fields(void **state)
{
	struct eng_rdma_hs h;

	(void)state;
	expect_bad(client_hs(), 0, 0, 0, LUNAR_ERR_PROTOCOL);	      /* magic */
	expect_bad(client_hs(), 0, 4, 1, LUNAR_ERR_VERSION_MISMATCH); /* version 1 */
	expect_bad(client_hs(), 0, 6, 0, LUNAR_ERR_PROTOCOL);	      /* nqp 0 */
	expect_bad(client_hs(), 0, 6, 9, LUNAR_ERR_PROTOCOL);	      /* nqp > 8 */
	expect_bad(client_hs(), 0, 7, 1, LUNAR_ERR_PROTOCOL);	      /* nqp 260 */
	expect_bad(client_hs(), 0, 8, 0, LUNAR_ERR_PROTOCOL);	      /* mtu 0 */
	expect_bad(client_hs(), 0, 8, 6, LUNAR_ERR_PROTOCOL);	      /* mtu 6 */
	expect_bad(client_hs(), 0, 9, 0, LUNAR_ERR_PROTOCOL);	      /* port 0 */
	expect_bad(client_hs(), 0, 12, 3, LUNAR_ERR_PROTOCOL);	      /* cap_op READ_DISK */
	expect_bad(client_hs(), 0, 12, 0, LUNAR_ERR_PROTOCOL);	      /* cap_op none */
	expect_bad(client_hs(), 0, 14, 1, LUNAR_ERR_PROTOCOL);	      /* flags */
	expect_bad(client_hs(), 0, 53, 1, LUNAR_ERR_PROTOCOL);	      /* reserved */
	expect_bad(client_hs(), 0, 32, 1, LUNAR_ERR_PROTOCOL);	      /* client addr */
	expect_bad(client_hs(), 0, 40, 1, LUNAR_ERR_PROTOCOL);	      /* client length */
	expect_bad(client_hs(), 0, 48, 1, LUNAR_ERR_PROTOCOL);	      /* client rkey */
	expect_bad(owner_hs(), 1, 12, 1, LUNAR_ERR_PROTOCOL);	      /* owner cap_op */
	/* QP table: qpn 0, above 24 bits, psn above 24 bits, a duplicate, an
	 * unused slot not zero. */
	expect_bad(client_hs(), 0, ENG_RDMA_HS_HEAD, 0, LUNAR_ERR_PROTOCOL);
	expect_bad(client_hs(), 0, ENG_RDMA_HS_HEAD + 3, 1, LUNAR_ERR_PROTOCOL);
	expect_bad(client_hs(), 0, ENG_RDMA_HS_HEAD + 7, 1, LUNAR_ERR_PROTOCOL);
	expect_bad(client_hs(), 0, ENG_RDMA_HS_HEAD + 8, 0x11, LUNAR_ERR_PROTOCOL);
	expect_bad(client_hs(), 0, ENG_RDMA_HS_HEAD + 8 * 5, 1, LUNAR_ERR_PROTOCOL);
	expect_bad(client_hs(), 0, ENG_RDMA_HS_SIZE - 1, 1, LUNAR_ERR_PROTOCOL);
	/* No address: neither LID nor GID. */
	h = client_hs();
	memset(h.gid, 0, sizeof(h.gid));
	expect_bad(h, 0, SIZE_MAX, 0, LUNAR_ERR_PROTOCOL);
	h.lid = 3;
	expect_bad(h, 0, SIZE_MAX, 0, 0);
	/* Owner: an empty segment, one that wraps, the largest that does not. */
	h = owner_hs();
	h.length = 0;
	expect_bad(h, 1, SIZE_MAX, 0, LUNAR_ERR_PROTOCOL);
	h.addr = UINT64_MAX - 10;
	h.length = 11;
	expect_bad(h, 1, SIZE_MAX, 0, LUNAR_ERR_PROTOCOL);
	h.length = 10;
	expect_bad(h, 1, SIZE_MAX, 0, 0);
	/* Every count from 1 to the most. */
	for (uint16_t n = 1; n <= ENG_RDMA_QP_MAX; n++) {
		h = client_hs();
		h.nqp = n;
		for (unsigned i = 0; i < n; i++)
			h.qpn[i] = ENG_RDMA_QPN_MAX - i;
		expect_bad(h, 0, SIZE_MAX, 0, 0);
	}
}

static void test_rdma_wire_random_bytes(void **state)
{
	unsigned char b[ENG_RDMA_HS_SIZE];
	struct eng_rdma_hs h = client_hs();
	unsigned seed = 7;

	(void)state;
	/* Random bodies: all refused (the magic alone makes them so)... */
	for (int i = 0; i < 20000; i++) {
		for (size_t j = 0; j < sizeof(b); j++)
			b[j] = (unsigned char)rand_r(&seed);
		assert_int_not_equal(dec(b, sizeof(b), i & 1), 0);
	}
	/* ...and random single-byte flips of a valid one decode or are
	 * refused, never crash. */
	for (int i = 0; i < 20000; i++) {
		eng_rdma_hs_encode(&h, b);
		b[rand_r(&seed) % sizeof(b)] ^= (unsigned char)(1 + rand_r(&seed) % 255);
		(void)dec(b, sizeof(b), 0);
	}
}

static void test_rdma_wire_reply_mac(void **state)
{
	struct auth_session s;
	struct eng_wire_krep rep = {
	    .h = {.magic = ENG_WIRE_REP_MAGIC, .id = 9, .length = ENG_RDMA_HS_SIZE}};
	struct eng_wire_krep copy;
	unsigned char body[ENG_RDMA_HS_SIZE];
	struct eng_rdma_hs h = owner_hs();

	(void)state;
	memset(&s, 0, sizeof(s));
	memset(s.tx_key, 5, sizeof(s.tx_key));
	memcpy(s.rx_key, s.tx_key, sizeof(s.rx_key)); /* one session plays both ends */
	eng_rdma_hs_encode(&h, body);
	eng_wire_rep_encode(&rep.h);
	eng_wire_krep_seal(&rep, &s, 3, body, sizeof(body));
	copy = rep;
	assert_int_equal(eng_wire_krep_open(&copy, &s, 3, body, sizeof(body)), 0);
	assert_int_equal(copy.h.id, 9);
	copy = rep;
	assert_int_equal(eng_wire_krep_open(&copy, &s, 4, body, sizeof(body)), -EPROTO);
	body[50] ^= 1; /* the rkey changed on the way */
	copy = rep;
	assert_int_equal(eng_wire_krep_open(&copy, &s, 3, body, sizeof(body)), -EPROTO);
}

/* A transfer body of n pieces of 1000 bytes each. */
static struct eng_rdma_xf xf_of(uint16_t n)
{
	struct eng_rdma_xf x = {.cap_op = ENG_OP_WRITE, .nsge = n};

	for (uint16_t i = 0; i < n; i++)
		x.sge[i] = (struct eng_rdma_sge){0x10000 + 4096ull * i, 1000, 0x77 + i};
	return x;
}

/* x encoded, the byte at `at` (if inside) set to v, decoded for total. */
static int xf_dec(struct eng_rdma_xf x, size_t at, unsigned char v, uint64_t total)
{
	unsigned char b[ENG_RDMA_XF_SIZE];
	struct eng_rdma_xf out;

	eng_rdma_xf_encode(&x, b);
	if (at < sizeof(b))
		b[at] = v;
	return eng_rdma_xf_decode(b, sizeof(b), total, &out);
}

static void test_rdma_wire_xfer_body(void **state)
{
	unsigned char b[ENG_RDMA_XF_SIZE + 1];
	struct eng_rdma_xf x = xf_of(3), out;
	const size_t e1 = ENG_RDMA_XF_HEAD + 16; /* the second entry */

	(void)state;
	eng_rdma_xf_encode(&x, b);
	assert_int_equal(eng_rdma_xf_decode(b, ENG_RDMA_XF_SIZE, 3000, &out), 0);
	assert_memory_equal(&out, &x, sizeof(x));
	for (size_t len = 0; len <= sizeof(b); len++)
		if (len != ENG_RDMA_XF_SIZE)
			assert_int_equal(eng_rdma_xf_decode(b, len, 3000, &out),
					 LUNAR_ERR_PROTOCOL);
	assert_int_equal(eng_rdma_xf_decode(NULL, ENG_RDMA_XF_SIZE, 3000, &out),
			 LUNAR_ERR_PROTOCOL);
	assert_int_equal(xf_dec(x, SIZE_MAX, 0, 2999), LUNAR_ERR_PROTOCOL); /* sum short */
	assert_int_equal(xf_dec(x, SIZE_MAX, 0, 3001), LUNAR_ERR_PROTOCOL); /* sum long */
	assert_int_equal(xf_dec(x, 0, 3, 3000), LUNAR_ERR_PROTOCOL);	    /* op READ_DISK */
	assert_int_equal(xf_dec(x, 0, 0, 3000), LUNAR_ERR_PROTOCOL);	    /* op none */
	assert_int_equal(xf_dec(x, 0, ENG_OP_READ, 3000), 0);
	assert_int_equal(xf_dec(x, 2, 0, 3000), LUNAR_ERR_PROTOCOL);  /* no pieces */
	assert_int_equal(xf_dec(x, 2, 17, 3000), LUNAR_ERR_PROTOCOL); /* too many */
	assert_int_equal(xf_dec(x, 5, 1, 3000), LUNAR_ERR_PROTOCOL);  /* reserved */
	/* An empty piece; one that wraps; a used count below what is there. */
	x.sge[1].len = 0;
	x.sge[2].len = 2000;
	assert_int_equal(xf_dec(x, SIZE_MAX, 0, 3000), LUNAR_ERR_PROTOCOL);
	x = xf_of(3);
	x.sge[1].addr = UINT64_MAX - 999;
	assert_int_equal(xf_dec(x, SIZE_MAX, 0, 3000), LUNAR_ERR_PROTOCOL);
	x.sge[1].addr = UINT64_MAX - 1000;
	assert_int_equal(xf_dec(x, SIZE_MAX, 0, 3000), 0);
	x = xf_of(3);
	assert_int_equal(xf_dec(x, 2, 2, 2000), LUNAR_ERR_PROTOCOL); /* entry 3 not zero */
	assert_int_equal(xf_dec(xf_of(1), e1 + 15, 1, 1000), LUNAR_ERR_PROTOCOL);
	/* The most pieces, each the most bytes: the sum does not wrap. */
	x = xf_of(ENG_RDMA_SGE_MAX);
	for (int i = 0; i < ENG_RDMA_SGE_MAX; i++)
		x.sge[i].len = UINT32_MAX;
	assert_int_equal(xf_dec(x, SIZE_MAX, 0, (uint64_t)UINT32_MAX * ENG_RDMA_SGE_MAX), 0);
}

LUNAR_TEST_MAIN(NULL, NULL, test_rdma_wire_round_trip, test_rdma_wire_truncations,
		test_rdma_wire_bad_fields, test_rdma_wire_random_bytes, test_rdma_wire_reply_mac,
		test_rdma_wire_xfer_body)
