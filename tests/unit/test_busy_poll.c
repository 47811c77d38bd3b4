/*
 * test_busy_poll.c - the engine's waits for a peer's bytes (eng_io_wait,
 * eng_io_poll) on a socket pair: with a budget, bytes already there end the
 * wait while polling; bytes that come after the budget end it asleep, still
 * in time; a wait without a deadline and a zero budget never poll; the
 * budget is capped, and bounds a poll without a deadline. A real data
 * port polls for a peer's next request after each it served, read or
 * write.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "engine/eng_int.h"
#include "tests/unit/test_engine_util.h"
#include "tests/cmocka_main.h"

#define LATE_MS 500 /* far past the longest budget, ENG_BUSY_POLL_MAX_US */
#define WAIT_MS 10000

struct counts {
	uint64_t polled, slept;
};

static struct counts counts_now(void)
{
	struct counts c;

	eng_busy_poll_stats(&c.polled, &c.slept);
	return c;
}

static uint64_t polls(struct counts c)
{
	return c.polled + c.slept;
}

/* Wait (at most WAIT_MS) for a busy poll to end after *seen; 1 and *seen
 * updated, or 0. */
static int next_poll(struct counts *seen)
{
	uint64_t until = lc_now_ns() + WAIT_MS * 1000000ull;
	const struct timespec tick = {0, 50000};

	while (polls(counts_now()) == polls(*seen)) {
		if (lc_now_ns() > until)
			return 0;
		nanosleep(&tick, NULL);
	}
	*seen = counts_now();
	return 1;
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

/* A pair whose sv[0] has a byte to read. */
static void pair_ready(int sv[2])
{
	pair(sv);
	assert_int_equal(write(sv[1], "x", 1), 1);
}

static void unpair(int sv[2])
{
	close(sv[0]);
	close(sv[1]);
}

static uint64_t in_ms(unsigned ms)
{
	return lc_now_ns() + (uint64_t)ms * 1000000u;
}

/* A writer of one byte to fd: LATE_MS from its start (late), or once a
 * busy poll after seen has gone to sleep (after_poll). rc: the write's. */
struct writer {
	int fd, after_poll;
	struct counts seen;
	ssize_t rc;
};

static void *write_later(void *arg)
{
	struct writer *w = arg;
	struct timespec late = {LATE_MS / 1000, (LATE_MS % 1000) * 1000000L};

	if (w->after_poll)
		next_poll(&w->seen);
	else
		nanosleep(&late, NULL);
	w->rc = write(w->fd, "x", 1);
	return NULL;
}

/* Bytes already there end the wait while polling; a wait past its
 * deadline times out, ready or not, without polling. */
static void test_busy_poll_ready_ends_while_polling(void **state)
{
	struct counts before;
	int sv[2];

	(void)state;
	pair_ready(sv);
	eng_busy_poll_set(50);
	before = counts_now();
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(5000)), 0);
	assert_int_equal(counts_now().polled, before.polled + 1);
	assert_int_equal(counts_now().slept, before.slept);
	assert_int_equal(eng_io_wait(sv[0], POLLIN, lc_now_ns() - 1), -ETIMEDOUT);
	assert_int_equal(polls(counts_now()), polls(before) + 1);
	unpair(sv);
}

/* A wait, under a budget of us, for the byte a writer sends later
 * (struct writer): the counters as they were before it. */
static struct counts wait_for_writer(int after_poll, unsigned us)
{
	struct writer w = {.after_poll = after_poll};
	struct counts before;
	pthread_t t;
	int sv[2];

	pair(sv);
	w.fd = sv[1];
	eng_busy_poll_set(us);
	before = w.seen = counts_now();
	assert_int_equal(pthread_create(&t, NULL, write_later, &w), 0);
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(WAIT_MS)), 0);
	pthread_join(t, NULL);
	assert_int_equal(w.rc, 1);
	unpair(sv);
	return before;
}

/* Bytes that come only after the budget was spent end the wait asleep. */
static void test_busy_poll_late_bytes_end_asleep(void **state)
{
	struct counts before;

	(void)state;
	before = wait_for_writer(1, ENG_BUSY_POLL_MAX_US);
	assert_int_equal(counts_now().polled, before.polled);
	assert_int_equal(counts_now().slept, before.slept + 1);
}

/* A wait without a deadline, one for room to write, and any with no
 * budget sleep at once. */
static void test_busy_poll_never_for_idle_or_zero_budget(void **state)
{
	struct counts before;
	int sv[2];

	(void)state;
	pair_ready(sv);
	eng_busy_poll_set(50);
	before = counts_now();
	assert_int_equal(eng_io_wait(sv[0], POLLIN, ENG_NO_DEADLINE), 0);
	assert_int_equal(eng_io_wait(sv[0], POLLOUT, in_ms(5000)), 0);
	eng_busy_poll_set(0);
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(5000)), 0);
	assert_int_equal(counts_now().polled, before.polled);
	assert_int_equal(counts_now().slept, before.slept);
	unpair(sv);
}

/* A budget past the cap polls for the cap: a wait for bytes LATE_MS away
 * goes to sleep long before they come (uncapped, it would poll through). */
static void test_busy_poll_budget_capped(void **state)
{
	struct counts before;

	(void)state;
	before = wait_for_writer(0, ENG_BUSY_POLL_MAX_US * 1000);
	assert_int_equal(counts_now().slept, before.slept + 1);
}

/* eng_io_poll with no deadline stops at the budget: 0, asleep, nothing read. */
static void test_busy_poll_without_deadline_stops_at_budget(void **state)
{
	struct counts before;
	int sv[2];

	(void)state;
	pair(sv);
	eng_busy_poll_set(100);
	before = counts_now();
	assert_int_equal(eng_io_poll(sv[0], POLLIN, ENG_NO_DEADLINE), 0);
	assert_int_equal(counts_now().slept, before.slept + 1);
	assert_int_equal(write(sv[1], "x", 1), 1);
	assert_int_equal(eng_io_poll(sv[0], POLLIN, ENG_NO_DEADLINE), 1);
	assert_int_equal(counts_now().polled, before.polled + 1);
	unpair(sv);
}

/* A keyless peer of endpoint ("host:port"), by hand: its waits are plain
 * blocking calls, so that every busy poll counted is the owner's. */
static int dial(const char *endpoint)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	const char *colon = strrchr(endpoint, ':');
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_non_null(colon);
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* READ (or WRITE) 64 bytes at 0 as request id, and take the reply (and
 * the bytes read). */
static void xfer_once(int fd, uint16_t op, uint64_t id)
{
	struct {
		struct eng_wire_kreq k;
		char data[64];
	} req = {.k.h = {.magic = ENG_WIRE_REQ_MAGIC,
			 .version = ENG_WIRE_VERSION,
			 .op = op,
			 .length = 64,
			 .id = id}};
	struct {
		struct eng_wire_krep r;
		char data[64];
	} rep;
	size_t out = op == ENG_OP_WRITE ? sizeof(req) : sizeof(req.k);
	size_t in = op == ENG_OP_READ ? sizeof(rep) : sizeof(rep.r);

	eng_wire_req_encode(&req.k.h);
	assert_int_equal(send(fd, &req, out, MSG_NOSIGNAL), (ssize_t)out);
	assert_int_equal(recv(fd, &rep, in, MSG_WAITALL), (ssize_t)in);
	eng_wire_rep_decode(&rep.r.h);
	assert_int_equal(rep.r.h.status, 0);
	assert_int_equal(rep.r.h.id, id);
}

/* A real data port's thread, after each of 20 reads and 20 writes (a
 * writer's next write follows its commit to the master), busy-polled for
 * the next request (its poll ends, by the budget, before the next is
 * sent). With no budget it sleeps at once. */
static void test_busy_poll_data_port_after_each_request(void **state)
{
	static const uint16_t ops[] = {ENG_OP_READ, ENG_OP_WRITE};
	struct node owner = node_create((struct eng_config){.host = "127.0.0.1", .seg_size = 4096});
	struct counts before, seen;
	uint64_t id = 0;
	int fd;

	(void)state;
	eng_busy_poll_set(0);
	fd = dial(eng_engine_endpoint(owner.e));
	before = counts_now();
	for (int i = 0; i < 40; i++)
		xfer_once(fd, ops[i & 1], id++);
	assert_int_equal(polls(counts_now()), polls(before));
	eng_busy_poll_set(ENG_BUSY_POLL_MAX_US);
	xfer_once(fd, ENG_OP_WRITE, id++); /* the owner's thread slept with no budget */
	seen = counts_now();
	for (int i = 0; i < 40; i++) {
		xfer_once(fd, ops[i / 20], id++);
		assert_true(next_poll(&seen));
	}
	eng_busy_poll_set(0);
	close(fd);
	node_stop(&owner);
}

LUNAR_TEST_MAIN(NULL, NULL, test_busy_poll_ready_ends_while_polling,
		test_busy_poll_late_bytes_end_asleep, test_busy_poll_never_for_idle_or_zero_budget,
		test_busy_poll_budget_capped, test_busy_poll_without_deadline_stops_at_budget,
		test_busy_poll_data_port_after_each_request)
