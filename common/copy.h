/*
 * copy.h - the single-thread copy for KV blocks. Small copies are memcpy;
 * large ones stream to memory with non-temporal stores, which skip the
 * read-for-ownership of every destination line and leave the caches to the
 * data the process works on (a block written here is read later, by another
 * process or by the NIC, not by this core now).
 */
#ifndef LUNAR_COMMON_COPY_H
#define LUNAR_COMMON_COPY_H

#include <stddef.h>

/* Copies at least this long use non-temporal stores. */
#define LC_COPY_NT_MIN (64u * 1024)

/*
 * lc_copy - copy len bytes from src to dst; the ranges must not overlap. Any
 * alignment. At LC_COPY_NT_MIN bytes and above, dst is written with SSE2
 * streaming stores and an sfence orders them before the return, so another
 * thread or process told afterwards sees the bytes. Thread-safe, never blocks.
 */
void lc_copy(void *dst, const void *src, size_t len);
/*
 * lc_copy_stream - lc_copy's streaming path at any length: dst is written
 * with non-temporal stores (its unaligned head and tail with memcpy), in
 * one sequential stream, then an sfence. For a caller that has read src
 * already (it is in the cache) and wants dst out of it. Thread-safe.
 */
void lc_copy_stream(void *dst, const void *src, size_t len);

#endif /* LUNAR_COMMON_COPY_H */
