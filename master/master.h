/*
 * master.h - the Lunar master as a library: object metadata in shards,
 * segment space allocation, replica placement, leases and client liveness.
 * lunar-master serves it on nng's wire (rpc_server.h); lunar-proxy
 * --embedded-master calls mst_dispatch directly, with no RPC and no second
 * copy of any master logic.
 *
 * Errors: every call here returns 0 (or a count) on success and a negative
 * LUNAR_ERR_* code of lunar.h on failure (out of memory is
 * LUNAR_ERR_INTERNAL); the one positive result is MST_CONFIG_UNKNOWN.
 */
#ifndef LUNAR_MASTER_MASTER_H
#define LUNAR_MASTER_MASTER_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#define MST_SHARDS 1024
/* Segments one client may have mounted at once (each costs the master the
 * tables of its allocator, a few hundred KiB). */
#define MST_SEGMENTS_PER_CLIENT 64

enum mst_alloc_strategy { MST_ALLOC_RANDOM, MST_ALLOC_FREE_RATIO_FIRST, MST_ALLOC_LOCAL_FIRST };

/* --offload: when objects are copied to a proxy's SSD tier. */
enum mst_offload_mode {
	MST_OFFLOAD_ON_EVICT, /* when DRAM eviction picks them: disk copy first */
	MST_OFFLOAD_ON_PUT,   /* right after PutEnd */
};

#define MST_TENANT_QUOTAS_MAX 64

/* --tenant-quota NAME=SIZE: the logical value bytes a tenant may store. */
struct mst_tenant_quota {
	char name[64];
	uint64_t bytes;
};

struct mst_config {
	uint64_t kv_lease_ttl_ms;	       /* --kv-lease-ttl 10s */
	uint64_t kv_soft_pin_ttl_ms;	       /* --kv-soft-pin-ttl 30m */
	uint64_t max_kv_soft_pin_ttl_ms;       /* --max-kv-soft-pin-ttl 24h */
	int allow_evict_soft_pinned;	       /* --allow-evict-soft-pinned true */
	double eviction_ratio;		       /* --eviction-ratio 0.01 */
	double eviction_high_watermark_ratio;  /* --eviction-high-watermark-ratio 1.0 */
	uint64_t client_ttl_ms;		       /* --client-ttl 10s */
	uint64_t put_start_discard_timeout_ms; /* --put-start-discard-timeout 30s */
	uint64_t put_start_release_timeout_ms; /* --put-start-release-timeout 600s */
	enum mst_alloc_strategy strategy;      /* --allocation-strategy random */
	uint64_t reserve_max;		       /* --reserve-max 64MiB: a put-ahead grant; 0 off */
	uint64_t reserve_ttl_ms;	       /* --reserve-ttl 10s: a reservation's life */
	uint64_t debug_reserve_delay_ms;       /* test hook: hold a grant placed, not inserted */
	uint64_t default_tenant_quota;	       /* --default-tenant-quota 0 (none) */
	unsigned n_tenant_quotas;	       /* --tenant-quota NAME=SIZE, repeatable */
	struct mst_tenant_quota tenant_quotas[MST_TENANT_QUOTAS_MAX];
	int enable_offload;	       /* --enable-offload (also set by --offload) */
	enum mst_offload_mode offload; /* --offload on_evict */
	int offload_force_evict;       /* --offload-force-evict: evict when the queue is full */
	uint64_t offload_queue;	       /* --offload-queue 65536: tasks per proxy */
	uint64_t offload_queue_bytes;  /* --offload-queue-bytes 64MiB (<= capacity / 4) */
	uint64_t offload_put_wait_ms;  /* --offload-put-wait 500ms (on an RPC thread) */
	uint64_t report_wait_ms;       /* --report-wait 30s: a new leader's longest wait
					* for the proxies' reports (mst_rebuild_settling) */
	/* Not a flag: the daemon has a cluster key (SPEC §13), so every
	 * segment gets a capability secret at mount and every replica handed
	 * out a capability. 0: keyless, replies carry neither. */
	int keyed;
};

/* mst_config_defaults - fill *cfg with the SPEC §10 defaults. Never fails;
 * touches only *cfg. */
void mst_config_defaults(struct mst_config *cfg);

/* mst_config_set's result for a name that is not a master flag (nothing set). */
#define MST_CONFIG_UNKNOWN 1
/*
 * mst_config_set - apply one master flag by its long name without dashes
 * ("client-ttl", "10s") to *cfg. Returns 0; LUNAR_ERR_INVALID_PARAMS for a
 * bad or NULL value; MST_CONFIG_UNKNOWN (> 0) for a name that is not a master
 * flag. --tenant-quota is repeatable: call once per occurrence (a name given
 * again takes the new size). name and value are only read. Pure parsing: no
 * locks, no I/O. Used by lunar-master and by lunar-proxy --embedded-master,
 * so both accept the same flags.
 */
int mst_config_set(struct mst_config *cfg, const char *name, const char *value);
/* mst_config_has - 1 if name is a master flag (without the dashes), else 0. */
int mst_config_has(const char *name);
/* mst_config_is_switch - 1 if the master flag name may be given without a
 * value (it then means "true"), else 0. */
int mst_config_is_switch(const char *name);
/* mst_config_usage - one help line per master flag, for --help texts; a
 * static string, never NULL. */
const char *mst_config_usage(void);

struct mst_master;

/*
 * mst_master_create - a master with its housekeeping thread running (client
 * liveness every 100 ms, expiry of discarded puts, background eviction).
 * cfg is copied. Returns 0 with *out set, the caller owning it until
 * mst_master_destroy; or LUNAR_ERR_INTERNAL (out of memory, or no thread:
 * the cause is logged) with *out untouched. Does not block.
 */
int mst_master_create(const struct mst_config *cfg, struct mst_master **out);
/* mst_master_destroy - stop housekeeping (joins its thread), free all
 * metadata. NULL is a no-op. No other call on m may be running or follow. */
void mst_master_destroy(struct mst_master *m);

/*
 * mst_dispatch - run one control-plane call. req is a message of the
 * method's request type (lp_method_find(method)->req); it is only read. On
 * return 0, *rep is a heap reply of the method's reply type with its Status
 * set; free it with protobuf_c_message_free_unpacked(*rep, NULL). Returns
 * LUNAR_ERR_INTERNAL (out of memory) or LUNAR_ERR_PROTOCOL (unknown method,
 * or req not of its request type) otherwise, with no reply.
 * Thread-safe; takes shard and segment locks briefly, never blocks on I/O.
 * A PutStart, UpsertStart or Reserve that finds memory full of objects
 * waiting for their disk copy (--offload on_evict) waits for copies to end,
 * up to --offload-put-wait (mst_room_make).
 */
int mst_dispatch(struct mst_master *m, uint32_t method, const ProtobufCMessage *req,
		 ProtobufCMessage **rep);

/*
 * mst_put_may_wait - whether a put of len bytes may wait in mst_dispatch
 * for an eviction round (which may take a census of every object): only a
 * put whose allocation fails runs one, so when len no longer fits in the
 * memory left, or an allocation failed and its round has not started yet.
 * A put may still fail on a fragmented segment short of that. A hint for a
 * caller choosing a thread that may block: three atomic loads, stale by
 * the time it returns.
 */
int mst_put_may_wait(struct mst_master *m, uint64_t len);

/* Figures for logs, lunarctl and /metrics. */
struct mst_stats {
	uint64_t keys;	     /* COMPLETE objects */
	uint64_t processing; /* PutStart without PutEnd */
	uint64_t segments;
	uint64_t clients;
	uint64_t tenants; /* with bytes stored or being written */
	uint64_t capacity_bytes;
	uint64_t used_bytes;
};
/* mst_master_stats - fill *out with a snapshot of m's figures. Thread-safe;
 * takes the segment table, client and tenant locks briefly, never blocks on
 * I/O. */
void mst_master_stats(struct mst_master *m, struct mst_stats *out);

/*
 * mst_metrics_render - the master's figures as Prometheus text (lunar_master_*
 * gauges, counters and the value size histogram) in a malloc'd buffer the
 * caller frees. Returns 0 with *out and *len set, or LUNAR_ERR_INTERNAL (out of
 * memory). Thread-safe; takes the segment table and client locks briefly.
 */
int mst_metrics_render(struct mst_master *m, char **out, size_t *len);
/* mst_master_ready - 1 when at least one segment is mounted, else 0.
 * Thread-safe; a snapshot, stale by the time it returns. */
int mst_master_ready(struct mst_master *m);

struct auth_http_gate;
struct lc_http_reply;
struct lc_http_req;

/* What mst_http_handle serves: a master, and the gate of its /admin pages. */
struct mst_http {
	struct mst_master *m;
	struct auth_http_gate *gate;
};

/*
 * mst_http_handle - the master's HTTP face (SPEC §11), an lc_http handler
 * whose arg is a struct mst_http whose master and gate outlive the server.
 * Served by lunar-master on --http-port, and by lunar-proxy
 * --embedded-master on its own HTTP port.
 *   /metrics                          Prometheus text, with the gate's counter
 *   /health                           200 "ok" while the process serves
 *   /ready                            200 once a segment is mounted, else 503
 *   /admin/keys?tenant=&pattern=&limit=   ListKeys as JSON
 *   /admin/segments, /admin/clients       ListSegments, ListClients
 *   /admin/stat?tenant=&key=              StatKey
 *   /admin/ha                             role, leader, view (JSON; SPEC §14)
 * Every path under /admin is first put to the gate (auth_http_gate_admit):
 * a refused caller gets 403 whether or not the page exists.
 * Returns 1 when path is not one of these (the caller may serve it or 404),
 * 0 when rep holds the answer, or a negative value when it could not be
 * built (out of memory: the server answers 500), as lc_http_handler_fn.
 * HTTP server thread; takes master locks briefly, never blocks on I/O.
 */
int mst_http_handle(void *arg, const struct lc_http_req *req, struct lc_http_reply *rep);

#endif /* LUNAR_MASTER_MASTER_H */
