/*
 * rpc_follow.c - the leader-following client of rpc_follow.h. One target at
 * a time (a master and the rpc_client dialling it), reference counted so a
 * switch never frees a client under a call. A watcher thread reads the
 * leader key every POLL_MS, every FAST_MS while something looks wrong (a
 * dropped connection, a failed or refused call, no leader), and switches
 * when etcd names a newer view or another address for ours.
 */
#include "rpc_follow.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "atomic.h"
#include "clock.h"
#include "etcd/leader.h"
#include "log.h"
#include "lunar.h"
#include "rpc_client.h"

#define POLL_MS	    500 /* etcd read period while all is well */
#define FAST_MS	    100 /* ... and for SUSPECT_MS after trouble */
#define SUSPECT_MS  10000
#define RETRY_MS    50	 /* pause before a refused call goes again */
#define ETCD_TMO_MS 1000 /* one etcd request */
#define HINT	    "standby: the leader is "

struct target {
	struct lp_client *c;
	char url[ETCD_ADDR_MAX];
	unsigned refs; /* under f->lock */
};

struct lp_follow {
	struct auth_key key;
	int keyed;
	uint32_t role;
	void (*on_switch)(void *arg);
	void *arg;
	pthread_mutex_t lock; /* cur, suspect_ms, kicked, closed; cond */
	pthread_cond_t cond;  /* a target came, or a kick */
	struct target *cur;
	uint64_t suspect_ms; /* poll fast until then */
	int kicked, closed;
	uint64_t view;	   /* atomic: newest seen */
	uint64_t switches; /* atomic */
	uint64_t warned_ms;
	struct etcd_client *e; /* the watcher's; NULL without etcd:// */
	char cluster[ETCD_CLUSTER_MAX];
	int cancel; /* atomic: aborts etcd requests at close */
	pthread_t watcher;
	int watching;
};

static void view_raise(struct lp_follow *f, uint64_t v)
{
	uint64_t cur = LC_READ_ONCE(f->view);

	while (v > cur && !lc_cas(&f->view, &cur, v))
		;
}

static void target_put(struct lp_follow *f, struct target *t)
{
	unsigned left;

	pthread_mutex_lock(&f->lock);
	left = --t->refs;
	pthread_mutex_unlock(&f->lock);
	if (!left) {
		lp_client_destroy(t->c);
		free(t);
	}
}

/* Something looks wrong: the watcher reads etcd now and often for a while. */
static void kick(void *arg)
{
	struct lp_follow *f = arg;

	pthread_mutex_lock(&f->lock);
	f->kicked = 1;
	f->suspect_ms = lc_now_ms() + SUSPECT_MS;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

/* Dial url and make it the target (a no-op when it already is). */
static int switch_to(struct lp_follow *f, const char *url, uint64_t view)
{
	struct target *t = calloc(1, sizeof(*t)), *old;
	int rc;

	if (!t)
		return LUNAR_ERR_INTERNAL;
	snprintf(t->url, sizeof(t->url), "%s", url);
	pthread_mutex_lock(&f->lock);
	old = f->cur;
	if ((old && !strcmp(old->url, t->url)) || f->closed) {
		pthread_mutex_unlock(&f->lock);
		free(t);
		return 0;
	}
	pthread_mutex_unlock(&f->lock);
	rc = lp_client_create(t->url, f->keyed ? &f->key : NULL, f->role, 0, &t->c);
	if (rc) {
		free(t);
		return rc;
	}
	lp_client_on_drop(t->c, kick, f);
	t->refs = 1;
	pthread_mutex_lock(&f->lock);
	if (f->closed) {
		pthread_mutex_unlock(&f->lock);
		lp_client_destroy(t->c);
		free(t);
		return 0;
	}
	old = f->cur;
	f->cur = t;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	view_raise(f, view);
	lc_fetch_add_relaxed(&f->switches, 1);
	LC_INFO("rpc", "following the master at %s (view %llu)%s", t->url, (unsigned long long)view,
		old ? "" : ": first contact");
	if (old) {
		lp_client_close(old->c); /* calls waiting on it fail now */
		target_put(f, old);
		if (f->on_switch)
			f->on_switch(f->arg);
	}
	return 0;
}

/* One read of the leader key; follow it when it names a newer view or
 * another address in ours. 0, or etcd's code. */
static int watch_once(struct lp_follow *f)
{
	struct etcd_leader l;
	int rc = etcd_leader_read(f->e, f->cluster, &l), same;

	if (rc)
		return rc;
	if (!l.rpc[0] || l.view < LC_READ_ONCE(f->view))
		return -ENOENT;
	pthread_mutex_lock(&f->lock);
	same = f->cur && !strcmp(f->cur->url, l.rpc);
	pthread_mutex_unlock(&f->lock);
	view_raise(f, l.view);
	return same ? 0 : switch_to(f, l.rpc, l.view) ? -EIO : 0;
}

static void *watch_main(void *arg)
{
	struct lp_follow *f = arg;
	struct timespec ts;
	uint64_t ms;
	int rc;

	for (;;) {
		rc = watch_once(f);
		pthread_mutex_lock(&f->lock);
		if (rc)
			f->suspect_ms = lc_now_ms() + SUSPECT_MS; /* no leader: look often */
		ms = lc_now_ms() < f->suspect_ms ? FAST_MS : POLL_MS;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)ms * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		while (!f->closed && !f->kicked)
			if (pthread_cond_timedwait(&f->cond, &f->lock, &ts))
				break;
		rc = f->kicked;
		f->kicked = 0;
		if (f->closed) {
			pthread_mutex_unlock(&f->lock);
			return NULL;
		}
		pthread_mutex_unlock(&f->lock);
		if (rc) /* kicks come with every failed call: a floor under the rate */
			nanosleep(&(struct timespec){.tv_nsec = 20 * 1000000L}, NULL);
	}
}

/* The current target, referenced; waits for one until deadline. NULL when
 * there is none by then, or after close. */
static struct target *target_get(struct lp_follow *f, uint64_t deadline)
{
	struct target *t;
	struct timespec ts;
	uint64_t now;

	pthread_mutex_lock(&f->lock);
	while (!(t = f->cur) && !f->closed && (now = lc_now_ms()) < deadline) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)(deadline - now < 100 ? deadline - now : 100) * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&f->cond, &f->lock, &ts);
	}
	if (t && f->closed)
		t = NULL;
	if (t)
		t->refs++;
	pthread_mutex_unlock(&f->lock);
	return t;
}

/* A stale reply is logged at most every 10 s. */
static void warn_stale(struct lp_follow *f, const char *url, uint64_t got)
{
	uint64_t now = lc_now_ms();

	if (now - LC_READ_ONCE(f->warned_ms) < 10000)
		return;
	LC_WRITE_ONCE(f->warned_ms, now);
	LC_WARN("rpc", "dropped a reply of %s from view %llu: view %llu is newer", url,
		(unsigned long long)got, (unsigned long long)LC_READ_ONCE(f->view));
}

/* After a refusal from t: follow the leader it names, else ask etcd. */
static void follow_hint(struct lp_follow *f, const struct target *t, const Lunar__Status *st)
{
	const char *m = st->message;
	char url[ETCD_ADDR_MAX];

	kick(f);
	if (!m || strncmp(m, HINT, strlen(HINT)) || strncmp(m + strlen(HINT), "tcp://", 6))
		return;
	snprintf(url, sizeof(url), "%.*s", (int)strcspn(m + strlen(HINT), " "), m + strlen(HINT));
	if (strcmp(url, t->url))
		switch_to(f, url, st->view);
}

/* One call on t; 1 when it was refused (it did not run) and may go again.
 * *rep is set only on 0: a reply dropped here never reaches the caller. */
static int call_once(struct lp_follow *f, struct target *t, const struct lp_method *mt,
		     const ProtobufCMessage *req, ProtobufCMessage **rep, uint64_t deadline)
{
	uint64_t now = lc_now_ms();
	const Lunar__Status *st;
	ProtobufCMessage *r;
	int rc = lp_client_call(t->c, mt, req, &r, deadline > now ? deadline - now : 0);

	if (rc) {
		if (f->e)
			kick(f);
		return rc;
	}
	st = lp_status(r);
	if (st->view && st->view < LC_READ_ONCE(f->view)) {
		warn_stale(f, t->url, st->view);
		protobuf_c_message_free_unpacked(r, NULL);
		kick(f);
		return LUNAR_ERR_RPC_FAIL;
	}
	view_raise(f, st->view);
	if (st->code == LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS && f->e) {
		follow_hint(f, t, st);
		if (lc_now_ms() + RETRY_MS < deadline) {
			protobuf_c_message_free_unpacked(r, NULL);
			return 1;
		}
		/* no time for another try: the refusal is the answer */
	}
	*rep = r;
	return 0;
}

int lp_follow_call(struct lp_follow *f, const struct lp_method *mt, const ProtobufCMessage *req,
		   ProtobufCMessage **rep, uint64_t timeout_ms)
{
	uint64_t deadline = lc_now_ms() + timeout_ms;
	struct target *t;
	int rc;

	for (;;) {
		if (!(t = target_get(f, deadline)))
			return f->closed ? LUNAR_ERR_RPC_FAIL : LUNAR_ERR_RPC_TIMEOUT;
		rc = call_once(f, t, mt, req, rep, deadline);
		target_put(f, t);
		if (rc != 1)
			return rc;
		nanosleep(&(struct timespec){.tv_nsec = RETRY_MS * 1000000L}, NULL);
	}
}

uint64_t lp_follow_view(const struct lp_follow *f)
{
	return LC_READ_ONCE(f->view);
}

uint64_t lp_follow_switches(const struct lp_follow *f)
{
	return LC_READ_ONCE(f->switches);
}

/* etcd://: the etcd client, a first look at the leader (a tool waits for
 * it), and the watcher. */
static int follow_etcd(struct lp_follow *f, const char *urls, unsigned flags)
{
	int rc;

	if (etcd_alloc(urls, ETCD_TMO_MS, &f->cancel, &f->e))
		return LUNAR_ERR_INVALID_PARAMS;
	rc = watch_once(f);
	if (rc && (flags & LP_CLIENT_DIAL_NOW)) {
		LC_ERROR("rpc", "no leader of cluster %s in etcd (%s)", f->cluster,
			 rc == -ENOENT ? "no leader key" : "etcd unreachable");
		return LUNAR_ERR_INVALID_PARAMS;
	}
	if (pthread_create(&f->watcher, NULL, watch_main, f))
		return LUNAR_ERR_INTERNAL;
	f->watching = 1;
	return 0;
}

static int follow_init(struct lp_follow *f)
{
	if (lc_cond_init(&f->cond))
		return -1;
	pthread_mutex_init(&f->lock, NULL);
	return 0;
}

/* tcp:// or ipc://: one target, for good. */
static int follow_plain(struct lp_follow *f, const char *url, unsigned flags)
{
	struct target *t = calloc(1, sizeof(*t));
	int rc;

	if (!t)
		return LUNAR_ERR_INTERNAL;
	snprintf(t->url, sizeof(t->url), "%s", url);
	rc = lp_client_create(url, f->keyed ? &f->key : NULL, f->role, flags, &t->c);
	if (rc) {
		free(t);
		return rc;
	}
	t->refs = 1;
	f->cur = t;
	return 0;
}

int lp_follow_create(const char *master, const struct auth_key *key, uint32_t role, unsigned flags,
		     void (*on_switch)(void *arg), void *arg, struct lp_follow **out)
{
	struct lp_follow *f = calloc(1, sizeof(*f));
	char urls[2048];
	int rc, ha;

	if (!f || follow_init(f)) {
		free(f);
		return LUNAR_ERR_INTERNAL;
	}
	f->keyed = key != NULL;
	if (key)
		f->key = *key;
	f->role = role;
	f->on_switch = on_switch;
	f->arg = arg;
	ha = etcd_master_url_parse(master, urls, sizeof(urls), f->cluster);
	if (ha < 0)
		LC_ERROR("rpc", "bad master address %s (etcd://HOST:PORT,.../CLUSTER)", master);
	rc = ha < 0 ? LUNAR_ERR_INVALID_PARAMS
	     : ha   ? follow_etcd(f, urls, flags)
		    : follow_plain(f, master, flags);
	if (rc) {
		lp_follow_destroy(f);
		return rc;
	}
	*out = f;
	return 0;
}

void lp_follow_close(struct lp_follow *f)
{
	struct target *t;

	if (!f)
		return;
	lc_store_release(&f->cancel, 1);
	pthread_mutex_lock(&f->lock);
	f->closed = 1;
	if ((t = f->cur))
		t->refs++;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	if (t) {
		lp_client_close(t->c);
		target_put(f, t);
	}
}

void lp_follow_destroy(struct lp_follow *f)
{
	if (!f)
		return;
	lp_follow_close(f);
	if (f->watching)
		pthread_join(f->watcher, NULL);
	if (f->cur)
		target_put(f, f->cur);
	etcd_free(f->e);
	auth_key_wipe(&f->key);
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
	free(f);
}
