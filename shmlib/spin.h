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

#include <sched.h>
#include <stdint.h>

#include "shm_abi.h"

#define SHM_SPIN_MIN_NS 2000u	/* a brief probe */
#define SHM_SPIN_MAX_NS 500000u /* never spin longer */
/* Requests completing on average sooner than this are spun for by every
 * waiter: about what a sched_yield that switches threads costs a waiter on
 * a virtual machine (1.4 us alone, 2.3 us under load on the one measured,
 * bench.md), so spinning costs less than the switch a yield would pay;
 * on bare metal a switch costs less, and this is generous.
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
 * shm_spare_cpus - how many CPUs a waiter's process may use beside the
 * proxy's loop: count (those in its affinity set; when that could not be
 * read, set holds every CPU and count those online), less one when the
 * loop runs on one of set's CPUs. loop_cpu is the ring's hint, the CPU
 * plus one; 0 (unknown) or a value past CPU_SETSIZE counts as in set. A
 * proxy given CPUs of its own (taskset, systemd's CPUAffinity=) leaves
 * every CPU of its clients spare, however few they have.
 */
static inline uint32_t shm_spare_cpus(const cpu_set_t *set, uint32_t count, uint32_t loop_cpu)
{
	int ours = !loop_cpu || loop_cpu > CPU_SETSIZE || CPU_ISSET(loop_cpu - 1, set);

	return ours && count ? count - 1 : count;
}

/* What a waiter knows of the others when it starts to wait. */
struct shm_waiters {
	uint32_t watching;   /* the session's threads watching a completion, not asleep */
	uint32_t spare_cpus; /* shm_spare_cpus */
	int crowded;	     /* the proxy reports more busy clients than CPUs beside it */
};

/*
 * shm_should_spin - 1 if a waiter spins within its budget, 0 if it yields
 * between looks. It spins while a CPU is spare for it: fewer than
 * spare_cpus of the session's threads watch already, and not crowded. It
 * also spins, however many watch and even when crowded, while requests of
 * its kind complete under SHM_SHORT_WAIT_NS on average (lat_ns): with more
 * waiters than CPUs each then finishes its request and sends the next on
 * its own time slice, where yielding would cost every request a thread
 * switch; its spin then lasts at most 2 * SHM_SHORT_WAIT_NS (the budget),
 * and a slow request lifts the average past the line. With no spare CPU
 * (only the loop's) nobody spins: the proxy needs that CPU.
 */
static inline int shm_should_spin(struct shm_waiters w, uint32_t lat_ns)
{
	if (!w.spare_cpus)
		return 0;
	return (w.watching < w.spare_cpus && !w.crowded) || lat_ns < SHM_SHORT_WAIT_NS;
}

/* The average of requests of kind op in lat (one per op: LC_OP_MAX). Ops
 * come only from the library's own descriptors; one out of range would
 * share slot 0, which no request uses. */
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
