/*
 * mst_ha.h - master internals of high availability (SPEC §14): the gate
 * every call passes in mst_dispatch, and the view every reply carries. The
 * election (ha.c) sets the gate; dispatch, metrics and /admin/ha read it.
 * A master without --etcd has no gate (m->ha is NULL): it admits every call
 * and its view is 0.
 */
#ifndef LUNAR_MASTER_MST_HA_H
#define LUNAR_MASTER_MST_HA_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include <protobuf-c/protobuf-c.h>

struct mst_master;
struct lc_http_reply;

enum mst_role { MST_ROLE_STANDBY, MST_ROLE_LEADER };

#define MST_HA_ADDR_MAX	   256	/* bytes of an advertised address */
#define MST_HA_MEMBERS_MAX 2048 /* bytes of the members list */

/*
 * Fields marked atomic are written by the election thread and read by any
 * thread without a lock: role and view are published with release after
 * fence_ms (and read with acquire), so a reader that sees LEADER sees that
 * term's view and a deadline set for it. fence_ms is CLOCK_MONOTONIC
 * milliseconds: the leader admits a call only before it, and the election
 * only ever sets it to a time before the lease can have expired in etcd.
 */
struct mst_ha_gate {
	int role;	      /* atomic: enum mst_role */
	uint64_t view;	      /* atomic: create revision of the leader key; 0 unknown */
	uint64_t fence_ms;    /* atomic: leader admits calls while now < fence_ms */
	uint64_t failovers;   /* atomic: times the leader key changed hands, seen here */
	uint64_t refused;     /* atomic: calls refused by the gate */
	pthread_mutex_t lock; /* guards leader[] and members[] */
	char members[MST_HA_MEMBERS_MAX]; /* registered masters, comma-separated; "" unknown */
	char leader[MST_HA_ADDR_MAX];	  /* the leader's address as its key says; "" unknown */
	char self[MST_HA_ADDR_MAX];	  /* --advertise; set before serving, then read-only */
	char cluster[MST_HA_ADDR_MAX];	  /* --cluster-id; same */
};

/* mst_ha_gate_alloc - a gate for a standby that knows no leader; NULL on
 * ENOMEM. Owned by the election (ha.c), freed with mst_ha_gate_free once no
 * call can be running. */
struct mst_ha_gate *mst_ha_gate_alloc(const char *self, const char *cluster);
/* mst_ha_gate_free - NULL is a no-op. */
void mst_ha_gate_free(struct mst_ha_gate *g);

/*
 * mst_ha_admit - whether m may run method now: 0, or
 * LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS when m is a standby, or a leader
 * past its fence deadline, and method is not one of the admin queries that
 * describe m's own state (ListKeys, ListSegments, ListClients, StatKey).
 * On 0, *view: the view the call runs in, for its reply. A leader's own,
 * read on both sides of the role and deadline (a view that changed between
 * is refused): never one from before its lead, and a call answered after
 * m learned of a newer leader carries its older view, stale to the
 * proxies that follow the new one. Any thread; lock-free.
 */
int mst_ha_admit(struct mst_master *m, uint32_t method, uint64_t *view);
/*
 * mst_ha_may_commit - checked again at the commit of each put or upsert
 * (its End, each key of a batch), so that a call admitted just before the
 * master froze does not commit after it woke past its fence: 0 (no HA, or
 * leading before the fence), else LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS.
 * *d (when not NULL): the wall-clock time of the check, in ms since the
 * epoch, and the view it let the commit in. Lock-free.
 * mst_ha_committed - the debug log line of a commit, with that view and
 * time ("ha: committed put T/K in view V decided W"): a master stopped
 * between the check and the commit logs the line late (when it may know
 * of a newer leader), but its decision is what the fence bounds. When HA
 * is on and LUNAR_LOG=debug. Any thread.
 */
struct mst_ha_decision {
	uint64_t ms, view;
};
int mst_ha_may_commit(struct mst_master *m, struct mst_ha_decision *d);
void mst_ha_committed(struct mst_master *m, const char *what, const char *tenant, const char *key,
		      const struct mst_ha_decision *d);
/* mst_ha_refuse - *rep: a reply of descriptor d with that code and a message
 * naming the leader when it is known. 0, or -ENOMEM. Any thread. */
int mst_ha_refuse(struct mst_master *m, const ProtobufCMessageDescriptor *d,
		  ProtobufCMessage **rep);
/* mst_view - the view a refusal carries: the leader key's create revision
 * (ours while we lead, the leader's we know of as a standby), 0 without
 * HA. A served call's reply carries mst_ha_admit's. */
uint64_t mst_view(struct mst_master *m);

/* For the election thread only. mst_ha_gate_lead - lead in view until
 * fence_ms. mst_ha_gate_renew - push the deadline to fence_ms (never back).
 * mst_ha_gate_follow - stand by (the gate closes first); leader "" and view
 * 0 when no leader is known. */
void mst_ha_gate_lead(struct mst_ha_gate *g, uint64_t view, uint64_t fence_ms);
void mst_ha_gate_renew(struct mst_ha_gate *g, uint64_t fence_ms);
void mst_ha_gate_follow(struct mst_ha_gate *g, const char *leader, uint64_t view);
/* mst_ha_gate_members - the masters registered in etcd: RPC addresses,
 * comma-separated (each made printable as the leader's is). The watch
 * thread's (ha.c); takes g->lock. */
void mst_ha_gate_members(struct mst_ha_gate *g, const char *list);

/* mst_ha_metrics - lunar_master_is_leader, _view, _failovers_total and
 * _ha_refused_total into f (nothing without HA). Any thread. */
void mst_ha_metrics(struct mst_master *m, FILE *f);
/* mst_rebuild_metrics - the HA rebuild figures (rebuild.c) into f: objects
 * reported and rebuilt, proxies done, seconds the rebuild took so far. */
void mst_rebuild_metrics(struct mst_master *m, FILE *f);
/* mst_ha_http - GET /admin/ha: {"ha": bool, "role", "leader", "self",
 * "view", "fenced", "cluster_id", "failovers", "members": [..], "standbys":
 * [..]} as JSON in rep (the standbys: the members but the leader). 0, or -1
 * on ENOMEM. */
int mst_ha_http(struct mst_master *m, struct lc_http_reply *rep);

#endif /* LUNAR_MASTER_MST_HA_H */
