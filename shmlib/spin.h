/*
 * spin.h - how long a waiting thread spins before it sleeps, learnt from
 * how long the session's requests of its kind (op) take.
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

#include "shm_abi.h"

#define SHM_SPIN_MIN_NS 2000u  /* a brief probe */
#define SHM_SPIN_MAX_NS 500000u /* never spin longer */
/* Requests completing on average sooner than this are spun for by every
 * waiter: about what a sched_yield that switches threads costs a waiter on
 * a virtual machine (1.4 us alone, 2.3 us under load on the one measured,
 * bench.md), so spinning costs less than the switch a yield would pay.
 * Below it there, 4 KiB gets and exists (~1.2 us); above, puts (~2.2 us),
 * which the proxy runs faster in the batches yielding waiters let build. */
#define SHM_SHORT_WAIT_NS 1800u

/* Spin for twice the average completion time when that fits under the
 * maximum, else only probe. */
static inline uint32_t shm_spin_budget(uint32_t lat_ns)
{
	if (lat_ns > SHM_SPIN_MAX_NS / 2)
		return SHM_SPIN_MIN_NS;
	return lat_ns < SHM_SPIN_MIN_NS / 2 ? SHM_SPIN_MIN_NS : 2 * lat_ns;
}

/*
 * Whether a waiter spins (1) or yields between looks (0) within its budget.
 * It spins while the session has a CPU to spare for it: fewer than
 * spare_cpus (the CPUs it may use, minus one left to the proxy) of its
 * threads spin already, and the proxy does not report more busy clients
 * than CPUs (crowded). Beyond that it also spins when the session's
 * requests of its kind complete within SHM_SHORT_WAIT_NS on average
 * (lat_ns): with more waiters than CPUs, each then finishes its request and
 * submits the next on its own time slice, where yielding would cost every
 * request a thread switch. With no CPU to spare (one CPU) nobody spins:
 * the proxy needs that CPU.
 */
static inline int shm_spin_or_yield(uint32_t spinning, uint32_t spare_cpus, int crowded,
				    uint32_t lat_ns)
{
	if (!spare_cpus)
		return 0;
	return (spinning < spare_cpus && !crowded) || lat_ns < SHM_SHORT_WAIT_NS;
}

/* The average of requests of kind op in lat (one per op: LC_OP_MAX); an op
 * out of range shares slot 0, which no request uses. */
static inline uint32_t *shm_lat_of(uint32_t *lat, uint16_t op)
{
	return &lat[op < LC_OP_MAX ? op : 0];
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
