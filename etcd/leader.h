/*
 * leader.h - the leader key of a Lunar cluster in etcd (SPEC §14):
 * /lunar/<cluster>/leader holds {"rpc":"tcp://h:p","http":"http://h:p"}
 * (a phase-1 master wrote the bare RPC address; both read back), and its
 * create revision is the view. Also the etcd://h1:2379,h2:2379/C form of
 * --master that proxies, lunarctl and lunar-bench accept, and the members
 * keys masters register under.
 */
#ifndef LUNAR_ETCD_LEADER_H
#define LUNAR_ETCD_LEADER_H

#include <stddef.h>
#include <stdint.h>

#include "etcd/etcd.h"

#define ETCD_ADDR_MAX	 256 /* bytes of one address in the leader key */
#define ETCD_CLUSTER_MAX 128 /* bytes of a cluster id */

/* The leader as its key says: addresses NUL terminated ("" when absent). */
struct etcd_leader {
	char rpc[ETCD_ADDR_MAX];
	char http[ETCD_ADDR_MAX];
	uint64_t view; /* the key's create revision; 0: no leader */
};

/*
 * etcd_master_url_parse - split --master etcd://h1:2379,h2:2379/C into the
 * client's URL list "http://h1:2379,http://h2:2379" (urls, n bytes) and the
 * cluster id C (cluster, ETCD_CLUSTER_MAX bytes). 1 when s is an etcd://
 * address and parsed, 0 when s is not one (a plain tcp:// or ipc:// master),
 * -EINVAL when it is malformed (no hosts, no or a bad cluster id, too long).
 * Pure.
 */
int etcd_master_url_parse(const char *s, char *urls, size_t n, char *cluster);
/* etcd_leader_key - "/lunar/<cluster>/leader" into buf (n bytes); 0 or -ENOSPC. */
int etcd_leader_key(const char *cluster, char *buf, size_t n);
/* etcd_leader_encode - the value a leader writes: JSON of rpc and http (http
 * may be NULL or ""). The length written, or -ENOSPC / -EINVAL (an address
 * with a quote, a backslash or a control byte). Pure. */
int etcd_leader_encode(const char *rpc, const char *http, char *buf, size_t n);
/* etcd_leader_decode - the addresses of a leader key's value (len bytes,
 * untrusted): the JSON above, or a bare address (the RPC one). 0, or -EPROTO
 * (malformed, an address too long or not printable ASCII). Pure. */
int etcd_leader_decode(const char *value, size_t len, struct etcd_leader *out);
/*
 * etcd_leader_read - the leader of cluster, read through e (linearizable):
 * 0 and *out, -ENOENT (no leader now), or etcd_get's codes. Blocks for up to
 * e's timeout per endpoint; e's thread rules.
 */
int etcd_leader_read(struct etcd_client *e, const char *cluster, struct etcd_leader *out);

/*
 * Members: every master with --etcd registers /lunar/<cluster>/members/<rpc>
 * under a lease of its own, holding the same JSON as the leader key, so that
 * tools can list the standbys. etcd_member_key - that key for the RPC
 * address rpc into buf (n bytes): 0, -EINVAL (rpc not printable ASCII, or
 * with a quote or a backslash) or -ENOSPC. Pure.
 */
int etcd_member_key(const char *cluster, const char *rpc, char *buf, size_t n);
/* etcd_members_read - the masters registered for cluster (at most max, in
 * key order; values that do not parse are skipped; view 0) into out: their
 * number, or etcd_list's codes, -EINVAL, -ENOMEM. e's thread rules. */
int etcd_members_read(struct etcd_client *e, const char *cluster, struct etcd_leader *out,
		      size_t max);

#endif /* LUNAR_ETCD_LEADER_H */
