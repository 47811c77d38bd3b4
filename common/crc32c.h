/*
 * crc32c.h - CRC32C (Castagnoli), the checksum every object carries (SPEC §3).
 * Carry-less multiplication (VPCLMULQDQ on AVX-512 or AVX2 vectors) when the
 * CPU has it, else the SSE4.2 crc32 instruction over three interleaved
 * streams, else a slice-by-8 table (the fastest the CPU has, chosen once at
 * run time; tests may choose another); and a copy that
 * checksums in the same pass, for the put and get paths of every KV block.
 * All functions are thread-safe and never block; all but lc_crc32c_use are
 * pure.
 */
#ifndef LUNAR_COMMON_CRC32C_H
#define LUNAR_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Copies at least this long use non-temporal stores in lc_copy_crc32c, as in
 * lc_copy: from 64 KiB on they beat a cached copy into a cold destination
 * (docs/bench.md, the copy baselines). */
#define LC_COPY_CRC32C_NT_MIN (64u * 1024)

/*
 * lc_crc32c - extend crc over len bytes of buf. Start with crc = 0; the
 * pre- and post-inversion happen inside, so chaining works:
 * lc_crc32c(lc_crc32c(0, a, la), b, lb) == lc_crc32c(0, a || b, la + lb).
 * lc_crc32c(0, "123456789", 9) == 0xE3069283. buf may be NULL when len == 0.
 */
uint32_t lc_crc32c(uint32_t crc, const void *buf, size_t len);

/*
 * lc_crc32c_combine - the CRC32C of a || b from crc_a = lc_crc32c(0, a, la)
 * and crc_b = lc_crc32c(0, b, len_b), without the bytes: for pieces
 * checksummed apart (the slices of a transfer, each on its connection).
 * O(log len_b) carry-less products, about a microsecond.
 */
uint32_t lc_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/*
 * lc_copy_crc32c - copy len bytes from src to dst (which must not overlap)
 * and return lc_crc32c(crc, src, len), reading src once. From
 * LC_COPY_CRC32C_NT_MIN bytes on, every implementation but the table's
 * writes dst with non-temporal stores (they bypass the caches; an sfence
 * orders them before the return).
 */
uint32_t lc_copy_crc32c(void *dst, const void *src, size_t len, uint32_t crc);

/*
 * lc_copy_crc32c_cached - lc_copy_crc32c with ordinary stores at every
 * length: for a dst that is read again at once (a staging buffer the client
 * copies out of next), which then finds the bytes in the shared cache
 * instead of in memory.
 */
uint32_t lc_copy_crc32c_cached(void *dst, const void *src, size_t len, uint32_t crc);

/* The implementations, slowest first. The folding ones take buffers of
 * 2 KiB and more, and leave shorter ones to the chains. */
enum lc_crc32c_impl {
	LC_CRC32C_TABLE,   /* slice-by-8 tables, on every CPU */
	LC_CRC32C_CHAINS,  /* three chains of the SSE4.2 crc32 instruction */
	LC_CRC32C_FOLD256, /* AVX2 VPCLMULQDQ folding, then the chains */
	LC_CRC32C_FOLD512, /* AVX-512 VPCLMULQDQ folding, then the chains */
};

/*
 * For tests and benchmarks. lc_crc32c_best - the fastest enum lc_crc32c_impl
 * this CPU has, the one every call uses unless lc_crc32c_use chose another.
 * lc_crc32c_use - every call, in every thread, uses impl from now on; -1
 * (nothing changes) when this CPU lacks it. lc_crc32c_sw, lc_copy_crc32c_sw -
 * the table implementations of lc_crc32c and lc_copy_crc32c, whatever is in
 * use: same arguments and results on every CPU.
 */
int lc_crc32c_best(void);
int lc_crc32c_use(int impl);
uint32_t lc_crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t lc_copy_crc32c_sw(void *dst, const void *src, size_t len, uint32_t crc);

#endif /* LUNAR_COMMON_CRC32C_H */
