/*
 * futex.h - futex wait/wake on a 32-bit word in a shared (MAP_SHARED) mapping.
 * Shared futexes (no FUTEX_PRIVATE_FLAG) so waker and waiter may be different
 * processes.
 */
#ifndef LUNAR_COMMON_FUTEX_H
#define LUNAR_COMMON_FUTEX_H

#include <errno.h>
#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* lc_futex_wait - sleep while *word == val, at most timeout_ns. Returns 0 on
 * wake, -ETIMEDOUT, -EAGAIN (value differed) or -EINTR. */
static inline int lc_futex_wait(uint32_t *word, uint32_t val, uint64_t timeout_ns)
{
	struct timespec ts = {(time_t)(timeout_ns / 1000000000ull),
			      (long)(timeout_ns % 1000000000ull)};

	if (syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0) < 0)
		return -errno;
	return 0;
}

/* lc_futex_wake - wake up to n waiters on word. */
static inline void lc_futex_wake(uint32_t *word, int n)
{
	syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

#endif /* LUNAR_COMMON_FUTEX_H */
