/*
 * uncommit.c - values committed beside a write that then failed, whose
 * taking back (BatchPutUncommit) the master did not answer. Left there,
 * such a value stays the key's until evicted: every get finds its bytes
 * unlike its CRC32C, and every later put of the key is told it exists. So
 * they wait here (a put told the key exists meanwhile fails, as the
 * value's own put did), and each answered Ping asks for them again, one call per
 * value, until the master answers for the value (whatever it says: taken
 * back, not there, or another object of the key now). The master keeps
 * the value's tie to its reservation while bytes may still land there,
 * which a tainted piece holds off for the reservation's life: long past
 * the next Ping.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "failpoint.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"

struct px_uncommit {
	struct px_uncommit *next;
	char *tenant, *key;
	uint64_t resv, off;
};

struct px_uncommits {
	pthread_mutex_t lock;
	struct px_uncommit *head;
	atomic_size_t n;	   /* changed under lock */
	atomic_uint_fast64_t gone; /* taken out of the list; changed under lock */
};

int px_uncommits_create(struct px_proxy *px)
{
	struct px_uncommits *u = calloc(1, sizeof(*u));

	if (!u)
		return LUNAR_ERR_INTERNAL;
	pthread_mutex_init(&u->lock, NULL);
	px->uncommits = u;
	return 0;
}

static void uncommit_free(struct px_uncommit *v)
{
	free(v->tenant);
	free(v->key);
	free(v);
}

void px_uncommits_destroy(struct px_proxy *px)
{
	struct px_uncommits *u = px->uncommits;
	struct px_uncommit *v, *next;

	if (!u)
		return;
	px->uncommits = NULL;
	if (atomic_load(&u->n))
		LC_WARN("proxy",
			"%zu values whose writes failed were not taken back; "
			"they stay unreadable until evicted",
			atomic_load(&u->n));
	for (v = u->head; v; v = next) {
		next = v->next;
		uncommit_free(v);
	}
	pthread_mutex_destroy(&u->lock);
	free(u);
}

void px_uncommit_later(struct px_proxy *px, const char *tenant, const char *key, uint64_t resv,
		       uint64_t off)
{
	struct px_uncommits *u = px->uncommits;
	struct px_uncommit *v = calloc(1, sizeof(*v));

	if (v) {
		v->tenant = strdup(tenant);
		v->key = strdup(key);
		v->resv = resv;
		v->off = off;
	}
	pthread_mutex_lock(&u->lock);
	if (!v || !v->tenant || !v->key || atomic_load(&u->n) >= PX_UNCOMMIT_MAX) {
		pthread_mutex_unlock(&u->lock);
		LC_WARN("proxy",
			"put of %s: its write failed and the master kept it; "
			"it stays unreadable until evicted",
			key);
		if (v)
			uncommit_free(v);
		return;
	}
	v->next = u->head;
	u->head = v;
	atomic_fetch_add(&u->n, 1);
	pthread_mutex_unlock(&u->lock);
}

/* Ask the master to take v back: 0 when it answered for v, else the
 * call's code (a refusal of the whole call, as an HA leader past its
 * fence gives, is no answer). */
static int uncommit_call(struct px_proxy *px, const struct px_uncommit *v)
{
	Lunar__BatchPutCommitRequest rq = LUNAR__BATCH_PUT_COMMIT_REQUEST__INIT;
	Lunar__PutCommitItem it = LUNAR__PUT_COMMIT_ITEM__INIT, *items[1] = {&it};
	const Lunar__BatchCodesReply *res;
	ProtobufCMessage *rep;
	int rc;

	rq.client_id = px->client_id;
	rq.tenant = v->tenant;
	rq.n_items = 1;
	rq.items = items;
	it.key = v->key;
	it.reservation = v->resv;
	it.offset = v->off;
	rc = LC_FAILPOINT("proxy-uncommit-retry") /* tests: no answer again */
		 ? LUNAR_ERR_RPC_TIMEOUT
		 : px_mc_call(px->mc, LUNAR__METHOD__BATCH_PUT_UNCOMMIT, &rq.base, &rep);
	if (rc)
		return rc;
	res = (const Lunar__BatchCodesReply *)rep;
	rc = px_mc_code(rep) ? px_mc_code(rep) : res->n_codes != 1 ? LUNAR_ERR_PROTOCOL : 0;
	if (!rc && !res->codes[0])
		PX_COUNT(px, puts_uncommitted, 1);
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

void px_uncommit_retry(struct px_proxy *px)
{
	struct px_uncommits *u = px->uncommits;
	struct px_uncommit *v, *next, **pp;

	/* Each stays listed (px_uncommit_waits) until answered. Only this
	 * thread takes one out and later ones go in at the head, so v
	 * outlives the call and its next is read under the lock. */
	pthread_mutex_lock(&u->lock);
	v = u->head;
	pthread_mutex_unlock(&u->lock);
	/* after one goes unanswered, the rest wait for the next Ping */
	for (; v && !uncommit_call(px, v); v = next) {
		pthread_mutex_lock(&u->lock);
		for (pp = &u->head; *pp != v; pp = &(*pp)->next)
			;
		next = v->next;
		*pp = next;
		atomic_fetch_sub(&u->n, 1);
		atomic_fetch_add(&u->gone, 1);
		pthread_mutex_unlock(&u->lock);
		uncommit_free(v);
	}
}

uint64_t px_uncommit_mark(struct px_proxy *px)
{
	return atomic_load(&px->uncommits->gone);
}

bool px_uncommit_waits(struct px_proxy *px, const char *tenant, const char *key, uint64_t mark)
{
	struct px_uncommits *u = px->uncommits;
	bool found;

	/* A value unlisted since mark was taken back once the master said so,
	 * maybe after it told the put the key exists: it may be that one. */
	if (atomic_load(&u->gone) != mark)
		return true;
	if (!atomic_load(&u->n))
		return false;
	found = false;
	pthread_mutex_lock(&u->lock);
	for (const struct px_uncommit *v = u->head; v && !found; v = v->next)
		found = !strcmp(v->key, key) && !strcmp(v->tenant, tenant);
	pthread_mutex_unlock(&u->lock);
	return found;
}
