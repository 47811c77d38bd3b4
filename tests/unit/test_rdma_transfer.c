/*
 * test_rdma_transfer.c - RDMA transfers between engines on loopback with
 * the device layer faked (rdma_fake.h: real frames on the real data port,
 * a "NIC" that moves each work request's bytes with memcpy).
 *
 * Keyless, the client posts one-sided READs and WRITEs at the owner's
 * segment, on a QP set that serves the owner's mount it was set up under
 * only. Keyed (SPEC §13), the owner's segment is never open to remote
 * access: each transfer is asked for on the connect's connection with its
 * capability, and the owner moves the bytes with its QPs. Then: the bytes
 * move exactly, both ways; on an established connection a transfer whose
 * grant is for another range or op is refused before a byte moves, and
 * counted; a WRITE whose bytes do not match their CRC32C is refused; an
 * owner whose lifeline ends mid-transfer gives TRANSFER_FAIL with our QPs
 * fenced, one gone between transfers a transfer that moves nothing, and a
 * new owner is reached afresh; the owner's fence ends a set, and the next
 * transfer sets up a new one; an owner of another cluster fails the connect's
 * handshake and the transfer, nothing moved; memory not open to the owner goes over TCP;
 * concurrent keyed transfers to one owner run at once, on up to
 * ENG_RDMA_CHANNELS QP sets; an engine destroyed under a transfer ends it
 * at once. An engine serves before its segment is
 * registered, peers using TCP meanwhile and RDMA a second after it is.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

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

#include "auth.h"
#include "clock.h"
#include "crc32c.h"
#include "engine/rdma_int.h"
#include "lunar.h"
#include "rdma_fake.h"
#include "test_engine_util.h"
#include "test_engine_raw.h"
#include "test_listen.h"
#include "tests/cmocka_main.h"

#define SEG_SIZE (8u << 20)
#define MIB	 (1u << 20)

static struct auth_key key;
static unsigned char secret[AUTH_KEY_BYTES];

static int setup(void **state)
{
	(void)state;
	keys_make(&key, secret);
	return 0;
}

/* The configuration of a keyless engine with the fake device, on a free
 * data port. */
static struct eng_config fake_config(void)
{
	return (struct eng_config){.host = "127.0.0.1",
				   .seg_size = SEG_SIZE,
				   .io_timeout_ms = 10000,
				   .rdma_devices = "auto"};
}

/* An engine with the fake device on data port port (0: a free one);
 * keyed (k not NULL): with cluster key k and the segment secret the master
 * would have given it. */
static struct node node_start_at(const struct auth_key *k, uint16_t port)
{
	struct eng_config cfg = fake_config();
	struct node n;

	cfg.port = port;
	cfg.cluster_key = k;
	n = node_create(cfg);

	assert_string_equal(eng_engine_rdma_device(n.e), "fake0:1");
	assert_true(rdma_fake_wait_segment(n.e));
	if (k)
		assert_int_equal(eng_engine_set_secret(n.e, eng_engine_endpoint(n.e), secret), 0);
	return n;
}

static struct node node_start_key(const struct auth_key *k)
{
	return node_start_at(k, 0);
}

static struct node node_start(int keyed)
{
	return node_start_key(keyed ? &key : NULL);
}

/* A grant for op of [off, off + len) of owner's segment, valid a minute. */
static struct eng_cap cap_for(struct node *owner, uint32_t op, uint64_t off, uint64_t len)
{
	return grant(secret, eng_engine_endpoint(owner->e), op, off, len, 1, lc_now_ms() + 60000);
}

static int xfer(struct node *a, struct node *b, enum eng_dir dir, uint64_t off, void *buf,
		size_t len, const struct eng_cap *cap)
{
	struct iovec v = {buf, len};

	return eng_xfer(a->e, eng_engine_endpoint(b->e), dir, off, &v, 1, cap, NULL);
}

static uint64_t xfers(struct node *n, enum eng_transport t)
{
	struct eng_xfer_stats s;

	eng_engine_xfer_stats(n->e, t, &s);
	return s.xfers;
}

static void fill(unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)rand_r(&seed);
}

/* a writes len bytes at off of b's segment and reads them back, with
 * grants when keyed; both byte-exact, the CRC the caller gets right. */
static void round_trip(struct node *a, struct node *b, int keyed, uint64_t off, size_t len)
{
	unsigned char *src = malloc(len), *dst = calloc(1, len);
	struct eng_cap wc = cap_for(b, ENG_OP_WRITE, off, len),
		       rc = cap_for(b, ENG_OP_READ, off, len);
	struct iovec v = {src, len}, w = {dst, len};
	const char *ep = eng_engine_endpoint(b->e);
	uint32_t crc = 0;

	assert_non_null(src);
	assert_non_null(dst);
	fill(src, len, (unsigned)len);
	assert_int_equal(eng_xfer(a->e, ep, ENG_WRITE, off, &v, 1, keyed ? &wc : NULL, &crc), 0);
	assert_int_equal(crc, lc_crc32c(0, src, len));
	assert_memory_equal(b->seg + off, src, len);
	assert_int_equal(eng_xfer(a->e, ep, ENG_READ, off, &w, 1, keyed ? &rc : NULL, &crc), 0);
	assert_memory_equal(dst, src, len);
	assert_int_equal(crc, lc_crc32c(0, src, len));
	free(src);
	free(dst);
}

static void test_rdma_transfer_keyless_client_posts(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(0);
	b = node_start(0);
	assert_true(b.e->rdma->dev->seg.remote); /* the client reaches into it */
	/* A one-sided READ lands unseen: nothing tells its bytes as they come. */
	assert_false(eng_engine_tells_landed(a.e, eng_engine_endpoint(b.e)));
	round_trip(&a, &b, 0, 4096 + 3, 3 * MIB + 5);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 2);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 0);
	assert_int_equal(rdma_fake.moved, 2 * (3 * MIB + 5));
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* Keyless engines a and b, and a QP set under b's mount 7 set up by a
 * transfer of dir of buf; then b fences and re-mounts as 9. */
static void set_then_remount(struct node *a, struct node *b, enum eng_dir dir, unsigned char *buf,
			     size_t len)
{
	const struct eng_cap old = {.mount = 7};

	rdma_fake_reset(1);
	*a = node_start(0);
	*b = node_start(0);
	eng_engine_set_mount(b->e, 7);
	assert_int_equal(xfer(a, b, dir, 0, buf, len, &old), 0);
	assert_int_equal(xfers(a, ENG_TR_RDMA), 1);
	assert_int_equal(rdma_fake.connects, 2); /* each side's QPs */
	assert_int_equal(eng_engine_fence(b->e), 0);
	eng_engine_set_mount(b->e, 9);
}

/* Keyless, a QP set serves the owner's mount it was set up under only, and
 * ends with the owner's fence: after a re-mount the first transfer sets up
 * a new set under the new mount; one of the old mount is refused over TCP
 * with no byte moved; after a re-mount that keeps the mount, the same. */
static void test_rdma_transfer_keyless_set_serves_its_mount(void **state)
{
	const struct eng_cap old = {.mount = 7}, cur = {.mount = 9};
	unsigned char buf[4096];
	struct node a, b;

	(void)state;
	fill(buf, sizeof(buf), 1);
	set_then_remount(&a, &b, ENG_WRITE, buf, sizeof(buf));
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &cur), 0);
	assert_memory_equal(buf, b.seg, sizeof(buf));
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 2);
	assert_int_equal(rdma_fake.connects, 4);
	buf[0] ^= 0xff;
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &old),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_not_equal(b.seg[0], buf[0]);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 1);
	/* A re-mount that keeps the mount ends the set too. */
	assert_int_equal(eng_engine_fence(b.e), 0);
	eng_engine_set_mount(b.e, 9);
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &cur), 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 3);
	assert_int_equal(rdma_fake.connects, 6);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 1);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* Fence engine e once the fake NIC is moving a transfer's bytes (5 s at
 * most), then, keyless, re-mount it keeping mount (0: keyed, no re-mount);
 * with destroy, destroy e instead (its segment stays). On a thread of its
 * own, its result in fence_rc. */
struct fence_job {
	struct eng_engine *e;
	uint64_t mount;
	int destroy;
};
static int fence_rc;

static void *fence_soon(void *arg)
{
	const struct fence_job *j = arg;

	for (int ms = 0; ms < 5000 && !atomic_load(&rdma_fake.running); ms++)
		usleep(1000);
	if (j->destroy) {
		eng_engine_destroy(j->e);
		return NULL;
	}
	fence_rc = eng_engine_fence(j->e);
	if (j->mount)
		eng_engine_set_mount(j->e, j->mount);
	return NULL;
}

/* a's transfer of dir of buf (4096 bytes) to b's offset 0 under cap, with
 * j run on another thread while the fake NIC moves it (300 ms): its result. */
static int xfer_under(struct node *a, struct node *b, enum eng_dir dir, unsigned char *buf,
		      const struct eng_cap *cap, struct fence_job *j)
{
	struct iovec v = {buf, 4096};
	char ep[ENG_ENDPOINT_MAX];
	pthread_t th;
	int rc;

	/* Copied: j may destroy b, and its endpoint string with it. */
	snprintf(ep, sizeof(ep), "%s", eng_engine_endpoint(b->e));
	rdma_fake.post_ms = 300;
	assert_int_equal(pthread_create(&th, NULL, fence_soon, j), 0);
	rc = eng_xfer(a->e, ep, dir, 0, &v, 1, cap, NULL);
	pthread_join(th, NULL);
	rdma_fake.post_ms = 0;
	return rc;
}

/* Keyless, the owner ends the set in the middle of a transfer (or before
 * it, the hang-up not seen yet). A fence that keeps the mount: the
 * transfer fails on the set and runs once more on a new one; its result
 * and bytes are that run's, counted once. The owner gone: the second run
 * finds nobody, and the transfer fails as one that may have sent bytes
 * (TRANSFER_FAIL), never as one that sent none. */
static void test_rdma_transfer_keyless_set_ended_under_transfer(void **state)
{
	const struct eng_cap cur = {.mount = 9};
	unsigned char buf[4096];
	struct fence_job j;
	struct node a, b;

	(void)state;
	fill(buf, sizeof(buf), 2);
	set_then_remount(&a, &b, ENG_READ, buf, sizeof(buf));
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &cur), 0);
	assert_int_equal(rdma_fake.connects, 4);
	fill(b.seg, sizeof(buf), 5);
	j = (struct fence_job){.e = b.e, .mount = 9};
	assert_int_equal(xfer_under(&a, &b, ENG_READ, buf, &cur, &j), 0);
	assert_int_equal(fence_rc, 0);
	assert_memory_equal(buf, b.seg, sizeof(buf));
	assert_int_equal(rdma_fake.connects, 6); /* a new set for the second run */
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 3);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 0);
	j = (struct fence_job){.e = b.e, .destroy = 1};
	assert_int_equal(xfer_under(&a, &b, ENG_WRITE, buf, &cur, &j), LUNAR_ERR_TRANSFER_FAIL);
	free(b.seg);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* Keyless, a transfer of a mount the owner left (a writer that slept
 * through its re-mount) is refused, and the set it asked for too; the
 * transfers of the owner's mount still go over RDMA at once, not by TCP
 * for the second such a refusal holds its own mount off. */
static void test_rdma_transfer_keyless_stale_mount_holds_off_itself(void **state)
{
	const struct eng_cap old = {.mount = 7}, cur = {.mount = 9};
	unsigned char buf[4096];
	struct node a, b;

	(void)state;
	set_then_remount(&a, &b, ENG_READ, buf, sizeof(buf));
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &old), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 1);
	assert_int_equal(rdma_fake.creates, 3); /* each side's, then ours refused */
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &old), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 2);
	assert_int_equal(rdma_fake.creates, 3); /* the refused mount held off */
	fill(b.seg, sizeof(buf), 3);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &cur), 0);
	assert_memory_equal(buf, b.seg, sizeof(buf));
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 2);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 2);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* A keyless transfer of several pieces looks each piece's key up once,
 * and each lands where it belongs. */
static void test_rdma_transfer_keyless_pieces_keyed_once(void **state)
{
	unsigned char src[3][1000], dst[3][1000];
	struct iovec w[3] = {{src[0], 1000}, {src[1], 0}, {src[2], 1000}},
		     r[3] = {{dst[0], 1000}, {dst[1], 0}, {dst[2], 1000}};
	struct node a, b;
	const char *ep;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(0);
	b = node_start(0);
	ep = eng_engine_endpoint(b.e);
	fill(src[0], 1000, 1);
	fill(src[2], 1000, 2);
	memset(dst, 0, sizeof(dst));
	atomic_store(&rdma_fake.key_lookups, 0);
	assert_int_equal(eng_xfer(a.e, ep, ENG_WRITE, 64, w, 3, NULL, NULL), 0);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 64, r, 3, NULL, NULL), 0);
	assert_int_equal(atomic_load(&rdma_fake.key_lookups), 4); /* 2 pieces, 2 transfers */
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 2);
	assert_memory_equal(b.seg + 64, src[0], 1000);
	assert_memory_equal(b.seg + 1064, src[2], 1000);
	assert_memory_equal(dst[0], src[0], 1000);
	assert_memory_equal(dst[2], src[2], 1000);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* The end of a keyed pair's test: every window closed, no client memory
 * reached by its MR's own key, denied requests a window refused; then both
 * engines stopped and the fake off. */
static void keyed_pair_end(struct node *a, struct node *b, int denied)
{
	assert_int_equal(rdma_fake.bound, 0);
	assert_int_equal(rdma_fake.mr_key_posts, 0);
	assert_int_equal(rdma_fake.denied, denied);
	node_stop(b);
	node_stop(a);
	rdma_fake_reset(0);
}

static void test_rdma_transfer_keyed_owner_moves(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	assert_false(b.e->rdma->dev->seg.remote); /* closed: only its owner posts */
	round_trip(&a, &b, 1, 4096 + 3, 3 * MIB + 5);
	round_trip(&a, &b, 1, 0, 1);		 /* on the same connection */
	assert_int_equal(rdma_fake.connects, 2); /* one QP set a side */
	/* Nor did it tell where its segment lies, or a key to it. */
	assert_int_equal(atomic_load(&rdma_fake.owner_addr), 0);
	assert_int_equal(atomic_load(&rdma_fake.owner_rkey), 0);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 4);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 0);
	assert_int_equal(rdma_fake.moved, 2 * (3 * MIB + 5) + 2);
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), 0);
	/* Each transfer opened its bytes by windows, closed after it: a
	 * 3 MiB one in four pieces, one a QP, a byte in one; the owner never
	 * held the range's own key, and posted each piece on the QP its
	 * window serves (the fake's windows serve that one only). */
	assert_int_equal(rdma_fake.binds, 2 * 4 + 2);
	keyed_pair_end(&a, &b, 0);
}

/* A keyed transfer's pieces are cut by bytes, not by count: 3 MiB and
 * 4 KiB over 4 QPs move as four pieces of 768 KiB and the 4 KiB (the 3 MiB
 * one cut until no piece holds more than a QP's share), each bound and
 * landing whole. */
static void test_rdma_transfer_keyed_pieces_spread_by_bytes(void **state)
{
	enum { BIG = 3 * MIB, SMALL = 4096 };
	unsigned char *src = malloc(BIG + SMALL), *dst = calloc(1, BIG + SMALL);
	struct iovec v[2] = {{src, BIG}, {src + BIG, SMALL}};
	struct iovec w[2] = {{dst, BIG}, {dst + BIG, SMALL}};
	struct node a, b;
	struct eng_cap wc, rc;

	(void)state;
	assert_non_null(src);
	assert_non_null(dst);
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	wc = cap_for(&b, ENG_OP_WRITE, 0, BIG + SMALL);
	rc = cap_for(&b, ENG_OP_READ, 0, BIG + SMALL);
	fill(src, BIG + SMALL, 9);
	assert_int_equal(eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_WRITE, 0, v, 2, &wc, NULL), 0);
	assert_int_equal(rdma_fake.binds, 5);
	assert_int_equal(eng_xfer(a.e, eng_engine_endpoint(b.e), ENG_READ, 0, w, 2, &rc, NULL), 0);
	assert_int_equal(rdma_fake.binds, 10);
	assert_memory_equal(dst, src, BIG + SMALL);
	free(src);
	free(dst);
	keyed_pair_end(&a, &b, 0);
}

/* Keyed, the owner's fence (a re-mount) ends the QP set too: the next
 * transfer, under the new mount's secret, sets up a new set rather than
 * fail on the dead one. */
static void test_rdma_transfer_keyed_set_ends_at_fence(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	round_trip(&a, &b, 1, 0, 4096);
	assert_int_equal(rdma_fake.connects, 2);
	assert_int_equal(eng_engine_fence(b.e), 0);
	assert_int_equal(eng_engine_set_secret(b.e, eng_engine_endpoint(b.e), secret), 0);
	round_trip(&a, &b, 1, 4096, 4096);
	assert_int_equal(rdma_fake.connects, 4);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 4);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 0);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* A good READ of [0, 4096): the connection up (again) over RDMA. */
static void good_read(struct node *a, struct node *b)
{
	unsigned char buf[4096];
	struct eng_cap c = cap_for(b, ENG_OP_READ, 0, sizeof(buf));
	uint64_t before = xfers(a, ENG_TR_RDMA);

	assert_int_equal(xfer(a, b, ENG_READ, 0, buf, sizeof(buf), &c), 0);
	assert_int_equal(xfers(a, ENG_TR_RDMA), before + 1);
}

/* Keyed, a QP set's lifeline waiting between transfers holds its slot of
 * the owner's data port only until the port needs it: connections from
 * its address past the address's quarter of the slots, each past the
 * handshake and idle since a request of its own, take the slot of the one
 * idle longest, the lifeline; the next transfer sets up a new set. */
static void test_rdma_transfer_keyed_idle_lifeline_gives_way(void **state)
{
	enum { SOCKS = 300 }; /* past one address's 256 slots */
	static int fds[SOCKS];
	struct auth_session s;
	struct eng_cap c;
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	good_read(&a, &b); /* one set up */
	assert_int_equal(rdma_fake.connects, 2);
	c = cap_for(&b, ENG_OP_READ, 0, 64);
	for (int i = 0; i < SOCKS; i++) {
		fds[i] = raw_keyed(&a, &b, &s);
		raw_read64(fds[i], &s, &c);
	}
	good_read(&a, &b);
	assert_int_equal(rdma_fake.connects, 4);
	for (int i = 0; i < SOCKS; i++)
		close(fds[i]);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

static void test_rdma_transfer_keyed_grant_per_transfer(void **state)
{
	unsigned char buf[4096], want[4096];
	struct eng_cap bad[3];
	struct node a, b;
	int posts;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	fill(want, sizeof(want), 3);
	memcpy(b.seg + 8192, want, sizeof(want));
	bad[0] = cap_for(&b, ENG_OP_WRITE, 0, 4096);   /* another range */
	bad[1] = cap_for(&b, ENG_OP_READ, 8192, 4096); /* another op */
	bad[2] = grant(secret, eng_engine_endpoint(b.e), ENG_OP_WRITE, 8192, 4096, 1,
		       lc_now_ms() - 60000); /* expired */
	for (int i = 0; i < 3; i++) {
		good_read(&a, &b);
		posts = rdma_fake.posts;
		memset(buf, 0xee, sizeof(buf));
		assert_int_equal(xfer(&a, &b, ENG_WRITE, 8192, buf, sizeof(buf), &bad[i]),
				 LUNAR_ERR_UNAUTHORIZED);
		assert_int_equal(rdma_fake.posts, posts); /* not a byte moved */
		assert_memory_equal(b.seg + 8192, want, sizeof(want));
		assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), (uint64_t)i + 1);
	}
	/* The windows will not close after a refusal: still the refusal, not
	 * run again (the refused grant would be refused at the connect). */
	good_read(&a, &b);
	rdma_fake.close_rc = -EIO;
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 8192, buf, sizeof(buf), &bad[0]),
			 LUNAR_ERR_UNAUTHORIZED);
	rdma_fake.close_rc = 0;
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CAPABILITY), 4);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 0);
	good_read(&a, &b); /* a refusal costs the connection, not the peer */
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* An owner that reaches one byte past a get's bytes is stopped by the
 * transfer's window. */
static void test_rdma_transfer_keyed_window_bounds_owner(void **state)
{
	unsigned char buf[4096 + 1];
	struct node a, b;
	struct eng_cap c;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	good_read(&a, &b);
	memset(b.seg, 0xab, 8192);
	memset(buf, 0, sizeof(buf));
	c = cap_for(&b, ENG_OP_READ, 0, 4096);
	rdma_fake.overreach = 1;
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, 4096, &c), LUNAR_ERR_TRANSFER_FAIL);
	rdma_fake.overreach = 0;
	assert_int_equal(buf[4096], 0);
	keyed_pair_end(&a, &b, 1);
}

/* A keyed engine whose device binds no type 2 windows does not use it:
 * without them an owner could reach memory opened to another (a type 1
 * window serves every QP of the PD, an open MR all of its range), so its
 * transfers go over TCP. */
static void test_rdma_transfer_keyed_without_windows_uses_tcp(void **state)
{
	struct eng_config cfg = fake_config();
	unsigned char buf[4096];
	struct node a, b;
	struct eng_cap c;

	(void)state;
	rdma_fake_reset(1);
	rdma_fake.no_windows = 1;
	cfg.cluster_key = &key;
	a = node_create(cfg);
	b = node_create(cfg);
	assert_null(eng_engine_rdma_device(a.e));
	assert_int_equal(eng_engine_set_secret(b.e, eng_engine_endpoint(b.e), secret), 0);
	c = cap_for(&b, ENG_OP_READ, 0, sizeof(buf));
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &c), 0);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 1);
	assert_int_equal(rdma_fake.connects, 0);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* A keyed WRITE whose bytes reach the owner unlike their CRC32C fails,
 * and its QP set, which the owner keeps serving, carries the next; unless
 * its windows failed to close, which fenced it. */
static void test_rdma_transfer_keyed_write_crc_checked(void **state)
{
	unsigned char buf[4096];
	struct node a, b;
	struct eng_cap c;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	c = cap_for(&b, ENG_OP_WRITE, 0, sizeof(buf));
	fill(buf, sizeof(buf), 5);
	rdma_fake.corrupt = 1; /* the bytes the owner reads are not those sent */
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &c), LUNAR_ERR_TRANSFER_FAIL);
	rdma_fake.corrupt = 0;
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &c), 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	assert_int_equal(eng_engine_rejected(b.e, ENG_REJ_CRC), 1);
	/* The owner serves on after a mismatch: the same set carried both. */
	assert_int_equal(rdma_fake.connects, 2);
	assert_int_equal(rdma_fake.fences, 0);
	/* A mismatch whose windows then failed to close fenced the set: the
	 * next transfer sets up another rather than failing on it. */
	rdma_fake.corrupt = 1;
	rdma_fake.close_rc = -EIO;
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &c), LUNAR_ERR_TRANSFER_FAIL);
	rdma_fake.corrupt = 0;
	rdma_fake.close_rc = 0;
	fill(buf, sizeof(buf), 6);
	assert_int_equal(xfer(&a, &b, ENG_WRITE, 0, buf, sizeof(buf), &c), 0);
	assert_memory_equal(b.seg, buf, sizeof(buf));
	assert_int_equal(rdma_fake.connects, 4);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

static void test_rdma_transfer_keyed_owner_failures(void **state)
{
	unsigned char buf[4096];
	char ep[ENG_ENDPOINT_MAX];
	struct iovec v = {buf, sizeof(buf)};
	struct node a, b, b2;
	struct fence_job j;
	struct eng_cap c;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	/* The owner's post fails: TRANSFER_FAIL, its QPs fenced. */
	good_read(&a, &b);
	c = cap_for(&b, ENG_OP_READ, 0, sizeof(buf));
	rdma_fake.post_rc = -EIO;
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &c), LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(rdma_fake.fences, 1);
	rdma_fake.post_rc = 0;
	good_read(&a, &b);
	/* The owner's fence ends the lifeline while it moves the bytes: our
	 * QPs fenced before the caller has its memory back, and the transfer
	 * run once more on a new set, whose connect the owner, between
	 * mounts, refuses: UNAUTHORIZED (a grant of its old mount). */
	j = (struct fence_job){.e = b.e};
	assert_int_equal(xfer_under(&a, &b, ENG_READ, buf, &c, &j), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(fence_rc, 0);
	assert_int_equal(rdma_fake.fences, 2);
	assert_int_equal(rdma_fake.bound, 0); /* no window outlived a failure */
	/* The owner goes away between transfers: the next one sees the
	 * lifeline down, and moves nothing. (The refused connect holds RDMA
	 * off for a second: TCP meanwhile.) */
	assert_int_equal(eng_engine_set_secret(b.e, eng_engine_endpoint(b.e), secret), 0);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &c), 0);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 2);
	usleep(1100 * 1000);
	good_read(&a, &b);
	snprintf(ep, sizeof(ep), "%s", eng_engine_endpoint(b.e));
	node_stop(&b);
	assert_int_equal(eng_xfer(a.e, ep, ENG_READ, 0, &v, 1, &c, NULL), ENG_XFER_UNSENT);
	assert_int_equal(rdma_fake.bound, 0);
	b2 = node_start(1);
	good_read(&a, &b2);
	node_stop(&b2);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* An owner of another cluster: the connect's auth handshake fails, its
 * connection is closed (once), and the transfer fails, nothing moved. */
static void test_rdma_transfer_keyed_handshake_refused(void **state)
{
	unsigned char other_secret[AUTH_KEY_BYTES], buf[4096];
	struct auth_key other;
	struct node a, b;
	struct eng_cap c;

	(void)state;
	rdma_fake_reset(1);
	keys_make(&other, other_secret);
	a = node_start(1);
	b = node_start_key(&other);
	c = cap_for(&b, ENG_OP_READ, 0, sizeof(buf));
	memset(b.seg, 7, sizeof(buf));
	memset(buf, 0, sizeof(buf));
	assert_int_not_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), &c), 0);
	assert_int_equal(rdma_fake.connects, 0);
	assert_int_equal(buf[0], 0);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

#define NWRITERS 4
#define ROUNDS	 6

struct writer {
	struct node *a, *b;
	pthread_barrier_t *go;
	int slot; /* writes [slot MiB, slot + 1 MiB) */
};

/* ROUNDS writes of its own MiB, all writers starting each round together. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	unsigned char *buf = malloc(MIB);
	struct eng_cap c = cap_for(w->b, ENG_OP_WRITE, (uint64_t)w->slot * MIB, MIB);
	intptr_t bad = buf == NULL;

	for (int i = 0; i < ROUNDS && !bad; i++) {
		fill(buf, MIB, (unsigned)(w->slot * ROUNDS + i));
		pthread_barrier_wait(w->go);
		bad = xfer(w->a, w->b, ENG_WRITE, (uint64_t)w->slot * MIB, buf, MIB, &c) != 0 ||
		      memcmp(w->b->seg + (size_t)w->slot * MIB, buf, MIB) != 0;
	}
	free(buf);
	return (void *)bad;
}

static void test_rdma_transfer_keyed_concurrent_on_sets(void **state)
{
	struct writer w[NWRITERS];
	pthread_t t[NWRITERS];
	pthread_barrier_t go;
	struct node a, b;
	void *bad;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	good_read(&a, &b);	/* one set up */
	rdma_fake.post_ms = 20; /* long enough for the writes to meet */
	assert_int_equal(pthread_barrier_init(&go, NULL, NWRITERS), 0);
	for (int i = 0; i < NWRITERS; i++) {
		w[i] = (struct writer){&a, &b, &go, i};
		assert_int_equal(pthread_create(&t[i], NULL, writer_main, &w[i]), 0);
	}
	for (int i = 0; i < NWRITERS; i++) {
		assert_int_equal(pthread_join(t[i], &bad), 0);
		assert_null(bad);
	}
	pthread_barrier_destroy(&go);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 1 + NWRITERS * ROUNDS);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 0);
	assert_true(rdma_fake.most >= 2); /* the owner ran two at once */
	/* QP sets, counted on both sides: more than one, never too many. */
	assert_in_range(rdma_fake.connects, 2 * 2, 2 * ENG_RDMA_CHANNELS);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* An engine going away while a keyed transfer waits for the owner's
 * answer (its "NIC" holds each request 3 s) ends that transfer at once,
 * failed, rather than at the owner's answer or the I/O deadline. */
static void test_rdma_transfer_destroy_cuts_transfer_short(void **state)
{
	unsigned char *buf = malloc(4096);
	struct eng_cap c;
	struct eng_op op;
	struct eng_cq *cq;
	struct iovec v = {buf, 4096};
	struct node a, b;
	uint64_t t0;

	(void)state;
	assert_non_null(buf);
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	good_read(&a, &b); /* one set up */
	c = cap_for(&b, ENG_OP_READ, 0, 4096);
	op = (struct eng_op){.endpoint = eng_engine_endpoint(b.e),
			     .dir = ENG_READ,
			     .iov = &v,
			     .iovcnt = 1,
			     .cap = &c};
	rdma_fake.post_ms = 3000;
	assert_int_equal(eng_cq_alloc(&cq), 0);
	assert_int_equal(eng_xfer_submit(a.e, cq, &op, 1), 0);
	for (t0 = lc_now_ms(); !atomic_load(&rdma_fake.running) && lc_now_ms() - t0 < 5000;)
		usleep(1000);
	assert_int_equal(atomic_load(&rdma_fake.running), 1); /* the owner holds it */
	assert_true(node_stop_under(&a, cq, &op) < 2500);
	node_stop(&b); /* after its request: the buffer it writes stays ours */
	eng_cq_free(cq);
	free(buf);
	rdma_fake_reset(0);
}

/* An owner that takes the connection and its handshake, then never
 * answers: it reads what comes until the peer closes. */
struct mute_owner {
	struct node *b; /* whose engine plays the handshake */
	int lfd;
};

static void *mute_owner_main(void *arg)
{
	struct mute_owner *m = arg;
	struct auth_session s;
	const char *why;
	char buf[256];
	int fd = accept(m->lfd, NULL, NULL);

	if (fd >= 0 && !eng_hs_server(m->b->e, fd, &s, lc_now_ns() + 10000000000ull, &why))
		while (recv(fd, buf, sizeof(buf), 0) > 0)
			;
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* An engine destroyed while it sets up a QP set, its owner silent, ends
 * the set-up at once, as a TCP slice: not at the I/O deadline (10 s). */
static void test_rdma_transfer_destroy_cuts_set_up_short(void **state)
{
	unsigned char buf[4096];
	struct iovec v = {buf, sizeof(buf)};
	struct mute_owner m;
	struct eng_cap c;
	struct eng_op op;
	struct eng_cq *cq;
	struct node a, b;
	uint16_t port;
	pthread_t t;
	char ep[32];

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	m = (struct mute_owner){&b, test_listen_loopback(1, &port)};
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	assert_int_equal(pthread_create(&t, NULL, mute_owner_main, &m), 0);
	c = grant(secret, ep, ENG_OP_READ, 0, sizeof(buf), 1, lc_now_ms() + 60000);
	op = (struct eng_op){.endpoint = ep, .dir = ENG_READ, .iov = &v, .iovcnt = 1, .cap = &c};
	assert_int_equal(eng_cq_alloc(&cq), 0);
	assert_int_equal(eng_xfer_submit(a.e, cq, &op, 1), 0);
	usleep(300 * 1000); /* its connect request sent (published or not, the stop ends it) */
	assert_true(node_stop_under(&a, cq, &op) < 5000);
	pthread_join(t, NULL);
	close(m.lfd);
	eng_cq_free(cq);
	node_stop(&b);
	rdma_fake_reset(0);
}

static void test_rdma_transfer_keyed_unopened_memory_uses_tcp(void **state)
{
	struct node a, b;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(1);
	b = node_start(1);
	rdma_fake.unregistered = 1;
	round_trip(&a, &b, 1, 0, MIB);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 2);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 0);
	assert_int_equal(eng_engine_rdma_fallbacks(a.e), 2);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* An owner whose port refuses (gone, not back yet) has not said it has no
 * device: a transfer to it fails, and RDMA is tried again a second later
 * (ENG_RDMA_REDIAL_NS), not only after the 30 s a refusal of RDMA holds it
 * off. The owner back on its port is reached over RDMA. */
static void test_rdma_transfer_refused_port_tried_again_soon(void **state)
{
	unsigned char buf[4096];
	char ep[ENG_ENDPOINT_MAX];
	struct iovec v = {buf, sizeof(buf)};
	struct node a, b;
	uint16_t port;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(0);
	b = node_start(0);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 1);
	snprintf(ep, sizeof(ep), "%s", eng_engine_endpoint(b.e));
	port = (uint16_t)atoi(strrchr(ep, ':') + 1);
	node_stop(&b);
	assert_int_equal(rdma_fake.creates, 2);
	assert_int_not_equal(eng_xfer(a.e, ep, ENG_READ, 0, &v, 1, NULL, NULL), 0);
	assert_int_equal(rdma_fake.creates, 2); /* nobody there: no QPs made for it */
	b = node_start_at(NULL, port);
	assert_string_equal(eng_engine_endpoint(b.e), ep);
	usleep(1100 * 1000);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 2);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* An engine serves at once; its segment is registered beside it (pinning a
 * large one takes seconds), and until then peers reach it over TCP. */
static void test_rdma_transfer_segment_registered_beside_serving(void **state)
{
	unsigned char buf[4096];
	struct node a, b, c;
	uint64_t t0;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(0);
	rdma_fake.register_ms = 1500;
	t0 = lc_now_ms();
	b = node_create(fake_config());
	assert_true(lc_now_ms() - t0 < 1000); /* create did not wait for it */
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	assert_int_equal(xfers(&a, ENG_TR_TCP), 1); /* b said no to RDMA: not yet */
	assert_int_equal(eng_engine_rdma_fallbacks(a.e), 1);
	assert_true(rdma_fake_wait_segment(b.e));
	rdma_fake.register_ms = 0;
	/* It said "not yet": a asks again a second later, and is answered. */
	usleep(1100 * 1000);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 1);
	c = node_start(0); /* a new peer: over RDMA at once */
	assert_int_equal(xfer(&c, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	assert_int_equal(xfers(&c, ENG_TR_RDMA), 1);
	node_stop(&c);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

/* An owner whose segment could not be registered says "no", not "not
 * yet": its peers use TCP and ask again after 30 s, not every second. */
static void test_rdma_transfer_segment_unregistered_refuses(void **state)
{
	unsigned char buf[4096];
	struct node a, b;
	int creates;

	(void)state;
	rdma_fake_reset(1);
	a = node_start(0);
	rdma_fake.register_rc = -ENOMEM;
	b = node_create(fake_config());
	assert_false(rdma_fake_wait_segment(b.e));
	assert_int_equal(eng_rdma_seg_state(b.e->rdma->dev), ENG_SEG_FAILED);
	rdma_fake.register_rc = 0;
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	creates = atomic_load(&rdma_fake.creates); /* a's QPs for its one ask */
	assert_int_equal(creates, 1);
	usleep(1100 * 1000);
	assert_int_equal(xfer(&a, &b, ENG_READ, 0, buf, sizeof(buf), NULL), 0);
	assert_int_equal(atomic_load(&rdma_fake.creates), creates); /* not asked again */
	assert_int_equal(xfers(&a, ENG_TR_TCP), 2);
	assert_int_equal(xfers(&a, ENG_TR_RDMA), 0);
	node_stop(&b);
	node_stop(&a);
	rdma_fake_reset(0);
}

LUNAR_TEST_MAIN(
    setup, NULL, test_rdma_transfer_keyless_client_posts,
    test_rdma_transfer_keyless_pieces_keyed_once, test_rdma_transfer_keyless_set_serves_its_mount,
    test_rdma_transfer_keyless_set_ended_under_transfer,
    test_rdma_transfer_keyless_stale_mount_holds_off_itself, test_rdma_transfer_keyed_owner_moves,
    test_rdma_transfer_keyed_idle_lifeline_gives_way, test_rdma_transfer_keyed_set_ends_at_fence,
    test_rdma_transfer_keyed_grant_per_transfer, test_rdma_transfer_keyed_window_bounds_owner,
    test_rdma_transfer_keyed_without_windows_uses_tcp,
    test_rdma_transfer_keyed_pieces_spread_by_bytes, test_rdma_transfer_keyed_write_crc_checked,
    test_rdma_transfer_keyed_owner_failures, test_rdma_transfer_keyed_handshake_refused,
    test_rdma_transfer_keyed_concurrent_on_sets, test_rdma_transfer_destroy_cuts_transfer_short,
    test_rdma_transfer_destroy_cuts_set_up_short, test_rdma_transfer_keyed_unopened_memory_uses_tcp,
    test_rdma_transfer_refused_port_tried_again_soon,
    test_rdma_transfer_segment_registered_beside_serving,
    test_rdma_transfer_segment_unregistered_refuses)
