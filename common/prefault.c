/*
 * prefault.c - make a range resident by touching it (prefault.h).
 */
#include "prefault.h"

#include <errno.h>
#include <unistd.h>

/*
 * Write-fault the page holding p and leave its byte as it is: a locked
 * read-modify-write of nothing cannot lose a store another thread makes
 * to the same byte meanwhile. In asm on x86, where the sanitizers see no
 * access (ThreadSanitizer would call a put's memcpy into the page a race
 * with it, though no byte can change).
 */
static void touch(char *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("lock; orb $0, %0" : "+m"(*p));
#else
	__atomic_fetch_or(p, 0, __ATOMIC_RELAXED);
#endif
}

int lc_prefault(void *base, uint64_t len, const atomic_bool *stop)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	char *at = base, *end = at + len;

	/* The first byte, then the first byte of every later page. */
	while (at < end) {
		if (atomic_load_explicit(stop, memory_order_relaxed))
			return -ECANCELED;
		touch(at);
		at = (char *)(((uintptr_t)at & ~(page - 1)) + page);
	}
	return 0;
}
