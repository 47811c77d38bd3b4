/*
 * test_busy_poll.c - the engine's waits for a peer's bytes (eng_io_wait) on
 * a socket pair: with a budget, bytes already there end the wait while
 * polling; bytes that come after the budget end it asleep, still in time;
 * an idle connection's wait (no deadline) and a zero budget never poll;
 * the budget is capped.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "engine/eng_int.h"
#include "tests/cmocka_main.h"

#define LATE_MS 100 /* far past the longest budget, ENG_BUSY_POLL_MAX_US */

struct counts {
	uint64_t polled, slept;
};

static struct counts counts_now(void)
{
	struct counts c;

	eng_busy_poll_stats(&c.polled, &c.slept);
	return c;
}

static void pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static uint64_t in_ms(unsigned ms)
{
	return lc_now_ns() + (uint64_t)ms * 1000000u;
}

static void *write_late(void *arg)
{
	int fd = *(int *)arg;
	struct timespec ts = {0, LATE_MS * 1000000L};

	nanosleep(&ts, NULL);
	assert_int_equal(write(fd, "x", 1), 1);
	return NULL;
}

static void test_busy_poll_ready_ends_while_polling(void **state)
{
	struct counts before;
	int sv[2];

	(void)state;
	pair(sv);
	assert_int_equal(write(sv[1], "x", 1), 1);
	eng_busy_poll_set(50);
	before = counts_now();
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(5000)), 0);
	assert_int_equal(counts_now().polled, before.polled + 1);
	assert_int_equal(counts_now().slept, before.slept);
	close(sv[0]);
	close(sv[1]);
}

static void test_busy_poll_late_bytes_end_asleep(void **state)
{
	struct counts before;
	pthread_t t;
	int sv[2];

	(void)state;
	pair(sv);
	eng_busy_poll_set(ENG_BUSY_POLL_MAX_US);
	before = counts_now();
	assert_int_equal(pthread_create(&t, NULL, write_late, &sv[1]), 0);
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(10000)), 0);
	assert_int_equal(counts_now().polled, before.polled);
	assert_int_equal(counts_now().slept, before.slept + 1);
	pthread_join(t, NULL);
	close(sv[0]);
	close(sv[1]);
}

static void test_busy_poll_never_for_idle_or_zero_budget(void **state)
{
	struct counts before;
	int sv[2];

	(void)state;
	pair(sv);
	assert_int_equal(write(sv[1], "x", 1), 1);
	eng_busy_poll_set(50);
	before = counts_now();
	assert_int_equal(eng_io_wait(sv[0], POLLIN, ENG_NO_DEADLINE), 0);
	eng_busy_poll_set(0);
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(5000)), 0);
	assert_int_equal(counts_now().polled, before.polled);
	assert_int_equal(counts_now().slept, before.slept);
	close(sv[0]);
	close(sv[1]);
}

/* A budget past the cap polls for the cap: a wait for bytes LATE_MS away
 * goes to sleep long before they come. */
static void test_busy_poll_budget_capped(void **state)
{
	struct counts before;
	pthread_t t;
	int sv[2];

	(void)state;
	pair(sv);
	eng_busy_poll_set(ENG_BUSY_POLL_MAX_US * 1000);
	before = counts_now();
	assert_int_equal(pthread_create(&t, NULL, write_late, &sv[1]), 0);
	assert_int_equal(eng_io_wait(sv[0], POLLIN, in_ms(10000)), 0);
	assert_int_equal(counts_now().slept, before.slept + 1);
	pthread_join(t, NULL);
	close(sv[0]);
	close(sv[1]);
}

LUNAR_TEST_MAIN(NULL, NULL, test_busy_poll_ready_ends_while_polling,
		test_busy_poll_late_bytes_end_asleep, test_busy_poll_never_for_idle_or_zero_budget,
		test_busy_poll_budget_capped)
