/*
 * key.c - key and tenant validation and hashing; see key.h. The hash is
 * xxHash's XXH3 (libxxhash-dev), inlined here: twice as fast as FNV-1a on
 * keys of about 30 bytes, and better mixed. Its seed is random per process,
 * so that no client can choose keys that pile up in one slot of a table.
 */
#include "key.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "lunar.h"

/* Length of the UTF-8 sequence at s (at most n bytes), 0 if malformed:
 * overlong forms, surrogates and code points past U+10FFFF are refused. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	uint32_t cp;
	size_t len, i;

	if (s[0] < 0x80)
		return 1;
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2;
		cp = s[0] & 0x1f;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3;
		cp = s[0] & 0x0f;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp < 0xa0))
		return 0;
	return len;
}

#define BYTES(b) (0x0101010101010101ull * (b))

/* Whether all 8 bytes at s are printable ASCII, 0x20..0x7e (word-at-a-time:
 * a byte below 0x20 borrows into its top bit, one above 0x7e carries into
 * it or has it set already). */
static int printable8(const unsigned char *s)
{
	uint64_t w;

	memcpy(&w, s, sizeof(w));
	return !((((w - BYTES(0x20)) & ~w) | ((w + BYTES(0x01)) | w)) & BYTES(0x80));
}

int lc_key_check(const char *key, size_t len)
{
	const unsigned char *s = (const unsigned char *)key;
	size_t i = 0, step;

	if (!key || len == 0 || len > LUNAR_KEY_MAX)
		return LUNAR_ERR_INVALID_KEY;
	while (i < len) {
		if (len - i >= 8 && printable8(s + i)) {
			i += 8;
			continue;
		}
		if (s[i] < 0x20 || s[i] == 0x7f)
			return LUNAR_ERR_INVALID_KEY;
		step = utf8_seq(s + i, len - i);
		if (!step)
			return LUNAR_ERR_INVALID_KEY;
		i += step;
	}
	return 0;
}

int lc_tenant_check(const char *tenant, size_t len)
{
	if (!tenant || len == 0 || len > 63)
		return LUNAR_ERR_INVALID_PARAMS;
	for (size_t i = 0; i < len; i++) {
		char ch = tenant[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || ch == '_' || ch == '.' || ch == '-'))
			return LUNAR_ERR_INVALID_PARAMS;
	}
	return 0;
}

static _Atomic uint64_t name_seed; /* 0 until the first hash */

/* The process's seed: random, never 0; the first thread to set it wins. */
static uint64_t seed_init(void)
{
	uint64_t s = 0, old = 0;
	struct timespec t;

	if (getrandom(&s, sizeof(s), GRND_NONBLOCK) != sizeof(s)) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		s = XXH3_64bits_withSeed(&t, sizeof(t), (uint64_t)getpid());
	}
	s |= 1;
	return atomic_compare_exchange_strong(&name_seed, &old, s) ? s : old;
}

uint64_t lc_name_hash(const char *tenant, size_t tlen, const char *key, size_t klen)
{
	uint64_t seed = atomic_load_explicit(&name_seed, memory_order_relaxed);

	if (!seed)
		seed = seed_init();
	return XXH3_64bits_withSeed(key, klen, XXH3_64bits_withSeed(tenant, tlen, seed));
}
