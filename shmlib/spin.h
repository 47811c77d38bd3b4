/*
 * spin.h - how long a waiting thread spins before it sleeps, learnt from
 * how long the session's requests take.
 *
 * The proxy stamps every completion with CLOCK_MONOTONIC (lc_cslot.done_ns).
 * The time from submit to that stamp feeds a running average, also for
 * requests that completed while the waiter slept: the waiter's own wakeup
 * never counts, so a session whose requests speed up spins again (a budget
 * learnt from the waiter's view alone would stay at the minimum for good
 * once wakeups cost more than the requests).
 */
#ifndef LUNAR_SHMLIB_SPIN_H
#define LUNAR_SHMLIB_SPIN_H

#include <stdint.h>

#define SHM_SPIN_MIN_NS 2000u  /* a brief probe */
#define SHM_SPIN_MAX_NS 500000u /* never spin longer */

/* Spin for twice the average completion time when that fits under the
 * maximum, else only probe. */
static inline uint32_t shm_spin_budget(uint32_t lat_ns)
{
	if (lat_ns > SHM_SPIN_MAX_NS / 2)
		return SHM_SPIN_MIN_NS;
	return lat_ns < SHM_SPIN_MIN_NS / 2 ? SHM_SPIN_MIN_NS : 2 * lat_ns;
}

/* The average after one request submitted at start_ns and stamped done_ns
 * by the proxy (1/8 weight). The stamp is a hint from another process: one
 * before the submit counts as no time, one absurdly late as the longest. */
static inline uint32_t shm_lat_update(uint32_t lat_ns, uint64_t start_ns, uint64_t done_ns)
{
	uint64_t d = done_ns > start_ns ? done_ns - start_ns : 0;
	uint32_t sample = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;

	return lat_ns - lat_ns / 8 + sample / 8;
}

#endif /* LUNAR_SHMLIB_SPIN_H */
