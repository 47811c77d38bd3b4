/*
 * cpus.h - the CPUs the calling thread may run on: its affinity mask, which
 * is where a container's cpuset shows, rather than every CPU the machine
 * has online.
 */
#ifndef LUNAR_COMMON_CPUS_H
#define LUNAR_COMMON_CPUS_H

#include <sched.h>
#include <string.h>
#include <unistd.h>

/* lc_online_cpus - the CPUs the machine has online, at least 1. */
static inline unsigned lc_online_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n > 0 ? (unsigned)n : 1;
}

/*
 * lc_usable_set - the thread's affinity into set; their count, at least 1.
 * When it cannot be read: every CPU in set, and lc_online_cpus.
 */
static inline unsigned lc_usable_set(cpu_set_t *set)
{
	if (sched_getaffinity(0, sizeof(*set), set) == 0 && CPU_COUNT(set) > 0)
		return (unsigned)CPU_COUNT(set);
	memset(set, 0xff, sizeof(*set));
	return lc_online_cpus();
}

/* lc_usable_cpus - at least 1. */
static inline unsigned lc_usable_cpus(void)
{
	cpu_set_t set;

	return lc_usable_set(&set);
}

#endif /* LUNAR_COMMON_CPUS_H */
