/*
 * clients.c - the proxies the master knows: last ping per client_id, and the
 * housekeeping that declares a silent proxy dead and takes back everything it
 * held (its segments, the replicas on them, its unfinished puts).
 */
#include <errno.h>
#include <stdlib.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "mst_int.h"

int mst_clients_init(struct mst_clients *c)
{
	c->n = 0;
	c->nbuckets = 64;
	c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
	if (!c->buckets)
		return -ENOMEM;
	if (pthread_mutex_init(&c->lock, NULL)) {
		free(c->buckets);
		return -ENOMEM;
	}
	if (pthread_mutex_init(&c->bury_lock, NULL)) {
		pthread_mutex_destroy(&c->lock);
		free(c->buckets);
		return -ENOMEM;
	}
	return 0;
}

void mst_clients_fini(struct mst_clients *c)
{
	for (size_t b = 0; b < c->nbuckets; b++) {
		struct mst_client *x, *n;

		for (x = c->buckets[b]; x; x = n) {
			n = x->next;
			free(x);
		}
	}
	free(c->buckets);
	pthread_mutex_destroy(&c->bury_lock);
	pthread_mutex_destroy(&c->lock);
}

static struct mst_client **client_find(struct mst_clients *c, uint64_t id)
{
	struct mst_client **pp = &c->buckets[(id * 0x9e3779b97f4a7c15ull >> 32) % c->nbuckets];

	while (*pp && (*pp)->id != id)
		pp = &(*pp)->next;
	return pp;
}

/* Rehash into twice the buckets; failure only costs speed. */
static void clients_grow(struct mst_clients *c)
{
	struct mst_clients g = {.nbuckets = c->nbuckets * 2};

	g.buckets = calloc(g.nbuckets, sizeof(*g.buckets));
	if (!g.buckets)
		return;
	for (size_t b = 0; b < c->nbuckets; b++) {
		struct mst_client *x, *n;

		for (x = c->buckets[b]; x; x = n) {
			struct mst_client **head = client_find(&g, x->id);

			n = x->next;
			x->next = NULL;
			*head = x;
		}
	}
	free(c->buckets);
	c->buckets = g.buckets;
	c->nbuckets = g.nbuckets;
}

/* Dead clients named in the log each round; the rest are counted. */
#define EXPIRED_LOGGED 16

/* Declare clients ids[0..n) dead, already out of the table: drop their
 * segments, the replicas on them and their unfinished puts. Call with
 * bury_lock held. */
static void clients_bury(struct mst_master *m, uint64_t *ids, size_t n, uint64_t now)
{
	for (size_t i = 0; i < n; i++) {
		if (i < EXPIRED_LOGGED)
			LC_WARN("master", "client %016llx silent for %llu ms: dead",
				(unsigned long long)ids[i],
				(unsigned long long)m->cfg.client_ttl_ms);
		mst_offload_drop_client(m, ids[i]);
		mst_resv_drop_client(m, ids[i]); /* late: it may only be asleep */
		mst_segments_drop_client(m, ids[i]);
	}
	if (n > EXPIRED_LOGGED)
		LC_WARN("master", "and %zu more clients silent for %llu ms: dead",
			n - EXPIRED_LOGGED, (unsigned long long)m->cfg.client_ttl_ms);
	/* Their unfinished writes, all in one sweep of the objects: client ids
	 * cost nothing to make up, so a sweep each would cost ids x objects. */
	if (n)
		mst_objects_drop(m, NULL, ids, n, now);
}

/* Whether x has been silent for client_ttl at now. */
static int silent(const struct mst_master *m, const struct mst_client *x, uint64_t now)
{
	return now >= m->cfg.client_ttl_ms && x->last_ping_ms < now - m->cfg.client_ttl_ms;
}

/* x called now: counted once a lead in rebuild.clients_called, for the
 * new leader's wait (mst_rebuild_settling). With the table's lock held. */
static void called(struct mst_master *m, struct mst_client *x)
{
	uint64_t lead = LC_READ_ONCE(m->rebuild.lead_ms);

	if (lead && x->called_lead_ms != lead) {
		x->called_lead_ms = lead;
		lc_fetch_add_relaxed(&m->rebuild.clients_called, 1);
	}
}

/* Free x, unlinked (declared dead): one that called in this lead and
 * never sent its last batch is waited for no more. With c->lock held. */
static void client_free(struct mst_master *m, struct mst_client *x)
{
	uint64_t lead = LC_READ_ONCE(m->rebuild.lead_ms);

	if (lead && x->called_lead_ms == lead && x->done_lead_ms != lead)
		lc_fetch_sub_relaxed(&m->rebuild.clients_called, 1);
	free(x);
}

/* Add client, unknown to c, pinged now; with c->lock held. Its entry, or
 * NULL when out of memory. */
static struct mst_client *client_add(struct mst_clients *c, uint64_t client, uint64_t now)
{
	struct mst_client *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->id = client;
	x->last_ping_ms = now;
	*client_find(c, client) = x;
	c->n++;
	if (c->n > c->nbuckets)
		clients_grow(c); /* moves the chains, not the entries */
	return x;
}

int mst_client_touch(struct mst_master *m, uint64_t client)
{
	struct mst_clients *c = &m->clients;
	uint64_t now = lc_now_ms();
	struct mst_client **pp, *x;
	int dead = 0;

	pthread_mutex_lock(&c->lock);
	pp = client_find(c, client);
	if (*pp && !silent(m, *pp, now)) {
		(*pp)->last_ping_ms = now;
		called(m, *pp);
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	pthread_mutex_unlock(&c->lock);
	/* Unknown, or silent for the TTL: its death (ours to declare, or the
	 * housekeeper's in progress) is over before its next life begins. */
	pthread_mutex_lock(&c->bury_lock);
	now = lc_now_ms();
	pthread_mutex_lock(&c->lock);
	pp = client_find(c, client);
	if (*pp && !silent(m, *pp, now)) {
		(*pp)->last_ping_ms = now; /* another call registered it meanwhile */
		called(m, *pp);
		pthread_mutex_unlock(&c->lock);
		pthread_mutex_unlock(&c->bury_lock);
		return 0;
	}
	if (*pp) {
		x = *pp;
		*pp = x->next;
		c->n--;
		client_free(m, x);
		dead = 1;
	}
	pthread_mutex_unlock(&c->lock);
	if (dead)
		clients_bury(m, &client, 1, now);
	pthread_mutex_lock(&c->lock);
	x = client_add(c, client, lc_now_ms());
	if (x)
		called(m, x);
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->bury_lock);
	if (!x)
		return -ENOMEM;
	LC_INFO("master", "client %016llx registered", (unsigned long long)client);
	return 1;
}

int mst_client_alive(struct mst_master *m, uint64_t client)
{
	int alive;

	pthread_mutex_lock(&m->clients.lock);
	alive = *client_find(&m->clients, client) != NULL;
	pthread_mutex_unlock(&m->clients.lock);
	return alive;
}

int mst_client_last_batch(struct mst_master *m, uint64_t client, uint64_t lead_ms, int owns)
{
	struct mst_client *x;
	int first_owned = 0;

	pthread_mutex_lock(&m->clients.lock);
	x = *client_find(&m->clients, client);
	if (x && x->called_lead_ms == lead_ms && x->done_lead_ms != lead_ms) {
		x->done_lead_ms = lead_ms;
		/* after its call's count (the lock orders them): released so,
		 * a wait that reads this count also reads that one */
		lc_fetch_add_release(&m->rebuild.clients_done, 1);
	}
	if (x && owns && x->reported_lead_ms != lead_ms) {
		x->reported_lead_ms = lead_ms;
		first_owned = 1;
	}
	pthread_mutex_unlock(&m->clients.lock);
	return first_owned;
}

/* Unlink the clients silent since before deadline; their ids in *out
 * (malloc'd), how many. Out of memory, the rest waits for the next round. */
static size_t take_expired(struct mst_master *m, uint64_t deadline, uint64_t **out)
{
	struct mst_clients *c = &m->clients;
	uint64_t *ids = NULL, *v;
	size_t n = 0, cap = 0;

	pthread_mutex_lock(&c->lock);
	for (size_t b = 0; b < c->nbuckets; b++) {
		for (struct mst_client **pp = &c->buckets[b]; *pp;) {
			struct mst_client *x = *pp;

			if (x->last_ping_ms >= deadline) {
				pp = &x->next;
				continue;
			}
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				if (!(v = realloc(ids, cap * sizeof(*ids))))
					goto out;
				ids = v;
			}
			ids[n++] = x->id;
			*pp = x->next;
			c->n--;
			client_free(m, x);
		}
	}
out:
	pthread_mutex_unlock(&c->lock);
	*out = ids;
	return n;
}

void mst_clients_expire(struct mst_master *m)
{
	uint64_t now = lc_now_ms(), *ids;
	size_t n;

	if (now < m->cfg.client_ttl_ms)
		return;
	pthread_mutex_lock(&m->clients.bury_lock);
	n = take_expired(m, now - m->cfg.client_ttl_ms, &ids);
	clients_bury(m, ids, n, now);
	pthread_mutex_unlock(&m->clients.bury_lock);
	free(ids);
}

static Lunar__ClientInfo *client_info(const struct mst_client *x, uint64_t now, uint64_t ttl)
{
	Lunar__ClientInfo *ci = malloc(sizeof(*ci));

	if (!ci)
		return NULL;
	lunar__client_info__init(ci);
	ci->client_id = x->id;
	ci->last_ping_ms_ago = now > x->last_ping_ms ? now - x->last_ping_ms : 0;
	ci->alive = ci->last_ping_ms_ago < ttl;
	return ci;
}

int mst_clients_list(struct mst_master *m, Lunar__ListClientsReply *r)
{
	struct mst_clients *c = &m->clients;
	uint64_t now = lc_now_ms();
	int rc = 0;

	pthread_mutex_lock(&c->lock);
	r->clients = calloc(c->n + 1, sizeof(*r->clients));
	if (!r->clients)
		rc = -ENOMEM;
	for (size_t b = 0; !rc && b < c->nbuckets; b++) {
		for (struct mst_client *x = c->buckets[b]; x && !rc; x = x->next) {
			Lunar__ClientInfo *ci = client_info(x, now, m->cfg.client_ttl_ms);

			if (ci)
				r->clients[r->n_clients++] = ci;
			else
				rc = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&c->lock);
	/* segment counts outside the client lock (table -> clients order) */
	for (size_t i = 0; i < r->n_clients; i++)
		r->clients[i]->segments = mst_segments_owned(m, r->clients[i]->client_id);
	return rc;
}
