/*
 * atomic.h - the one vocabulary for atomics in Lunar, on <stdatomic.h>.
 * Shared-memory words are plain integers accessed only through these macros,
 * so every access states its ordering. Each fence at a call site names the
 * fence it pairs with.
 */
#ifndef LUNAR_COMMON_ATOMIC_H
#define LUNAR_COMMON_ATOMIC_H

#include <stdatomic.h>

#define LC_READ_ONCE(x) atomic_load_explicit((_Atomic __typeof__(x) *)&(x), memory_order_relaxed)
#define LC_WRITE_ONCE(x, v)                                                                        \
	atomic_store_explicit((_Atomic __typeof__(x) *)&(x), (v), memory_order_relaxed)
#define lc_load_acquire(p)                                                                         \
	atomic_load_explicit((_Atomic __typeof__(*(p)) *)(p), memory_order_acquire)
#define lc_store_release(p, v)                                                                     \
	atomic_store_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_release)
#define lc_xchg(p, v)                                                                              \
	atomic_exchange_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_acq_rel)
#define lc_cas(p, expp, v)                                                                         \
	atomic_compare_exchange_strong_explicit((_Atomic __typeof__(*(p)) *)(p), (expp), (v),      \
						memory_order_acq_rel, memory_order_acquire)
#define lc_fetch_add(p, v)                                                                         \
	atomic_fetch_add_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_acq_rel)
#define lc_fetch_or(p, v)                                                                          \
	atomic_fetch_or_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_acq_rel)
/* Relaxed read-modify-writes: counters and statistics that order nothing. */
#define lc_fetch_add_relaxed(p, v)                                                                 \
	atomic_fetch_add_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_relaxed)
#define lc_fetch_sub_relaxed(p, v)                                                                 \
	atomic_fetch_sub_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_relaxed)
#define lc_xchg_relaxed(p, v)                                                                      \
	atomic_exchange_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_relaxed)
/* A release read-modify-write: publishes prior writes to an lc_load_acquire of *p. */
#define lc_fetch_add_release(p, v)                                                                 \
	atomic_fetch_add_explicit((_Atomic __typeof__(*(p)) *)(p), (v), memory_order_release)
#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer does not model fences (gcc refuses them under -Werror):
 * a sequentially consistent read-modify-write is a full barrier on x86 and
 * one TSan follows. */
static _Atomic unsigned lc_fence_word __attribute__((unused));
#define lc_smp_mb() ((void)atomic_fetch_add_explicit(&lc_fence_word, 0u, memory_order_seq_cst))
#else
#define lc_smp_mb() atomic_thread_fence(memory_order_seq_cst)
#endif

/*
 * LC_UNTRACKED_BEGIN, LC_UNTRACKED_END - around accesses to a segment's
 * bytes that ThreadSanitizer cannot judge: those ordered through another
 * process (a range is written, the master hears of it, a peer reads it
 * over the data port - or it is freed and placed again), and reads that
 * race with writers by design and are checked after (a CRC). TSan neither
 * checks nor records this thread's memory accesses in between (its
 * annotations; no code elsewhere). Keep the span to those accesses alone.
 */
#if defined(__SANITIZE_THREAD__)
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
#define LC_UNTRACKED_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define LC_UNTRACKED_END()   AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
#else
#define LC_UNTRACKED_BEGIN() ((void)0)
#define LC_UNTRACKED_END()   ((void)0)
#endif

/*
 * LC_ORDERED_BEFORE(p), LC_ORDERED_AFTER(p) - an order another process
 * makes, told to ThreadSanitizer: what a thread did before
 * LC_ORDERED_BEFORE(p) happens before what a thread does after a later
 * LC_ORDERED_AFTER(p) of the same p. For orders TSan cannot see, as a
 * proxy's writes to a client's region before it completes a request and
 * its reads of the region for the requests the client submits after
 * seeing that completion. Nothing outside a TSan build.
 */
#if defined(__SANITIZE_THREAD__)
void AnnotateHappensBefore(const char *file, int line, const volatile void *addr);
void AnnotateHappensAfter(const char *file, int line, const volatile void *addr);
#define LC_ORDERED_BEFORE(p) AnnotateHappensBefore(__FILE__, __LINE__, (p))
#define LC_ORDERED_AFTER(p)  AnnotateHappensAfter(__FILE__, __LINE__, (p))
#else
#define LC_ORDERED_BEFORE(p) ((void)(p))
#define LC_ORDERED_AFTER(p)  ((void)(p))
#endif

static inline void lc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

#endif /* LUNAR_COMMON_ATOMIC_H */
