/*
 * test_engine_auth.c - the keyed data port (SPEC §13) as untrusted input:
 * keyed frames whose every bit is under the MAC, counters taken once and in
 * order, capability checks that refuse another range, op, version, secret
 * or an expired grant and cannot be wrapped around; then engines on
 * loopback: a keyed pair moves bytes only with grants, a keyless peer gets
 * nothing, a replayed or altered frame and a WRITE unlike its CRC close the
 * connection, a keyed WRITE goes in frames that each name their own
 * CRC32C, a grant the owner refuses comes back UNAUTHORIZED (not a
 * failed peer: a fresh grant may pass), and each refusal is counted.
 * White-box: it speaks the wire
 * through engine/eng_int.h.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "crc32c.h"
#include "engine/eng_int.h"
#include "lunar.h"
#include "test_engine_util.h"
#include "test_engine_raw.h"
#include "test_listen.h"
#include "tests/cmocka_main.h"

#define SEG_SIZE (8u << 20)
#define MIB	 (1u << 20)

static struct auth_key key;
static unsigned char secret[AUTH_KEY_BYTES];

static struct node node_start(const struct auth_key *k)
{
	struct eng_config cfg = {.host = "127.0.0.1",
				 .seg_size = SEG_SIZE,
				 .cluster_key = k,
				 .slices = ENG_SLICE_MAX}; /* sliced whatever the CPUs */
	struct node n = node_create(cfg);

	if (k)
		assert_int_equal(eng_engine_set_secret(n.e, eng_engine_endpoint(n.e), secret), 0);
	return n;
}

static int xfer(struct node *a, struct node *b, enum eng_dir dir, uint64_t off, void *buf,
		size_t len, const struct eng_cap *cap)
{
	struct iovec v = {buf, len};

	return eng_xfer(a->e, eng_engine_endpoint(b->e), dir, off, &v, 1, cap, NULL);
}

static int setup(void **state)
{
	(void)state;
	keys_make(&key, secret);
	return 0;
}

/* Sessions of both ends, made in memory. */
static void session_pair(struct auth_session *c, struct auth_session *s)
{
	struct auth_hs hc, hs;
	unsigned char ch[AUTH_HELLO_BYTES], sh[AUTH_HELLO_BYTES], p[AUTH_PROOF_BYTES];

	auth_hs_start(&hc, 1, ch);
	auth_hs_start(&hs, 0, sh);
	assert_int_equal(auth_hs_peer(&hs, ch), 0);
	assert_int_equal(auth_hs_peer(&hc, sh), 0);
	auth_hs_proof(&hs, &key, AUTH_ROLE_SERVER, p);
	assert_int_equal(auth_hs_verify(&hc, &key, AUTH_ROLE_SERVER, p), 0);
	auth_hs_proof(&hc, &key, AUTH_ROLE_NODE, p);
	assert_int_equal(auth_hs_verify(&hs, &key, AUTH_ROLE_NODE, p), 0);
	assert_int_equal(auth_hs_finish(&hc, &key, AUTH_ROLE_NODE, c), 0);
	assert_int_equal(auth_hs_finish(&hs, &key, AUTH_ROLE_NODE, s), 0);
}

static void test_engine_auth_frame_bits_and_counters(void **state)
{
	struct auth_session c, s, s0;
	struct eng_cap cap = grant(secret, "seg", ENG_OP_READ, 0, 4096, 1, UINT64_MAX);
	struct eng_wire_kreq k, x;

	(void)state;
	session_pair(&c, &s);
	k = kreq(&c, ENG_OP_READ, 0, 4096, &cap);
	s0 = s;
	/* Any flipped bit of the header, its MAC included, fails the MAC
	 * (the padding after it is not read). */
	for (size_t bit = 0; bit < 8 * offsetof(struct eng_wire_kreq, pad); bit++) {
		x = k;
		((unsigned char *)&x)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		assert_int_equal(eng_wire_kreq_open(&x, &s, NULL, 0), ENG_REJ_MAC);
	}
	assert_memory_equal(&s, &s0, sizeof(s)); /* a refused frame moves no window */
	x = k;
	assert_int_equal(eng_wire_kreq_open(&x, &s, NULL, 0), 0);
	assert_int_equal(x.h.offset, 0);
	assert_int_equal(x.h.length, 4096);
	x = k; /* the same frame again: a replay */
	assert_int_equal(eng_wire_kreq_open(&x, &s, NULL, 0), ENG_REJ_REPLAY);
	/* Counters strictly in order: 2 before 1 is refused (TCP keeps order). */
	k = kreq(&c, ENG_OP_READ, 0, 4096, &cap);
	x = kreq(&c, ENG_OP_READ, 0, 4096, &cap);
	assert_int_equal(eng_wire_kreq_open(&x, &s, NULL, 0), ENG_REJ_REPLAY);
	/* A frame sealed for the other direction, or another session, fails. */
	session_pair(&c, &s0);
	x = kreq(&c, ENG_OP_READ, 0, 4096, &cap);
	assert_int_equal(eng_wire_kreq_open(&x, &s, NULL, 0), ENG_REJ_MAC);
}

static void test_engine_auth_reply_bound_to_request(void **state)
{
	struct auth_session c, s;
	struct eng_wire_krep r = {.h = {.magic = ENG_WIRE_REP_MAGIC, .id = 7, .length = 9}}, x;

	(void)state;
	session_pair(&c, &s);
	eng_wire_krep_encode(&r);
	eng_wire_krep_seal(&r, &s, 5, NULL, 0);
	x = r;
	assert_int_equal(eng_wire_krep_open(&x, &c, 5, NULL, 0), 0);
	assert_int_equal(x.h.length, 9);
	x = r;
	assert_int_equal(eng_wire_krep_open(&x, &c, 4, NULL, 0), -EPROTO); /* another request's */
	for (size_t bit = 0; bit < 8 * offsetof(struct eng_wire_krep, pad); bit += 7) {
		x = r;
		((unsigned char *)&x)[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		assert_int_equal(eng_wire_krep_open(&x, &c, 5, NULL, 0), -EPROTO);
	}
}

/* eng_wire_cap_check of a decoded request for [off, off + len) with cap. */
static int check(uint16_t op, uint64_t off, uint64_t len, const struct eng_cap *cap,
		 const char *seg, const void *subject, size_t slen)
{
	struct eng_wire_kreq k = {
	    .h =
		{.magic = ENG_WIRE_REQ_MAGIC, .version = 2, .op = op, .offset = off, .length = len},
	    .cap_offset = cap->offset,
	    .cap_length = cap->length,
	    .cap_version = cap->version,
	    .cap_expiry_ms = cap->expiry_ms,
	};

	memcpy(k.cap, cap->tag, sizeof(k.cap));
	return eng_wire_cap_check(&k, secret, seg, subject, slen, lc_now_ms());
}

static void test_engine_auth_capability_checks(void **state)
{
	uint64_t later = lc_now_ms() + 60000, big = UINT64_MAX - 10;
	struct eng_cap w = grant(secret, "seg", ENG_OP_WRITE, 4096, 8192, 3, later), x;
	unsigned char other[AUTH_KEY_BYTES];
	const char name[] = "default\0k1";

	(void)state;
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &w, "seg", NULL, 0), 0);
	assert_int_equal(check(ENG_OP_WRITE, 8192, 4096, &w, "seg", NULL, 0), 0); /* a slice */
	assert_int_equal(check(ENG_OP_WRITE, 0, 4096, &w, "seg", NULL, 0), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(check(ENG_OP_WRITE, 8192, 8192, &w, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(check(ENG_OP_READ, 4096, 8192, &w, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &w, "seh", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	x = w;
	x.version = 4; /* a grant for another value of the key */
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	x = w;
	x.length = 1 << 20; /* a range widened by the peer */
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	auth_random(other, sizeof(other));
	x = grant(other, "seg", ENG_OP_WRITE, 4096, 8192, 3, later);
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	/* Expired: refused past the skew tolerance, taken within it. */
	x = grant(secret, "seg", ENG_OP_WRITE, 4096, 8192, 3, lc_now_ms() - ENG_CAP_SKEW_MS - 1000);
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	x = grant(secret, "seg", ENG_OP_WRITE, 4096, 8192, 3, lc_now_ms() - ENG_CAP_SKEW_MS / 2);
	assert_int_equal(check(ENG_OP_WRITE, 4096, 8192, &x, "seg", NULL, 0), 0);
	/* Ranges near the top of u64 cannot wrap past the check. */
	x = grant(secret, "seg", ENG_OP_READ, big, 10, 3, later);
	assert_int_equal(check(ENG_OP_READ, big + 2, 8, &x, "seg", NULL, 0), 0);
	assert_int_equal(check(ENG_OP_READ, big + 5, 20, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(check(ENG_OP_READ, big + 5, UINT64_MAX - 2, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(check(ENG_OP_READ, 5, UINT64_MAX, &x, "seg", NULL, 0),
			 LUNAR_ERR_UNAUTHORIZED);
	/* A disk read names its record: another one, or a range grant, fails. */
	x = grant(secret, "seg", ENG_OP_READ_DISK, 0, 100, 3, later);
	assert_int_equal(check(ENG_OP_READ_DISK, 10, 100, &x, "seg", name, 10),
			 LUNAR_ERR_UNAUTHORIZED); /* made without the subject */
	{
		struct auth_cap c = {.segment = "seg",
				     .segment_len = 3,
				     .subject = name,
				     .subject_len = 10,
				     .op = ENG_OP_READ_DISK,
				     .length = 100,
				     .version = 3,
				     .expiry_ms = later};

		auth_cap_make(secret, &c, x.tag);
	}
	assert_int_equal(check(ENG_OP_READ_DISK, 10, 100, &x, "seg", name, 10), 0);
	assert_int_equal(check(ENG_OP_READ_DISK, 10, 101, &x, "seg", name, 10),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(check(ENG_OP_READ_DISK, 10, 100, &x, "seg", "default\0k2", 10),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(eng_wire_cap_check(&(struct eng_wire_kreq){0}, NULL, "seg", NULL, 0, 0),
			 LUNAR_ERR_UNAUTHORIZED);
}

static void test_engine_auth_keyed_transfers(void **state)
{
	struct node a = node_start(&key), b = node_start(&key);
	const char *seg = eng_engine_endpoint(b.e);
	uint64_t later = lc_now_ms() + 60000;
	size_t len = 5 * MIB + 77; /* sliced over several connections */
	unsigned char *w = malloc(len), *r = malloc(len);
	struct eng_cap wc = grant(secret, seg, ENG_OP_WRITE, 4096, len, 9, later);
	struct eng_cap rc = grant(secret, seg, ENG_OP_READ, 4096, len, 9, later);
	struct iovec v = {w, len};
	uint32_t crc = 0;

	(void)state;
	assert_non_null(w);
	assert_non_null(r);
	for (size_t i = 0; i < len; i++)
		w[i] = (unsigned char)(i * 31 + 7);
	assert_int_equal(eng_xfer(a.e, seg, ENG_WRITE, 4096, &v, 1, &wc, &crc), 0);
	assert_int_equal(crc, lc_crc32c(0, w, len));
	assert_memory_equal(b.seg + 4096, w, len);
	assert_int_equal(xfer(&a, &b, ENG_READ, 4096, r, len, &rc), 0);
	assert_memory_equal(r, w, len);
	/* 4 KiB inside the grant, on a pooled connection: a later counter. */
	assert_int_equal(xfer(&a, &b, ENG_READ, 8192, r, 4096, &rc), 0);
	assert_memory_equal(r, w + 4096, 4096);
	/* No grant: nothing sent at all. */
	assert_int_equal(xfer(&a, &b, ENG_READ, 4096, r, 4096, NULL), ENG_XFER_UNSENT);
	for (int i = 0; i < ENG_REJ_COUNT; i++)
		assert_int_equal(eng_engine_rejected(b.e, i), 0);
	node_stop(&a);
	node_stop(&b);
	free(w);
	free(r);
}

static void test_engine_auth_wrong_grants_refused(void **state)
{
	struct node a = node_start(&key), b = node_start(&key);
	const char *seg = eng_engine_endpoint(b.e);
	uint64_t later = lc_now_ms() + 60000;
	unsigned char buf[4096], zero[4096] = {0}, other[AUTH_KEY_BYTES];
	struct eng_cap caps[5];

	(void)state;
	auth_random(other, sizeof(other));
	caps[0] = grant(secret, seg, ENG_OP_WRITE, 0, 4096, 1, later);	 /* another range */
	caps[1] = grant(secret, seg, ENG_OP_READ, 8192, 4096, 1, later); /* another op */
	caps[2] = grant(secret, seg, ENG_OP_WRITE, 8192, 4096, 1, lc_now_ms() - 60000);
	caps[3] = grant(other, seg, ENG_OP_WRITE, 8192, 4096, 1, later);
	caps[4] = grant(secret, "127.0.0.1:1", ENG_OP_WRITE, 8192, 4096, 1, later);
	memset(buf, 0xAB, sizeof(buf));
	for (int i = 0; i < 5; i++)
		assert_int_equal(xfer(&a, &b, ENG_WRITE, 8192, buf, sizeof(buf), &caps[i]),
				 LUNAR_ERR_UNAUTHORIZED);
	assert_memory_equal(b.seg + 8192, zero, sizeof(zero)); /* never touched */
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), 5);
	/* Before the master gave the segment a secret, nothing is granted. */
	{
		struct node c = node_start(NULL);
		struct eng_config cfg = {.host = "127.0.0.1",
					 .seg_size = SEG_SIZE,
					 .seg_base = c.seg,
					 .cluster_key = &key};
		struct eng_engine *d;

		assert_int_equal(eng_engine_create(&cfg, &d), 0);
		caps[0] = grant(secret, eng_engine_endpoint(d), ENG_OP_READ, 0, 4096, 1, later);
		assert_int_equal(eng_xfer(a.e, eng_engine_endpoint(d), ENG_READ, 0,
					  &(struct iovec){buf, 4096}, 1, &caps[0], NULL),
				 LUNAR_ERR_UNAUTHORIZED);
		assert_int_equal(eng_engine_rejected(d, ENG_REJ_CAPABILITY), 1);
		eng_engine_destroy(d);
		node_stop(&c);
	}
	node_stop(&a);
	node_stop(&b);
}

/* A fence (before a re-mount) forgets the segment's secret: a grant made
 * before it is refused, with the connection it came on closed, until the
 * mount's new secret comes; then only grants under that one are taken. A
 * handshake the fence cuts short is not counted as a refused one. */
static void test_engine_auth_fence_forgets_the_secret(void **state)
{
	struct node a = node_start(&key), b = node_start(&key);
	const char *seg = eng_engine_endpoint(b.e);
	uint64_t later = lc_now_ms() + 60000;
	unsigned char buf[4096], next[AUTH_KEY_BYTES];
	struct eng_cap old = grant(secret, seg, ENG_OP_WRITE, 0, sizeof(buf), 1, later), now;
	int silent = raw_to(&b); /* in its handshake when the fence comes */

	(void)state;
	usleep(100 * 1000); /* the listener takes it */
	memset(buf, 0xCD, sizeof(buf));
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &old), 0);
	assert_int_equal(eng_engine_fence(b.e), 0);
	/* The fence cut it short: not a peer's refused handshake. */
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_HANDSHAKE), 0);
	close(silent);
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &old),
			 LUNAR_ERR_UNAUTHORIZED);
	auth_random(next, sizeof(next));
	assert_int_equal(eng_engine_set_secret(b.e, seg, next), 0);
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &old),
			 LUNAR_ERR_UNAUTHORIZED);
	now = grant(next, seg, ENG_OP_WRITE, 0, sizeof(buf), 1, later);
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &now), 0);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), 2);
	node_stop(&a);
	node_stop(&b);
}

/*
 * Expiries are on the master's capability clock as the owner estimates it
 * (eng_engine_set_clock), never on the owner's own clocks: with the master's
 * clock a day ahead of b's (another machine, or b in a time namespace), a
 * grant the master made for 60 s from its now is good, one that ended 60 s
 * ago on its clock is refused, and so is one that would only be good on b's
 * own clock.
 */
static void test_engine_auth_expiry_on_master_clock(void **state)
{
	struct node a = node_start(&key), b = node_start(&key);
	const char *seg = eng_engine_endpoint(b.e);
	uint64_t day = 86400000ull, now = lc_now_ms(), mnow = now + day;
	unsigned char buf[4096];
	struct eng_cap good = grant(secret, seg, ENG_OP_READ, 0, 4096, 1, mnow + 60000);
	struct eng_cap past = grant(secret, seg, ENG_OP_READ, 0, 4096, 1, mnow - 60000);
	struct eng_cap ours = grant(secret, seg, ENG_OP_READ, 0, 4096, 1, now + 60000);

	(void)state;
	eng_engine_set_clock(b.e, mnow, now);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &good), 0);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &past),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &ours),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), 2);
	node_stop(&a);
	node_stop(&b);
}

/* A keyed transfer cut into slices (several connections, each slice's
 * CRC32C in its own header) lands whole, and the CRC32C reported is the
 * whole value's, the slices' combined; the source spans two iovecs. */
static void test_engine_auth_sliced_crc(void **state)
{
	struct node a = node_start(&key), b = node_start(&key);
	const char *seg = eng_engine_endpoint(b.e);
	size_t len = 3 * MIB + 4099, half = MIB + 17;
	unsigned char *src = malloc(len), *dst = calloc(1, len);
	struct iovec w[2] = {{src, half}, {src + half, len - half}}, r = {dst, len};
	struct eng_cap wc = grant(secret, seg, ENG_OP_WRITE, 64, len, 3, UINT64_MAX);
	struct eng_cap rc = grant(secret, seg, ENG_OP_READ, 64, len, 3, UINT64_MAX);
	uint32_t crc = 1;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 2654435761u >> 13);
	assert_int_equal(eng_xfer(a.e, seg, ENG_WRITE, 64, w, 2, &wc, &crc), 0);
	assert_int_equal(crc, lc_crc32c(0, src, len));
	assert_memory_equal(b.seg + 64, src, len);
	crc = 1;
	assert_int_equal(eng_xfer(a.e, seg, ENG_READ, 64, &r, 1, &rc, &crc), 0);
	assert_int_equal(crc, lc_crc32c(0, src, len));
	assert_memory_equal(dst, src, len);
	free(src);
	free(dst);
	node_stop(&a);
	node_stop(&b);
}

/* The owner's side of one keyed connection, played by the test on a
 * listening socket with b's engine for the handshake: it takes WRITE
 * frames into seg until the writer closes (or until it refuses one),
 * checking each. */
struct frames {
	struct node *b;
	int lfd;
	unsigned char *seg;
	unsigned n;	 /* frames taken */
	uint64_t next;	 /* where the next frame must start */
	int bad;	 /* a frame over ENG_WRITE_FRAME, out of order or unlike its CRC */
	unsigned refuse; /* refuse the frame after this many, then close; 0 never */
};

static void *frames_serve(void *arg)
{
	struct frames *f = arg;
	struct auth_session s;
	struct eng_wire_kreq k;
	const char *why;
	int fd = accept(f->lfd, NULL, NULL);
	uint64_t deadline = lc_now_ns() + 10000000000ull;

	/* As the engine's own server: a refusal's reply leaves before the
	 * close that cuts the connection. */
	if (fd < 0 || eng_sock_nodelay(fd) || eng_hs_server(f->b->e, fd, &s, deadline, &why))
		f->bad = 1;
	while (!f->bad && recv(fd, &k, sizeof(k), MSG_WAITALL) == (ssize_t)sizeof(k)) {
		struct eng_srv_req q = {.fd = fd, .s = &s, .ctr = le64toh(k.ctr)};

		if (f->refuse && f->n == f->refuse && !eng_wire_kreq_open(&k, &s, NULL, 0)) {
			q.id = k.h.id; /* as a fence between frames has it */
			eng_send_rep(&q, LUNAR_ERR_UNAUTHORIZED, k.h.length, 0, deadline);
			break;
		}
		if (eng_wire_kreq_open(&k, &s, NULL, 0) || k.h.op != ENG_OP_WRITE ||
		    k.h.length > ENG_WRITE_FRAME || k.h.offset != f->next ||
		    recv(fd, f->seg + k.h.offset, k.h.length, MSG_WAITALL) != (ssize_t)k.h.length ||
		    lc_crc32c(0, f->seg + k.h.offset, k.h.length) != k.crc) {
			f->bad = 1;
			break;
		}
		q.id = k.h.id;
		f->next += k.h.length;
		f->n++;
		if (eng_send_rep(&q, 0, k.h.length, 0, deadline))
			f->bad = 1;
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* A keyed WRITE whose CRC32C the writer computes goes in frames of at most
 * ENG_WRITE_FRAME bytes, each under its own MAC and counter and naming its
 * own bytes' CRC32C, in order (so each frame's checksum runs while the
 * last one crosses); the owner takes them all and the writer reports the
 * whole value's CRC32C. One slice, so one connection, carries them. */
static void test_engine_auth_keyed_write_in_frames(void **state)
{
	struct eng_config cfg = {
	    .host = "127.0.0.1", .seg_size = SEG_SIZE, .cluster_key = &key, .slices = 1};
	struct node a = node_create(cfg), b = node_start(&key);
	size_t len = 4 * ENG_WRITE_FRAME + 5;
	unsigned char *src = malloc(len);
	struct frames f = {.b = &b, .seg = calloc(1, len)};
	uint16_t port;
	struct iovec v = {src, len};
	char ep[64];
	pthread_t t;
	uint32_t crc = 1;

	(void)state;
	assert_non_null(src);
	assert_non_null(f.seg);
	for (size_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 2654435761u >> 11);
	f.lfd = test_listen_loopback(1, &port);
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	assert_int_equal(pthread_create(&t, NULL, frames_serve, &f), 0);
	{
		struct eng_cap wc = grant(secret, ep, ENG_OP_WRITE, 0, len, 1, UINT64_MAX);

		assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 0, &v, 1, &wc, &crc), 0);
	}
	node_stop(&a); /* closes the pooled connection: the owner's loop ends */
	pthread_join(t, NULL);
	close(f.lfd);
	assert_false(f.bad);
	assert_int_equal(f.n, 5);
	assert_int_equal(f.next, len);
	assert_memory_equal(f.seg, src, len);
	assert_int_equal(crc, lc_crc32c(0, src, len));
	free(src);
	free(f.seg);
	node_stop(&b);
}

/* A framed WRITE larger than the sockets hold whose second frame the owner
 * refuses, and closes, while the writer still sends: the writer finds the
 * refusal among the replies (after the first frame's), UNAUTHORIZED. */
static void test_engine_auth_later_frame_refused_unauthorized(void **state)
{
	struct eng_config cfg = {
	    .host = "127.0.0.1", .seg_size = SEG_SIZE, .cluster_key = &key, .slices = 1};
	struct node a = node_create(cfg), b = node_start(&key);
	size_t len = 64 * ENG_WRITE_FRAME;
	unsigned char *src = malloc(len);
	struct frames f = {.b = &b, .seg = calloc(1, len), .refuse = 1};
	uint16_t port;
	struct iovec v = {src, len};
	char ep[64];
	pthread_t t;
	uint32_t crc;

	(void)state;
	assert_non_null(src);
	assert_non_null(f.seg);
	memset(src, 0x3C, len);
	f.lfd = test_listen_loopback(1, &port);
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	assert_int_equal(pthread_create(&t, NULL, frames_serve, &f), 0);
	{
		struct eng_cap wc = grant(secret, ep, ENG_OP_WRITE, 0, len, 1, UINT64_MAX);

		assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 0, &v, 1, &wc, &crc),
				 LUNAR_ERR_UNAUTHORIZED);
	}
	node_stop(&a);
	pthread_join(t, NULL);
	close(f.lfd);
	assert_false(f.bad);
	assert_int_equal(f.n, 1);
	free(src);
	free(f.seg);
	node_stop(&b);
}

/* A refused WRITE larger than the sockets hold: the owner answers the first
 * request's grant with a refusal and closes while the writer is still
 * sending, and the writer reads that answer rather than report the broken
 * connection: UNAUTHORIZED, in frames (the CRC32C ours to compute) and
 * whole (the caller's CRC32C), and not a byte written. */
static void test_engine_auth_large_write_refused_unauthorized(void **state)
{
	enum { LEN = 48u << 20 };
	struct eng_config cfg = {.host = "127.0.0.1", .seg_size = LEN, .cluster_key = &key};
	struct node a = node_create((struct eng_config){.host = "127.0.0.1",
							.seg_size = SEG_SIZE,
							.cluster_key = &key,
							.slices = 1}),
		    b = node_create(cfg);
	unsigned char *src = malloc(LEN), other[AUTH_KEY_BYTES];
	struct iovec v = {src, LEN};
	struct eng_cap cap;
	struct eng_op op;
	uint32_t crc;

	(void)state;
	assert_non_null(src);
	memset(src, 0x5A, LEN);
	assert_int_equal(eng_engine_set_secret(b.e, eng_engine_endpoint(b.e), secret), 0);
	auth_random(other, sizeof(other));
	cap = grant(other, eng_engine_endpoint(b.e), ENG_OP_WRITE, 0, LEN, 1, UINT64_MAX);
	assert_int_equal(eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_WRITE, 0, &v, 1, &cap, &crc),
			 LUNAR_ERR_UNAUTHORIZED);
	op = (struct eng_op){.endpoint = eng_engine_endpoint(b.e),
			     .dir = ENG_WRITE,
			     .iov = &v,
			     .iovcnt = 1,
			     .cap = &cap,
			     .crc_known = 1,
			     .known_crc = lc_crc32c(0, src, LEN)};
	eng_xfer_batch(a.e, &op, 1);
	assert_int_equal(op.result, LUNAR_ERR_UNAUTHORIZED);
	for (size_t i = 0; i < LEN; i += 4096)
		assert_int_equal(b.seg[i], 0);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), 2);
	free(src);
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_auth_keyless_peers_refused(void **state)
{
	struct node a = node_start(&key), b = node_start(&key), c = node_start(NULL);
	struct auth_key other;
	struct node d;
	unsigned char buf[4096];
	struct eng_cap cap =
	    grant(secret, eng_engine_endpoint(b.e), ENG_OP_READ, 0, 4096, 1, lc_now_ms() + 60000);

	(void)state;
	/* A keyless engine's plain frame is not a handshake: closed at once. */
	assert_int_equal(xfer(&c, &b, ENG_READ, 0, buf, sizeof(buf), NULL),
			 LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_HANDSHAKE), 1);
	/* A keyed dialler does not talk to a keyless port, nor to another key. */
	assert_int_not_equal(xfer(&a, &c, ENG_READ, 0, buf, sizeof(buf), &cap), 0);
	auth_random(other.k, sizeof(other.k));
	d = node_start(&other);
	assert_int_not_equal(xfer(&d, &b, ENG_READ, 0, buf, sizeof(buf), &cap), 0);
	/* b sees the close after d gave up: wait for its thread to count it. */
	for (int i = 0; i < 200 && eng_engine_rejected(b.e, ENG_REJ_HANDSHAKE) < 2; i++)
		usleep(10000);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_HANDSHAKE), 2);
	node_stop(&d);
	node_stop(&a);
	node_stop(&b);
	node_stop(&c);
}

/* A peer that opens connections and never begins the handshake takes no
 * slot from one that proves the key, even from the same address: a
 * connection still in its handshake gives way, before any that is past
 * it, though idle longer (they held every slot of the address until the
 * handshake timed out); the ones taken back are not counted as refused
 * handshakes. */
static void test_engine_auth_stalled_handshakes_give_way(void **state)
{
	enum { STALLED = 300 }; /* past one address's quarter of the slots */
	struct eng_config cfg = {.host = "127.0.0.1",
				 .seg_size = SEG_SIZE,
				 .cluster_key = &key,
				 .io_timeout_ms = 60000}; /* no handshake times out here */
	struct node a = node_start(&key), b = node_create(cfg);
	const char *seg = eng_engine_endpoint(b.e);
	struct eng_cap wc = grant(secret, seg, ENG_OP_WRITE, 0, 4096, 1, UINT64_MAX);
	struct eng_cap rc = grant(secret, seg, ENG_OP_READ, 0, 64, 1, UINT64_MAX);
	unsigned char buf[4096];
	struct iovec v = {buf, sizeof(buf)};
	static int fds[STALLED];
	struct auth_session s;
	struct pollfd idle;

	(void)state;
	assert_int_equal(eng_engine_set_secret(b.e, seg, secret), 0);
	idle = (struct pollfd){.fd = raw_keyed(&a, &b, &s), .events = POLLIN | POLLRDHUP};
	raw_read64(idle.fd, &s, &rc); /* past the handshake at b too */
	for (int i = 0; i < STALLED; i++)
		fds[i] = raw_to(&b);
	usleep(500 * 1000);			/* the listener takes them all */
	assert_int_equal(poll(&idle, 1, 0), 0); /* still open */
	close(idle.fd);
	memset(buf, 0x6B, sizeof(buf));
	assert_int_equal(eng_xfer(a.e, seg, ENG_WRITE, 0, &v, 1, &wc, NULL), 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	usleep(200 * 1000); /* the evicted ones' threads end */
	/* Handshakes the listener took back were not the peers' refusals;
	 * they are counted as taken back, and no idle one was. */
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_HANDSHAKE), 0);
	assert_true(eng_engine_evicted(b.e, 1) >= STALLED + 1 - 256);
	assert_int_equal(eng_engine_evicted(b.e, 0), 0);
	for (int i = 0; i < STALLED; i++)
		close(fds[i]);
	node_stop(&a);
	node_stop(&b);
}

/* Bytes the peer sends until it closes (at most cap kept). */
static size_t drain(int fd, void *buf, size_t cap)
{
	struct timeval tv = {.tv_sec = 5};
	size_t got = 0;
	ssize_t n;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	while ((n = recv(fd, (char *)buf + got, cap - got, 0)) > 0)
		got += (size_t)n;
	assert_true(n == 0 || errno == ECONNRESET); /* closed, not timed out */
	return got;
}

/* An engine stopped while a transfer waits for a new connection's
 * handshake (the owner took the connection and is silent) ends it at
 * once, not at its deadline (30 s). */
static void test_engine_auth_stop_cuts_handshake_short(void **state)
{
	struct eng_config cfg = {
	    .host = "127.0.0.1", .seg_size = SEG_SIZE, .cluster_key = &key, .io_timeout_ms = 30000};
	struct node a = node_create(cfg);
	unsigned char buf[64];
	struct iovec v = {buf, sizeof(buf)};
	struct eng_cap c;
	struct eng_op op;
	struct eng_cq *cq;
	uint16_t port;
	char ep[32];
	int lfd = test_listen_loopback(4, &port); /* the kernel accepts; nobody speaks */

	(void)state;
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	c = grant(secret, ep, ENG_OP_READ, 0, sizeof(buf), 1, UINT64_MAX);
	op = (struct eng_op){.endpoint = ep, .dir = ENG_READ, .iov = &v, .iovcnt = 1, .cap = &c};
	assert_int_equal(eng_cq_alloc(&cq), 0);
	assert_int_equal(eng_xfer_submit(a.e, cq, &op, 1), 0);
	usleep(200 * 1000); /* in its handshake (published or not, the stop ends it) */
	assert_true(node_stop_under(&a, cq, &op) < 10000);
	eng_cq_free(cq);
	close(lfd);
}

static void test_engine_auth_replay_bitflip_and_crc(void **state)
{
	struct node a = node_start(&key), b = node_start(&key);
	const char *seg = eng_engine_endpoint(b.e);
	struct eng_cap rc = grant(secret, seg, ENG_OP_READ, 0, 64, 1, lc_now_ms() + 60000);
	struct eng_cap wc = grant(secret, seg, ENG_OP_WRITE, 0, 64, 1, lc_now_ms() + 60000);
	unsigned char buf[ENG_WIRE_REP_FRAME + 64], payload[64];
	struct auth_session s;
	struct eng_wire_kreq k;
	struct eng_wire_krep rep;
	int fd;

	(void)state;
	memset(b.seg, 0x5A, 64);
	fd = raw_keyed(&a, &b, &s);
	k = kreq(&s, ENG_OP_READ, 0, 64, &rc);
	assert_int_equal(send(fd, &k, sizeof(k), 0), sizeof(k));
	assert_int_equal(recv(fd, buf, sizeof(buf), MSG_WAITALL), sizeof(buf));
	memcpy(&rep, buf, sizeof(rep));
	assert_int_equal(eng_wire_krep_open(&rep, &s, le64toh(k.ctr), NULL, 0), 0);
	assert_int_equal(rep.h.status, 0);
	assert_int_equal(buf[ENG_WIRE_REP_FRAME], 0x5A);
	/* The recorded frame again on the same connection: closed, no byte. */
	assert_int_equal(send(fd, &k, sizeof(k), 0), sizeof(k));
	assert_int_equal(drain(fd, buf, sizeof(buf)), 0);
	close(fd);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_REPLAY), 1);
	/* One flipped bit of a fresh frame: closed, no byte. */
	fd = raw_keyed(&a, &b, &s);
	k = kreq(&s, ENG_OP_READ, 0, 64, &rc);
	k.h.offset ^= htole64(1);
	assert_int_equal(send(fd, &k, sizeof(k), 0), sizeof(k));
	assert_int_equal(drain(fd, buf, sizeof(buf)), 0);
	close(fd);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_MAC), 1);
	/* A WRITE whose payload is not the CRC32C its header names fails. */
	fd = raw_keyed(&a, &b, &s);
	memset(payload, 0x11, sizeof(payload));
	k = kreq(&s, ENG_OP_WRITE, 0, 64, &wc); /* crc 0 sealed in */
	assert_int_equal(send(fd, &k, sizeof(k), 0), sizeof(k));
	assert_int_equal(send(fd, payload, sizeof(payload), 0), sizeof(payload));
	assert_int_equal(drain(fd, buf, sizeof(buf)), ENG_WIRE_REP_FRAME);
	memcpy(&rep, buf, sizeof(rep));
	assert_int_equal(eng_wire_krep_open(&rep, &s, le64toh(k.ctr), NULL, 0), 0);
	assert_int_equal(rep.h.status, LUNAR_ERR_CHECKSUM_MISMATCH);
	close(fd);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CRC), 1);
	node_stop(&a);
	node_stop(&b);
}

LUNAR_TEST_MAIN(setup, NULL, test_engine_auth_frame_bits_and_counters,
		test_engine_auth_reply_bound_to_request, test_engine_auth_capability_checks,
		test_engine_auth_keyed_transfers, test_engine_auth_wrong_grants_refused,
		test_engine_auth_fence_forgets_the_secret, test_engine_auth_expiry_on_master_clock,
		test_engine_auth_keyless_peers_refused, test_engine_auth_sliced_crc,
		test_engine_auth_keyed_write_in_frames,
		test_engine_auth_large_write_refused_unauthorized,
		test_engine_auth_later_frame_refused_unauthorized,
		test_engine_auth_stalled_handshakes_give_way,
		test_engine_auth_stop_cuts_handshake_short, test_engine_auth_replay_bitflip_and_crc)
