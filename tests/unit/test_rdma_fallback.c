/*
 * test_rdma_fallback.c - transport choice without RDMA hardware. Engines
 * on loopback with --rdma-devices auto on a host with no device (or no
 * libibverbs) move bytes over TCP; a named device that is not there makes
 * create fail. With the device layer faked (rdma_fake.h: real handshake
 * frames on the real data port, no verbs), a handshake the owner cannot complete and an owner
 * without a device both fall back to TCP byte-exact, counted; the
 * owner refuses a malformed connect body and closes; and a transfer over
 * TCP instead ends with its engine.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "engine/rdma_int.h"
#include "lunar.h"
#include "rdma_fake.h"
#include "test_engine_util.h"
#include "test_listen.h"
#include "tests/cmocka_main.h"

#define SEG_SIZE (8u << 20)
#define MIB	 (1u << 20)

/* ---- engines ---- */

static int node_start(struct node *n, const char *rdma)
{
	struct eng_config cfg = {
	    .host = "127.0.0.1",
	    .seg_size = SEG_SIZE,
	    .io_timeout_ms = 10000,
	    .rdma_devices = rdma,
	};

	int rc;

	n->seg = calloc(1, SEG_SIZE);
	cfg.seg_base = n->seg;
	rc = eng_engine_create(&cfg, &n->e);
	/* A device's segment is registered beside serving: wait for it. */
	if (!rc && n->e->rdma)
		assert_true(rdma_fake_wait_segment(n->e));
	return rc;
}

static void fill(unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)rand_r(&seed);
}

/* Write len bytes a -> b at off and read them back; byte-exact both ways. */
static void round_trip(struct node *a, struct node *b, uint64_t off, size_t len)
{
	unsigned char *src = malloc(len), *dst = calloc(1, len);
	struct iovec v = {src, len}, w = {dst, len};
	const char *ep = eng_engine_endpoint(b->e);

	fill(src, len, (unsigned)len);
	assert_int_equal(eng_xfer(a->e, ep, ENG_WRITE, off, &v, 1, NULL, NULL), 0);
	assert_memory_equal(b->seg + off, src, len);
	assert_int_equal(eng_xfer(a->e, ep, ENG_READ, off, &w, 1, NULL, NULL), 0);
	assert_memory_equal(dst, src, len);
	free(src);
	free(dst);
}

static uint64_t stat_of(struct node *n, enum eng_transport t, int bytes)
{
	struct eng_xfer_stats s;

	eng_engine_xfer_stats(n->e, t, &s);
	return bytes ? s.bytes : s.xfers;
}

static void test_rdma_fallback_auto_without_device(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(0);
	assert_int_equal(node_start(&a, "auto"), 0);
	if (eng_engine_rdma_device(a.e)) {
		node_stop(&a);
		skip(); /* this host has a device: test_rdma_device covers it */
	}
	assert_int_equal(node_start(&b, "auto"), 0);
	assert_null(eng_engine_rdma_device(b.e));
	round_trip(&a, &b, 4096, MIB + 7);
	assert_int_equal(stat_of(&a, ENG_TR_TCP, 0), 2);
	assert_int_equal(stat_of(&a, ENG_TR_TCP, 1), 2 * (MIB + 7));
	assert_int_equal(stat_of(&a, ENG_TR_RDMA, 0), 0);
	node_stop(&b);
	node_stop(&a);
}

static void test_rdma_fallback_no_library(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(0);
	setenv(ENG_IBV_LIB_ENV, "/nonexistent/libibverbs.so.1", 1);
	assert_int_equal(node_start(&a, "auto"), 0);
	assert_null(eng_engine_rdma_device(a.e));
	assert_int_equal(node_start(&b, "none"), 0);
	round_trip(&a, &b, 0, 4096);
	assert_int_equal(stat_of(&a, ENG_TR_TCP, 0), 2);
	node_stop(&b);
	node_stop(&a);
	/* A device asked for by name that cannot be had: no engine. */
	assert_int_equal(node_start(&a, "mlx5_0"), LUNAR_ERR_INVALID_PARAMS);
	free(a.seg);
	unsetenv(ENG_IBV_LIB_ENV);
	assert_int_equal(node_start(&a, "nosuchdevice0,nosuchdevice1:2"), LUNAR_ERR_INVALID_PARAMS);
	free(a.seg);
}

static void test_rdma_fallback_handshake_fails(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	rdma_fake.connect_rc = -EIO; /* the owner's QPs will not connect */
	assert_int_equal(node_start(&a, "auto"), 0);
	assert_int_equal(node_start(&b, "auto"), 0);
	assert_string_equal(eng_engine_rdma_device(a.e), "fake0:1");
	round_trip(&a, &b, 123, 3 * MIB);
	assert_int_equal(rdma_fake.connects, 1); /* once: then TCP for a while */
	assert_int_equal(stat_of(&a, ENG_TR_TCP, 0), 2);
	assert_int_equal(stat_of(&a, ENG_TR_RDMA, 0), 0);
	assert_int_equal(eng_engine_rdma_fallbacks(a.e), 2);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

static void test_rdma_fallback_peer_without_device(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	rdma_fake.nodev_at = 2; /* b has none */
	assert_int_equal(node_start(&a, "auto"), 0);
	assert_int_equal(node_start(&b, "auto"), 0);
	assert_null(eng_engine_rdma_device(b.e));
	round_trip(&a, &b, 0, 64 * 1024);
	assert_int_equal(rdma_fake.connects, 0); /* the owner said no before any QP */
	assert_int_equal(stat_of(&a, ENG_TR_TCP, 0), 2);
	assert_int_equal(eng_engine_rdma_fallbacks(a.e), 2);
	/* And the other way: b has no device, so it never tries. */
	round_trip(&b, &a, 0, 4096);
	assert_int_equal(stat_of(&b, ENG_TR_TCP, 0), 2);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

static int raw_connect(const char *ep)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_port = htons((uint16_t)atoi(strrchr(ep, ':') + 1));
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Send a keyless connect request with body; the reply's status, or 1 when
 * the connection closed without one. */
static int send_connect(int fd, const unsigned char *body, uint64_t off, uint64_t len)
{
	struct eng_wire_req h = {.magic = ENG_WIRE_REQ_MAGIC,
				 .version = ENG_WIRE_VERSION,
				 .op = ENG_OP_RDMA_CONNECT,
				 .offset = off,
				 .length = len,
				 .id = 5};
	unsigned char frame[ENG_WIRE_REQ_FRAME] = {0}, rframe[ENG_WIRE_REP_FRAME];
	struct eng_wire_rep rep;

	eng_wire_req_encode(&h);
	memcpy(frame, &h, sizeof(h)); /* then zeros */
	assert_int_equal(send(fd, frame, sizeof(frame), MSG_NOSIGNAL), sizeof(frame));
	assert_int_equal(send(fd, body, ENG_RDMA_HS_SIZE, MSG_NOSIGNAL), ENG_RDMA_HS_SIZE);
	if (recv(fd, rframe, sizeof(rframe), MSG_WAITALL) != sizeof(rframe))
		return 1;
	memcpy(&rep, rframe, sizeof(rep));
	eng_wire_rep_decode(&rep);
	assert_int_equal(rep.magic, ENG_WIRE_REP_MAGIC);
	return rep.status;
}

static int closed(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char c;

	return poll(&p, 1, 5000) == 1 && recv(fd, &c, 1, 0) == 0;
}

static void test_rdma_fallback_owner_checks_body(void **state)
{
	struct eng_rdma_hs h = {
	    .nqp = 2, .mtu = 3, .port = 1, .cap_op = ENG_OP_READ, .qpn = {7, 8}, .gid = {1}};
	unsigned char body[ENG_RDMA_HS_SIZE], rb[ENG_RDMA_HS_SIZE];
	struct eng_rdma_hs theirs;
	struct node b;
	int fd;

	(void)state;
	rdma_fake_reset(1);
	assert_int_equal(node_start(&b, "auto"), 0);
	/* A malformed body (9 QPs): refused, closed. */
	eng_rdma_hs_encode(&h, body);
	body[6] = 9;
	fd = raw_connect(eng_engine_endpoint(b.e));
	assert_int_equal(send_connect(fd, body, 0, 4096), LUNAR_ERR_PROTOCOL);
	assert_true(closed(fd));
	close(fd);
	/* A range outside the segment: refused, closed. */
	eng_rdma_hs_encode(&h, body);
	fd = raw_connect(eng_engine_endpoint(b.e));
	assert_int_equal(send_connect(fd, body, SEG_SIZE - 10, 11), LUNAR_ERR_INVALID_PARAMS);
	assert_true(closed(fd));
	close(fd);
	/* A good one: the owner's body, which decodes; held until we close. */
	fd = raw_connect(eng_engine_endpoint(b.e));
	assert_int_equal(send_connect(fd, body, 0, 4096), 0);
	assert_int_equal(recv(fd, rb, sizeof(rb), MSG_WAITALL), sizeof(rb));
	assert_int_equal(eng_rdma_hs_decode(rb, sizeof(rb), 1, &theirs), 0);
	assert_int_equal(theirs.nqp, 2);
	assert_int_equal(theirs.rkey, 0x42);
	assert_int_equal(theirs.length, SEG_SIZE);
	close(fd);
	node_stop(&b); /* joins the holding thread: no leak under ASan */
	rdma_fake_reset(0);
}

/* An engine destroyed under a transfer that went over TCP instead of
 * RDMA (its memory not registered) ends it at once, as a TCP transfer:
 * here the owner, a socket nobody answers on, would hold it to the I/O
 * deadline (10 s). */
static void test_rdma_fallback_destroy_cuts_tcp_instead(void **state)
{
	unsigned char buf[4096];
	struct iovec v = {buf, sizeof(buf)};
	struct eng_op op;
	struct eng_cq *cq;
	struct node a;
	uint16_t port;
	uint64_t t0;
	char ep[32];
	int lfd = test_listen_loopback(4, &port);

	(void)state;
	rdma_fake_reset(1);
	assert_int_equal(node_start(&a, "auto"), 0);
	rdma_fake.unregistered = 1;
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	op = (struct eng_op){.endpoint = ep, .dir = ENG_READ, .iov = &v, .iovcnt = 1};
	assert_int_equal(eng_cq_alloc(&cq), 0);
	assert_int_equal(eng_xfer_submit(a.e, cq, &op, 1), 0);
	for (t0 = lc_now_ms(); !eng_engine_rdma_fallbacks(a.e) && lc_now_ms() - t0 < 5000;)
		usleep(1000);
	assert_int_equal(eng_engine_rdma_fallbacks(a.e), 1);
	usleep(100000); /* its request sent (published or not, the stop ends it) */
	assert_true(node_stop_under(&a, cq, &op) < 5000);
	eng_cq_free(cq);
	close(lfd);
	rdma_fake_reset(0);
}

LUNAR_TEST_MAIN(NULL, NULL, test_rdma_fallback_auto_without_device, test_rdma_fallback_no_library,
		test_rdma_fallback_handshake_fails, test_rdma_fallback_peer_without_device,
		test_rdma_fallback_owner_checks_body, test_rdma_fallback_destroy_cuts_tcp_instead)
