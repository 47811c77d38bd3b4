/*
 * http_gate.c - the /admin gate of the daemons' HTTP ports; see
 * http_gate.h. The token is compared by auth_http_token_check (constant
 * time); a refusal is answered 403 with no reason, so a caller learns
 * neither whether the daemon is keyed nor what was wrong with its token.
 */
#include "http_gate.h"

#include <string.h>
#include <strings.h>
#include <time.h>

#include "http.h"
#include "log.h"

#define GATE_LOG_EVERY_MS 1000

static const char *const reason_name[AUTH_HTTP_VERDICTS] = {
    [AUTH_HTTP_KEYLESS] = "keyless",
    [AUTH_HTTP_NO_TOKEN] = "no_token",
    [AUTH_HTTP_BAD_TOKEN] = "bad_token",
};

void auth_http_gate_init(struct auth_http_gate *g, const struct auth_key *key, const char *who)
{
	g->key = key;
	g->who = who;
	for (int i = 0; i < AUTH_HTTP_VERDICTS; i++)
		atomic_init(&g->rejected[i], 0);
	atomic_init(&g->logged_ms, 0);
}

int auth_http_is_admin(const char *path)
{
	return !strncmp(path, "/admin", 6) && (path[6] == '\0' || path[6] == '/');
}

enum auth_http_verdict auth_http_admin_verdict(int peer_loopback, const struct auth_key *key,
					       const char *authorization)
{
	const char *p = authorization;

	if (peer_loopback)
		return AUTH_HTTP_ALLOW;
	if (!key)
		return AUTH_HTTP_KEYLESS;
	if (!p || strncasecmp(p, "Bearer", 6) || (p[6] != ' ' && p[6] != '\t'))
		return AUTH_HTTP_NO_TOKEN;
	p += 6;
	p += strspn(p, " \t");
	return auth_http_token_check(key, p) ? AUTH_HTTP_BAD_TOKEN : AUTH_HTTP_ALLOW;
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int auth_http_gate_admit(struct auth_http_gate *g, const struct lc_http_req *req,
			 struct lc_http_reply *rep)
{
	enum auth_http_verdict v =
	    auth_http_admin_verdict(req->peer_loopback, g->key, req->authorization);
	int_fast64_t now, last;

	if (v == AUTH_HTTP_ALLOW)
		return 1;
	atomic_fetch_add_explicit(&g->rejected[v], 1, memory_order_relaxed);
	now = mono_ms();
	last = atomic_load_explicit(&g->logged_ms, memory_order_relaxed);
	/* One thread wins the second's log line; the rest only count. */
	if ((last == 0 || now - last >= GATE_LOG_EVERY_MS) &&
	    atomic_compare_exchange_strong_explicit(&g->logged_ms, &last, now, memory_order_relaxed,
						    memory_order_relaxed))
		LC_WARN(g->who, "HTTP: refused %.200s to %s (%s)", req->path, req->peer,
			reason_name[v]);
	rep->status = 403;
	rep->len = 0;
	lc_http_reply_printf(rep, "forbidden\n"); /* out of memory: an empty 403 */
	return 0;
}

int auth_http_gate_metrics(struct auth_http_gate *g, struct lc_http_reply *rep)
{
	int rc = lc_http_reply_printf(
	    rep, "# HELP lunar_http_admin_rejected_total /admin requests refused "
		 "(not loopback, without the cluster key's token).\n"
		 "# TYPE lunar_http_admin_rejected_total counter\n");

	for (int v = AUTH_HTTP_KEYLESS; !rc && v < AUTH_HTTP_VERDICTS; v++)
		rc = lc_http_reply_printf(
		    rep, "lunar_http_admin_rejected_total{reason=\"%s\"} %llu\n", reason_name[v],
		    (unsigned long long)atomic_load_explicit(&g->rejected[v],
							     memory_order_relaxed));
	return rc;
}
