/*
 * clock.h - monotonic time for timeouts, leases and latency figures.
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

#endif /* LUNAR_COMMON_CLOCK_H */
