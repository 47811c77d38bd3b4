/*
 * harness_clients.c - liblunar clients for the integration tests (see
 * harness.h) with the harness's timeouts and arenas, the patterned values
 * they put and verify (h_seed, h_fill, h_verify), and an application memfd
 * for lunar_register.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static struct lunar_client *client_try(const struct lunar_opts *opts, int *rc)
{
	struct lunar_client *c = NULL;
	int r;

	r = lunar_connect(opts, &c);
	if (rc)
		*rc = r;
	if (r != 0) {
		if (c)
			lunar_close(c);
		return NULL;
	}
	return c;
}

struct lunar_client *h_client_try(const char *sockpath, unsigned timeout_ms, int *rc)
{
	struct lunar_opts opts = {.socket_path = sockpath, .timeout_ms = timeout_ms};

	return client_try(&opts, rc);
}

struct lunar_client *h_client_arena(const char *sockpath, unsigned timeout_ms, size_t arena_bytes)
{
	struct lunar_opts opts = {
	    .socket_path = sockpath, .timeout_ms = timeout_ms, .arena_bytes = arena_bytes};
	struct lunar_client *c;
	int rc = 0;

	c = client_try(&opts, &rc);
	H_ASSERT_MSG(c != NULL, "lunar_connect(%s) = %d (%s)", sockpath, rc, h_code(rc));
	return c;
}

struct lunar_client *h_client(const char *sockpath)
{
	return h_client_arena(sockpath, H_CLIENT_TIMEOUT_MS, 0);
}

/* FNV-1a: a stable seed per key. */
uint64_t h_seed(const char *key)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *key; key++)
		h = (h ^ (uint8_t)*key) * 0x100000001b3ull;
	return h ? h : 1;
}

/* splitmix64 keyed by seed and the 8-byte word's index: any byte can be
 * checked on its own, and neighbouring objects differ everywhere. */
static uint64_t word_at(uint64_t seed, uint64_t idx)
{
	uint64_t z = seed + (idx + 1) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void h_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *b = buf;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t w = word_at(seed, i / 8);

		memcpy(b + i, &w, 8);
	}
	if (i < len) {
		uint64_t w = word_at(seed, i / 8);

		memcpy(b + i, &w, len - i);
	}
}

int64_t h_verify(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *b = buf;

	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = word_at(seed, i / 8);
		size_t n = len - i < 8 ? len - i : 8;

		if (memcmp(b + i, &w, n) != 0) {
			for (size_t j = 0; j < n; j++)
				if (b[i + j] != ((const uint8_t *)&w)[j])
					return (int64_t)(i + j);
		}
	}
	return -1;
}

uint8_t *h_app_memfd(const char *name, size_t len, int *fd)
{
	uint8_t *p;

	*fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	H_ASSERT_MSG(*fd >= 0, "memfd_create: %s", strerror(errno));
	H_ASSERT(ftruncate(*fd, (off_t)len) == 0);
	H_ASSERT(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	H_ASSERT(p != MAP_FAILED);
	return p;
}

int h_put_seeded(struct lunar_client *c, const char *key, size_t len, uint64_t seed,
		 const struct lunar_put_cfg *cfg)
{
	void *buf = malloc(len ? len : 1);
	int rc;

	H_ASSERT(buf != NULL);
	h_fill(buf, len, seed);
	rc = lunar_put(c, key, buf, len, cfg);
	free(buf);
	return rc;
}

void h_expect_seeded(struct lunar_client *c, const char *key, size_t len, uint64_t seed)
{
	uint8_t *buf = malloc(len + 64);
	int64_t got, bad;

	H_ASSERT(buf != NULL);
	got = lunar_get_into(c, key, buf, len + 64);
	H_ASSERT_MSG(got == (int64_t)len, "get %s = %lld (%s), expected %zu", key, (long long)got,
		     h_code(got), len);
	bad = h_verify(buf, len, seed);
	H_ASSERT_MSG(bad < 0, "%s: wrong byte at offset %lld", key, (long long)bad);
	free(buf);
}

uint64_t h_wait_health(struct lunar_client *c, int want, int timeout_ms)
{
	uint64_t t0 = h_now_ms();
	int h;

	while ((h = lunar_health(c)) != want && h_now_ms() - t0 < (uint64_t)timeout_ms)
		h_sleep_ms(20);
	H_ASSERT_MSG(h == want, "lunar_health = %d after %d ms, want %d", h, timeout_ms, want);
	return h_now_ms() - t0;
}
