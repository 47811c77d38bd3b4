/*
 * clock.h - monotonic time for timeouts, leases, expiries and latency
 * figures. Nothing in Lunar compares wall-clock times, within a process or
 * across machines: a capability's expiry is on the master's monotonic clock,
 * which each owner estimates from readings the master sends (SPEC §13,
 * eng_engine_set_clock), so a wall-clock step (NTP, an operator) expires
 * nothing early and keeps nothing alive.
 */
#ifndef LUNAR_COMMON_CLOCK_H
#define LUNAR_COMMON_CLOCK_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "failpoint.h"

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

/* lc_monotonic_after - *ts: ms from now on CLOCK_MONOTONIC, the deadline
 * of a pthread_cond_timedwait on a condition set to that clock. */
static inline void lc_monotonic_after(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* lc_monotonic_at - *ts: the CLOCK_MONOTONIC time of ns (an lc_now_ns
 * deadline), for a pthread_cond_timedwait as above. */
static inline void lc_monotonic_at(struct timespec *ts, uint64_t ns)
{
	ts->tv_sec = (time_t)(ns / 1000000000ull);
	ts->tv_nsec = (long)(ns % 1000000000ull);
}

/*
 * lc_cond_init - *cond on CLOCK_MONOTONIC, the clock of lc_now_* and
 * lc_monotonic_after, so that a step of the wall clock neither stretches
 * nor cuts a timed wait on it. 0, or pthread_cond_init's error number.
 */
static inline int lc_cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t ca;
	int rc = pthread_condattr_init(&ca);

	if (rc)
		return rc;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	rc = pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
	return rc;
}

/* A wall-clock step, in failpoint builds (failpoint.h): a test steps the
 * daemons' wall clock by an hour either way while they run, and checks that
 * nothing expires early or lives on (tests/integration/test_clock_jump.c). */
#define LC_WALL_STEP_MS 3600000ll

/*
 * lc_wall_ms - CLOCK_REALTIME in milliseconds: the one wall-clock read of
 * the daemons' logic, so that test_clock_jump.c can step it. No daemon code
 * calls it today (capability expiries did until they moved to the master's
 * monotonic clock); should a date ever be needed, read it here, and never
 * use it for a timeout or an expiry, nor compare it with another machine's.
 * (Log lines' timestamps read the clock in log.c: a failpoint logs.) Any
 * thread.
 */
static inline uint64_t lc_wall_ms(void)
{
	struct timespec ts;
	int64_t step = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	if (LC_FAILPOINT("wall-clock-ahead-1h"))
		step += LC_WALL_STEP_MS;
	if (LC_FAILPOINT("wall-clock-behind-1h"))
		step -= LC_WALL_STEP_MS;
	return (uint64_t)((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + step);
}

#endif /* LUNAR_COMMON_CLOCK_H */
