/*
 * admin_http.c - the master's HTTP endpoints; see mst_http_handle in
 * master.h. Admin queries go through mst_dispatch like any RPC, and their
 * replies are rendered as JSON from the protobuf descriptors.
 */
#include "master.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "http_gate.h"
#include "json.h"
#include "lunar.h"
#include "mst_ha.h"
#include "rpc.h"

#define ARG_MAX 4097

/* A query parameter into buf, "" when absent; -1 when it is malformed (a
 * bad escape, a NUL, too long), which must not widen the query to all. */
static int query_arg(const char *query, const char *name, char *buf)
{
	int n = lc_http_query_get(query, name, buf, ARG_MAX);

	if (n == -ENOENT)
		buf[0] = '\0';
	return n < 0 && n != -ENOENT ? -1 : 0;
}

static int bad_query(struct lc_http_reply *rep)
{
	rep->status = 400;
	return lc_http_reply_printf(rep, "malformed query parameter\n");
}

static int answer(struct mst_master *m, uint32_t method, const ProtobufCMessage *rq,
		  struct lc_http_reply *rep)
{
	ProtobufCMessage *out;
	int code;

	if (mst_dispatch(m, method, rq, &out))
		return -1;
	code = lp_status(out) ? lp_status(out)->code : LUNAR_ERR_INTERNAL;
	rep->status = code == 0 ? 200 : code == LUNAR_ERR_OBJECT_NOT_FOUND ? 404 : 400;
	rep->content_type = "application/json";
	code = lp_json_render(out, rep);
	protobuf_c_message_free_unpacked(out, NULL);
	return code ? -1 : lc_http_reply_append(rep, "\n", 1);
}

static int admin_keys(struct mst_master *m, const char *query, struct lc_http_reply *rep)
{
	Lunar__ListKeysRequest rq = LUNAR__LIST_KEYS_REQUEST__INIT;
	char *tenant = malloc(ARG_MAX), *pattern = malloc(ARG_MAX), limit[32];
	int rc = -1;

	if (!tenant || !pattern)
		goto out;
	if (query_arg(query, "tenant", tenant) || query_arg(query, "pattern", pattern)) {
		rc = bad_query(rep);
		goto out;
	}
	if (lc_http_query_get(query, "limit", limit, sizeof(limit)) > 0)
		rq.limit = (uint32_t)strtoul(limit, NULL, 10);
	rq.tenant = tenant;
	rq.pattern = pattern;
	rc = answer(m, LUNAR__METHOD__LIST_KEYS, &rq.base, rep);
out:
	free(tenant);
	free(pattern);
	return rc;
}

static int admin_stat(struct mst_master *m, const char *query, struct lc_http_reply *rep)
{
	Lunar__StatKeyRequest rq = LUNAR__STAT_KEY_REQUEST__INIT;
	char *tenant = malloc(ARG_MAX), *key = malloc(ARG_MAX);
	int rc = -1;

	if (!tenant || !key)
		goto out;
	if (query_arg(query, "tenant", tenant) || query_arg(query, "key", key)) {
		rc = bad_query(rep);
		goto out;
	}
	rq.tenant = tenant;
	rq.key = key;
	rc = answer(m, LUNAR__METHOD__STAT_KEY, &rq.base, rep);
out:
	free(tenant);
	free(key);
	return rc;
}

static int metrics(struct mst_http *mh, struct lc_http_reply *rep)
{
	struct mst_master *m = mh->m;
	char *text;
	size_t len;
	int rc;

	if (mst_metrics_render(m, &text, &len))
		return -1;
	rep->content_type = "text/plain; version=0.0.4";
	rc = lc_http_reply_append(rep, text, len);
	free(text);
	return rc ?: auth_http_gate_metrics(mh->gate, rep);
}

int mst_http_handle(void *arg, const struct lc_http_req *req, struct lc_http_reply *rep)
{
	struct mst_http *mh = arg;
	struct mst_master *m = mh->m;
	const char *path = req->path, *query = req->query;
	Lunar__ListSegmentsRequest segs = LUNAR__LIST_SEGMENTS_REQUEST__INIT;
	Lunar__ListClientsRequest clients = LUNAR__LIST_CLIENTS_REQUEST__INIT;

	if (!strcmp(path, "/metrics"))
		return metrics(mh, rep);
	if (!strcmp(path, "/health"))
		return lc_http_reply_printf(rep, "ok\n");
	if (!strcmp(path, "/ready")) {
		rep->status = mst_master_ready(m) ? 200 : 503;
		return lc_http_reply_printf(rep, "%s\n",
					    rep->status == 200 ? "ready" : "no segment");
	}
	if (auth_http_is_admin(path) && !auth_http_gate_admit(mh->gate, req, rep))
		return 0;
	if (!strcmp(path, "/admin/keys"))
		return admin_keys(m, query, rep);
	if (!strcmp(path, "/admin/stat"))
		return admin_stat(m, query, rep);
	if (!strcmp(path, "/admin/segments"))
		return answer(m, LUNAR__METHOD__LIST_SEGMENTS, &segs.base, rep);
	if (!strcmp(path, "/admin/clients"))
		return answer(m, LUNAR__METHOD__LIST_CLIENTS, &clients.base, rep);
	if (!strcmp(path, "/admin/ha"))
		return mst_ha_http(m, rep);
	return 1;
}
