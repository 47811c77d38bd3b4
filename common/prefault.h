/*
 * prefault.h - make a range of anonymous memory resident without holding
 * up anything else in the process. MADV_POPULATE_WRITE holds the address
 * space's lock for as long as the range takes, and every mmap (a client's
 * region, a thread's stack, the allocator's next arena) waits for it:
 * where a hypervisor backs a guest's memory lazily, 2 MiB takes
 * milliseconds and a 2 GiB segment seconds. A fault taken by a write
 * holds only the mapping it lands in (per-VMA locks, Linux 6.4 on; the
 * address space's lock for one fault before), so the range is faulted in
 * by touching it, a page at a time.
 */
#ifndef LUNAR_COMMON_PREFAULT_H
#define LUNAR_COMMON_PREFAULT_H

#include <stdatomic.h>
#include <stdint.h>

/*
 * lc_prefault - write-fault every page of [base, base + len) without
 * changing a byte of it: other threads may be storing into the range at
 * the same time, and no store of theirs is lost. Stops early once *stop
 * is set (checked at every page). 0 once the whole range is resident;
 * -ECANCELED when stopped before. Any thread; base and len need no
 * alignment.
 */
int lc_prefault(void *base, uint64_t len, const atomic_bool *stop);

#endif /* LUNAR_COMMON_PREFAULT_H */
