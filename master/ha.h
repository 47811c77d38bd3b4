/*
 * ha.h - lunar-master's leader election through etcd (SPEC §14): flags, and
 * two threads, each with an etcd client (a connection) of its own: one
 * campaigns for /lunar/<cluster-id>/leader, keeps its lease alive while
 * leading and fences the master (mst_ha.h) before the lease can have
 * expired; the other checks the leader key is still ours and keeps this
 * master's members key. Used by lunar-master only (it links libcurl).
 */
#ifndef LUNAR_MASTER_HA_H
#define LUNAR_MASTER_HA_H

#include <stddef.h>
#include <stdint.h>

struct mst_master;
struct mst_ha;

struct mst_ha_config {
	const char *etcd;	    /* --etcd http://h1:2379,http://h2:2379; NULL: no HA */
	const char *cluster_id;	    /* --cluster-id lunar */
	const char *advertise;	    /* --advertise tcp://HOST:PORT, what proxies dial */
	const char *advertise_http; /* --advertise-http http://HOST:PORT, lunarctl's */
	uint64_t lease_ttl_ms;	    /* --etcd-lease-ttl 5s */
};

/* mst_ha_config_defaults - no HA, cluster "lunar", a 5 s lease. */
void mst_ha_config_defaults(struct mst_ha_config *c);
/* mst_ha_flag_has - 1 if name (without dashes) is one of the HA flags. */
int mst_ha_flag_has(const char *name);
/* mst_ha_config_set - apply one HA flag; value is kept by pointer (it must
 * outlive c). 0, -ENOENT (not an HA flag) or -EINVAL. */
int mst_ha_config_set(struct mst_ha_config *c, const char *name, const char *value);
/* mst_ha_config_check - 0 when the flags make sense together (--etcd needs
 * --advertise tcp://HOST:PORT); else -EINVAL with the reason in why. */
int mst_ha_config_check(const struct mst_ha_config *c, char *why, size_t n);
/* mst_ha_usage - the help lines of the HA flags. */
const char *mst_ha_usage(void);

/*
 * mst_ha_start - install the HA gate in m (a standby that knows no leader:
 * it refuses calls) and start its threads. Call before m serves
 * anything. deposed(arg) is called once, on the election thread, some time
 * after this master lost a term it led (its metadata is then stale: the
 * caller should restart the process, which campaigns afresh). Returns 0 and
 * *out, -EINVAL (bad --etcd list), -ENOMEM or -errno of pthread_create.
 */
int mst_ha_start(struct mst_master *m, const struct mst_ha_config *c, void (*deposed)(void *arg),
		 void *arg, struct mst_ha **out);
/*
 * mst_ha_stop - step down: close the gate (every call is refused from now
 * on), stop the threads, revoke the members key's lease and, when leading,
 * the leader's lease, so that a standby takes over at once. Blocks for at most about two etcd
 * request timeouts. The gate stays installed. NULL is a no-op.
 */
void mst_ha_stop(struct mst_ha *h);
/* mst_ha_free - after mst_ha_stop, once no call can reach m's dispatch any
 * more: remove the gate from m and free everything. NULL is a no-op. */
void mst_ha_free(struct mst_ha *h);

#endif /* LUNAR_MASTER_HA_H */
