/*
 * test_engine.c - the data plane on loopback: engines with malloc'd
 * segments move bytes to each other over TCP and to themselves by memcpy;
 * the data port refuses bad ranges and survives hostile peers; the client
 * pool recovers from a restarted peer and fails fast on a dead one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "engine/engine.h"
#include "crc32c.h"
#include "lunar.h"
#include "tests/unit/test_engine_util.h"
#include "tests/unit/test_fds.h"
#include "tests/unit/test_fill.h"
#include "tests/unit/test_listen.h"
#include "tests/cmocka_main.h"

#define SEG_SIZE   (20u << 20)
#define MIB	   (1u << 20)
#define TIMEOUT_MS 30000 /* generous: sanitizers and valgrind slow every byte down */

#ifdef __SANITIZE_THREAD__
/*
 * Segment bytes pass from one thread to the next through a TCP round trip,
 * an ordering TSan cannot see: it would report every byte of every transfer
 * as a race (and crawl doing so). So TSan does not track the memory that
 * socket calls read and write; everything else it still checks. The hook's
 * name is TSan's.
 */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "ignore_interceptors_accesses=1";
}
#endif

static struct node node_start(uint16_t port, unsigned timeout_ms)
{
	return node_create((struct eng_config){
	    .host = "127.0.0.1",
	    .port = port,
	    .seg_size = SEG_SIZE,
	    .io_timeout_ms = timeout_ms ? timeout_ms : TIMEOUT_MS,
	    .slices = 4, /* the most (engine.h): sliced whatever the CPUs */
	});
}

static uint16_t node_port(const struct node *n)
{
	const char *colon = strrchr(eng_engine_endpoint(n->e), ':');

	assert_non_null(colon);
	return (uint16_t)atoi(colon + 1);
}

static int xfer1(struct eng_engine *e, const char *ep, enum eng_dir dir, uint64_t off, void *buf,
		 size_t len)
{
	struct iovec v = {buf, len};

	return eng_xfer(e, ep, dir, off, &v, 1, NULL, NULL);
}

static void test_engine_write_read_sizes(void **state)
{
	static const size_t sizes[] = {1, 4096, MIB, 8 * MIB, 8 * MIB + 12345};
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *ep = eng_engine_endpoint(b.e);

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i];
		uint64_t off = 1000 + i * 7;
		unsigned char *src = malloc(len), *dst = malloc(len);

		test_fill(src, len, (uint32_t)i);
		memset(dst, 0, len);
		assert_int_equal(xfer1(a.e, ep, ENG_WRITE, off, src, len), 0);
		assert_memory_equal(b.seg + off, src, len);
		assert_int_equal(xfer1(a.e, ep, ENG_READ, off, dst, len), 0);
		assert_memory_equal(dst, src, len);
		free(src);
		free(dst);
	}
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_multi_iov(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *ep = eng_engine_endpoint(b.e);
	unsigned char src[10000], dst[10000];
	struct iovec w[] = {
	    {src, 1}, {src + 1, 0}, {src + 1, 4095}, {src + 4096, 5000}, {src + 9096, 904},
	};
	struct iovec r[] = {{dst, 3333}, {NULL, 0}, {dst + 3333, 6667}};

	test_fill(src, sizeof(src), 7);
	memset(dst, 0, sizeof(dst));
	assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 5, w, 5, NULL, NULL), 0);
	assert_memory_equal(b.seg + 5, src, sizeof(src));
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 5, r, 3, NULL, NULL), 0);
	assert_memory_equal(dst, src, sizeof(src));
	node_stop(&a);
	node_stop(&b);
}

/* Both transports report the CRC32C of the bytes they moved, reads into
 * staging buffers (ENG_READ_STAGED) included. */
static void test_engine_checksum(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *remote = eng_engine_endpoint(b.e), *self = eng_engine_endpoint(a.e);
	static unsigned char src[300000], dst[300000];
	struct iovec w[] = {{src, 1000}, {src + 1000, sizeof(src) - 1000}};
	struct iovec r = {dst, sizeof(dst)};
	uint32_t want, crc = 1;

	test_fill(src, sizeof(src), 11);
	want = lc_crc32c(0, src, sizeof(src));
	assert_int_equal(eng_xfer(a.e, remote, ENG_WRITE, 0, w, 2, NULL, &crc), 0);
	assert_int_equal(crc, want);
	crc = 1;
	assert_int_equal(eng_xfer(a.e, remote, ENG_READ, 0, &r, 1, NULL, &crc), 0);
	assert_int_equal(crc, want);
	crc = 1;
	assert_int_equal(eng_xfer(a.e, self, ENG_WRITE, 64, w, 2, NULL, &crc), 0);
	assert_int_equal(crc, want);
	for (int i = 0; i < 2; i++) {
		memset(dst, 0, sizeof(dst));
		crc = 1;
		assert_int_equal(
		    eng_xfer(a.e, self, i ? ENG_READ_STAGED : ENG_READ, 64, &r, 1, NULL, &crc), 0);
		assert_int_equal(crc, want);
		assert_memory_equal(dst, src, sizeof(src));
	}
	memset(dst, 0, sizeof(dst));
	crc = 1;
	assert_int_equal(eng_xfer(a.e, remote, ENG_READ_STAGED, 0, &r, 1, NULL, &crc), 0);
	assert_int_equal(crc, want);
	assert_memory_equal(dst, src, sizeof(src));
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_local_memcpy(void **state)
{
	struct node a = node_start(0, 0);
	const char *self = eng_engine_endpoint(a.e);
	unsigned char src[3000], dst[3000];
	struct iovec w[] = {{src, 1000}, {src + 1000, 2000}};

	test_fill(src, sizeof(src), 3);
	assert_int_equal(eng_xfer(a.e, self, ENG_WRITE, SEG_SIZE - sizeof(src), w, 2, NULL, NULL),
			 0);
	assert_memory_equal(a.seg + SEG_SIZE - sizeof(src), src, sizeof(src));
	assert_int_equal(xfer1(a.e, self, ENG_READ, SEG_SIZE - sizeof(src), dst, sizeof(dst)), 0);
	assert_memory_equal(dst, src, sizeof(src));
	memset(dst, 0, sizeof(dst));
	assert_int_equal(
	    xfer1(a.e, self, ENG_READ_STAGED, SEG_SIZE - sizeof(src), dst, sizeof(dst)), 0);
	assert_memory_equal(dst, src, sizeof(src));
	/* The local path checks bounds as the data port does. */
	assert_int_equal(xfer1(a.e, self, ENG_WRITE, SEG_SIZE - 10, src, 11),
			 LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(xfer1(a.e, self, ENG_READ, UINT64_MAX - 5, dst, 10),
			 LUNAR_ERR_TRANSFER_FAIL);
	node_stop(&a);
}

static void test_engine_out_of_bounds(void **state)
{
	static const uint64_t offs[] = {SEG_SIZE - 10, SEG_SIZE, SEG_SIZE + 1, UINT64_MAX - 5,
					UINT64_MAX};
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *ep = eng_engine_endpoint(b.e);
	unsigned char buf[64], back[64];

	test_fill(buf, sizeof(buf), 11);
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		assert_int_equal(xfer1(a.e, ep, ENG_WRITE, offs[i], buf, sizeof(buf)),
				 LUNAR_ERR_TRANSFER_FAIL);
		assert_int_equal(xfer1(a.e, ep, ENG_READ, offs[i], buf, sizeof(buf)),
				 LUNAR_ERR_TRANSFER_FAIL);
	}
	/* Exactly the last bytes are fine, and the server still serves. */
	assert_int_equal(xfer1(a.e, ep, ENG_WRITE, SEG_SIZE - sizeof(buf), buf, sizeof(buf)), 0);
	assert_int_equal(xfer1(a.e, ep, ENG_READ, SEG_SIZE - sizeof(buf), back, sizeof(back)), 0);
	assert_memory_equal(back, buf, sizeof(buf));
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_bad_args(void **state)
{
	struct node a = node_start(0, 0);
	const char *self = eng_engine_endpoint(a.e);
	char c = 0;
	struct iovec empty = {&c, 0};

	assert_int_equal(xfer1(a.e, NULL, ENG_READ, 0, &c, 1), LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(eng_xfer(a.e, self, ENG_READ, 0, &empty, 1, NULL, NULL),
			 LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(eng_xfer(a.e, self, ENG_READ, 0, &empty, 0, NULL, NULL),
			 LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(eng_xfer(a.e, self, (enum eng_dir)7, 0, &empty, 1, NULL, NULL),
			 LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(xfer1(a.e, self, (enum eng_dir)(ENG_READ_STAGED + 1), 0, &c, 1),
			 LUNAR_ERR_TRANSFER_FAIL);
	/* An endpoint that names no peer reaches none: nothing was sent. */
	assert_int_equal(xfer1(a.e, "nonsense", ENG_READ, 0, &c, 1), ENG_XFER_UNSENT);
	assert_int_equal(xfer1(a.e, "127.0.0.1:", ENG_READ, 0, &c, 1), ENG_XFER_UNSENT);
	assert_int_equal(xfer1(a.e, ":80", ENG_READ, 0, &c, 1), ENG_XFER_UNSENT);
	node_stop(&a);
}

/* A socket connected to 127.0.0.1:port, from the loopback address from
 * (NULL: the kernel's choice, 127.0.0.1). */
static int raw_connect_from(uint16_t port, const char *from)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct sockaddr_in me = {.sin_family = AF_INET};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	if (from) {
		assert_int_equal(inet_pton(AF_INET, from, &me.sin_addr), 1);
		assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
	}
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static int raw_connect(uint16_t port)
{
	return raw_connect_from(port, NULL);
}

/* Read until EOF (or error); returns how many bytes came. */
static size_t drain(int fd)
{
	char buf[256];
	size_t total = 0;
	ssize_t n;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		total += (size_t)n;
	return total;
}

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le(const unsigned char *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* A request frame as the wire comment in eng_int.h lays it out: the
 * 32-byte header, mount 0 (an engine no master mounted), then 88 zeros. */
static void make_req(unsigned char h[128], uint16_t op, uint64_t off, uint64_t len)
{
	memset(h, 0, 128);
	put_le(h, 0x51524e4cu, 4);
	put_le(h + 4, 5, 2);
	put_le(h + 6, op, 2);
	put_le(h + 8, off, 8);
	put_le(h + 16, len, 8);
	put_le(h + 24, 42, 8);
}

/* 1 if the server closed fd (EOF) within ms. */
static int closed_within(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN, 0};
	char b;

	return poll(&p, 1, ms) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) == 0;
}

/* A connection may idle between requests for as long as its client likes,
 * but once a request has begun, the rest of its header must follow within
 * the timeout: a peer cannot hold the server's connections a byte apiece. */
static void test_engine_partial_header_times_out(void **state)
{
	struct node b = node_start(0, 200);
	uint16_t port = node_port(&b);
	int idle = raw_connect(port), started = raw_connect(port);

	(void)state;
	assert_int_equal(write(started, "L", 1), 1);
	assert_true(closed_within(started, 3000));
	assert_false(closed_within(idle, 300));
	close(started);
	close(idle);
	node_stop(&b);
}

/* 1 if seg[at] became want within ms. */
static int landed_within(const unsigned char *seg, size_t at, unsigned char want, int ms)
{
	uint64_t end = lc_now_ms() + (uint64_t)ms;

	while (__atomic_load_n(&seg[at], __ATOMIC_RELAXED) != want)
		if (lc_now_ms() > end)
			return 0;
		else
			poll(NULL, 0, 5);
	return 1;
}

/*
 * A fence (before a re-mount) ends every connection open: a WRITE under
 * way has what its peer sent before landed, and nothing it sends after;
 * an idle connection is closed too. It waits for them, not for their
 * timeout (30 s here).
 */
static void test_engine_fence_ends_writes_under_way(void **state)
{
	struct node b = node_start(0, 0);
	uint16_t port = node_port(&b);
	int w = raw_connect(port), idle = raw_connect(port);
	size_t first = 64 * 1024, len = MIB;
	unsigned char h[128], *pay = malloc(len), zero[4096] = {0};

	(void)state;
	assert_non_null(pay);
	memset(pay, 0xAA, first);
	memset(pay + first, 0xBB, len - first);
	make_req(h, 2 /* WRITE */, 0, len);
	assert_int_equal(write(w, h, sizeof(h)), (ssize_t)sizeof(h));
	assert_int_equal(write(w, pay, first), (ssize_t)first);
	assert_true(landed_within(b.seg, first - 1, 0xAA, 5000));
	assert_int_equal(eng_engine_fence(b.e), 0);
	/* The rest is refused (a reset), or taken by the kernel and dropped. */
	(void)!send(w, pay + first, len - first, MSG_NOSIGNAL);
	assert_true(closed_within(idle, 3000));
	poll(NULL, 0, 100);
	for (size_t off = first; off < len; off += sizeof(zero))
		assert_memory_equal(b.seg + off, zero, sizeof(zero));
	close(w);
	close(idle);
	node_stop(&b);
	free(pay);
}

/* A fence raises the mount epoch: a local WRITE of the epoch before it
 * fails having copied nothing; one of the new epoch, or naming none,
 * copies. */
static void test_engine_fence_fails_older_local_writes(void **state)
{
	struct node b = node_start(0, 0);
	unsigned char buf[4096], zero[4096] = {0};
	struct iovec v = {buf, sizeof(buf)};
	struct eng_op op = {
	    .endpoint = eng_engine_endpoint(b.e), .dir = ENG_WRITE, .iov = &v, .iovcnt = 1};
	uint64_t epoch = eng_engine_epoch(b.e);

	(void)state;
	memset(buf, 0x5A, sizeof(buf));
	assert_int_equal(eng_engine_fence(b.e), 0);
	assert_int_equal(eng_engine_epoch(b.e), epoch + 1);
	op.epoch = epoch;
	eng_xfer_batch(b.e, &op, 1);
	assert_int_equal(op.result, LUNAR_ERR_TRANSFER_FAIL);
	assert_memory_equal(b.seg, zero, sizeof(zero));
	op.epoch = epoch + 1;
	eng_xfer_batch(b.e, &op, 1);
	assert_int_equal(op.result, 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	op.epoch = 0;
	op.off = 8192;
	eng_xfer_batch(b.e, &op, 1);
	assert_int_equal(op.result, 0);
	assert_memory_equal(b.seg + 8192, buf, sizeof(buf));
	node_stop(&b);
}

/* One transfer of buf to or from offset 0 of ep under a grant of mount. */
static int xfer_mount(struct eng_engine *e, const char *ep, enum eng_dir dir, void *buf, size_t len,
		      uint64_t mount)
{
	struct eng_cap cap = {.length = len, .mount = mount};
	struct iovec v = {buf, len};

	return eng_xfer(e, ep, dir, 0, &v, 1, &cap, NULL);
}

/* A keyless owner serves ranges of its mount only: a grant of an older
 * one (or of none) is refused before a byte lands, also between a fence
 * and the next mount. */
static void test_engine_keyless_owner_serves_its_mount_only(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *ep = eng_engine_endpoint(b.e);
	unsigned char buf[4096], zero[4096] = {0};

	(void)state;
	memset(buf, 0x3C, sizeof(buf));
	eng_engine_set_mount(b.e, 7);
	assert_int_equal(xfer_mount(a.e, ep, ENG_WRITE, buf, sizeof(buf), 8),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(xfer1(a.e, ep, ENG_WRITE, 0, buf, sizeof(buf)), LUNAR_ERR_UNAUTHORIZED);
	assert_memory_equal(b.seg, zero, sizeof(zero));
	assert_int_equal(xfer_mount(a.e, ep, ENG_READ, buf, sizeof(buf), 8),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(xfer_mount(a.e, ep, ENG_WRITE, buf, sizeof(buf), 7), 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	assert_int_equal(eng_engine_fence(b.e), 0);
	memset(buf, 0x4D, sizeof(buf));
	assert_int_equal(xfer_mount(a.e, ep, ENG_WRITE, buf, sizeof(buf), 7),
			 LUNAR_ERR_UNAUTHORIZED);
	eng_engine_set_mount(b.e, 9);
	assert_int_equal(xfer_mount(a.e, ep, ENG_WRITE, buf, sizeof(buf), 7),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_not_equal(b.seg[0], 0x4D);
	assert_int_equal(xfer_mount(a.e, ep, ENG_WRITE, buf, sizeof(buf), 9), 0);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(xfer_mount(a.e, ep, ENG_READ, buf, sizeof(buf), 9), 0);
	assert_int_equal(buf[0], 0x4D);
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_hostile_peer(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *ep = eng_engine_endpoint(b.e);
	uint16_t port = node_port(&b);
	unsigned char h[128], buf[100] = {0};
	int fd;

	/* A short header, then hang-up. */
	fd = raw_connect(port);
	assert_int_equal(write(fd, "LNRQ\1", 5), 5);
	close(fd);
	/* Garbage: refused with a reply, then closed. */
	fd = raw_connect(port);
	memset(h, 0xab, 128);
	assert_int_equal(write(fd, h, 128), 128);
	assert_int_equal(drain(fd), 64);
	close(fd);
	/* A huge WRITE: refused before any payload is read. */
	fd = raw_connect(port);
	make_req(h, 2, 0, UINT64_MAX);
	assert_int_equal(write(fd, h, 128), 128);
	assert_int_equal(drain(fd), 64);
	close(fd);
	/* Wrong version and unknown op. */
	fd = raw_connect(port);
	make_req(h, 9, 0, 10);
	assert_int_equal(write(fd, h, 128), 128);
	assert_int_equal(drain(fd), 64);
	close(fd);
	fd = raw_connect(port);
	make_req(h, 1, 0, 10);
	put_le(h + 4, 77, 2);
	assert_int_equal(write(fd, h, 128), 128);
	assert_int_equal(drain(fd), 64);
	close(fd);
	/* A WRITE whose payload stops half-way (away from the bytes read below:
	 * its server thread may still be storing them). */
	fd = raw_connect(port);
	make_req(h, 2, 4096, sizeof(buf));
	assert_int_equal(write(fd, h, 128), 128);
	assert_int_equal(write(fd, buf, 50), 50);
	close(fd);
	/* A valid READ by hand: the wire format is what eng_int.h says. */
	memset(b.seg, 0x5a, 10);
	fd = raw_connect(port);
	make_req(h, 1, 0, 10);
	assert_int_equal(write(fd, h, 128), 128);
	assert_int_equal(recv(fd, h, 74, MSG_WAITALL), 74);
	assert_int_equal(get_le(h, 4), 0x50524e4cu); /* reply magic */
	assert_int_equal(get_le(h + 4, 4), 0);	     /* status */
	assert_int_equal(get_le(h + 8, 8), 42);	     /* id */
	assert_int_equal(get_le(h + 16, 8), 10);     /* length */
	assert_memory_equal(h + 64, b.seg, 10);
	close(fd);

	test_fill(buf, sizeof(buf), 5);
	assert_int_equal(xfer1(a.e, ep, ENG_WRITE, 0, buf, sizeof(buf)), 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	node_stop(&a);
	node_stop(&b);
}

/* A port nobody listens on: bound, never listening, then closed. */
static uint16_t closed_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* A refused connection fails at once, and says that nothing was sent (a
 * put's range can then be given back at once: no byte can land later). */
static void test_engine_unreachable_fails_fast(void **state)
{
	struct node a = node_start(0, 0);
	char ep[64], c = 1;
	uint64_t t0;

	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)closed_port());
	t0 = lc_now_ms();
	assert_int_equal(xfer1(a.e, ep, ENG_WRITE, 0, &c, 1), ENG_XFER_UNSENT);
	assert_int_equal(xfer1(a.e, ep, ENG_READ, 0, &c, 1), ENG_XFER_UNSENT);
	assert_true(lc_now_ms() - t0 < 1000);
	node_stop(&a);
}

/* A socket listening on a free loopback port, its endpoint in ep[64]. */
static int listen_loopback(char *ep)
{
	uint16_t port;
	int lfd = test_listen_loopback(8, &port);

	snprintf(ep, 64, "127.0.0.1:%u", (unsigned)port);
	return lfd;
}

/* A peer that accepts (in the kernel backlog) but never answers: the
 * request went out, so this is no ENG_XFER_UNSENT. */
static void test_engine_timeout(void **state)
{
	struct node a = node_start(0, 200);
	char ep[64], buf[16] = {0};
	uint64_t t0, dt;
	int lfd = listen_loopback(ep);

	t0 = lc_now_ms();
	assert_int_equal(xfer1(a.e, ep, ENG_READ, 0, buf, sizeof(buf)), LUNAR_ERR_TRANSFER_FAIL);
	dt = lc_now_ms() - t0;
	assert_true(dt >= 190 && dt < 2000);
	close(lfd);
	node_stop(&a);
}

/* A peer that answers the one request it gets (taking a READ_DISK's name)
 * with a reply header of its choosing and no payload. */
struct canned {
	int lfd;
	int32_t status;
	uint64_t id_delta; /* added to the request's id */
};

static void *canned_server(void *arg)
{
	struct canned *c = arg;
	int fd = accept(c->lfd, NULL, NULL);
	unsigned char req[128], name[256], rep[64] = {0};

	if (fd < 0)
		return NULL;
	if (recv(fd, req, sizeof(req), MSG_WAITALL) == sizeof(req) &&
	    (get_le(req + 6, 2) != 3 || /* READ_DISK: its name follows */
	     (get_le(req + 8, 8) <= sizeof(name) &&
	      recv(fd, name, get_le(req + 8, 8), MSG_WAITALL) >= 0))) {
		put_le(rep, 0x50524e4cu, 4);
		put_le(rep + 4, (uint32_t)c->status, 4);
		put_le(rep + 8, get_le(req + 24, 8) + c->id_delta, 8);
		put_le(rep + 16, 0, 8);
		(void)!write(fd, rep, sizeof(rep));
		(void)!recv(fd, name, 1, 0); /* until the client hangs up */
	}
	close(fd);
	return NULL;
}

/* eng_xfer_disk (disk) or a READ of 64 bytes from a canned peer: the
 * result. */
static int64_t canned_read(int32_t status, uint64_t id_delta, int disk)
{
	struct node a = node_start(0, 500);
	struct canned c = {.status = status, .id_delta = id_delta};
	char ep[64], buf[64];
	struct iovec v = {buf, sizeof(buf)};
	uint32_t crc = 0;
	int64_t rc;
	pthread_t th;

	c.lfd = listen_loopback(ep);
	assert_int_equal(pthread_create(&th, NULL, canned_server, &c), 0);
	rc = disk ? eng_xfer_disk(a.e, ep, "t", "k", &v, 1, NULL, &crc)
		  : eng_xfer(a.e, ep, ENG_READ, 0, &v, 1, NULL, NULL);
	node_stop(&a);
	pthread_join(th, NULL);
	close(c.lfd);
	return rc;
}

/* A disk-read reply's status is 0 or a code; a positive one is a protocol
 * error, never a byte count of a value that was not sent. A code no owner
 * answers a READ_DISK with is one too: the peer does not choose the
 * reader's error. */
static void test_engine_disk_reply_positive_status(void **state)
{
	(void)state;
	assert_int_equal(canned_read(16, 0, 1), LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(canned_read(LUNAR_ERR_NO_AVAILABLE_HANDLE, 0, 1), LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(canned_read(LUNAR_ERR_OBJECT_NOT_FOUND, 0, 1), LUNAR_ERR_OBJECT_NOT_FOUND);
}

/* A reply to another request says nothing, whatever its status: a refusal
 * of the capability under a wrong id is TRANSFER_FAIL, not UNAUTHORIZED. */
static void test_engine_reply_of_another_request(void **state)
{
	(void)state;
	assert_int_equal(canned_read(LUNAR_ERR_UNAUTHORIZED, 0, 0), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(canned_read(LUNAR_ERR_UNAUTHORIZED, 1, 0), LUNAR_ERR_TRANSFER_FAIL);
}

/* A peer that answers READs of up to 64 bytes with 0x5c bytes, one
 * connection after another, 2 answers in all; its first answer has one
 * byte more than the reply. */
static void *chatty_server(void *arg)
{
	int lfd = *(int *)arg, fd = -1;
	unsigned char req[128], rep[64 + 64 + 1];

	for (int answered = 0; answered < 2;) {
		uint64_t len;

		if (fd < 0 && (fd = accept(lfd, NULL, NULL)) < 0)
			return NULL;
		if (recv(fd, req, sizeof(req), MSG_WAITALL) != sizeof(req)) {
			close(fd); /* the client hung up: the next comes on a new one */
			fd = -1;
			continue;
		}
		len = get_le(req + 16, 8);
		if (len > 64)
			break;
		memset(rep, 0, 64);
		put_le(rep, 0x50524e4cu, 4);
		put_le(rep + 8, get_le(req + 24, 8), 8);
		put_le(rep + 16, len, 8);
		memset(rep + 64, 0x5c, len + 1);
		(void)!write(fd, rep, 64 + len + (answered++ == 0));
	}
	close(fd);
	return NULL;
}

/* A byte a peer sent beyond its reply is never read as the next reply's:
 * the connection it came on is not taken from the pool again. */
static void test_engine_pool_drops_connection_with_stray_bytes(void **state)
{
	struct node a = node_start(0, 2000);
	unsigned char buf[64], want[64];
	char ep[64];
	int lfd = listen_loopback(ep);
	pthread_t th;

	(void)state;
	memset(want, 0x5c, sizeof(want));
	assert_int_equal(pthread_create(&th, NULL, chatty_server, &lfd), 0);
	for (int i = 0; i < 2; i++) {
		memset(buf, 0, sizeof(buf));
		assert_int_equal(xfer1(a.e, ep, ENG_READ, 0, buf, sizeof(buf)), 0);
		assert_memory_equal(buf, want, sizeof(buf));
	}
	node_stop(&a);
	pthread_join(th, NULL);
	close(lfd);
}

static void check_roundtrip(struct node *a, struct node *b, const char *ep, size_t len,
			    uint32_t seed)
{
	unsigned char *src = malloc(len), *dst = malloc(len);

	test_fill(src, len, seed);
	assert_int_equal(xfer1(a->e, ep, ENG_WRITE, 0, src, len), 0);
	assert_memory_equal(b->seg, src, len);
	assert_int_equal(xfer1(a->e, ep, ENG_READ, 0, dst, len), 0);
	assert_memory_equal(dst, src, len);
	free(src);
	free(dst);
}

static void test_engine_peer_restart(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	uint16_t port = node_port(&b);
	size_t len = 9 * MIB; /* sliced: leaves several pooled connections */
	char ep[64], c = 1;

	strcpy(ep, eng_engine_endpoint(b.e));
	check_roundtrip(&a, &b, ep, len, 21);
	/* Restarted behind our back: the pooled connections are stale. */
	node_stop(&b);
	b = node_start(port, 0);
	assert_string_equal(eng_engine_endpoint(b.e), ep);
	for (uint32_t i = 0; i < 3; i++) {
		check_roundtrip(&a, &b, ep, len, 22 + i);
		check_roundtrip(&a, &b, ep, 100, 25 + i);
	}
	/* Down for a while: fails, then works again once it is back. The
	 * pooled connections' end of stream is seen before anything is sent
	 * on them, and the new one is refused: nothing was sent. */
	node_stop(&b);
	assert_int_equal(xfer1(a.e, ep, ENG_WRITE, 0, &c, 1), ENG_XFER_UNSENT);
	b = node_start(port, 0);
	check_roundtrip(&a, &b, ep, len, 30);
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_pool_reuses_connections(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	const char *ep = eng_engine_endpoint(b.e);
	unsigned char buf[512] = {0};
	int before;

	check_roundtrip(&a, &b, ep, sizeof(buf), 1);
	before = test_open_fds();
	for (int i = 0; i < 200; i++)
		assert_int_equal(xfer1(a.e, ep, i & 1 ? ENG_READ : ENG_WRITE, 0, buf, sizeof(buf)),
				 0);
	assert_int_equal(test_open_fds(), before);
	node_stop(&a);
	node_stop(&b);
}

struct worker {
	pthread_t tid;
	struct eng_engine *e;
	const char *ep;
	unsigned char *seg;
	unsigned id;
	int failures;
};

static void *worker_main(void *arg)
{
	static const size_t sizes[] = {1, 777, 4096, 65536, 2 * MIB - 3};
	struct worker *w = arg;
	uint64_t base = (uint64_t)w->id * 2 * MIB;
	unsigned char *src = malloc(2 * MIB), *dst = malloc(2 * MIB);

	for (unsigned it = 0; it < 20; it++) {
		size_t len = sizes[it % 5];

		test_fill(src, len, w->id * 1000 + it);
		if (xfer1(w->e, w->ep, ENG_WRITE, base, src, len) ||
		    xfer1(w->e, w->ep, ENG_READ, base, dst, len) || memcmp(src, dst, len) ||
		    memcmp(w->seg + base, src, len))
			w->failures++;
	}
	free(src);
	free(dst);
	return NULL;
}

static void test_engine_concurrent_threads(void **state)
{
	struct node a = node_start(0, 0), b = node_start(0, 0);
	struct worker w[8];

	for (unsigned i = 0; i < 8; i++) {
		w[i] = (struct worker){
		    .e = a.e, .ep = eng_engine_endpoint(b.e), .seg = b.seg, .id = i};
		assert_int_equal(pthread_create(&w[i].tid, NULL, worker_main, &w[i]), 0);
	}
	for (unsigned i = 0; i < 8; i++)
		pthread_join(w[i].tid, NULL);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(w[i].failures, 0);
	node_stop(&a);
	node_stop(&b);
}

static void test_engine_create_refuses_bad_config(void **state)
{
	struct eng_config cfg = {.host = "127.0.0.1", .seg_size = 4096};
	struct eng_engine *e = NULL;

	assert_int_equal(eng_engine_create(&cfg, &e), LUNAR_ERR_INVALID_PARAMS);
	cfg.seg_size = 0;
	cfg.host = "no.such.host.invalid";
	assert_int_equal(eng_engine_create(&cfg, &e), LUNAR_ERR_INVALID_PARAMS);
	assert_null(e);
	eng_engine_destroy(NULL);
}

/* a writes a value into b's segment and reads it back: b serves it. */
static void honest_round_trip(const struct node *a, const struct node *b)
{
	char buf[64] = "honest", got[64];

	assert_int_equal(xfer1(a->e, eng_engine_endpoint(b->e), ENG_WRITE, 0, buf, sizeof(buf)), 0);
	assert_int_equal(xfer1(a->e, eng_engine_endpoint(b->e), ENG_READ, 0, got, sizeof(got)), 0);
	assert_memory_equal(got, buf, sizeof(buf));
}

/* One peer fills every connection slot with sockets that never send: a new
 * connection takes the slot of the one idle longest, so other peers are
 * still served (they were refused for as long as the sockets stayed). */
static void test_engine_idle_connections_give_way(void **state)
{
	enum { IDLE = 1024 }; /* the data port's connection limit */
	struct node a = node_start(0, 2000), b = node_start(0, 2000);
	static int fds[IDLE];

	(void)state;
	for (int i = 0; i < IDLE; i++)
		fds[i] = raw_connect(node_port(&b));
	usleep(500 * 1000); /* the listener accepts them all */
	honest_round_trip(&a, &b);
	/* Keyless, none waits in a handshake: all taken back were idle. */
	assert_true(eng_engine_evicted(b.e, 0) >= IDLE - 256);
	assert_int_equal(eng_engine_evicted(b.e, 1), 0);
	for (int i = 0; i < IDLE; i++)
		close(fds[i]);
	node_stop(&a);
	node_stop(&b);
}

/* A peer at 127.0.0.2 opens more connections than the data port has slots
 * and begins a request on each, then stalls: such a connection is held to
 * the I/O timeout, and none of them is idle to give way. One address gets a
 * quarter of the slots, the rest are refused at once, and a peer at
 * another address is still served (it was refused while the stalled
 * sockets held every slot). */
static void test_engine_stalled_peer_holds_a_quarter(void **state)
{
	enum { SLOTS = 1024, TRIES = SLOTS + 64 }; /* the data port's limit */
	/* No stalled request times out while the test runs, even under TSan. */
	struct node a = node_start(0, 30000), b = node_start(0, 30000);
	static int fds[TRIES];
	int held = 0;

	(void)state;
	for (int i = 0; i < TRIES; i++) {
		fds[i] = raw_connect_from(node_port(&b), "127.0.0.2");
		assert_int_equal(write(fds[i], "L", 1), 1); /* a request begun */
	}
	/* Until the listener has taken them all: one not accepted yet looks held. */
	for (int t = 0; t < 100 && held != SLOTS / 4; t++) {
		usleep(100 * 1000);
		held = 0;
		for (int i = 0; i < TRIES; i++) {
			struct pollfd p = {fds[i], POLLIN, 0};

			held += poll(&p, 1, 0) == 0; /* a refused one has EOF or a reset */
		}
	}
	print_message("stalled connections held: %d of %d\n", held, TRIES);
	assert_int_equal(held, SLOTS / 4);
	honest_round_trip(&a, &b);
	for (int i = 0; i < TRIES; i++)
		close(fds[i]);
	node_stop(&a);
	node_stop(&b);
}

/* Connections a peer opened and closed give back their descriptors (and
 * threads) by themselves, not only when the next connection comes. */
static void test_engine_closed_connections_released(void **state)
{
	enum { N = 64 };
	struct node b = node_start(0, 2000);
	int fds[N], before, after = 0;

	(void)state;
	before = test_open_fds();
	for (int i = 0; i < N; i++)
		fds[i] = raw_connect(node_port(&b));
	usleep(300 * 1000); /* the listener accepts them all */
	for (int i = 0; i < N; i++)
		close(fds[i]);
	for (int t = 0; t < 40; t++) {
		usleep(100 * 1000);
		after = test_open_fds();
		if (after <= before)
			break;
	}
	assert_int_equal(after, before);
	node_stop(&b);
}

LUNAR_TEST_MAIN(NULL, NULL, test_engine_write_read_sizes, test_engine_multi_iov,
		test_engine_checksum, test_engine_local_memcpy, test_engine_out_of_bounds,
		test_engine_bad_args, test_engine_hostile_peer,
		test_engine_partial_header_times_out, test_engine_fence_ends_writes_under_way,
		test_engine_fence_fails_older_local_writes,
		test_engine_keyless_owner_serves_its_mount_only,
		test_engine_disk_reply_positive_status, test_engine_reply_of_another_request,
		test_engine_pool_drops_connection_with_stray_bytes,
		test_engine_unreachable_fails_fast, test_engine_timeout, test_engine_peer_restart,
		test_engine_pool_reuses_connections, test_engine_concurrent_threads,
		test_engine_create_refuses_bad_config, test_engine_idle_connections_give_way,
		test_engine_stalled_peer_holds_a_quarter, test_engine_closed_connections_released)
