/*
 * test_engine_aio.c - the engine's completion machinery on loopback: a
 * batch of transfers of every kind (local, remote, sliced) submitted at
 * once completes each op once with its bytes and CRC32C; a batch where
 * some transfers cannot work fails those alone, each with its own code;
 * destroying an engine with transfers queued and running to a peer that
 * never answers completes every one of them at once, and so does one to a
 * peer whose listener drops its SYNs (a full accept queue); a transfer is
 * cut in at most eng_config.slices slices, by default half the usable
 * CPUs; a remote read says how much of it landed, across its slices, where
 * the op asks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "cpus.h"
#include "crc32c.h"
#include "engine/eng_int.h"
#include "lunar.h"
#include "tests/unit/test_engine_util.h"
#include "tests/unit/test_listen.h"
#include "tests/cmocka_main.h"

#define SEG_SIZE (32u << 20)
#define MIB	 (1u << 20)

static struct node node_start(unsigned timeout_ms, unsigned io_threads)
{
	return node_create((struct eng_config){
	    .host = "127.0.0.1",
	    .seg_size = SEG_SIZE,
	    .io_timeout_ms = timeout_ms,
	    .io_threads = io_threads,
	    .slices = ENG_SLICE_MAX, /* sliced whatever the CPUs */
	});
}

static void fill(unsigned char *p, size_t len, unsigned seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 12));
}

/* Wait until n ops came out of cq; each exactly once. */
static void wait_all(struct eng_cq *cq, struct eng_op *ops, int n)
{
	struct eng_op *out[8];
	int seen[64] = {0}, got = 0;

	assert_true(n <= 64);
	while (got < n) {
		int k = eng_cq_wait(cq, out, 8, 60000);

		assert_true(k > 0);
		for (int i = 0; i < k; i++) {
			long idx = out[i] - ops;

			assert_true(idx >= 0 && idx < n);
			assert_int_equal(seen[idx], 0);
			assert_ptr_equal(out[i]->user, (void *)(intptr_t)(idx + 1000));
			seen[idx] = 1;
		}
		got += k;
	}
}

/* Writes of several sizes to the peer (one of them sliced) and to ourselves,
 * then reads of all of them back, each a batch. */
static void test_engine_aio_batch_submit(void **state)
{
	static const size_t sizes[] = {4096, 1 * MIB, 9 * MIB, 100, 64 * 1024, 3 * MIB};
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	struct node a = node_start(30000, 3), b = node_start(30000, 3);
	struct eng_op ops[N];
	struct iovec src[N], dst[N];
	struct eng_cq *cq;
	uint64_t off = 0;

	(void)state;
	assert_int_equal(eng_cq_alloc(&cq), 0);
	for (int i = 0; i < N; i++) {
		src[i].iov_base = malloc(sizes[i]);
		dst[i].iov_base = calloc(1, sizes[i]);
		src[i].iov_len = dst[i].iov_len = sizes[i];
		fill(src[i].iov_base, sizes[i], (unsigned)i);
		ops[i] = (struct eng_op){
		    /* Every third to ourselves: a copy at submit. */
		    .endpoint = eng_engine_endpoint(i % 3 == 2 ? a.e : b.e),
		    .dir = ENG_WRITE,
		    .off = off,
		    .iov = &src[i],
		    .iovcnt = 1,
		    .want_crc = 1,
		    .user = (void *)(intptr_t)(i + 1000),
		};
		off += sizes[i];
	}
	assert_int_equal(eng_xfer_submit(a.e, cq, ops, N), 0);
	wait_all(cq, ops, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_int_equal(ops[i].crc, lc_crc32c(0, src[i].iov_base, sizes[i]));
		ops[i].dir = ENG_READ;
		ops[i].iov = &dst[i];
		ops[i].crc = 0;
	}
	assert_int_equal(eng_xfer_submit(a.e, cq, ops, N), 0);
	wait_all(cq, ops, N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(ops[i].result, 0);
		assert_memory_equal(dst[i].iov_base, src[i].iov_base, sizes[i]);
		assert_int_equal(ops[i].crc, lc_crc32c(0, src[i].iov_base, sizes[i]));
		free(src[i].iov_base);
		free(dst[i].iov_base);
	}
	/* A cq is one engine's. */
	assert_int_equal(eng_xfer_submit(b.e, cq, ops, 0), LUNAR_ERR_INVALID_PARAMS);
	eng_cq_free(cq);
	node_stop(&a);
	node_stop(&b);
}

/* A free loopback port nobody listens on. */
static uint16_t dead_port(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* One batch (run by eng_xfer_batch): good transfers succeed beside a dead
 * peer (unsent), a range the peer refuses and a malformed op. */
static void test_engine_aio_partial_failure(void **state)
{
	struct node a = node_start(30000, 2), b = node_start(30000, 2);
	unsigned char *buf = malloc(2 * MIB), *back = calloc(1, 2 * MIB);
	struct iovec v = {buf, 2 * MIB}, w = {back, 2 * MIB};
	char dead[64];
	struct eng_op ops[5];

	(void)state;
	fill(buf, 2 * MIB, 9);
	snprintf(dead, sizeof(dead), "127.0.0.1:%u", dead_port());
	ops[0] = (struct eng_op){.endpoint = eng_engine_endpoint(b.e),
				 .dir = ENG_WRITE,
				 .off = MIB,
				 .iov = &v,
				 .iovcnt = 1,
				 .want_crc = 1};
	ops[1] = (struct eng_op){.endpoint = dead, .dir = ENG_WRITE, .iov = &v, .iovcnt = 1};
	ops[2] = (struct eng_op){.endpoint = eng_engine_endpoint(b.e),
				 .dir = ENG_WRITE,
				 .off = SEG_SIZE - MIB,
				 .iov = &v,
				 .iovcnt = 1};
	ops[3] = (struct eng_op){
	    .endpoint = eng_engine_endpoint(b.e), .dir = ENG_READ, .iov = &v, .iovcnt = 0};
	ops[4] = (struct eng_op){.endpoint = eng_engine_endpoint(b.e),
				 .dir = ENG_READ,
				 .off = 0,
				 .iov = &w,
				 .iovcnt = 1};
	eng_xfer_batch(a.e, ops, 5);
	assert_int_equal(ops[0].result, 0);
	assert_int_equal(ops[0].crc, lc_crc32c(0, buf, 2 * MIB));
	assert_int_equal(ops[1].result, ENG_XFER_UNSENT);
	assert_int_equal(ops[2].result, LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(ops[3].result, LUNAR_ERR_TRANSFER_FAIL);
	assert_int_equal(ops[4].result, 0);
	/* Whatever order they ran in, the write at MIB is whole. */
	assert_memory_equal(b.seg + MIB, buf, 2 * MIB);
	/* A batch of none does nothing. */
	eng_xfer_batch(a.e, ops, 0);
	free(buf);
	free(back);
	node_stop(&a);
	node_stop(&b);
}

/*
 * A peer that takes connections and never answers: with a 60 s timeout,
 * destroying the engine must complete every op at once, the running ones
 * cut short (TRANSFER_FAIL: the request went out), the queued ones
 * cancelled (unsent).
 */
static void test_engine_aio_cancel_at_shutdown(void **state)
{
	enum { N = 10 };
	struct node a = node_start(60000, 2);
	uint16_t port;
	int lfd = test_listen_loopback(64, &port), unsent = 0, failed = 0;
	unsigned char *buf = malloc(64 * 1024);
	struct iovec v = {buf, 64 * 1024};
	struct eng_op ops[N];
	struct eng_cq *cq;
	char ep[64];
	uint64_t t0;

	(void)state;
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	assert_int_equal(eng_cq_alloc(&cq), 0);
	for (int i = 0; i < N; i++)
		ops[i] = (struct eng_op){.endpoint = ep,
					 .dir = ENG_READ,
					 .iov = &v,
					 .iovcnt = 1,
					 .user = (void *)(intptr_t)(i + 1000)};
	assert_int_equal(eng_xfer_submit(a.e, cq, ops, N), 0);
	/* Nothing completes while the peer is silent. */
	assert_int_equal(eng_cq_wait(cq, (struct eng_op *[1]){0}, 1, 300), 0);
	t0 = lc_now_ms();
	eng_engine_destroy(a.e);
	assert_true(lc_now_ms() - t0 < 5000);
	wait_all(cq, ops, N);
	for (int i = 0; i < N; i++) {
		assert_true(ops[i].result == ENG_XFER_UNSENT ||
			    ops[i].result == LUNAR_ERR_TRANSFER_FAIL);
		unsent += ops[i].result == ENG_XFER_UNSENT;
		failed += ops[i].result == LUNAR_ERR_TRANSFER_FAIL;
	}
	/* Two I/O threads: two ran, the rest never went. */
	assert_int_equal(failed, 2);
	assert_int_equal(unsent + failed, N);
	eng_cq_free(cq);
	close(lfd);
	free(a.seg);
	free(buf);
}

/* Whether this kernel resets a SYN to a full accept queue rather than
 * dropping it (net.ipv4.tcp_abort_on_overflow). */
static int abort_on_overflow(void)
{
	FILE *f = fopen("/proc/sys/net/ipv4/tcp_abort_on_overflow", "r");
	int v = 0;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = 0;
		fclose(f);
	}
	if (v)
		printf("  skipped: net.ipv4.tcp_abort_on_overflow is set\n");
	return v;
}

/*
 * A listener whose accept queue is full drops new SYNs: a transfer to it
 * waits in connect. With a 60 s timeout, destroying the engine ends it at
 * once (without the stop reaching the connecting socket, it waited out
 * the timeout).
 */
static void test_engine_aio_stop_cuts_connect_short(void **state)
{
	enum { FILL = 3 };
	struct node a = node_start(60000, 1);
	uint16_t port;
	int lfd = test_listen_loopback(0, &port), fill[FILL];
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	unsigned char buf[64];
	struct iovec v = {buf, sizeof(buf)};
	struct eng_op op, *done;
	struct eng_cq *cq;
	char ep[64];
	uint64_t t0;

	(void)state;
	if (abort_on_overflow()) {
		close(lfd);
		node_stop(&a);
		skip(); /* a full queue resets SYNs instead: nothing waits in connect */
	}
	sa.sin_port = htons(port);
	for (int i = 0; i < FILL; i++) { /* the queue full; later ones hang too */
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		assert_true(fill[i] >= 0);
		connect(fill[i], (struct sockaddr *)&sa, sizeof(sa));
	}
	usleep(100 * 1000);
	snprintf(ep, sizeof(ep), "127.0.0.1:%u", (unsigned)port);
	op = (struct eng_op){.endpoint = ep, .dir = ENG_READ, .iov = &v, .iovcnt = 1};
	assert_int_equal(eng_cq_alloc(&cq), 0);
	assert_int_equal(eng_xfer_submit(a.e, cq, &op, 1), 0);
	assert_int_equal(eng_cq_wait(cq, &done, 1, 300), 0); /* still connecting */
	t0 = lc_now_ms();
	eng_engine_destroy(a.e);
	t0 = lc_now_ms() - t0;
	printf("  stop with a transfer in connect took %llu ms\n", (unsigned long long)t0);
	assert_true(t0 < 5000);
	assert_int_equal(eng_cq_wait(cq, &done, 1, 0), 1);
	assert_int_not_equal(op.result, 0);
	eng_cq_free(cq);
	for (int i = 0; i < FILL; i++)
		close(fill[i]);
	close(lfd);
	free(a.seg);
}

/* How many slices an engine configured with slices (0: by CPUs) cuts a
 * transfer of total bytes in. */
static unsigned slices_of(unsigned slices, uint64_t total)
{
	struct node n = node_create(
	    (struct eng_config){.host = "127.0.0.1", .seg_size = 4096, .slices = slices});
	struct iovec v = {NULL, total};
	struct eng_op op = eng_op_of("127.0.0.1:1", ENG_READ, 0, &v, 1, NULL, NULL);

	op.priv.total = total;
	assert_int_equal(eng_tcp_plan(n.e, &op), 0);
	node_stop(&n);
	return op.priv.nslices;
}

static void test_engine_aio_slices_follow_config(void **state)
{
	unsigned cpus = lc_usable_cpus() / 2;

	(void)state;
	assert_int_equal(slices_of(1, 4 * MIB), 1);
	assert_int_equal(slices_of(2, 4 * MIB), 2);
	assert_int_equal(slices_of(4, 4 * MIB), 4);
	assert_int_equal(slices_of(9, 4 * MIB), ENG_SLICE_MAX);
	assert_int_equal(slices_of(4, ENG_SLICE_MIN), 1); /* one slice's worth */
	assert_int_equal(slices_of(4, ENG_SLICE_MIN + 1), 2);
	/* By default: half the CPUs this thread may use, 1 to ENG_SLICE_MAX. */
	assert_int_equal(slices_of(0, 4 * MIB), cpus < 1	       ? 1
						: cpus > ENG_SLICE_MAX ? ENG_SLICE_MAX
								       : cpus);
}

/* Read len bytes at 64 of ep's segment into dst, asking to be told in
 * *landed (landed_base 7 << 40): the result. *landed holds what the
 * caller stored before (landed_base, or what a client scribbled there). */
static int read_told(struct node *a, const char *ep, enum eng_dir dir, int want_crc,
		     unsigned char *dst, size_t len, uint64_t *landed)
{
	struct iovec v = {dst, len};
	struct eng_op op = eng_op_of(ep, dir, 64, &v, 1, NULL, NULL);

	op.want_crc = want_crc;
	op.landed = landed;
	op.landed_base = 7ull << 40;
	eng_xfer_batch(a->e, &op, 1);
	return op.result;
}

/* read_told, landed_base stored first. */
static int read_landed(struct node *a, const char *ep, enum eng_dir dir, int want_crc,
		       unsigned char *dst, size_t len, uint64_t *landed)
{
	*landed = 7ull << 40; /* landed_base, as the caller stores it first */
	return read_told(a, ep, dir, want_crc, dst, len, landed);
}

/* A remote READ with its CRC32C wanted says as it lands how many of its
 * first bytes arrived, in one slice or across several (each slice's bytes
 * counted once those before it all landed), raising the word, never
 * lowering it. A local copy, or a read with no CRC32C (no chunks to tell
 * by), says nothing. */
static void test_engine_aio_read_tells_what_landed(void **state)
{
	struct node a = node_start(5000, 2), b = node_start(5000, 2);
	const char *remote = eng_engine_endpoint(b.e), *self = eng_engine_endpoint(a.e);
	size_t len = 3 * MIB;
	unsigned char *dst = malloc(len);
	uint64_t w;

	(void)state;
	assert_non_null(dst);
	assert_true(eng_engine_tells_landed(a.e, remote));
	assert_false(eng_engine_tells_landed(a.e, self));
	fill(b.seg + 64, len, 5);
	fill(a.seg + 64, len, 5);
	assert_int_equal(read_landed(&a, remote, ENG_READ_STAGED, 1, dst, 200000, &w), 0);
	assert_int_equal(w, (7ull << 40) + 200000); /* under ENG_SLICE_MIN: one slice */
	assert_int_equal(read_landed(&a, remote, ENG_READ, 1, dst, len, &w), 0);
	assert_int_equal(w, (7ull << 40) + len); /* in ENG_SLICE_MAX slices */
	assert_memory_equal(dst, b.seg + 64, len);
	assert_int_equal(read_landed(&a, remote, ENG_READ, 0, dst, len, &w), 0);
	assert_int_equal(w, 7ull << 40);
	assert_int_equal(read_landed(&a, self, ENG_READ_STAGED, 1, dst, len, &w), 0);
	assert_int_equal(w, 7ull << 40);
	/* A word already past what landed (a client's scribble) is never
	 * lowered, and the read still completes. */
	w = 8ull << 40;
	assert_int_equal(read_told(&a, remote, ENG_READ, 1, dst, len, &w), 0);
	assert_int_equal(w, 8ull << 40);
	assert_memory_equal(dst, b.seg + 64, len);
	free(dst);
	node_stop(&a);
	node_stop(&b);
}

LUNAR_TEST_MAIN(NULL, NULL, test_engine_aio_batch_submit, test_engine_aio_partial_failure,
		test_engine_aio_cancel_at_shutdown, test_engine_aio_stop_cuts_connect_short,
		test_engine_aio_slices_follow_config, test_engine_aio_read_tells_what_landed)
