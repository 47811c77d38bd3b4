/*
 * avx512_emulated.h - the AVX-512 intrinsics common/crc32c.c's fold uses,
 * done by SIMDe (Debian's libsimde-dev) in plain C, so that test_crc32c can
 * check that fold on a CPU without AVX-512. The Makefile builds crc32c.c and
 * test_crc32c.c again with this header forced in first (-include), into
 * test_crc32c_avx512; the daemons and liblunar never see it.
 *
 * crc32c.c, seeing LC_CRC32C_AVX512_EMULATED, compiles its fold without
 * the avx512f target (the compiler may not emit an AVX-512 instruction
 * here) and offers LC_CRC32C_FOLD512 wherever it offers the AVX2 fold. Its
 * other paths (SSE4.2, PCLMULQDQ, AVX2) stay the CPU's own.
 */
#ifndef LUNAR_TESTS_AVX512_EMULATED_H
#define LUNAR_TESTS_AVX512_EMULATED_H

#include <assert.h>
#include <immintrin.h> /* first: the names below then stand for SIMDe's */
#include <stdint.h>

#include <simde/x86/avx512.h>
#include <simde/x86/clmul.h>

#define LC_CRC32C_AVX512_EMULATED 1

#define __m512i			  simde__m512i
#define _mm512_loadu_si512	  simde_mm512_loadu_si512
#define _mm512_storeu_si512	  simde_mm512_storeu_si512
#define _mm512_xor_si512	  simde_mm512_xor_si512
#define _mm512_broadcast_i32x4	  simde_mm512_broadcast_i32x4
#define _mm512_extracti32x4_epi32 simde_mm512_extracti32x4_epi32
#define _mm512_ternarylogic_epi64 simde_mm512_ternarylogic_epi64
#define _mm512_clmulepi64_epi128  simde_mm512_clmulepi64_epi128
/* Two SIMDe 0.7.4 lacks. A stream store faults unless 64-byte aligned:
 * so does this one. */
#define _mm512_zextsi128_si512(x) simde_mm512_inserti32x4(simde_mm512_setzero_si512(), x, 0)
#define _mm512_stream_si512(p, v) (assert(((uintptr_t)(p)&63) == 0), simde_mm512_storeu_si512(p, v))

#endif /* LUNAR_TESTS_AVX512_EMULATED_H */
