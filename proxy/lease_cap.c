/*
 * lease_cap.c - the most keys one client may hold read leases on at once
 * (--max-client-leases). A client that reads key after key and never stops
 * would otherwise keep that many objects from eviction and fill the lease
 * cache the other clients share. Each session remembers the distinct keys
 * it read in the current lease period (the master's lease TTL, after which
 * a lease not read again has run out); a read of a new key past the cap is
 * answered BUSY until the period ends. A key the client removes no longer
 * counts. The set holds 32-bit hashes: a collision makes the count low by
 * one, never a read refused wrongly.
 */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "crc32c.h"
#include "lunar.h"
#include "ops.h"

#define CAP_MIN_SLOTS 1024u
#define CAP_EMPTY     0u
#define CAP_GONE      1u /* a removed key's tombstone */

struct px_lease_cap {
	pthread_mutex_t lock;
	uint64_t period_end_ms;
	uint32_t n;	/* keys counted this period */
	uint32_t used;	/* slots not empty (keys and tombstones) */
	uint32_t nslot; /* a power of two, 0 before the first read */
	uint32_t *slot;
};

struct px_lease_cap *px_lease_cap_alloc(void)
{
	struct px_lease_cap *c = calloc(1, sizeof(*c));

	if (c)
		pthread_mutex_init(&c->lock, NULL);
	return c;
}

void px_lease_cap_free(struct px_lease_cap *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c->slot);
	free(c);
}

static uint32_t cap_hash(const char *tenant, const char *key, uint32_t klen)
{
	uint32_t h = lc_crc32c(lc_crc32c(0, tenant, strlen(tenant) + 1), key, klen);

	return h > CAP_GONE ? h : h + 2;
}

/* The slot of h, or the first free one on its probe path (-1: none). */
static int64_t cap_find(const struct px_lease_cap *c, uint32_t h, int64_t *free_slot)
{
	uint32_t mask = c->nslot - 1;

	*free_slot = -1;
	for (uint32_t i = h & mask, k = 0; k < c->nslot; i = (i + 1) & mask, k++) {
		if (c->slot[i] == h)
			return i;
		if (c->slot[i] == CAP_GONE && *free_slot < 0)
			*free_slot = i;
		if (c->slot[i] == CAP_EMPTY) {
			if (*free_slot < 0)
				*free_slot = i;
			return -1;
		}
	}
	return -1;
}

/* Room for one more key: a table at most half used, rebuilt without its
 * tombstones. 0 or -1 (out of memory). */
static int cap_grow(struct px_lease_cap *c)
{
	uint32_t n = c->nslot ? c->nslot : CAP_MIN_SLOTS, *old = c->slot, oldn = c->nslot;

	if (c->used + 1 <= n / 2 && c->slot)
		return 0;
	while (c->n + 1 > n / 2)
		n *= 2;
	c->slot = calloc(n, sizeof(*c->slot));
	if (!c->slot) {
		c->slot = old;
		return -1;
	}
	c->nslot = n;
	c->used = 0;
	for (uint32_t i = 0; i < oldn; i++) {
		int64_t at, fs;

		if (old[i] <= CAP_GONE)
			continue;
		at = cap_find(c, old[i], &fs);
		if (at < 0 && fs >= 0) {
			c->slot[fs] = old[i];
			c->used++;
		}
	}
	free(old);
	return 0;
}

int px_lease_cap_take(struct px_proxy *px, struct px_session *s, const char *key, uint32_t klen)
{
	struct px_lease_cap *c = s->lease_cap;
	uint64_t now = lc_now_ms();
	uint32_t h;
	int64_t at, fs;
	int rc = 0;

	if (!c || !px->cfg.max_client_leases)
		return 0;
	h = cap_hash(s->tenant, key, klen);
	pthread_mutex_lock(&c->lock);
	if (now >= c->period_end_ms) {
		uint64_t ttl = atomic_load(&px->lease_ttl_ms);

		if (c->slot)
			memset(c->slot, 0, c->nslot * sizeof(*c->slot));
		c->n = c->used = 0;
		c->period_end_ms = now + (ttl ? ttl : 10000);
	}
	at = c->nslot ? cap_find(c, h, &fs) : -1;
	if (at >= 0)
		goto out;
	if (c->n >= px->cfg.max_client_leases) {
		rc = LUNAR_ERR_BUSY;
		goto out;
	}
	if (cap_grow(c))
		goto out; /* out of memory: this read goes uncounted */
	at = cap_find(c, h, &fs);
	if (at < 0 && fs >= 0) {
		if (c->slot[fs] == CAP_EMPTY)
			c->used++;
		c->slot[fs] = h;
		c->n++;
	}
out:
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void px_lease_cap_drop(struct px_session *s, const char *key, uint32_t klen)
{
	struct px_lease_cap *c = s->lease_cap;
	int64_t at, fs;

	if (!c)
		return;
	pthread_mutex_lock(&c->lock);
	at = c->nslot ? cap_find(c, cap_hash(s->tenant, key, klen), &fs) : -1;
	if (at >= 0) {
		c->slot[at] = CAP_GONE;
		c->n--;
	}
	pthread_mutex_unlock(&c->lock);
}
