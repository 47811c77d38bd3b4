/*
 * ha.c - the election of ha.h. Two threads, each with its own etcd
 * client, each waking every period (tick_ms: ttl/5 within 100 ms..1 s,
 * which also bounds each etcd request). The election thread has two
 * roles. A standby reads the leader key every STANDBY_POLL_MS and
 * campaigns when it is absent: a lease, then a transaction that creates
 * the key only if absent, holding our address; its create revision is the
 * view. A leader renews its lease every period; each renewal sent at t0
 * that etcd confirms moves the fence to t0 + ttl - ttl/2 (the lease cannot
 * expire before t0 + ttl), so a leader cut off from etcd refuses calls
 * for the second half of the TTL before anyone else can win. A leader
 * that loses its term never campaigns again (its metadata is stale): it
 * stands by and asks to be restarted.
 * The watch thread does the rest, so that no other request waits in front
 * of a renewal on a slow etcd: it checks that a leader's key is still its
 * own (when it is not, it wakes the election thread, which ends the
 * term), keeps /lunar/<cluster>/members/<advertise> alive under a lease of
 * its own, and reads the members back for /admin/ha, so that tools list
 * the standbys.
 */
#include "ha.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "etcd/etcd.h"
#include "etcd/leader.h"
#include "log.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "parse.h"

#define STANDBY_POLL_MS 200 /* how soon a standby sees the key go */
#define TICK_MIN_MS	100 /* a leader's renewal period: ttl/5 within these */
#define TICK_MAX_MS	1000
#define KEY_MAX		512
#define MEMBERS_MAX	16 /* members listed in /admin/ha */

struct mst_ha {
	struct mst_master *m;
	struct mst_ha_gate *g;
	struct etcd_client *e;	   /* the election thread's */
	struct etcd_client *watch; /* the watch thread's */
	char key[KEY_MAX];
	char member_key[KEY_MAX]; /* /lunar/<cluster>/members/<advertise> */
	char cluster[MST_HA_ADDR_MAX];
	int64_t member_lease; /* the members key's (the watch thread's); 0: none */
	char self[MST_HA_ADDR_MAX];
	char value[2 * MST_HA_ADDR_MAX + 32]; /* what the leader key holds: leader.h */
	uint64_t ttl_ms, tick_ms;
	/* Ours while leading, else 0; written by the election thread (view
	 * first, lease with release), read by the watch thread. */
	int64_t lease;
	uint64_t view;
	uint64_t key_lost; /* atomic: a view whose key the watch found not ours */
	int fenced;	   /* leading past the deadline (logged once) */
	int deposed;	   /* lost a term: stands by for good */
	uint64_t deposed_ms;
	int told;
	void (*on_deposed)(void *arg);
	void *arg;
	int cancel; /* atomic: aborts etcd requests in flight */
	int stopping;
	int woken;	      /* the watch found the key lost: the election acts now */
	pthread_mutex_t lock; /* guards stopping and woken, with cond */
	pthread_cond_t cond;
	pthread_t thread, watcher;
	int running;
};

void mst_ha_config_defaults(struct mst_ha_config *c)
{
	*c = (struct mst_ha_config){.cluster_id = "lunar", .lease_ttl_ms = 5000};
}

int mst_ha_flag_has(const char *name)
{
	return !strcmp(name, "etcd") || !strcmp(name, "cluster-id") || !strcmp(name, "advertise") ||
	       !strcmp(name, "advertise-http") || !strcmp(name, "etcd-lease-ttl");
}

int mst_ha_config_set(struct mst_ha_config *c, const char *name, const char *value)
{
	if (!strcmp(name, "etcd"))
		return *(c->etcd = value) ? 0 : -EINVAL;
	if (!strcmp(name, "cluster-id")) /* one path segment of the key */
		return *value && !strchr(value, '/') && strlen(value) < 128
			   ? (c->cluster_id = value, 0)
			   : -EINVAL;
	if (!strcmp(name, "advertise"))
		return *(c->advertise = value) ? 0 : -EINVAL;
	if (!strcmp(name, "advertise-http"))
		return strncmp(c->advertise_http = value, "http://", 7) ? -EINVAL : 0;
	if (!strcmp(name, "etcd-lease-ttl"))
		return lc_parse_duration_ms(value, &c->lease_ttl_ms) || c->lease_ttl_ms < 2000 ||
			       c->lease_ttl_ms > 3600000
			   ? -EINVAL
			   : 0;
	return -ENOENT;
}

int mst_ha_config_check(const struct mst_ha_config *c, char *why, size_t n)
{
	const char *a = c->advertise;

	if (!c->etcd)
		return 0;
	if (!a || strncmp(a, "tcp://", 6) || !strchr(a + 6, ':') || strlen(a) >= MST_HA_ADDR_MAX) {
		snprintf(why, n,
			 "--etcd needs --advertise tcp://HOST:PORT (the address proxies "
			 "dial this master on)");
		return -EINVAL;
	}
	return 0;
}

const char *mst_ha_usage(void)
{
	return "  --etcd URLS                      elect a leader through etcd "
	       "(http://h:2379,...)\n"
	       "  --cluster-id NAME                the election's key: /lunar/NAME/leader (lunar)\n"
	       "  --advertise tcp://HOST:PORT      this master's address, as proxies dial it\n"
	       "  --advertise-http http://H:P      its HTTP address, for lunarctl (the\n"
	       "                                   --advertise host and --http-port)\n"
	       "  --etcd-lease-ttl DURATION        leader lease; fenced after half of it (5s)\n";
}

/* Wait up to ms or until stopping, or (woken not NULL: the election
 * thread) until *woken is set, which the wait takes; 1 when stopping. */
static int nap(struct mst_ha *h, uint64_t ms, int *woken)
{
	struct timespec ts;
	int stop;

	lc_monotonic_after(&ts, ms);
	pthread_mutex_lock(&h->lock);
	if (!h->stopping && !(woken && *woken))
		pthread_cond_timedwait(&h->cond, &h->lock, &ts);
	if (woken)
		*woken = 0;
	stop = h->stopping;
	pthread_mutex_unlock(&h->lock);
	return stop;
}

/* The fence for a renewal sent at t0 of a lease etcd holds for ttl_s. */
static uint64_t fence_of(const struct mst_ha *h, uint64_t t0, int64_t ttl_s)
{
	uint64_t ttl = (uint64_t)ttl_s * 1000 < h->ttl_ms ? (uint64_t)ttl_s * 1000 : h->ttl_ms;

	return t0 + ttl - h->ttl_ms / 2;
}

/* The term is over: close the gate for good and ask for a restart later. */
static void lose(struct mst_ha *h, const char *why)
{
	mst_ha_gate_follow(h->g, "", 0);
	LC_WARN("ha", "lost the lead of view %llu: %s; standing by until restarted",
		(unsigned long long)h->view, why);
	if (h->lease && etcd_lease_revoke(h->e, h->lease) == 0)
		LC_INFO("ha", "revoked lease %llx", (unsigned long long)h->lease);
	LC_WRITE_ONCE(h->lease, 0);
	h->deposed = 1;
	h->deposed_ms = lc_now_ms();
}

static void lead_tick(struct mst_ha *h)
{
	uint64_t t0 = lc_now_ms();
	int64_t ttl = 0;
	int rc;

	if (lc_load_acquire(&h->key_lost) == h->view) {
		lose(h, "the leader key is gone or not ours");
		return;
	}
	rc = etcd_lease_keepalive(h->e, h->lease, &ttl);
	if (rc == 0 && ttl <= 0) {
		lose(h, "the lease expired");
		return;
	}
	if (rc == 0) {
		mst_ha_gate_renew(h->g, fence_of(h, t0, ttl));
		if (h->fenced)
			LC_INFO("ha", "lease renewed through %s: leading view %llu again",
				etcd_endpoint(h->e), (unsigned long long)h->view);
		h->fenced = 0;
	} else if (!h->fenced && lc_now_ms() >= LC_READ_ONCE(h->g->fence_ms)) {
		h->fenced = 1;
		LC_WARN("ha", "fenced: no lease renewal for %llu ms; refusing calls",
			(unsigned long long)(h->ttl_ms / 2));
	}
}

/* Try to create the leader key; on success we lead. */
static void campaign(struct mst_ha *h)
{
	uint64_t t0 = lc_now_ms();
	int64_t id, granted, rev;
	int rc = etcd_lease_grant(h->e, (int64_t)((h->ttl_ms + 999) / 1000), &id, &granted);

	if (rc)
		return;
	rc = etcd_create(h->e, h->key, h->value, id, &rev);
	if (rc) {
		/* Lost, or unknown (a timeout may have created it): the key goes
		 * with the lease either way. */
		etcd_lease_revoke(h->e, id);
		return;
	}
	LC_WRITE_ONCE(h->view, (uint64_t)rev);
	lc_store_release(&h->lease, id);
	/* Versions of this term above every older view's (rebuild.c: per key
	 * the highest reported version wins); views are etcd revisions. */
	lc_fetch_add_relaxed(&h->m->next_obj_id, (h->view << 32) > h->m->next_obj_id
						     ? (h->view << 32) - h->m->next_obj_id
						     : 0);
	h->fenced = 0;
	/* A term of ours long ago left reservations its proxies have dropped
	 * since (they drop theirs at every leader change): end them, late. */
	mst_resv_drop_all(h->m);
	mst_rebuild_lead(h->m, lc_now_ms());
	mst_ha_gate_lead(h->g, h->view, fence_of(h, t0, granted));
	LC_INFO("ha", "leading %s in view %llu (lease %llx, %llds, via %s)", h->key,
		(unsigned long long)h->view, (unsigned long long)id, (long long)granted,
		etcd_endpoint(h->e));
}

static void standby_tick(struct mst_ha *h)
{
	struct etcd_kv kv;
	struct etcd_leader l;
	int rc = etcd_get(h->e, h->key, &kv);

	if (rc == 0 && etcd_leader_decode(kv.value, kv.value_len, &l))
		snprintf(l.rpc, sizeof(l.rpc), "unreadable");
	if (rc == 0 && (uint64_t)kv.create_rev != LC_READ_ONCE(h->g->view))
		LC_INFO("ha", "standing by: %s leads in view %lld", l.rpc,
			(long long)kv.create_rev);
	if (rc == 0)
		mst_ha_gate_follow(h->g, l.rpc, (uint64_t)kv.create_rev);
	else if (rc == -ENOENT)
		mst_ha_gate_follow(h->g, "", 0);
	if (rc == -ENOENT && !h->deposed)
		campaign(h);
	if (h->deposed && !h->told && lc_now_ms() - h->deposed_ms >= h->ttl_ms) {
		h->told = 1;
		if (h->on_deposed)
			h->on_deposed(h->arg);
	}
}

/* While leading: whether the leader key is still the one our term
 * created, attached to our lease; when it is not (deleted, or etcd
 * restored from a backup), tell the election thread. Watch thread. */
static void key_check(struct mst_ha *h)
{
	int64_t lease = lc_load_acquire(&h->lease);
	uint64_t view = LC_READ_ONCE(h->view);
	struct etcd_kv kv;
	int rc;

	if (!lease)
		return;
	rc = etcd_get(h->watch, h->key, &kv);
	if (rc == -ENOENT || (!rc && ((uint64_t)kv.create_rev != view || kv.lease != lease))) {
		lc_store_release(&h->key_lost, view);
		pthread_mutex_lock(&h->lock); /* the election thread acts now, not at its tick */
		h->woken = 1;
		pthread_cond_broadcast(&h->cond);
		pthread_mutex_unlock(&h->lock);
	}
}

/* Keep our members key alive (registering it when its lease is gone), and
 * publish the members etcd lists in the gate. Watch thread. */
static void member_tick(struct mst_ha *h)
{
	struct etcd_leader *ms;
	char list[MST_HA_MEMBERS_MAX];
	int64_t ttl = 0, granted;
	size_t off = 0;
	int n;

	if (h->member_lease && !etcd_lease_keepalive(h->watch, h->member_lease, &ttl) && ttl <= 0)
		h->member_lease = 0; /* expired: register again */
	if (!h->member_lease &&
	    !etcd_lease_grant(h->watch, (int64_t)((h->ttl_ms + 999) / 1000), &h->member_lease,
			      &granted) &&
	    etcd_put(h->watch, h->member_key, h->value, h->member_lease)) {
		etcd_lease_revoke(h->watch, h->member_lease);
		h->member_lease = 0;
	}
	if (!(ms = calloc(MEMBERS_MAX, sizeof(*ms))))
		return;
	n = etcd_members_read(h->watch, h->cluster, ms, MEMBERS_MAX);
	list[0] = '\0';
	for (int i = 0; i < n && off < sizeof(list); i++)
		off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", i ? "," : "",
					ms[i].rpc);
	if (n >= 0 && off < sizeof(list))
		mst_ha_gate_members(h->g, list);
	free(ms);
}

static void *run(void *arg)
{
	struct mst_ha *h = arg;
	uint64_t t0, period, spent;

	do {
		t0 = lc_now_ms();
		if (h->lease)
			lead_tick(h);
		else
			standby_tick(h);
		period = h->lease ? h->tick_ms : STANDBY_POLL_MS;
		spent = lc_now_ms() - t0;
	} while (!nap(h, spent < period ? period - spent : 0, &h->woken));
	return NULL;
}

static void *watch(void *arg)
{
	struct mst_ha *h = arg;
	uint64_t t0, spent;

	do {
		t0 = lc_now_ms();
		key_check(h);
		member_tick(h);
		spent = lc_now_ms() - t0;
	} while (!nap(h, spent < h->tick_ms ? h->tick_ms - spent : 0, NULL));
	return NULL;
}

static int sync_init(struct mst_ha *h)
{
	int rc = lc_cond_init(&h->cond);

	if (rc)
		return -rc;
	if (pthread_mutex_init(&h->lock, NULL)) {
		pthread_cond_destroy(&h->cond);
		return -ENOMEM;
	}
	return 0;
}

/* Stop the election thread and, when watching, the watch thread: their
 * etcd requests in flight are abandoned. The clients can be used again
 * after. */
static void stop_threads(struct mst_ha *h, int watching)
{
	lc_store_release(&h->cancel, 1);
	pthread_mutex_lock(&h->lock);
	h->stopping = 1;
	pthread_cond_broadcast(&h->cond);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	if (watching)
		pthread_join(h->watcher, NULL);
	lc_store_release(&h->cancel, 0);
}

/* With the threads stopped: revoke our leases, so that the leader key (a
 * standby then takes over at once) and the members key go now. */
static void step_down(struct mst_ha *h)
{
	if (h->lease && etcd_lease_revoke(h->e, h->lease) == 0)
		LC_INFO("ha", "stepped down from view %llu", (unsigned long long)h->view);
	h->lease = 0;
	if (h->member_lease)
		etcd_lease_revoke(h->e, h->member_lease);
	h->member_lease = 0;
}

int mst_ha_start(struct mst_master *m, const struct mst_ha_config *c, void (*deposed)(void *arg),
		 void *arg, struct mst_ha **out)
{
	struct mst_ha *h = calloc(1, sizeof(*h));
	int rc = -ENOMEM;

	if (!h)
		return -ENOMEM;
	h->m = m;
	h->ttl_ms = c->lease_ttl_ms;
	h->tick_ms = h->ttl_ms / 5 < TICK_MIN_MS   ? TICK_MIN_MS
		     : h->ttl_ms / 5 > TICK_MAX_MS ? TICK_MAX_MS
						   : h->ttl_ms / 5;
	h->on_deposed = deposed;
	h->arg = arg;
	snprintf(h->key, sizeof(h->key), "/lunar/%s/leader", c->cluster_id);
	snprintf(h->self, sizeof(h->self), "%s", c->advertise);
	snprintf(h->cluster, sizeof(h->cluster), "%s", c->cluster_id);
	rc = -EINVAL;
	if (etcd_member_key(c->cluster_id, c->advertise, h->member_key, sizeof(h->member_key)) ||
	    etcd_leader_encode(h->self, c->advertise_http, h->value, sizeof(h->value)) < 0)
		goto err_etcd;
	if ((rc = etcd_alloc(c->etcd, (unsigned)h->tick_ms, &h->cancel, &h->e)) ||
	    (rc = etcd_alloc(c->etcd, (unsigned)h->tick_ms, &h->cancel, &h->watch)))
		goto err_etcd;
	rc = -ENOMEM;
	if (!(h->g = mst_ha_gate_alloc(c->advertise, c->cluster_id)))
		goto err_etcd;
	if ((rc = sync_init(h)))
		goto err_gate;
	m->ha = h->g;
	if ((rc = -pthread_create(&h->thread, NULL, run, h)))
		goto err_sync;
	if ((rc = -pthread_create(&h->watcher, NULL, watch, h))) {
		stop_threads(h, 0);
		step_down(h); /* the election thread may have campaigned already */
		goto err_sync;
	}
	h->running = 1;
	*out = h;
	return 0;
err_sync:
	m->ha = NULL;
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->cond);
err_gate:
	mst_ha_gate_free(h->g);
err_etcd:
	etcd_free(h->watch);
	etcd_free(h->e);
	free(h);
	return rc;
}

void mst_ha_stop(struct mst_ha *h)
{
	if (!h || !h->running)
		return;
	mst_ha_gate_follow(h->g, "", 0);
	stop_threads(h, 1);
	h->running = 0;
	step_down(h);
}

void mst_ha_free(struct mst_ha *h)
{
	if (!h)
		return;
	mst_ha_stop(h);
	h->m->ha = NULL;
	mst_ha_gate_free(h->g);
	pthread_mutex_destroy(&h->lock);
	pthread_cond_destroy(&h->cond);
	etcd_free(h->watch);
	etcd_free(h->e);
	free(h);
}
