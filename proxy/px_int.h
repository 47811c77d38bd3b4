/*
 * px_int.h - lunar-proxy internals shared by the proxy's files only.
 *
 * Threads: one event loop (accept, handshakes, hang-ups, ring draining), a
 * pool of workers running requests (master calls and transfers block), a
 * heartbeat thread (Ping, re-mount), and the engine's data-port threads.
 * A session is reference-counted: the loop holds one reference until
 * hang-up, each queued request one more; the region is unmapped at zero.
 *
 * Errors: calls return 0 (or a count) or a negative LUNAR_ERR_* code, which
 * may reach the client as is. Exceptions, said at each: px_loop_run's
 * -errno (a daemon exit, logged by main.c) and the HTTP renderers' -ENOMEM
 * (lc_http_reply's convention).
 */
#ifndef LUNAR_PROXY_PX_INT_H
#define LUNAR_PROXY_PX_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <protobuf-c/protobuf-c.h>

#include "auth.h"
#include "conf.h"
#include "http_gate.h"
#include "lunar.pb-c.h"
#include "master/master.h"
#include "decode.h"
#include "lease_cache.h"
#include "shm_abi.h"
#include "uds.h"

struct eng_engine;
struct lc_http;
struct lc_http_reply;
struct px_disk;

struct px_config {
	char socket_path[256];
	const char *master_url;	    /* NULL with embedded */
	int embedded;		    /* --embedded-master */
	struct mst_config mcfg;	    /* master flags, embedded only */
	const char *host;	    /* --host: data-plane address */
	uint16_t data_port;	    /* --data-port */
	uint64_t segment_size;	    /* --segment-size */
	uint64_t arena_size;	    /* --arena-size: per-client default */
	unsigned max_clients;	    /* --max-clients */
	unsigned max_inflight;	    /* --max-inflight: requests per client */
	unsigned max_registrations; /* --max-registrations: ranges of all clients */
	unsigned lease_cache_keys;  /* --lease-cache-keys: replica lists kept */
	unsigned max_client_leases; /* --max-client-leases: keys one client may lease */
	uid_t allow_uid[16];	    /* --allow-uid: besides our own uid and root */
	unsigned n_allow_uid;
	gid_t allow_gid[16]; /* --allow-gid: besides the socket's group */
	unsigned n_allow_gid;
	unsigned socket_mode;		   /* --socket-mode: of the socket file (0660) */
	gid_t socket_gid;		   /* --socket-group: of the socket and its directory */
	int socket_group_set;		   /* --socket-group given */
	unsigned workers;		   /* --workers */
	uint64_t rpc_timeout_ms;	   /* --rpc-timeout */
	uint64_t ping_interval_ms;	   /* --ping-interval */
	uint64_t debug_put_delay_ms;	   /* --debug-put-delay: test hook */
	uint64_t debug_get_delay_ms;	   /* --debug-get-delay: test hook */
	uint64_t reserve_size;		   /* --reserve-size: put-ahead space asked for */
	uint64_t reserve_value_max;	   /* --reserve-value-max: largest value put ahead */
	int commit_after_write;		   /* --commit-after-write: no commit beside a write */
	uint64_t debug_hb_delay_ms;	   /* --debug-heartbeat-delay: test hook */
	uint64_t debug_disk_read_delay_ms; /* --debug-disk-read-delay: test hook */
	uint16_t http_port;		   /* --http-port: metrics, health, admin */
	uint64_t grace_ms;		   /* --grace: serve reads this long after SIGTERM */
	const char *disk_dir;		   /* --disk-dir: SSD tier; NULL: none */
	const char *rdma_devices;	   /* --rdma-devices: "auto", "none" or device names */
	unsigned busy_poll_us;		   /* --busy-poll-us: eng_busy_poll_set */
	uint64_t disk_capacity;		   /* --disk-capacity */
	int disk_policy;		   /* --disk-eviction: enum dsk_policy */
	int dumpable;			   /* --dumpable: ptrace and core dumps allowed */
	const char *config_path;	   /* --config */
	const char *key_path;		   /* --cluster-key (or $LUNAR_CLUSTER_KEY_FILE) */
	int insecure;			   /* --insecure: a non-loopback --host without a key */
	int keyed;			   /* cluster_key holds the key */
	int admin_calls;		   /* --admin-calls: our master session is ADMIN */
	struct auth_key cluster_key;
	struct lc_conf conf; /* its settings; fields above may point into them */
};

/* px_config_parse - argv into cfg. Returns 0, 1 after --help/--version was
 * printed, or 2 after a usage error was printed (the exit codes). */
int px_config_parse(struct px_config *cfg, int argc, char **argv);
/*
 * px_mem_limit - the bytes the proxy's memory cgroup lets it use (the
 * smallest limit of v2's memory.max up its hierarchy and v1's memory
 * controller), or UINT64_MAX when none binds or none can be read.
 * px_mem_fit - shrink cfg's segment to what fits under that limit beside
 * what the proxy needs for itself, with a warning (memlimit.c); 0, or
 * LUNAR_ERR_INVALID_PARAMS (said why) when not even a small segment fits.
 * Main thread, at start.
 */
uint64_t px_mem_limit(void);
int px_mem_fit(struct px_config *cfg);

/* --- master client (mc.c) --- */
struct px_proxy;
struct px_mc;
/*
 * px_mc_create - a master client: embedded (m != NULL, calls run
 * mst_dispatch on the caller's thread) or remote (url, nng's REQ wire; m NULL).
 * Remote with key (not NULL; copied): calls go over a session authenticated
 * with the cluster key claiming role (AUTH_ROLE_NODE, or AUTH_ROLE_ADMIN
 * with --admin-calls). m must outlive it; url is only read. Returns 0 and
 * *out (freed by px_mc_destroy), LUNAR_ERR_INTERNAL (out of memory) or
 * LUNAR_ERR_INVALID_PARAMS (url refused, logged). Start-up thread; the dial
 * does not wait for the master, which may come up later.
 */
int px_mc_create(struct mst_master *m, const char *url, uint64_t timeout_ms,
		 const struct auth_key *key, uint32_t role, struct px_mc **out);
/* px_mc_follow - what px_mc_create does with an etcd://HOSTS/CLUSTER url
 * (rpc_follow.h): the same, following the leader; on_switch(arg) runs on the
 * follower's thread each time the leader changed. */
int px_mc_follow(const char *url, uint64_t timeout_ms, const struct auth_key *key, uint32_t role,
		 void (*on_switch)(void *arg), void *arg, struct px_mc **out);
/* px_master_client - px->mc for the proxy's flags: embedded, tcp://, or
 * etcd:// (then with px->objidx, and a leader change re-mounts at once).
 * Start-up thread, before px_heartbeat_start. 0 or px_mc_create's codes. */
int px_master_client(struct px_proxy *px);
/* px_mc_view - the newest master view seen (0: no HA or embedded). */
uint64_t px_mc_view(struct px_mc *mc);
/* px_mc_close - fail every call in flight or to come at once (shutdown).
 * Idempotent; NULL and embedded are no-ops. px_mc_destroy still frees. */
void px_mc_close(struct px_mc *mc);
/* px_mc_destroy - px_mc_close, then free mc. NULL is a no-op. No call may
 * be running on mc. */
void px_mc_destroy(struct px_mc *mc);
/*
 * px_mc_call - one control-plane call; blocks up to the RPC timeout. On 0,
 * *rep is the method's reply (free with protobuf_c_message_free_unpacked);
 * else LUNAR_ERR_RPC_FAIL, LUNAR_ERR_RPC_TIMEOUT or (keyed, the master does
 * not hold our cluster key) LUNAR_ERR_UNAUTHORIZED, and no reply.
 * Any thread; calls run in parallel (one connection each).
 * A Ping (the heartbeat's) is the probe of a remote master: while the last
 * one got no answer (RPC_FAIL or RPC_TIMEOUT) the master is down, and every
 * other call fails at once with LUNAR_ERR_RPC_FAIL instead of waiting out
 * its timeout, until a Ping is answered. An embedded master is never down.
 */
int px_mc_call(struct px_mc *mc, uint32_t method, const ProtobufCMessage *req,
	       ProtobufCMessage **rep);
/* px_mc_call_timed - px_mc_call with its own timeout (remote master only;
 * embedded calls never wait on I/O). LUNAR_ERR_INTERNAL for an unknown
 * method or an embedded dispatch that failed. */
int px_mc_call_timed(struct px_mc *mc, uint32_t method, const ProtobufCMessage *req,
		     ProtobufCMessage **rep, uint64_t timeout_ms);
/* px_mc_code - the status code of a reply (LUNAR_ERR_PROTOCOL if none). */
int px_mc_code(const ProtobufCMessage *rep);

/* --- put-ahead: space reserved for small puts (resv.c) --- */
struct px_resv;
struct px_resv_pool;
/* A piece of a reservation one put writes into; holds the reservation.
 * Until settled it is linked into its reservation's list of unsettled
 * pieces, so it must stay where px_resv_take put it. */
struct px_piece {
	struct px_resv *r;
	uint64_t off, len;	      /* len: the value's length rounded to the alignment */
	struct px_piece *prev, *next; /* the unsettled pieces, by offset (pool lock) */
};
/* How a put is done with its piece (px_resv_settle). */
enum px_piece_end {
	PX_PIECE_COMMITTED, /* the master made it an object */
	PX_PIECE_UNUSED,    /* not committed, and no byte is on its way there */
	PX_PIECE_TAINTED,   /* bytes may still land, or the commit's answer was lost */
	PX_PIECE_GONE,	    /* the master refused the reservation: no more pieces of it */
};
/* The longest any one goodbye to the master at shutdown waits (a release,
 * an unmount, a call of the put-ahead thread's under way). */
#define PX_GOODBYE_MS 500

/* px_resv_start - with a remote master, --reserve-size and
 * --reserve-value-max not 0 and no --debug-put-delay: px->resv and its
 * thread, which asks for reservations at once. 0, or LUNAR_ERR_INTERNAL.
 * px_resv_quit - ask the thread to end; it may be inside a call to the
 * master, which px_mc_close cuts short.
 * px_resv_stop - px_resv_quit, then join the thread (puts may still take
 * and settle pieces).
 * px_resv_release_all - stop the thread asking (as px_resv_quit), wait up
 * to PX_GOODBYE_MS for the master calls it has under way (a Reserve's
 * grant is then kept), then give back every reservation no put holds a
 * piece of (shutdown, while the master answers). A call that takes longer
 * (a master gone since its last Ping) loses its release or grant to the
 * master's --client-ttl.
 * px_resv_destroy - free the pool (no put may run).
 * All no-ops without a pool. */
int px_resv_start(struct px_proxy *px);
void px_resv_quit(struct px_proxy *px);
void px_resv_stop(struct px_proxy *px);
void px_resv_release_all(struct px_proxy *px);
void px_resv_destroy(struct px_proxy *px);
/* px_resv_enabled - 1 if puts may go ahead; px_resv_value_max - the
 * largest value that may. */
int px_resv_enabled(const struct px_proxy *px);
uint64_t px_resv_value_max(const struct px_proxy *px);
/* px_resv_take - a piece of len bytes (> 0) in *out: 0, or -1 when none is
 * at hand (then the put takes the two-call path). Never blocks on I/O;
 * any thread. Every piece taken is settled once. */
int px_resv_take(struct px_proxy *px, uint64_t len, struct px_piece *out);
/* px_resv_room - bytes puts may take now from the reservations held
 * (lunar_proxy_reserved_room_bytes): of the current view, taking pieces
 * (those done are retired here, as px_resv_take would). Any thread: takes
 * the pool's lock briefly, never waits on I/O; 0 without a pool. */
uint64_t px_resv_room(struct px_proxy *px);
/* px_resv_room_seen - a put found room (the master placed it): after a
 * Reserve refused for want of room (no segment yet, a full cluster), the
 * thread asks again RESV_SOON_MS after the refusal rather than a second
 * after; once between grants. Any thread; a no-op without a pool. */
void px_resv_room_seen(struct px_proxy *px);
/* px_resv_settle - the put is done with pc (see enum px_piece_end). */
void px_resv_settle(struct px_proxy *px, struct px_piece *pc, enum px_piece_end how);
/* px_piece_endpoint, px_piece_cap (keyless, its mount only), px_piece_epoch,
 * px_piece_resv - where a piece is written, with which capability, in which
 * epoch of our segment's mount (eng_op.epoch), and its reservation's id. */
const char *px_piece_endpoint(const struct px_piece *pc);
const struct eng_cap *px_piece_cap(const struct px_piece *pc);
uint64_t px_piece_epoch(const struct px_piece *pc);
uint64_t px_piece_resv(const struct px_piece *pc);
/* px_piece_beside - whether the master that granted pc's reservation takes
 * a commit sent beside its write (Reservation.beside). */
int px_piece_beside(const struct px_piece *pc);
/* px_resv_tell_landed - tell the master (Landed) of each reservation taking
 * commits beside writes, none of whose pieces was tainted, how far its
 * writes are done: below its first unsettled piece (its bump pointer when
 * none is), so that the ranges of values there that went since may be
 * used again, while puts go on into the pieces above. No call when there
 * is nothing new. By the heartbeat, and before a remove or
 * an upsert (so that a value this proxy put and then removes frees its
 * space at once). Any thread. */
void px_resv_tell_landed(struct px_proxy *px);
/* --- values to take back later (uncommit.c) --- */
struct px_uncommits;
/* How many wait at most; past that, one more is logged and left. */
#define PX_UNCOMMIT_MAX 4096
/* px_uncommits_create - px->uncommits, empty: 0 or LUNAR_ERR_INTERNAL.
 * px_uncommits_destroy - free it and what waits there (the proxy goes). */
int px_uncommits_create(struct px_proxy *px);
void px_uncommits_destroy(struct px_proxy *px);
/* px_uncommit_later - the master did not answer for key of tenant in a
 * BatchPutUncommit (committed beside its write at off of reservation
 * resv, which failed): px_uncommit_retry asks again. Any thread between
 * px_uncommits_create and px_uncommits_destroy (puts run in between). */
void px_uncommit_later(struct px_proxy *px, const char *tenant, const char *key, uint64_t resv,
		       uint64_t off);
/* px_uncommit_retry - ask again for each waiting, until the master does
 * not answer for one (the rest wait with it); one it answered for is
 * done, whatever the answer. The heartbeat, after an answered Ping (one
 * thread: nothing else takes one out). */
void px_uncommit_retry(struct px_proxy *px);
/* px_uncommit_mark - a mark for px_uncommit_waits, read before the call
 * that may tell a put its key exists. Any thread, as px_uncommit_later. */
uint64_t px_uncommit_mark(struct px_proxy *px);
/* px_uncommit_waits - whether an answer "the key exists" to a call made
 * after mark may be of a value of ours that is going: one of key of
 * tenant waits to be taken back, or one (of any key) was taken back since
 * mark. Lock-free while none waits or went. Same threads. */
bool px_uncommit_waits(struct px_proxy *px, const char *tenant, const char *key, uint64_t mark);

/* px_resv_drop_all - forget every reservation without a word: the master
 * forgot them (a new leader). px_resv_drop_before - those whose Reserve
 * was sent before asked_ns (lc_now_ns): a Ping sent then found that the
 * master forgot us (it restarted, or declared us dead); one asked for
 * since was granted by the master that knows us now. Any thread. */
void px_resv_drop_all(struct px_proxy *px);
void px_resv_drop_before(struct px_proxy *px, uint64_t asked_ns);

/* --- HA: what this proxy committed, for a new leader (objidx.c) --- */
struct px_objidx;
/* The value of a committed object, as its put asked for it. */
struct px_objidx_val {
	uint64_t size;
	uint32_t crc;
	int hard_pin;
	uint64_t soft_pin_ttl_ms;
};
/* px_objidx_create - an empty index (a few MB of buckets); NULL on ENOMEM.
 * px_objidx_destroy - free it; NULL is a no-op. */
struct px_objidx *px_objidx_create(void);
void px_objidx_destroy(struct px_objidx *x);
/* px_objidx_put - (tenant, key) committed with value v at the MEMORY
 * replicas of reps (a PutStart reply's; copied), replacing what the key
 * had. px_objidx_remove - this proxy removed it. Any thread; an internal
 * lock; ENOMEM drops the record (logged nowhere: a miss after failover). */
void px_objidx_put(struct px_objidx *x, const char *tenant, const char *key,
		   const struct px_objidx_val *v, Lunar__Replica *const *reps, size_t n);
void px_objidx_remove(struct px_objidx *x, const char *tenant, const char *key);
/* px_objidx_count - objects indexed. */
uint64_t px_objidx_count(struct px_objidx *x);
/* px_objidx_report - ReportObjects of the whole index to the master, in
 * batches; *again when a placement's segment was not mounted there yet
 * (send it all again at a later beat). 0 or the failed call's code. The
 * heartbeat thread; puts that index meanwhile wait. */
int px_objidx_report(struct px_proxy *px, int *again);

/* --- sessions (session.c) --- */
struct px_session {
	int sock;
	int efd;
	int memfd;
	uint64_t client_id;
	pid_t pid;
	uid_t uid;
	char tenant[LC_TENANT_MAX];
	struct px_region rg; /* the proxy's own copy of the layout */
	uint32_t cons;	     /* private consumer index; loop thread only */
	uint64_t active_ns;  /* when its ring last brought work; loop thread only */
	/* Socket input, loop thread only: the hello until open, then
	 * registration messages, gathered without ever blocking the loop. */
	int open;
	int refusal;		 /* decided at accept, answered after the hello */
	uint64_t rx_deadline_ms; /* for the hello, then for a started message */
	union {
		struct lc_hello hello;
		struct lc_reg_req reg;
	} rx;
	size_t rxlen;
	int rxfd; /* a descriptor that came with the message being gathered */
	atomic_int refs;
	atomic_bool dead;
	atomic_bool leased;		/* it looked keys up: leases may be held for it */
	struct px_lease_cap *lease_cap; /* its leased keys (lease_cap.c) */
	atomic_uint inflight;		/* requests queued or running */
	atomic_uint inflight_items;	/* and the keys they name */
	uint64_t reg_bytes;		/* registered memory mapped; loop thread only */
	struct px_proxy *px;
	struct px_session *prev, *next; /* px->sessions; loop thread only */
};

/* Closed clients whose leases wait for the heartbeat to give them back
 * (one successful Ping each time); past this many, as while the master is
 * unreachable, the rest run out on their own. */
#define PX_GONE_MAX 65536

/* Figures for /metrics; relaxed atomics, any thread. */
/* Why a connection was refused before its session opened
 * (lunar_proxy_rejected_connections_total{reason}). */
enum px_reject {
	PX_REJECT_UNAUTHORIZED,	    /* SO_PEERCRED not allowed */
	PX_REJECT_TOO_MANY_CLIENTS, /* --max-clients reached */
	PX_REJECT_VERSION,	    /* protocol version mismatch */
	PX_REJECT_BAD_HELLO,	    /* bad magic or tenant */
	PX_REJECT_INTERNAL,	    /* the proxy could not make the session */
	PX_REJECT_MAX
};

struct px_stats {
	atomic_uint_fast64_t requests[LC_OP_MAX]; /* by enum lc_op */
	atomic_uint_fast64_t requests_inline;	  /* run on the event loop itself */
	atomic_uint_fast64_t key_errors;	  /* per-key results < 0 */
	atomic_uint_fast64_t lease_hits;	  /* served without the master */
	atomic_uint_fast64_t lease_misses;
	atomic_uint_fast64_t leases_released; /* given back when their reader closed */
	atomic_uint_fast64_t checksum_failures;
	atomic_uint_fast64_t puts_beside;      /* committed while their bytes travelled */
	atomic_uint_fast64_t puts_uncommitted; /* and taken back: the write failed */
	atomic_uint_fast64_t bytes_put;
	atomic_uint_fast64_t bytes_got;
	atomic_uint_fast64_t busy;	 /* requests refused with BUSY */
	atomic_uint_fast64_t violations; /* clients disconnected for cause */
	atomic_uint_fast64_t clients_total;
	atomic_uint_fast64_t hangups[2];	      /* ended by the client's hang-up: [1] in
						       * the middle of a call (it died) */
	atomic_uint_fast64_t rejected[PX_REJECT_MAX]; /* by enum px_reject */
	atomic_uint_fast64_t lease_cap_busy;	      /* reads refused by --max-client-leases */
};

#define PX_COUNT(px, field, n)                                                                     \
	atomic_fetch_add_explicit(&(px)->stats.field, (n), memory_order_relaxed)

/* --- the proxy --- */
struct px_proxy {
	struct px_config cfg;
	struct px_stats stats;
	struct lc_http *http;
	char http_addr[LC_HTTP_ADDR_MAX]; /* "HOST:PORT" of http, told to clients; set before
					   * the loop starts */
	struct auth_http_gate http_gate;  /* of the embedded master's /admin pages */
	struct mst_http master_http;	  /* what the embedded master's pages serve */
	uint64_t client_id;		  /* this proxy's id at the master */
	struct mst_master *master;	  /* embedded only */
	struct px_mc *mc;
	struct px_lease_cache *leases;
	atomic_uint_fast64_t lease_ttl_ms; /* as the master last granted */
	struct eng_engine *engine;
	const char *endpoint; /* our data port, also our segment's name */
	void *segment;
	struct px_pool *pool;
	struct px_closer *closer;
	int listen_fd;
	struct lc_uds_file sock_file; /* listen_fd's file, removed at exit if still there */
	int epfd;
	int stop_efd; /* signalfd: SIGTERM, SIGINT */
	unsigned nsessions;
	unsigned spare_cpus; /* CPUs clients may busy beside the loop (main.c) */
	uint32_t crowded;    /* hints last written to every ring; loop thread only */
	uint32_t loop_cpu;
	struct px_session *sessions;
	struct px_disk *disk; /* the SSD tier, NULL without --disk-dir */
	atomic_bool mounted;
	struct px_objidx *objidx;	    /* HA (--master etcd://) only, else NULL */
	struct px_resv_pool *resv;	    /* put-ahead (resv.c); NULL when off */
	struct px_uncommits *uncommits;	    /* (uncommit.c) */
	atomic_uint_fast64_t reported_view; /* the view our objects were reported in */
	atomic_bool reporting;		    /* a report is being sent (one at a time) */
	atomic_bool hb_live;		    /* hb_lock and hb_cond are set up */
	atomic_int mount_err;		    /* the last mount's failure code, logged once */
	atomic_bool master_ok;		    /* the last heartbeat got an answer */
	atomic_bool ping_lost;		    /* a Ping went unanswered since our last mount */
	atomic_bool ping_retried;	    /* the heartbeat was kicked since the last answer */
	atomic_bool leaving;		    /* our segment given back: never mount it again */
	atomic_uint_fast64_t reg_bytes;	    /* registered memory of all clients */
	uint32_t reg_ranges;		    /* and its ranges; loop thread only */
	struct px_reg_owner *reg_owners;    /* the same by uid; loop thread only */
	size_t n_reg_owners;
	atomic_bool stopping;
	uint64_t drain_until_ms; /* after SIGTERM with --grace; loop thread only */
	atomic_bool hb_kick;	 /* ping again at once (more offload work waits) */
	pthread_t heartbeat;
	pthread_t prefault; /* makes the segment resident at start */
	bool prefault_started;
	pthread_mutex_t hb_lock;
	pthread_cond_t hb_cond;
	/* Pings come from the heartbeat, /ready and HEALTH at once: one mounts
	 * at a time (a fence would wipe the secret another's mount brought),
	 * and not again for a Ping sent before the last mount (mount_seq). */
	pthread_mutex_t mount_lock;
	atomic_uint_fast64_t mount_seq;
	/* Clients closed since the last heartbeat (hb_lock): their leases go.
	 * The heartbeat takes the array; it grows as needed. */
	uint64_t *gone;
	size_t ngone, gone_cap;
};

/*
 * px_session_accept - take an accepted connection: peer credentials and the
 * client limit are checked at once (a refusal is sent and the socket closed:
 * a negative code); else 0 and a session waiting for its hello, which must
 * arrive within 2 s, as must the rest of any message once its first byte
 * came (px_session_expired). Loop thread; never blocks.
 */
int px_session_accept(struct px_proxy *px, int sock, struct px_session **out);
/*
 * px_session_input - consume what the client sent, without blocking: the
 * hello (then the handshake completes: 1 is returned and the session is
 * open) or registration messages (0). -1 when the session must be closed,
 * with *why set for a violation, NULL for a hang-up or a refused hello.
 */
int px_session_input(struct px_proxy *px, struct px_session *s, const char **why);
/* px_session_expired - 1 if s waits past its deadline for the rest of a
 * message (the hello, or a registration it started). */
int px_session_expired(const struct px_session *s, uint64_t now_ms);
/* px_session_get - take one more reference on s (px_session_put drops it).
 * Any thread; the caller must already hold a reference. */
void px_session_get(struct px_session *s);
/* px_session_put - drop a reference; the last one unmaps and closes. */
void px_session_put(struct px_session *s);
/* px_session_mid_call - whether s, hanging up now, was in the middle of a
 * call: requests of it queued or running, descriptors published and not
 * taken, or a completion slot not given back (liblunar's lunar_close
 * needs every call finished, so only a client that died or gave up has
 * one). Read from its region for a counter only. Loop thread. */
bool px_session_mid_call(const struct px_session *s);
/* px_session_kill - mark dead (hang-up or violation) and log why. */
void px_session_kill(struct px_session *s, const char *why);

/* --- registered memory (mreg.c); loop thread only --- */
/* What the clients of one uid have registered (the budget: mreg.c). */
struct px_reg_owner {
	uid_t uid;
	uint32_t ranges;
	uint64_t bytes;
};
/* px_mreg_default_max - --max-registrations unless given: what
 * vm.max_map_count leaves beside the proxy's own mappings and max_clients
 * regions, in LC_MAX_REGIONS..65536. Any thread. */
unsigned px_mreg_default_max(unsigned max_clients);
/* px_mreg_fd_check - 0 and *size (its length in bytes) when fd is memory the
 * proxy may map for a client: a memfd sealed against shrinking, not on
 * hugetlbfs; else LUNAR_ERR_INVALID_PARAMS. */
int px_mreg_fd_check(int fd, uint64_t *size);
/* px_mreg_handle - act on one registration message (fd: the descriptor
 * that came with it, or -1; always consumed) and reply. 0, or -1 with *why
 * set when s must be closed. */
int px_mreg_handle(struct px_session *s, const struct lc_reg_req *q, int fd, const char **why);
/* px_mreg_drop_all - drop the session's references to its ranges. */
void px_mreg_drop_all(struct px_session *s);

/* --- requests (ops_*.c) --- */
/*
 * px_req_inline - whether r may run on the event loop itself: only when it
 * cannot block (embedded master, so no RPC; local memory only, no SSD tier
 * for gets; no put that may wait for an eviction round; no test delay) and
 * is small enough not to hold other clients back. Skipping the
 * hand-off to a worker is what makes a small request cost microseconds.
 */
int px_req_inline(const struct px_proxy *px, const struct px_req *r);
/* px_req_run - execute a decoded request and complete it to the client
 * (px_req_drop when its session is dead by then). Worker thread; blocks on
 * the master and transfers. Frees r. */
void px_req_run(struct px_proxy *px, struct px_req *r);
/* px_req_drop - give up r, a request of a dead session not run: its
 * session's reference and in-flight count go, r is freed. Any thread. */
void px_req_drop(struct px_req *r);
/*
 * px_run_put, px_run_get, px_run_remove - the executors px_req_run picks by
 * r's op: put and upsert; get, exists and prefix match; remove. Each sets
 * every item's result in r and returns the completion's result: 0, for a
 * prefix match the count of leading keys that exist, or LUNAR_ERR_INTERNAL
 * (out of memory; no item was tried). r stays the caller's. Worker thread (or
 * the loop when px_req_inline said so); blocks on the master, transfers and
 * the SSD tier.
 */
int64_t px_run_put(struct px_proxy *px, struct px_req *r);
int64_t px_run_get(struct px_proxy *px, struct px_req *r);
int64_t px_run_remove(struct px_proxy *px, struct px_req *r);
/*
 * px_debug_hold - the --debug-*-delay test hooks: sleep ms, but not past the
 * death of s (looked at every 50 ms: a hook must stay idle enough for the
 * idle-CPU test, also under the sanitizers). Worker thread.
 */
void px_debug_hold(const struct px_session *s, uint64_t ms);

/* px_lease_margin_ms - how long before its deadline a cached lease is no
 * longer used: a read must end inside the lease. */
uint64_t px_lease_margin_ms(struct px_proxy *px);
/* px_read_by - a read by client s at now_ms, for the lease cache (and s
 * is marked as holding leases). */
struct px_read px_read_by(struct px_proxy *px, struct px_session *s, uint64_t now_ms);
/* px_lease_renew - renew the leases of cached keys still being read. */
void px_lease_renew(struct px_proxy *px);
/* px_lease_reader_gone - client s closed: the heartbeat, woken now, gives
 * back the leases only its reads needed (SPEC: a dead client's leases
 * drop). Any thread. */
void px_lease_reader_gone(struct px_proxy *px, const struct px_session *s);
/* px_lease_release_gone - the heartbeat's part of px_lease_reader_gone:
 * BatchLeaseRelease of those leases. */
void px_lease_release_gone(struct px_proxy *px);

/* --- leases one client may hold (lease_cap.c) --- */
struct px_lease_cap;
/* px_lease_cap_alloc - an empty set for a new session, or NULL (out of
 * memory; the session then reads uncapped). px_lease_cap_free(NULL) is a
 * no-op. Either on any thread, the set unused by others. */
struct px_lease_cap *px_lease_cap_alloc(void);
void px_lease_cap_free(struct px_lease_cap *c);
/*
 * px_lease_cap_take - s is about to read key (klen bytes, of its tenant) and
 * so take a lease on it: 0 when it may (the key counted for this lease
 * period, or not when out of memory), LUNAR_ERR_BUSY when it holds
 * --max-client-leases other keys already. Any thread; takes the set's own
 * mutex, never blocks otherwise.
 */
int px_lease_cap_take(struct px_proxy *px, struct px_session *s, const char *key, uint32_t klen);
/* px_lease_cap_drop - s removed key: it no longer counts. Any thread. */
void px_lease_cap_drop(struct px_session *s, const char *key, uint32_t klen);

/* --- closing what clients handed us (closer.c) --- */
struct px_closer;
/* px_closer_create - a closer with its first closing thread (it adds more
 * while closes hang), and its signal handler installed. Returns 0 and *out
 * (px_closer_destroy frees it) or LUNAR_ERR_INTERNAL. Start-up thread. */
int px_closer_create(struct px_closer **out);
/* px_closer_close - close fd (a client's connection, or a descriptor it
 * sent) on a closing thread; ignores fd < 0. Never blocks on the close
 * itself, which may last as long as the client chooses, and one such close
 * does not hold up the others. Any thread. */
void px_closer_close(struct px_closer *c, int fd);
/* px_closer_destroy - close what is queued and stop; waits a second for a
 * close that is stuck, then leaves it (and the closer) to the exit. */
void px_closer_destroy(struct px_closer *c);

/* --- workers (pool.c) --- */
struct px_pool;
/* px_pool_create - start nthreads workers running px_req_run on what
 * px_pool_submit queues. px must outlive the pool. Returns 0 and *out
 * (px_pool_destroy frees it) or LUNAR_ERR_INTERNAL (no thread started
 * stays). Start-up thread. */
int px_pool_create(struct px_proxy *px, unsigned nthreads, struct px_pool **out);
/* px_pool_submit - queue r (the pool owns it). Never blocks. */
void px_pool_submit(struct px_pool *p, struct px_req *r);
/* px_pool_drop - px_req_drop every request of the dead session s still
 * queued, so that its last reference goes as soon as the running ones end.
 * Loop thread. */
void px_pool_drop(struct px_pool *p, struct px_session *s);
/* px_pool_destroy - run what is queued, stop and join the threads. */
void px_pool_destroy(struct px_pool *p);

/* --- event loop (loop.c) and heartbeat (heartbeat.c) --- */
/*
 * px_loop_run - the event loop, on the calling (main) thread: accepts
 * clients, drains their rings, handles SIGTERM/SIGINT (with --grace, first
 * serving reads until the grace ends). Returns 0 once stopping, every
 * session closed; -errno if epoll fails. Blocks until then.
 */
int px_loop_run(struct px_proxy *px);
/*
 * px_heartbeat_start - start the heartbeat thread (Ping every
 * ping_interval_ms, re-mount, lease give-back, disk-tier work). With an
 * embedded master, first mounts our segment on this thread. Returns 0, or
 * LUNAR_ERR_INTERNAL when no thread could be started. Start-up thread.
 */
int px_heartbeat_start(struct px_proxy *px);
/* px_heartbeat_stop - set px->stopping, wake the heartbeat and join it.
 * hb_lock and hb_cond stay usable afterwards. Blocks until a beat in
 * progress ends. Shutdown thread, once. */
void px_heartbeat_stop(struct px_proxy *px);
/* px_http_start - serve /metrics, /health, /ready, /disk/status (and, with
 * an embedded master, its /admin/ queries, behind the gate of
 * auth/http_gate.h) on --http-port. 0 or a code. */
int px_http_start(struct px_proxy *px);
/* px_segment_ready - 1 when our segment is mounted (or we have none):
 * health and readiness report the master unusable until then. */
int px_segment_ready(struct px_proxy *px);
/* px_segment_unmount - give our segment back (grace_ms > 0: it stays
 * readable and takes no new data for that long, then goes), for good: the
 * heartbeat mounts it no more. 0 or a code. */
int px_segment_unmount(struct px_proxy *px, uint64_t grace_ms, uint64_t timeout_ms);
/* px_master_ping - one Ping (and a re-mount if asked). 0 or a code. The
 * first Ping lost after an answered one, the heartbeat's or a health
 * check's, kicks the heartbeat to ping again at once: calls fail fast while
 * the master is taken for down, and a blip (a connection cut, one slow
 * answer) should cost them a round trip, not a ping interval. */
int px_master_ping(struct px_proxy *px);
/* px_heartbeat_kick - have the heartbeat ping now rather than at its next
 * interval. Any thread. */
void px_heartbeat_kick(struct px_proxy *px);

/* --- SSD tier (disk_tier.c) --- */
/*
 * px_disk_open - with --disk-dir: open the store (scan, verify, log what was
 * dropped) and start the offload worker. Before the engine starts (it
 * serves px_disk_read). 0 or a code; without --disk-dir 0 and no tier.
 */
int px_disk_open(struct px_proxy *px);
/* px_disk_stop - stop the offload worker (tasks queued are dropped: the
 * master re-queues them). Before the master client goes. */
void px_disk_stop(struct px_proxy *px);
/* px_disk_close - close the store; after the engine is destroyed. */
void px_disk_close(struct px_proxy *px);
/* px_disk_register - tell the master about every record (DiskReplicasAdd,
 * even none: it learns we have a disk tier), unless done already and not
 * again (after a (re)mount). 0 or a code (try again later). Blocks. */
int px_disk_register(struct px_proxy *px, int again);
/* px_disk_offload - hand Ping's offload tasks to the worker; never blocks
 * on disk. */
void px_disk_offload(struct px_proxy *px, Lunar__OffloadTask *const *t, size_t n);
/* px_disk_busy - whether a Ping brought offload tasks within the last
 * ping interval: the heartbeat then asks again every PX_OFFLOAD_POLL_MS
 * (eviction keeps objects in memory until their copy exists, so a task
 * waiting a whole interval holds memory puts are refused for). Any thread. */
int px_disk_busy(struct px_proxy *px);
#define PX_OFFLOAD_POLL_MS 2
/* px_disk_forget - hand Ping's forget records to the same worker: each
 * record goes if (tenant, key) is still stored at its location (a newer
 * copy of a key put again stays). Heartbeat thread; never blocks on disk. */
void px_disk_forget(struct px_proxy *px, Lunar__DiskRecord *const *f, size_t n);
/*
 * px_disk_read - the value of (tenant, key) from our SSD tier into iov,
 * CRC-checked: its length or OBJECT_NOT_FOUND, CHECKSUM_MISMATCH,
 * BUFFER_OVERFLOW, FILE_READ_FAIL. A record found bad is reported to the
 * master. The engine's disk_read callback (arg: the proxy); any thread.
 */
int64_t px_disk_read(void *arg, const char *tenant, const char *key, const struct iovec *iov,
		     int iovcnt);
/* px_disk_length - the length of (tenant, key)'s value in our SSD tier, or
 * OBJECT_NOT_FOUND. The engine's disk_length callback; any thread. */
int64_t px_disk_length(void *arg, const char *tenant, const char *key);
/* px_disk_get - px_disk_read for our own reads: want_crc (the master's
 * CRC32C of the value) must match the record's, else CHECKSUM_MISMATCH. */
int64_t px_disk_get(struct px_proxy *px, const char *tenant, const char *key,
		    const struct iovec *iov, int iovcnt, uint32_t want_crc);
struct dsk_get_item;
/* px_disk_get_batch - dsk_get_batch over our SSD tier (v[i].res set;
 * OBJECT_NOT_FOUND for all without a tier); a record found corrupt or
 * short is reported to the master as px_disk_get does. Blocks. */
void px_disk_get_batch(struct px_proxy *px, struct dsk_get_item *v, size_t n);
/* px_disk_metrics - append the lunar_proxy_disk_* figures to rep's body for
 * /metrics (nothing without a tier). px_disk_status - the JSON of GET
 * /disk/status in rep (404 and {"enabled":false} without a tier). Both
 * return 0 or -ENOMEM (rep's body then cut short); HTTP thread, never
 * block on disk (the store's counters only). */
int px_disk_metrics(struct px_proxy *px, struct lc_http_reply *rep);
int px_disk_status(struct px_proxy *px, struct lc_http_reply *rep);

#endif /* LUNAR_PROXY_PX_INT_H */
