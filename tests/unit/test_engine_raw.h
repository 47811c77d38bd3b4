/*
 * test_engine_raw.h - a peer of a keyed data port played by the test on a
 * raw socket: connected, past the handshake, and its requests sealed by
 * hand. Include after cmocka.h, engine/eng_int.h and test_engine_util.h.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_ENGINE_RAW_H
#define LUNAR_TESTS_UNIT_TEST_ENGINE_RAW_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "clock.h"

/* A raw connection to b's data port, from 127.0.0.1. */
static inline int raw_to(const struct node *b)
{
	const char *colon = strrchr(eng_engine_endpoint(b->e), ':');
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(colon + 1))};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* A raw connection to b past the handshake, speaking as a. */
static inline int raw_keyed(struct node *a, const struct node *b, struct auth_session *s)
{
	int fd = raw_to(b);

	assert_int_equal(eng_hs_client(a->e, fd, s, lc_now_ns() + 5000000000ull), 0);
	return fd;
}

/* An encoded, sealed keyed request. */
static inline struct eng_wire_kreq kreq(struct auth_session *c, uint16_t op, uint64_t off,
					uint64_t len, const struct eng_cap *cap)
{
	struct eng_wire_kreq k = {
	    .h = {.magic = ENG_WIRE_REQ_MAGIC,
		  .version = ENG_WIRE_VERSION_KEYED,
		  .op = op,
		  .offset = off,
		  .length = len,
		  .id = 7},
	    .cap_offset = cap->offset,
	    .cap_length = cap->length,
	    .cap_version = cap->version,
	    .cap_expiry_ms = cap->expiry_ms,
	};
	uint64_t ctr;

	memcpy(k.cap, cap->tag, sizeof(k.cap));
	eng_wire_kreq_encode(&k);
	eng_wire_kreq_seal(&k, c, NULL, 0, &ctr);
	return k;
}

/* A READ of [0, 64) under cap on fd (session s), answered in full: the
 * connection is then past its handshake at the owner, and idle. */
static inline void raw_read64(int fd, struct auth_session *s, const struct eng_cap *cap)
{
	unsigned char buf[ENG_WIRE_REP_FRAME + 64];
	struct eng_wire_kreq k = kreq(s, ENG_OP_READ, 0, 64, cap);
	struct eng_wire_krep rep;

	assert_int_equal(send(fd, &k, sizeof(k), 0), sizeof(k));
	assert_int_equal(recv(fd, buf, sizeof(buf), MSG_WAITALL), sizeof(buf));
	memcpy(&rep, buf, sizeof(rep));
	assert_int_equal(eng_wire_krep_open(&rep, s, le64toh(k.ctr), NULL, 0), 0);
	assert_int_equal(rep.h.status, 0);
}

#endif /* LUNAR_TESTS_UNIT_TEST_ENGINE_RAW_H */
