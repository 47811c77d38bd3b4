/*
 * ctl.h - what lunarctl's files share: the parsed command line, the exit
 * codes of SPEC §11, and the admin verbs that ask a master's HTTP endpoints
 * (tools/ctl/admin.c) rather than the proxy's socket (tools/lunarctl.c).
 */
#ifndef LUNAR_TOOLS_CTL_CTL_H
#define LUNAR_TOOLS_CTL_CTL_H

#include <limits.h>

#include "lunar.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_NOCONN = 3 };

#define CTL_MAX_ARGS	     2
#define CTL_MASTER_HTTP_PORT 9003 /* lunar-master --http-port default */
#define CTL_PROXY_HTTP_PORT  9300 /* lunar-proxy --http-port default */
#define CTL_PROXY_HTTP	     "127.0.0.1:9300"
#define CTL_TIMEOUT_MS	     30000 /* without --timeout-ms or $LUNAR_TIMEOUT_MS */

struct ctl {
	struct lunar_opts opts;
	int json;
	int force;
	unsigned replicas;
	const char *verb; /* "segment list" style verbs: the whole phrase */
	const char *args[CTL_MAX_ARGS];
	int nargs;
	struct lunar_client *c;
	char socket_shown[PATH_MAX + 32];
	/* Admin verbs: --master (master's HTTP) else --http (the proxy's). */
	const char *master;
	const char *http;
	/* --master etcd://h1:2379,h2:2379/C: the leader's HTTP address, read
	 * from its key by ctl_master_resolve into master_found (then master). */
	char etcd_urls[1024];
	char cluster[128];
	char master_found[256];
	char http_told[64];   /* the HTTP address the proxy behind the socket told */
	const char *key_path; /* --cluster-key: proves the key to /admin (bearer token) */
	unsigned limit;	      /* keys --limit; 0: the master's default */
	int limit_set;
	int all_tenants;
	/* rm over many keys */
	const char *regex;
	int all;
	int yes;
};

/*
 * The admin verbs. Each asks over HTTP (blocking, within the timeout), prints
 * its answer on stdout as text or one JSON object, its complaints on stderr,
 * and returns the exit code. Main thread.
 *   ctl_keys           keys [PATTERN]     /admin/keys
 *   ctl_segment_list   segment list       /admin/segments
 *   ctl_client_list    client list        /admin/clients
 *   ctl_stat           stat KEY           /admin/stat
 *   ctl_metrics        metrics            /metrics
 *   ctl_disk_status    disk status        /disk/status (always the proxy's)
 */
int ctl_keys(struct ctl *x);
int ctl_segment_list(struct ctl *x);
int ctl_client_list(struct ctl *x);
int ctl_stat(struct ctl *x);
int ctl_metrics(struct ctl *x);
int ctl_disk_status(struct ctl *x);

/*
 * ctl_admin_get - GET target from the admin endpoint (--master, else the
 * proxy's HTTP port as for the verbs above) into r, whatever its HTTP status;
 * a transport failure is reported and returned as an exit code. Free r with
 * ctl_http_resp_fini either way. Main thread.
 */
struct ctl_http_resp;
int ctl_admin_get(struct ctl *x, const char *target, struct ctl_http_resp *r);

/*
 * tools/ctl/ha.c. ctl_master_url - for --master: when v is etcd://HOSTS/C,
 * keep its etcd URLs and cluster in x and return 1; 0 when v is not one;
 * -1 after saying why it is malformed.
 * ctl_master_resolve - with etcd URLs in x, read the leader key and point
 * x->master at the leader's HTTP address: EXIT_OK, or an exit code after
 * saying why (no leader, etcd unreachable, a leader without an HTTP
 * address). ctl_master_status - verb "master status": /admin/ha of the
 * master (the leader with etcd://): role, leader, view, standbys.
 */
int ctl_master_url(struct ctl *x, const char *v);
int ctl_master_resolve(struct ctl *x);
int ctl_master_status(struct ctl *x);

#endif /* LUNAR_TOOLS_CTL_CTL_H */
