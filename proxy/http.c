/*
 * http.c - the proxy's HTTP port: Prometheus /metrics (lunar_proxy_*, and
 * the embedded master's lunar_master_* when there is one), /health, /ready
 * (segment mounted and master reachable), /disk/status, and the embedded
 * master's /admin/ queries. /admin answers loopback callers and callers
 * with the cluster key's token (auth/http_gate.h); /disk/status stays open
 * like /metrics: it holds counters, sizes and the disk directory, no key
 * names or placement.
 */
#include <stdio.h>
#include <string.h>

#include "http.h"
#include "log.h"
#include "lunar.h"
#include "master/master.h"
#include "px_int.h"
#include "sp_req.h"

static const char *const op_names[LC_OP_MAX] = {
    [LC_OP_PUT] = "put",
    [LC_OP_UPSERT] = "upsert",
    [LC_OP_GET] = "get",
    [LC_OP_GET_SIZE] = "get_size",
    [LC_OP_EXISTS] = "exists",
    [LC_OP_REMOVE] = "remove",
    [LC_OP_REMOVE_ALL] = "remove_all",
    [LC_OP_REMOVE_REGEX] = "remove_by_regex",
    [LC_OP_PREFIX_MATCH] = "prefix_match",
    [LC_OP_HEALTH] = "health",
};

#define LOAD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

static int counter(struct lc_http_reply *rep, const char *name, const char *help,
		   unsigned long long v)
{
	return lc_http_reply_printf(rep, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help,
				    name, name, v);
}

/* Data-port peers refused, by reason (keyed proxies; zeros otherwise). */
static int rejected_metrics(struct px_proxy *px, struct lc_http_reply *rep)
{
	int rc = lc_http_reply_printf(
	    rep, "# HELP lunar_proxy_data_rejected_total Data-port peers refused "
		 "(no key, bad MAC, replay, no capability, bad CRC).\n"
		 "# TYPE lunar_proxy_data_rejected_total counter\n");

	for (int r = 0; !rc && r < ENG_REJ_COUNT; r++) {
		uint64_t n = px->engine ? eng_engine_rejected(px->engine, r) : 0;

		rc = lc_http_reply_printf(rep,
					  "lunar_proxy_data_rejected_total{reason=\"%s\"} %llu\n",
					  eng_reject_name(r), (unsigned long long)n);
	}
	return rc;
}

/* Data-port connections taken back to make room, by where they were. */
static int evicted_metrics(struct px_proxy *px, struct lc_http_reply *rep)
{
	int rc = lc_http_reply_printf(
	    rep, "# HELP lunar_proxy_data_evicted_total Data-port connections closed to make "
		 "room for new ones (in their handshake first, then idle ones).\n"
		 "# TYPE lunar_proxy_data_evicted_total counter\n");

	for (int h = 1; !rc && h >= 0; h--)
		rc = lc_http_reply_printf(
		    rep, "lunar_proxy_data_evicted_total{state=\"%s\"} %llu\n",
		    h ? "handshake" : "idle",
		    (unsigned long long)(px->engine ? eng_engine_evicted(px->engine, h) : 0));
	return rc;
}

/* Remote and local transfers by transport, and RDMA's fallbacks to TCP. */
static int transport_metrics(struct px_proxy *px, struct lc_http_reply *rep)
{
	static const char *const what[3][2] = {
	    {"lunar_proxy_transfers_total", "Transfers by transport."},
	    {"lunar_proxy_transfer_bytes_total", "Bytes of successful transfers by transport."},
	    {"lunar_proxy_transfer_failures_total", "Failed transfers by transport."},
	};
	struct eng_xfer_stats st[ENG_TR_COUNT];
	int rc = 0;

	for (int t = 0; t < ENG_TR_COUNT; t++)
		eng_engine_xfer_stats(px->engine, t, &st[t]);
	for (int k = 0; !rc && k < 3; k++) {
		rc = lc_http_reply_printf(rep, "# HELP %s %s\n# TYPE %s counter\n", what[k][0],
					  what[k][1], what[k][0]);
		for (int t = 0; !rc && t < ENG_TR_COUNT; t++) {
			uint64_t v = k == 0 ? st[t].xfers : k == 1 ? st[t].bytes : st[t].failures;

			rc = lc_http_reply_printf(rep, "%s{transport=\"%s\"} %llu\n", what[k][0],
						  eng_transport_name(t), (unsigned long long)v);
		}
	}
	rc = rc
		 ?: counter(rep, "lunar_proxy_rdma_fallbacks_total",
			    "Remote transfers that went over TCP although RDMA is on here.",
			    (unsigned long long)eng_engine_rdma_fallbacks(px->engine));
	return rc
		   ?: lc_http_reply_printf(
			  rep,
			  "# HELP lunar_proxy_rdma_enabled 1 when an RDMA device is in use.\n"
			  "# TYPE lunar_proxy_rdma_enabled gauge\n"
			  "lunar_proxy_rdma_enabled %d\n",
			  eng_engine_rdma_device(px->engine) ? 1 : 0);
}

/* Waits for a peer's bytes that ended while busy-polling, and those that
 * slept after it (--busy-poll-us): a guide to its worth here. */
static int busy_poll_metrics(struct lc_http_reply *rep)
{
	uint64_t polled, slept;

	eng_busy_poll_stats(&polled, &slept);
	return lc_http_reply_printf(
	    rep,
	    "# HELP lunar_proxy_busy_poll_waits_total Busy polls for a peer's bytes by how they "
	    "ended: the connection ready (or hung up), or asleep after the budget.\n"
	    "# TYPE lunar_proxy_busy_poll_waits_total counter\n"
	    "lunar_proxy_busy_poll_waits_total{ended=\"polling\"} %llu\n"
	    "lunar_proxy_busy_poll_waits_total{ended=\"asleep\"} %llu\n",
	    (unsigned long long)polled, (unsigned long long)slept);
}

/* Clients that hung up, idle or in the middle of calls (they died), and
 * connections refused before a session opened, by reason. */
static int hangup_counters(const struct px_stats *st, struct lc_http_reply *rep)
{
	static const char *const reasons[PX_REJECT_MAX] = {
	    [PX_REJECT_UNAUTHORIZED] = "unauthorized",
	    [PX_REJECT_TOO_MANY_CLIENTS] = "too_many_clients",
	    [PX_REJECT_VERSION] = "version_mismatch",
	    [PX_REJECT_BAD_HELLO] = "bad_hello",
	    [PX_REJECT_INTERNAL] = "internal",
	};
	int rc = lc_http_reply_printf(
	    rep,
	    "# HELP lunar_proxy_client_hangups_total Sessions ended by the client's hang-up, "
	    "with no call or with a call unfinished (the client died mid-call).\n"
	    "# TYPE lunar_proxy_client_hangups_total counter\n"
	    "lunar_proxy_client_hangups_total{calls=\"none\"} %llu\n"
	    "lunar_proxy_client_hangups_total{calls=\"in_flight\"} %llu\n"
	    "# HELP lunar_proxy_rejected_connections_total Connections refused before a session "
	    "opened, by reason.\n"
	    "# TYPE lunar_proxy_rejected_connections_total counter\n",
	    LOAD(st->hangups[0]), LOAD(st->hangups[1]));

	for (int i = 0; !rc && i < PX_REJECT_MAX; i++)
		rc = lc_http_reply_printf(rep, "%s{reason=\"%s\"} %llu\n",
					  "lunar_proxy_rejected_connections_total", reasons[i],
					  LOAD(st->rejected[i]));
	return rc;
}

static int proxy_metrics(struct px_proxy *px, struct lc_http_reply *rep)
{
	const struct px_stats *st = &px->stats;
	int rc = lc_http_reply_printf(
	    rep, "# HELP lunar_proxy_requests_total Client requests by operation.\n"
		 "# TYPE lunar_proxy_requests_total counter\n");

	for (int op = 1; !rc && op < LC_OP_MAX; op++)
		rc = lc_http_reply_printf(rep, "lunar_proxy_requests_total{op=\"%s\"} %llu\n",
					  op_names[op], LOAD(st->requests[op]));
	rc = rc
		 ?: counter(rep, "lunar_proxy_requests_inline_total",
			    "Requests run on the event loop itself; the rest went to workers.",
			    LOAD(st->requests_inline));
	rc = rc
		 ?: counter(rep, "lunar_proxy_key_errors_total",
			    "Per-key results that were errors.", LOAD(st->key_errors));
	rc = rc
		 ?: counter(rep, "lunar_proxy_lease_cache_hits_total",
			    "Keys served from a held lease, no master call.", LOAD(st->lease_hits));
	rc = rc
		 ?: counter(rep, "lunar_proxy_lease_cache_misses_total",
			    "Keys that needed the master.", LOAD(st->lease_misses));
	rc = rc
		 ?: counter(rep, "lunar_proxy_leases_released_total",
			    "Leases given back when the only client reading them closed.",
			    LOAD(st->leases_released));
	rc = rc
		 ?: counter(rep, "lunar_proxy_checksum_failures_total",
			    "Replica reads whose CRC32C did not match.",
			    LOAD(st->checksum_failures));
	rc = rc
		 ?: counter(rep, "lunar_proxy_puts_beside_total",
			    "Values put ahead, committed while their bytes travelled.",
			    LOAD(st->puts_beside));
	rc = rc
		 ?: counter(rep, "lunar_proxy_puts_uncommitted_total",
			    "Values committed beside a write that failed, then taken back.",
			    LOAD(st->puts_uncommitted));
	rc = rc
		 ?: counter(rep, "lunar_proxy_put_bytes_total", "Value bytes stored.",
			    LOAD(st->bytes_put));
	rc = rc
		 ?: counter(rep, "lunar_proxy_get_bytes_total", "Value bytes read.",
			    LOAD(st->bytes_got));
	rc = rc
		 ?: counter(rep, "lunar_proxy_busy_total", "Requests refused with BUSY.",
			    LOAD(st->busy));
	rc =
	    rc
		?: counter(rep, "lunar_proxy_client_violations_total",
			   "Clients disconnected for breaking the protocol.", LOAD(st->violations));
	rc = rc
		 ?: counter(rep, "lunar_proxy_clients_total", "Clients accepted.",
			    LOAD(st->clients_total));
	rc = rc ?: hangup_counters(st, rep);
	rc =
	    rc
		?: counter(rep, "lunar_proxy_lease_cap_busy_total",
			   "Reads refused with BUSY: their client held --max-client-leases leases.",
			   LOAD(st->lease_cap_busy));
	rc = rc
		 ?: lc_http_reply_printf(rep,
					 "# HELP lunar_proxy_segment_bytes DRAM contributed.\n"
					 "# TYPE lunar_proxy_segment_bytes gauge\n"
					 "lunar_proxy_segment_bytes %llu\n"
					 "# HELP lunar_proxy_segment_mounted 1 while mounted.\n"
					 "# TYPE lunar_proxy_segment_mounted gauge\n"
					 "lunar_proxy_segment_mounted %d\n"
					 "# HELP lunar_proxy_reserved_room_bytes Room puts may go "
					 "ahead into now.\n"
					 "# TYPE lunar_proxy_reserved_room_bytes gauge\n"
					 "lunar_proxy_reserved_room_bytes %llu\n",
					 (unsigned long long)px->cfg.segment_size,
					 atomic_load(&px->mounted) ? 1 : 0,
					 (unsigned long long)px_resv_room(px));
	rc = rc ?: rejected_metrics(px, rep);
	rc = rc ?: evicted_metrics(px, rep);
	rc = rc ?: transport_metrics(px, rep);
	rc = rc ?: busy_poll_metrics(rep);
	return rc
		   ?: lc_http_reply_printf(
			  rep,
			  "# HELP lunar_proxy_peer_connections Connections open to "
			  "other nodes' data ports, idle or in use.\n"
			  "# TYPE lunar_proxy_peer_connections gauge\n"
			  "lunar_proxy_peer_connections %u\n"
			  "# HELP lunar_proxy_master_connections Connections open to the "
			  "master's RPC port, idle or in use.\n"
			  "# TYPE lunar_proxy_master_connections gauge\n"
			  "lunar_proxy_master_connections %u\n",
			  eng_engine_peer_conns(px->engine), lp_spreq_connections());
}

static int handle(void *arg, const struct lc_http_req *req, struct lc_http_reply *rep)
{
	struct px_proxy *px = arg;
	const char *path = req->path;
	int rc;

	if (!strcmp(path, "/metrics")) {
		rep->content_type = "text/plain; version=0.0.4";
		rc = proxy_metrics(px, rep) ?: px_disk_metrics(px, rep);
		if (rc || !px->master) /* else the master's text follows, with the gate's */
			return rc ?: auth_http_gate_metrics(&px->http_gate, rep);
	}
	if (!strcmp(path, "/disk/status"))
		return px_disk_status(px, rep);
	if (!strcmp(path, "/ready")) {
		int ok = px_segment_ready(px) && !px_master_ping(px);

		rep->status = ok ? 200 : 503;
		return lc_http_reply_printf(rep, "%s\n", ok ? "ready" : "not ready");
	}
	if (px->master && (rc = mst_http_handle(&px->master_http, req, rep)) <= 0)
		return rc;
	if (auth_http_is_admin(path) && !auth_http_gate_admit(&px->http_gate, req, rep))
		return 0; /* no master: still say nothing about what is there */
	if (!strcmp(path, "/health"))
		return lc_http_reply_printf(rep, "ok\n");
	if (!strcmp(path, "/metrics"))
		return 0;
	rep->status = 404;
	return lc_http_reply_printf(rep, "not found\n");
}

/* Where a client on this node reaches the HTTP port: a wildcard bind is
 * reached on loopback; an IPv6 host goes in brackets. */
static void http_addr_set(struct px_proxy *px)
{
	const char *h = px->cfg.host;
	unsigned port = lc_http_port(px->http);
	int n;

	if (!strcmp(h, "0.0.0.0") || !*h)
		h = "127.0.0.1";
	else if (!strcmp(h, "::"))
		h = "::1";
	if (strchr(h, ':'))
		n = snprintf(px->http_addr, sizeof(px->http_addr), "[%s]:%u", h, port);
	else
		n = snprintf(px->http_addr, sizeof(px->http_addr), "%s:%u", h, port);
	if (n < 0 || (size_t)n >= sizeof(px->http_addr))
		px->http_addr[0] = '\0'; /* too long to tell: clients use their default */
}

int px_http_start(struct px_proxy *px)
{
	int rc;

	auth_http_gate_init(&px->http_gate, px->cfg.keyed ? &px->cfg.cluster_key : NULL, "proxy");
	px->master_http = (struct mst_http){.m = px->master, .gate = &px->http_gate};
	rc = lc_http_start(px->cfg.host, px->cfg.http_port, handle, px, &px->http);

	if (rc) {
		LC_ERROR("proxy", "HTTP port %s:%u: %s", px->cfg.host, px->cfg.http_port,
			 strerror(-rc));
		return LUNAR_ERR_INTERNAL;
	}
	http_addr_set(px);
	LC_INFO("proxy", "HTTP on http://%s (metrics, health, ready%s)", px->http_addr,
		px->master ? ", admin" : "");
	return 0;
}
