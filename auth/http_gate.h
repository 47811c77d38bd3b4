/*
 * http_gate.h - who may read the /admin pages of a daemon's HTTP port
 * (SPEC §13): a loopback caller always; any other only with
 * "Authorization: Bearer <auth_http_token of the cluster key>" to a keyed
 * daemon. /metrics, /health and /ready stay open. lunar-master and
 * lunar-proxy (for its embedded master's pages) both ask this one gate.
 */
#ifndef LUNAR_AUTH_HTTP_GATE_H
#define LUNAR_AUTH_HTTP_GATE_H

#include <stdatomic.h>
#include <stdint.h>

#include "auth.h"

struct lc_http_req;
struct lc_http_reply;

/* What the gate says of one request; every value but ALLOW is a refusal. */
enum auth_http_verdict {
	AUTH_HTTP_ALLOW = 0,
	AUTH_HTTP_KEYLESS,   /* not loopback, and the daemon has no key to check */
	AUTH_HTTP_NO_TOKEN,  /* not loopback, no Bearer credentials */
	AUTH_HTTP_BAD_TOKEN, /* not loopback, Bearer credentials that are not the token */
	AUTH_HTTP_VERDICTS
};

/*
 * One daemon's gate: the key it checks tokens against (NULL for a keyless
 * daemon, whose /admin pages answer loopback callers only), the component
 * name its log lines carry, and its refusals by verdict.
 */
struct auth_http_gate {
	const struct auth_key *key;
	const char *who;
	atomic_uint_fast64_t rejected[AUTH_HTTP_VERDICTS];
	atomic_int_fast64_t logged_ms; /* of the last refusal logged */
};

/*
 * auth_http_gate_init - set g up for a daemon with key (NULL: keyless; the
 * key must outlive g) logging as who (a string literal). Before the HTTP
 * server starts.
 */
void auth_http_gate_init(struct auth_http_gate *g, const struct auth_key *key, const char *who);

/*
 * auth_http_admin_verdict - the decision alone, pure: peer_loopback says
 * whether the caller's address is a loopback one; key is the daemon's
 * cluster key or NULL; authorization the request's Authorization value
 * (untrusted) or NULL. Loopback callers are allowed; others need the scheme
 * "Bearer" (any case), blanks, then exactly auth_http_token(key), compared
 * in constant time.
 */
enum auth_http_verdict auth_http_admin_verdict(int peer_loopback, const struct auth_key *key,
					       const char *authorization);

/*
 * auth_http_gate_admit - the gate for one /admin request, called by a
 * handler on the HTTP server's thread. Returns 1 to serve req. Otherwise
 * returns 0 with rep set to 403 and a body that says nothing more; the
 * refusal is counted, and logged with the peer's address at most once a
 * second. Thread-safe.
 */
int auth_http_gate_admit(struct auth_http_gate *g, const struct lc_http_req *req,
			 struct lc_http_reply *rep);

/*
 * auth_http_gate_metrics - append the counter lunar_http_admin_rejected_total
 * {reason="keyless|no_token|bad_token"} to a /metrics reply. 0 or -ENOMEM.
 */
int auth_http_gate_metrics(struct auth_http_gate *g, struct lc_http_reply *rep);

/* auth_http_is_admin - 1 when path is under /admin (the gated pages), else 0. */
int auth_http_is_admin(const char *path);

#endif /* LUNAR_AUTH_HTTP_GATE_H */
