/*
 * clock.h - monotonic time for timeouts, leases and latency figures, and
 * wall-clock time for expiries another machine checks.
 */
#ifndef LUNAR_COMMON_CLOCK_H
#define LUNAR_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* lc_now_ns - CLOCK_MONOTONIC in nanoseconds. Any thread. */
static inline uint64_t lc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t lc_now_ms(void)
{
	return lc_now_ns() / 1000000ull;
}

/* lc_wall_ms - CLOCK_REALTIME in milliseconds: for expiries that cross
 * machines (data-port capabilities), never for timeouts. Any thread. */
static inline uint64_t lc_wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000ull + (uint64_t)ts.tv_nsec / 1000000ull;
}

#endif /* LUNAR_COMMON_CLOCK_H */
