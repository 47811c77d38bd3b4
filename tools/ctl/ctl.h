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
	char http_told[64]; /* the HTTP address the proxy behind the socket told */
	const char *key_path; /* --cluster-key: proves the key to /admin (bearer token) */
	unsigned limit; /* keys --limit; 0: the master's default */
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

#endif /* LUNAR_TOOLS_CTL_CTL_H */
