/*
 * fuzz_frame.c - libFuzzer target for what a data port reads from a peer
 * before it trusts it (engine/wire.c, engine/rdma_wire.c): a plain request
 * header and its check against a segment, a keyed request header opened
 * under a session (MAC, counter), its capability checked under a segment
 * secret, a keyed reply opened for a counter, and an RDMA connect body from
 * either side. The target checks the promises the server acts on: a request
 * accepted for a segment lies inside it, and a connect body accepted has
 * its counts and ranges in bounds.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/eng_int.h"
#include "engine/rdma_int.h"
#include "lunar.h"
#include "fuzz_check.h"

#define SEG_SIZE (1ull << 30)

static void plain(const uint8_t *d, size_t n)
{
	static const uint16_t versions[] = {ENG_WIRE_VERSION, ENG_WIRE_VERSION_KEYED};
	struct eng_wire_req r;

	if (n < sizeof(r))
		return;
	memcpy(&r, d, sizeof(r));
	eng_wire_req_decode(&r);
	for (size_t i = 0; i < sizeof(versions) / sizeof(versions[0]); i++)
		if (!eng_wire_req_check(&r, SEG_SIZE, versions[i], ~0u))
			FZ_CHECK(r.offset <= SEG_SIZE && r.length <= SEG_SIZE - r.offset);
}

static void keyed(const uint8_t *d, size_t n)
{
	static const unsigned char secret[AUTH_KEY_BYTES] = {1, 2, 3};
	struct auth_session s = {.tx_key = {4}, .rx_key = {5}, .box_key = {6}};
	struct eng_wire_kreq k;
	struct eng_wire_krep p;
	size_t name = n > sizeof(k) ? n - sizeof(k) : 0;

	if (n < sizeof(k))
		return;
	memcpy(&k, d, sizeof(k));
	if (!eng_wire_kreq_open(&k, &s, d + sizeof(k), name))
		FZ_CHECK(s.rx_top > 0); /* a counter was taken */
	memcpy(&k, d, sizeof(k));
	eng_wire_kreq_decode(&k);
	if (!eng_wire_req_check(&k.h, SEG_SIZE, ENG_WIRE_VERSION_KEYED, ENG_OPS_DATA))
		(void)eng_wire_cap_check(&k, secret, "127.0.0.1:1", NULL, 0, 1000);
	memcpy(&p, d, sizeof(p));
	(void)eng_wire_krep_open(&p, &s, k.ctr, NULL, 0);
}

static void connect_body(const uint8_t *d, size_t n)
{
	struct eng_rdma_hs h;

	for (int owner = 0; owner < 2; owner++) {
		if (eng_rdma_hs_decode(d, n, owner, &h))
			continue;
		FZ_CHECK(h.nqp >= 1 && h.nqp <= ENG_RDMA_QP_MAX);
		if (owner)
			FZ_CHECK(h.length > 0 && h.addr + h.length > h.addr);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)
{
	if (!n)
		return 0;
	/* The first byte picks a reader, so each sees the bytes from offset 1. */
	switch (d[0] % 3) {
	case 0: plain(d + 1, n - 1); break;
	case 1: keyed(d + 1, n - 1); break;
	default: connect_body(d + 1, n - 1); break;
	}
	return 0;
}
