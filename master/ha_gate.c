/*
 * ha_gate.c - the HA gate of mst_ha.h: which calls a master admits as leader
 * or standby, the refusal that names the leader, the view replies carry, and
 * the HA figures for /metrics and /admin/ha. No etcd here: the election in
 * ha.c drives the gate, so the master library needs no libcurl.
 */
#include "mst_ha.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "http.h"
#include "log.h"
#include "lunar.h"
#include "mst_int.h"
#include "rpc.h"

/* Copy an address (or a list of them) for messages and JSON: printable
 * ASCII except quotes and backslashes (it came from etcd, which anyone with
 * access may write), at most cap - 1 bytes. */
static void copy_text(char *dst, const char *src, size_t cap)
{
	size_t i = 0;

	for (; src && src[i] && i < cap - 1; i++)
		dst[i] = src[i] > 0x20 && src[i] < 0x7f && src[i] != '"' && src[i] != '\\' ? src[i]
											   : '?';
	dst[i] = '\0';
}

static void copy_addr(char *dst, const char *src)
{
	copy_text(dst, src, MST_HA_ADDR_MAX);
}

struct mst_ha_gate *mst_ha_gate_alloc(const char *self, const char *cluster)
{
	struct mst_ha_gate *g = calloc(1, sizeof(*g));

	if (!g)
		return NULL;
	if (pthread_mutex_init(&g->lock, NULL)) {
		free(g);
		return NULL;
	}
	g->role = MST_ROLE_STANDBY;
	copy_addr(g->self, self);
	copy_addr(g->cluster, cluster);
	return g;
}

void mst_ha_gate_free(struct mst_ha_gate *g)
{
	if (!g)
		return;
	pthread_mutex_destroy(&g->lock);
	free(g);
}

/* Admin queries describe this master's own state; any master answers them. */
static int local_query(uint32_t method)
{
	return method == LUNAR__METHOD__LIST_KEYS || method == LUNAR__METHOD__LIST_SEGMENTS ||
	       method == LUNAR__METHOD__LIST_CLIENTS || method == LUNAR__METHOD__STAT_KEY;
}

int mst_ha_admit(struct mst_master *m, uint32_t method, uint64_t *view)
{
	struct mst_ha_gate *g = m->ha;
	uint64_t v;
	int open;

	*view = mst_view(m);
	if (!g || local_query(method))
		return 0;
	/* Pairs with the release stores of mst_ha_gate_lead (deadline and
	 * view, then role) and mst_ha_gate_follow (deadline and role, then
	 * view): a LEADER seen here comes with its term's deadline, and the
	 * same view on both sides is that term's. */
	v = *view;
	open = lc_load_acquire(&g->role) == MST_ROLE_LEADER &&
	       lc_now_ms() < lc_load_acquire(&g->fence_ms) && mst_view(m) == v;
	if (open)
		return 0;
	lc_fetch_add_relaxed(&g->refused, 1);
	return LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
}

int mst_ha_may_commit(struct mst_master *m, struct mst_ha_decision *d)
{
	struct mst_ha_gate *g = m->ha;

	if (d) /* the view first: a leader's, or older than the role read */
		*d = (struct mst_ha_decision){.view = mst_view(m), .ms = g ? lc_wall_ms() : 0};
	if (!g)
		return 0;
	return lc_load_acquire(&g->role) == MST_ROLE_LEADER &&
		       lc_now_ms() < lc_load_acquire(&g->fence_ms)
		   ? 0
		   : LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
}

void mst_ha_committed(struct mst_master *m, const char *what, const char *tenant, const char *key,
		      const struct mst_ha_decision *d)
{
	if (m->ha) /* the key cut short: a debug line, not a record */
		LC_DEBUG("ha", "committed %s %.64s/%.128s in view %llu decided %llu", what, tenant,
			 key, (unsigned long long)d->view, (unsigned long long)d->ms);
}

int mst_ha_refuse(struct mst_master *m, const ProtobufCMessageDescriptor *d, ProtobufCMessage **rep)
{
	struct mst_ha_gate *g = m->ha;
	char leader[MST_HA_ADDR_MAX], *msg;
	Lunar__Status *st;
	int lead = lc_load_acquire(&g->role) == MST_ROLE_LEADER;

	*rep = lp_reply_new(d, LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS, mst_view(m));
	if (!*rep)
		return -ENOMEM;
	pthread_mutex_lock(&g->lock);
	memcpy(leader, g->leader, sizeof(leader));
	pthread_mutex_unlock(&g->lock);
	if (lead)
		msg = strdup("fenced: this leader could not renew its etcd lease in time");
	else if (asprintf(&msg, "standby: the leader is %s", leader[0] ? leader : "unknown") < 0)
		msg = NULL;
	st = lp_status(*rep);
	if (msg && st) { /* without it the reply keeps lunar_strerror's words */
		free(st->message);
		st->message = msg;
	} else {
		free(msg);
	}
	return 0;
}

uint64_t mst_view(struct mst_master *m)
{
	return m->ha ? lc_load_acquire(&m->ha->view) : 0;
}

void mst_ha_gate_lead(struct mst_ha_gate *g, uint64_t view, uint64_t fence_ms)
{
	uint64_t old = LC_READ_ONCE(g->view);

	if (old && old != view)
		lc_fetch_add_relaxed(&g->failovers, 1);
	pthread_mutex_lock(&g->lock);
	memcpy(g->leader, g->self, sizeof(g->leader));
	pthread_mutex_unlock(&g->lock);
	/* Deadline and view before the role: pairs with the acquires of
	 * mst_ha_admit, mst_ha_may_commit and mst_view. */
	lc_store_release(&g->fence_ms, fence_ms);
	lc_store_release(&g->view, view);
	lc_store_release(&g->role, MST_ROLE_LEADER);
}

void mst_ha_gate_renew(struct mst_ha_gate *g, uint64_t fence_ms)
{
	if (fence_ms > LC_READ_ONCE(g->fence_ms)) /* pairs as in mst_ha_gate_lead */
		lc_store_release(&g->fence_ms, fence_ms);
}

void mst_ha_gate_follow(struct mst_ha_gate *g, const char *leader, uint64_t view)
{
	uint64_t old = LC_READ_ONCE(g->view);

	/* Close first: no call may pass on the old term's deadline. */
	lc_store_release(&g->fence_ms, 0);
	lc_store_release(&g->role, MST_ROLE_STANDBY);
	if (old && view && old != view)
		lc_fetch_add_relaxed(&g->failovers, 1);
	if (view)
		lc_store_release(&g->view, view);
	pthread_mutex_lock(&g->lock);
	copy_addr(g->leader, leader);
	pthread_mutex_unlock(&g->lock);
}

void mst_ha_gate_members(struct mst_ha_gate *g, const char *list)
{
	pthread_mutex_lock(&g->lock);
	copy_text(g->members, list, sizeof(g->members));
	pthread_mutex_unlock(&g->lock);
}

/* The comma-separated list as a JSON array of strings into out (cap bytes),
 * leaving out skip (NULL: none). The list went through copy_text. */
static void json_list(char *out, size_t cap, const char *list, const char *skip)
{
	size_t off = 1, n;
	const char *p = list, *c;

	out[0] = '[';
	while (*p && off + 4 < cap) {
		c = strchr(p, ',');
		n = c ? (size_t)(c - p) : strlen(p);
		if (n && !(skip && strlen(skip) == n && !strncmp(p, skip, n)) && off + n + 4 < cap)
			off += (size_t)snprintf(out + off, cap - off, "%s\"%.*s\"",
						off > 1 ? "," : "", (int)n, p);
		p += n + (c != NULL);
	}
	snprintf(out + off, cap - off, "]");
}

/* Leading and not fenced. */
static int leading(const struct mst_ha_gate *g)
{
	return lc_load_acquire(&g->role) == MST_ROLE_LEADER &&
	       lc_now_ms() < lc_load_acquire(&g->fence_ms);
}

void mst_ha_metrics(struct mst_master *m, FILE *f)
{
	struct mst_ha_gate *g = m->ha;

	if (!g)
		return;
	fprintf(f, "# TYPE lunar_master_is_leader gauge\nlunar_master_is_leader %d\n", leading(g));
	fprintf(f, "# TYPE lunar_master_view gauge\nlunar_master_view %llu\n",
		(unsigned long long)mst_view(m));
	fprintf(f,
		"# TYPE lunar_master_failovers_total counter\nlunar_master_failovers_total %llu\n",
		(unsigned long long)LC_READ_ONCE(g->failovers));
	fprintf(f,
		"# TYPE lunar_master_ha_refused_total counter\n"
		"lunar_master_ha_refused_total %llu\n",
		(unsigned long long)LC_READ_ONCE(g->refused));
	mst_rebuild_metrics(m, f);
}

int mst_ha_http(struct mst_master *m, struct lc_http_reply *rep)
{
	struct mst_ha_gate *g = m->ha;
	char leader[MST_HA_ADDR_MAX], *members, *all, *standbys;
	int role, fenced, rc = -1;

	rep->content_type = "application/json";
	if (!g)
		return lc_http_reply_printf(rep, "{\"ha\":false,\"role\":\"leader\",\"view\":0}\n");
	role = lc_load_acquire(&g->role);
	fenced = role == MST_ROLE_LEADER && !leading(g);
	members = malloc(MST_HA_MEMBERS_MAX);
	all = malloc(2 * MST_HA_MEMBERS_MAX);
	standbys = malloc(2 * MST_HA_MEMBERS_MAX);
	if (!members || !all || !standbys)
		goto out;
	pthread_mutex_lock(&g->lock);
	memcpy(leader, g->leader, sizeof(leader));
	memcpy(members, g->members, MST_HA_MEMBERS_MAX);
	pthread_mutex_unlock(&g->lock);
	json_list(all, 2 * MST_HA_MEMBERS_MAX, members, NULL);
	json_list(standbys, 2 * MST_HA_MEMBERS_MAX, members, leader);
	/* Addresses went through copy_addr: nothing in them needs escaping. */
	rc = lc_http_reply_printf(
	    rep,
	    "{\"ha\":true,\"cluster_id\":\"%s\",\"role\":\"%s\",\"fenced\":%s,\"self\":\"%s\","
	    "\"leader\":\"%s\",\"view\":%llu,\"failovers\":%llu,\"members\":%s,\"standbys\":%s}\n",
	    g->cluster, role == MST_ROLE_LEADER ? "leader" : "standby", fenced ? "true" : "false",
	    g->self, leader, (unsigned long long)mst_view(m),
	    (unsigned long long)LC_READ_ONCE(g->failovers), all, standbys);
out:
	free(members);
	free(all);
	free(standbys);
	return rc ? -1 : 0;
}
