/*
 * copy.c - lc_copy: memcpy below LC_COPY_NT_MIN, above it a loop of 64-byte
 * lines, loaded unaligned and stored with movntdq to a 64-byte aligned
 * destination so every write-combining buffer leaves whole. Other
 * architectures use memcpy throughout.
 */
#include "copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

static void copy_stream(unsigned char *d, const unsigned char *s, size_t len)
{
	size_t head = (-(uintptr_t)d) & 63;

	head = head < len ? head : len;
	memcpy(d, s, head);
	d += head;
	s += head;
	len -= head;
	for (; len >= 128; len -= 128, d += 128, s += 128) {
		const __m128i *src = (const __m128i *)(const void *)s;
		__m128i *dst = (__m128i *)(void *)d;
		__m128i a = _mm_loadu_si128(src), b = _mm_loadu_si128(src + 1);
		__m128i c = _mm_loadu_si128(src + 2), e = _mm_loadu_si128(src + 3);
		__m128i f = _mm_loadu_si128(src + 4), g = _mm_loadu_si128(src + 5);
		__m128i h = _mm_loadu_si128(src + 6), k = _mm_loadu_si128(src + 7);

		_mm_stream_si128(dst, a);
		_mm_stream_si128(dst + 1, b);
		_mm_stream_si128(dst + 2, c);
		_mm_stream_si128(dst + 3, e);
		_mm_stream_si128(dst + 4, f);
		_mm_stream_si128(dst + 5, g);
		_mm_stream_si128(dst + 6, h);
		_mm_stream_si128(dst + 7, k);
	}
	memcpy(d, s, len);
	/* Streaming stores are weakly ordered: fence them before we return. */
	_mm_sfence();
}
#endif

void lc_copy_stream(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	copy_stream(dst, src, len);
#else
	memcpy(dst, src, len);
#endif
}

void lc_copy(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
	if (len >= LC_COPY_NT_MIN) {
		copy_stream(dst, src, len);
		return;
	}
#endif
	memcpy(dst, src, len);
}
