/*
 * master_rpc.c - lunar-bench --master: the control plane alone. Requester
 * threads (on the proxy's own RPC client, proto/rpc_client.h) pose as one
 * proxy with a fake segment that never moves a byte, fill the master with
 * PutStart+PutEnd pairs and measure pairs/s, GetReplicaList/s and
 * BatchExistKey keys/s at 10k objects and at N (flatness), plus the
 * master's resident memory per object when its pid is given.
 */
#include "bench.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "lunar.h"
#include "parse.h"
#include "rpc.h"
#include "rpc_follow.h"

#define MB_SMALL_LEVEL	  10000ull
#define MB_MAX_REQUESTERS 256
#define MB_MAX_BATCH	  LUNAR_BATCH_MAX
#define MB_PING_MS	  1000
#define MB_ERR_SHOWN	  5
#define MB_KEY_MAX	  64
#define MB_SEGMENT_BYTES  (1ull << 40) /* bookkeeping only: no byte ever moves */
#define MB_SEGMENT_ADDR	  "127.0.0.1:1"
#define MB_MAX_OBJECTS	  (1ull << 32)

enum mb_op { MB_PUT, MB_GET, MB_EXIST };

struct mb;

struct requester {
	struct mb *b;
	pthread_t tid;
	uint64_t rng;
	uint64_t errors;
	char (*keys)[MB_KEY_MAX]; /* one batch of keys */
	char **keyp;
};

/* One phase's headline figures, kept for the flatness ratios. */
struct phase_fig {
	double per_s, p50_us, p99_us;
	uint64_t errors;
};

struct mb {
	/* configuration */
	const char *url, *tenant;
	unsigned nreq, timeout_ms;
	uint64_t objects, window, batch, exist_batches, obj_size;
	int master_pid, keep;
	uint64_t client_id;
	char seg[64], prefix[32];
	/* connection */
	const char *key_path; /* --cluster-key */
	struct lp_follow *cl;
	struct requester *rq;
	/* keys [0, resident) are committed */
	uint64_t resident;
	/* the running phase */
	enum mb_op op;
	uint64_t base, count;
	atomic_uint_fast64_t next;
	uint64_t *lat;
	pthread_barrier_t start;
	atomic_uint_fast64_t errors_shown;
	/* the heartbeat */
	pthread_t pinger;
	pthread_mutex_t plock;
	pthread_cond_t pcond;
	int stop, pinger_running;
	atomic_uint_fast64_t ping_failures, remounts;
};

static const char usage_text[] =
    "usage: lunar-bench --master URL [OPTIONS]\n"
    "\n"
    "Drives lunar-master over its real RPC as one fake proxy: mounts a segment\n"
    "of 1 TiB at " MB_SEGMENT_ADDR " (no byte ever moves), pings it every second,\n"
    "and at each level (10000 objects, then --objects) fills the master to the\n"
    "level with PutStart+PutEnd pairs, then measures a window of further pairs,\n"
    "GetReplicaList calls on random resident keys and BatchExistKey batches.\n"
    "\n"
    "Options:\n"
    "  --master URL          the master, e.g. tcp://127.0.0.1:50051\n"
    "  --requesters R        requester threads, each call its own connection (default 4)\n"
    "  --cluster-key FILE    the master's cluster key (env LUNAR_CLUSTER_KEY_FILE)\n"
    "  --objects N           objects resident at the top level (default 1000000)\n"
    "  --window W            calls per measured put and get window (default 10000)\n"
    "  --batch B             keys per BatchExistKey (default 128)\n"
    "  --exist-batches K     BatchExistKey calls per window (default 1000)\n"
    "  --object-size SIZE    size each PutStart asks for (default 4KiB)\n"
    "  --master-pid PID      read the master's VmRSS to report bytes per object\n"
    "  --tenant NAME         tenant (default \"bench\")\n"
    "  --timeout-ms N        per-call timeout (default 30000)\n"
    "  --keep                leave the segment and its objects mounted\n"
    "\n"
    "Figures: fill_to_L_*, put_at_L_* (pairs), get_at_L_*, exist_at_L_* (per\n"
    "batch; _keys_per_s), each with _ops, _errors, _wall_s, _per_s, and\n"
    "latencies _mean/_p50/_p90/_p99/_p999/_max_us; flatness_* = figure at N /\n"
    "figure at 10000; master_rss_*_kib and master_bytes_per_object.\n"
    "Throughput is calls over the phase's wall-clock time, all requesters.\n";

/* --- one call ----------------------------------------------------------- */

/*
 * One request and its reply. Returns the reply's status code with *rep set
 * (free it with protobuf_c_message_free_unpacked), or a negative code with
 * *rep NULL when no decodable reply came.
 */
static int mb_call(struct mb *b, uint32_t method, const ProtobufCMessage *req,
		   ProtobufCMessage **rep)
{
	const struct lp_method *mt = lp_method_find(method);
	int rc;

	*rep = NULL;
	if (!mt)
		return LUNAR_ERR_INTERNAL;
	rc = lp_follow_call(b->cl, mt, req, rep, b->timeout_ms);
	if (rc) {
		*rep = NULL;
		return rc;
	}
	return lp_status(*rep)->code;
}

/* mb_call for calls whose reply holds nothing but the status. */
static int mb_call_status(struct mb *b, uint32_t method, const ProtobufCMessage *req)
{
	ProtobufCMessage *rep;
	int rc = mb_call(b, method, req, &rep);

	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* --- the fake proxy: segment and heartbeat ------------------------------- */

static int segment_mount(struct mb *b)
{
	Lunar__MountSegmentRequest rq = LUNAR__MOUNT_SEGMENT_REQUEST__INIT;
	Lunar__SegmentDesc sd = LUNAR__SEGMENT_DESC__INIT;

	sd.name = b->seg;
	sd.endpoint = (char *)MB_SEGMENT_ADDR;
	sd.size = MB_SEGMENT_BYTES;
	rq.client_id = b->client_id;
	rq.segment = &sd;
	return mb_call_status(b, LUNAR__METHOD__MOUNT_SEGMENT, &rq.base);
}

static int segment_unmount(struct mb *b)
{
	Lunar__UnmountSegmentRequest rq = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;

	rq.client_id = b->client_id;
	rq.name = b->seg;
	return mb_call_status(b, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq.base);
}

static void ping_once(struct mb *b)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	ProtobufCMessage *rep;
	int rc;

	rq.client_id = b->client_id;
	rc = mb_call(b, LUNAR__METHOD__PING, &rq.base, &rep);
	if (rc) {
		atomic_fetch_add(&b->ping_failures, 1);
	} else if (((Lunar__PingReply *)rep)->need_remount) {
		/* The master lost us (restart or a missed client_ttl): the objects
		 * are gone and the figures after this point are not comparable. */
		fprintf(stderr, "lunar-bench: the master asked for a remount; remounting\n");
		atomic_fetch_add(&b->remounts, 1);
		segment_mount(b);
	}
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
}

static void *pinger_main(void *arg)
{
	struct mb *b = arg;
	struct timespec ts;

	pthread_mutex_lock(&b->plock);
	while (!b->stop) {
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)MB_PING_MS % 1000 * 1000000L;
		ts.tv_sec += MB_PING_MS / 1000 + ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&b->pcond, &b->plock, &ts);
		if (b->stop)
			break;
		pthread_mutex_unlock(&b->plock);
		ping_once(b);
		pthread_mutex_lock(&b->plock);
	}
	pthread_mutex_unlock(&b->plock);
	return NULL;
}

static void pinger_stop(struct mb *b)
{
	if (!b->pinger_running)
		return;
	pthread_mutex_lock(&b->plock);
	b->stop = 1;
	pthread_cond_signal(&b->pcond);
	pthread_mutex_unlock(&b->plock);
	pthread_join(b->pinger, NULL);
	b->pinger_running = 0;
}

/* --- the operations -------------------------------------------------------- */

static void key_of(const struct mb *b, uint64_t i, char *key)
{
	snprintf(key, MB_KEY_MAX, "%s%" PRIu64, b->prefix, i);
}

static uint64_t rng_next(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ull;
	return bench_splitmix64(*s);
}

static int op_put(struct requester *r, uint64_t i)
{
	struct mb *b = r->b;
	Lunar__PutStartRequest ps = LUNAR__PUT_START_REQUEST__INIT;
	Lunar__PutEndRequest pe = LUNAR__PUT_END_REQUEST__INIT;
	ProtobufCMessage *rep;
	char key[MB_KEY_MAX];
	int rc;

	key_of(b, i, key);
	ps.client_id = b->client_id;
	ps.tenant = (char *)b->tenant;
	ps.key = key;
	ps.size = b->obj_size;
	ps.replica_num = 1;
	rc = mb_call(b, LUNAR__METHOD__PUT_START, &ps.base, &rep);
	if (!rc && ((Lunar__PutStartReply *)rep)->n_replicas != 1)
		rc = LUNAR_ERR_INTERNAL;
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	if (rc)
		return rc;
	pe.client_id = b->client_id;
	pe.tenant = (char *)b->tenant;
	pe.key = key;
	return mb_call_status(b, LUNAR__METHOD__PUT_END, &pe.base);
}

static int op_get(struct requester *r)
{
	struct mb *b = r->b;
	Lunar__GetReplicaListRequest rq = LUNAR__GET_REPLICA_LIST_REQUEST__INIT;
	Lunar__GetReplicaListReply *g;
	ProtobufCMessage *rep;
	char key[MB_KEY_MAX];
	int rc;

	key_of(b, rng_next(&r->rng) % b->resident, key);
	rq.tenant = (char *)b->tenant;
	rq.key = key;
	rc = mb_call(b, LUNAR__METHOD__GET_REPLICA_LIST, &rq.base, &rep);
	g = (Lunar__GetReplicaListReply *)rep;
	if (!rc && (g->n_replicas < 1 || g->size != b->obj_size))
		rc = LUNAR_ERR_INTERNAL;
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

static int op_exist(struct requester *r)
{
	struct mb *b = r->b;
	Lunar__BatchKeysRequest rq = LUNAR__BATCH_KEYS_REQUEST__INIT;
	Lunar__BatchCodesReply *c;
	ProtobufCMessage *rep;
	int rc;

	for (uint64_t k = 0; k < b->batch; k++) {
		key_of(b, rng_next(&r->rng) % b->resident, r->keys[k]);
		r->keyp[k] = r->keys[k];
	}
	rq.client_id = b->client_id;
	rq.tenant = (char *)b->tenant;
	rq.n_keys = b->batch;
	rq.keys = r->keyp;
	rc = mb_call(b, LUNAR__METHOD__BATCH_EXIST_KEY, &rq.base, &rep);
	c = (Lunar__BatchCodesReply *)rep;
	if (!rc && c->n_codes != b->batch)
		rc = LUNAR_ERR_INTERNAL;
	for (size_t k = 0; !rc && k < c->n_codes; k++)
		if (c->codes[k] != 1) /* 1: exists */
			rc = c->codes[k] < 0 ? c->codes[k] : LUNAR_ERR_OBJECT_NOT_FOUND;
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* --- phases -------------------------------------------------------------- */

static void report_error(struct requester *r, const char *what, int rc)
{
	uint64_t seen = atomic_fetch_add(&r->b->errors_shown, 1);

	r->errors++;
	if (seen < MB_ERR_SHOWN)
		fprintf(stderr, "lunar-bench: %s: %s (%d)\n", what, lunar_strerror(rc), rc);
	if (seen == MB_ERR_SHOWN)
		fprintf(stderr, "lunar-bench: further failures are counted, not shown\n");
}

static void *requester_main(void *arg)
{
	static const char *const names[] = {"PutStart+PutEnd", "GetReplicaList", "BatchExistKey"};
	struct requester *r = arg;
	struct mb *b = r->b;
	uint64_t i, t0;
	int rc;

	pthread_barrier_wait(&b->start);
	while ((i = atomic_fetch_add(&b->next, 1)) < b->count) {
		t0 = lc_now_ns();
		switch (b->op) {
		case MB_PUT: rc = op_put(r, b->base + i); break;
		case MB_GET: rc = op_get(r); break;
		default: rc = op_exist(r); break;
		}
		b->lat[i] = lc_now_ns() - t0;
		if (rc)
			report_error(r, names[b->op], rc);
	}
	return NULL;
}

/* Run count calls of op on every requester; the clock starts once all
 * threads exist. Prints the figures under name and fills *f. */
static int run_phase(struct mb *b, const char *name, enum mb_op op, uint64_t count,
		     struct phase_fig *f)
{
	static const char *const units[] = {"pairs", "ops", "batches"};
	unsigned started = 0;
	uint64_t t0, wall, errors = 0;
	double secs;
	char key[96];

	b->op = op;
	b->base = b->resident;
	b->count = count;
	atomic_store(&b->next, 0);
	if (pthread_barrier_init(&b->start, NULL, b->nreq + 1))
		return -1;
	for (; started < b->nreq; started++) {
		b->rq[started].errors = 0;
		if (pthread_create(&b->rq[started].tid, NULL, requester_main, &b->rq[started]))
			break;
	}
	if (started < b->nreq) {
		/* The barrier can never open: the process cannot go on. */
		fprintf(stderr, "lunar-bench: cannot start requester %u\n", started);
		exit(BENCH_EXIT_FAIL);
	}
	pthread_barrier_wait(&b->start);
	t0 = lc_now_ns();
	for (unsigned t = 0; t < started; t++) {
		pthread_join(b->rq[t].tid, NULL);
		errors += b->rq[t].errors;
	}
	wall = lc_now_ns() - t0;
	pthread_barrier_destroy(&b->start);
	if (op == MB_PUT)
		b->resident += count;
	secs = (double)wall / 1e9;
	printf("%s_ops=%" PRIu64 "\n", name, count);
	printf("%s_errors=%" PRIu64 "\n", name, errors);
	printf("%s_wall_s=%.6f\n", name, secs);
	printf("%s_%s_per_s=%.1f\n", name, units[op], secs > 0 ? (double)count / secs : 0.0);
	if (op == MB_EXIST)
		printf("%s_keys_per_s=%.1f\n", name,
		       secs > 0 ? (double)(count * b->batch) / secs : 0.0);
	snprintf(key, sizeof(key), "%s", name);
	bench_print_lat(key, b->lat, count);
	fflush(stdout);
	f->per_s = secs > 0 ? (double)(op == MB_EXIST ? count * b->batch : count) / secs : 0.0;
	f->p50_us = bench_pct_us(b->lat, count, 50);
	f->p99_us = bench_pct_us(b->lat, count, 99);
	f->errors = errors;
	return 0;
}

static void print_rss(const struct mb *b, const char *when, int64_t *out)
{
	*out = b->master_pid ? bench_vm_rss_kib(b->master_pid) : -1;
	if (b->master_pid)
		printf("master_rss_%s_kib=%" PRId64 "\n", when, *out);
}

struct level_figs {
	uint64_t level;
	struct phase_fig put, get, exist;
};

/* Fill to level, then measure the put, get and exist windows there. */
static uint64_t run_level(struct mb *b, uint64_t level, struct level_figs *lf)
{
	struct phase_fig fill;
	char name[64], when[48];
	int64_t rss;
	uint64_t errors = 0;

	lf->level = level;
	if (level > b->resident) {
		snprintf(name, sizeof(name), "fill_to_%" PRIu64, level);
		printf("%s_from=%" PRIu64 "\n", name, b->resident);
		if (run_phase(b, name, MB_PUT, level - b->resident, &fill))
			return 1;
		errors += fill.errors;
	}
	snprintf(when, sizeof(when), "at_%" PRIu64, level);
	print_rss(b, when, &rss);
	snprintf(name, sizeof(name), "put_at_%" PRIu64, level);
	if (run_phase(b, name, MB_PUT, b->window, &lf->put))
		return 1;
	snprintf(name, sizeof(name), "get_at_%" PRIu64, level);
	if (run_phase(b, name, MB_GET, b->window, &lf->get))
		return 1;
	snprintf(name, sizeof(name), "exist_at_%" PRIu64, level);
	if (run_phase(b, name, MB_EXIST, b->exist_batches, &lf->exist))
		return 1;
	return errors + lf->put.errors + lf->get.errors + lf->exist.errors;
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0.0;
}

static void print_flatness(const struct level_figs *lo, const struct level_figs *hi)
{
	printf("flatness_levels=%" PRIu64 ",%" PRIu64 "\n", lo->level, hi->level);
	printf("flatness_put_per_s_ratio=%.3f\n", ratio(hi->put.per_s, lo->put.per_s));
	printf("flatness_put_p50_ratio=%.3f\n", ratio(hi->put.p50_us, lo->put.p50_us));
	printf("flatness_put_p99_ratio=%.3f\n", ratio(hi->put.p99_us, lo->put.p99_us));
	printf("flatness_get_per_s_ratio=%.3f\n", ratio(hi->get.per_s, lo->get.per_s));
	printf("flatness_get_p50_ratio=%.3f\n", ratio(hi->get.p50_us, lo->get.p50_us));
	printf("flatness_get_p99_ratio=%.3f\n", ratio(hi->get.p99_us, lo->get.p99_us));
	printf("flatness_exist_keys_per_s_ratio=%.3f\n", ratio(hi->exist.per_s, lo->exist.per_s));
	printf("flatness_exist_p99_ratio=%.3f\n", ratio(hi->exist.p99_us, lo->exist.p99_us));
}

/* --- setup ----------------------------------------------------------------- */

static int parse_one(struct mb *b, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	uint64_t x;
	int missing = 0, rc;

	if ((v = bench_opt_value(argc, argv, i, "--master", &missing)))
		b->url = v;
	else if ((v = bench_opt_value(argc, argv, i, "--cluster-key", &missing)))
		b->key_path = v;
	else if ((v = bench_opt_value(argc, argv, i, "--tenant", &missing)))
		b->tenant = v;
	else if ((v = bench_opt_value(argc, argv, i, "--objects", &missing)))
		return bench_parse_num("--objects", v, 0, 1, MB_MAX_OBJECTS, &b->objects);
	else if ((v = bench_opt_value(argc, argv, i, "--window", &missing)))
		return bench_parse_num("--window", v, 0, 1, MB_MAX_OBJECTS, &b->window);
	else if ((v = bench_opt_value(argc, argv, i, "--batch", &missing)))
		return bench_parse_num("--batch", v, 0, 1, MB_MAX_BATCH, &b->batch);
	else if ((v = bench_opt_value(argc, argv, i, "--exist-batches", &missing)))
		return bench_parse_num("--exist-batches", v, 0, 1, MB_MAX_OBJECTS,
				       &b->exist_batches);
	else if ((v = bench_opt_value(argc, argv, i, "--object-size", &missing)))
		return bench_parse_num("--object-size", v, 1, 1, 1ull << 30, &b->obj_size);
	else if ((v = bench_opt_value(argc, argv, i, "--requesters", &missing))) {
		rc = bench_parse_num("--requesters", v, 0, 1, MB_MAX_REQUESTERS, &x);
		b->nreq = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--master-pid", &missing))) {
		rc = bench_parse_num("--master-pid", v, 0, 1, INT32_MAX, &x);
		b->master_pid = (int)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--timeout-ms", &missing))) {
		rc = bench_parse_num("--timeout-ms", v, 0, 1, INT32_MAX, &x);
		b->timeout_ms = (unsigned)x;
		return rc;
	} else if (!strcmp(a, "--keep"))
		b->keep = 1;
	else if (missing)
		return bench_usage_error("option %s needs a value", a);
	else
		return bench_usage_error("unknown argument '%s' for --master mode", a);
	return BENCH_EXIT_OK;
}

static void print_config(const struct mb *b)
{
	printf("mode=master\n");
	printf("master=%s\n", b->url);
	printf("requesters=%u\n", b->nreq);
	printf("objects=%" PRIu64 "\n", b->objects);
	printf("window=%" PRIu64 "\n", b->window);
	printf("batch=%" PRIu64 "\n", b->batch);
	printf("exist_batches=%" PRIu64 "\n", b->exist_batches);
	printf("object_size_bytes=%" PRIu64 "\n", b->obj_size);
	printf("segment=%s\n", b->seg);
	printf("segment_bytes=%llu\n", (unsigned long long)MB_SEGMENT_BYTES);
	printf("client_id=%016" PRIx64 "\n", b->client_id);
	printf("key_prefix=%s\n", b->prefix);
	printf("master_pid=%d\n", b->master_pid);
	fflush(stdout);
}

/* The RPC client, keyed when --cluster-key or $LUNAR_CLUSTER_KEY_FILE names
 * a key; the dial waits, so a missing master fails at once. */
static int connect_master(struct mb *b)
{
	struct auth_key key;
	char why[256];
	int keyed, rc;

	if (auth_init())
		return -1;
	keyed = auth_key_resolve(b->key_path, &key, why, sizeof(why));
	if (keyed < 0) {
		fprintf(stderr, "lunar-bench: cluster key: %s\n", why);
		return -1;
	}
	rc = lp_follow_create(b->url, keyed ? &key : NULL, AUTH_ROLE_NODE, LP_CLIENT_DIAL_NOW, NULL,
			      NULL, &b->cl);
	auth_key_wipe(&key);
	if (rc)
		fprintf(stderr, "lunar-bench: cannot reach the master at %s\n", b->url);
	return rc ? -1 : 0;
}

static int requesters_open(struct mb *b)
{
	b->rq = calloc(b->nreq, sizeof(*b->rq));
	if (!b->rq)
		return -1;
	for (unsigned t = 0; t < b->nreq; t++) {
		struct requester *r = &b->rq[t];

		r->b = b;
		r->rng = bench_splitmix64(b->client_id + t);
		r->keys = calloc(b->batch, sizeof(*r->keys));
		r->keyp = calloc(b->batch, sizeof(*r->keyp));
		if (!r->keys || !r->keyp)
			return -1;
	}
	return 0;
}

static void requesters_close(struct mb *b)
{
	for (unsigned t = 0; b->rq && t < b->nreq; t++) {
		free(b->rq[t].keys);
		free(b->rq[t].keyp);
	}
	free(b->rq);
}

/* Mount the segment and start the heartbeat; 0 or an exit code. */
static int fake_proxy_start(struct mb *b)
{
	int rc;

	rc = segment_mount(b);
	if (rc) {
		fprintf(stderr, "lunar-bench: MountSegment: %s (%d)\n", lunar_strerror(rc), rc);
		return rc == LUNAR_ERR_RPC_FAIL || rc == LUNAR_ERR_RPC_TIMEOUT ? BENCH_EXIT_NOCONN
									       : BENCH_EXIT_FAIL;
	}
	if (pthread_create(&b->pinger, NULL, pinger_main, b))
		return BENCH_EXIT_FAIL;
	b->pinger_running = 1;
	return 0;
}

static uint64_t run_all(struct mb *b)
{
	struct level_figs lo = {0}, hi = {0};
	uint64_t small = b->objects < MB_SMALL_LEVEL ? b->objects : MB_SMALL_LEVEL, errors;
	int64_t before, after;

	print_rss(b, "before", &before);
	errors = run_level(b, small, &lo);
	if (b->objects > small) {
		errors += run_level(b, b->objects, &hi);
		print_flatness(&lo, &hi);
	}
	print_rss(b, "after", &after);
	printf("resident_objects=%" PRIu64 "\n", b->resident);
	if (before >= 0 && after >= 0)
		printf("master_bytes_per_object=%.1f\n",
		       (double)(after - before) * 1024.0 / (double)b->resident);
	/* Nothing in the RPC or the master's stats times an eviction round. */
	printf("eviction_round_ms=skipped\n");
	printf("eviction_note=the master exposes no eviction timing over its RPC\n");
	printf("ping_failures=%" PRIu64 "\n", (uint64_t)atomic_load(&b->ping_failures));
	printf("remounts=%" PRIu64 "\n", (uint64_t)atomic_load(&b->remounts));
	return errors + atomic_load(&b->remounts);
}

int bench_master_main(int argc, char **argv)
{
	struct mb b = {.tenant = "bench",
		       .nreq = 4,
		       .timeout_ms = 30000,
		       .objects = 1000000,
		       .window = 10000,
		       .batch = 128,
		       .exist_batches = 1000,
		       .obj_size = 4096,
		       .plock = PTHREAD_MUTEX_INITIALIZER,
		       .pcond = PTHREAD_COND_INITIALIZER};
	uint64_t errors, nlat;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return BENCH_EXIT_OK;
		}
		rc = parse_one(&b, argc, argv, &i);
		if (rc)
			return rc;
	}
	if (!b.url)
		return bench_usage_error("--master needs a URL");
	if (lc_parse_rpc_url(b.url))
		return bench_usage_error("bad --master '%s': want " LC_RPC_URL_FORMS
					 " (e.g. tcp://127.0.0.1:50051)",
					 b.url);
	b.client_id = bench_splitmix64(lc_now_ns() ^ ((uint64_t)getpid() << 32));
	snprintf(b.seg, sizeof(b.seg), "lunar-bench-%016" PRIx64, b.client_id);
	snprintf(b.prefix, sizeof(b.prefix), "mb%08" PRIx32 "-", (uint32_t)b.client_id);
	print_config(&b);
	/* One latency slot per call of the longest phase. */
	nlat = b.objects > b.window ? b.objects : b.window;
	b.lat = calloc(nlat > b.exist_batches ? nlat : b.exist_batches, sizeof(*b.lat));
	if (!b.lat)
		return BENCH_EXIT_FAIL;
	if (connect_master(&b)) {
		free(b.lat);
		return BENCH_EXIT_NOCONN;
	}
	rc = requesters_open(&b) ? BENCH_EXIT_FAIL : fake_proxy_start(&b);
	if (!rc) {
		errors = run_all(&b);
		pinger_stop(&b);
		if (!b.keep && segment_unmount(&b))
			fprintf(stderr, "lunar-bench: UnmountSegment failed\n");
		printf("errors=%" PRIu64 "\n", errors);
		rc = errors ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
	}
	pinger_stop(&b);
	requesters_close(&b);
	lp_follow_destroy(b.cl);
	free(b.lat);
	return rc;
}
