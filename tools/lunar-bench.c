/*
 * lunar-bench.c - put/get/remove throughput and latency through liblunar,
 * with a same-run memcpy and non-temporal copy baseline for the same object
 * size. Every value read back is checked byte for byte. Two more modes live
 * in tools/bench/: --master (the master's RPC alone) and --trace (a request
 * trace replayed with prefix semantics). Output: the configuration, then one
 * stable key=value line per figure (SPEC §12).
 */
#include "lunar.h"
#include "clock.h"
#include "bench/bench.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

enum { EXIT_OK = BENCH_EXIT_OK, EXIT_FAIL = BENCH_EXIT_FAIL, EXIT_NOCONN = BENCH_EXIT_NOCONN };
/* PH_VERIFY runs only with --check sampled: a get of every object again,
 * every byte compared. */
enum phase { PH_PUT, PH_EXISTS, PH_GET, PH_VERIFY, PH_RM };
static const char *const phase_names[] = {"put", "exists", "get", "verify", "rm"};

#define BENCH_MIN_ARENA	      (64ull << 20)
#define BENCH_MAX_THREADS     1024
#define BENCH_MAX_DEPTH	      256	   /* a session's completion slots */
#define BENCH_MAX_SIZE	      (1ull << 40) /* the largest value (SPEC §3) */
#define BENCH_KEY_ROOM	      64	   /* "-<pid>-<index>" after the prefix */
#define BENCH_ERR_SHOWN	      5		   /* failures printed in full; the rest are counted */
#define BENCH_BASELINE_PASSES 8
#define BENCH_BASELINE_NS     300000000ull
#define BENCH_SYNC_MS	      60000 /* --sync-file: how long to wait for the others */
/* Each value is a window of one pseudo-random pattern, at offset 8*i for
 * object i: no fill cost on the put path, and distinct windows for up to
 * PAT_SPAN_MAX/8 objects, so a read returning another object's bytes is caught. */
#define PAT_SPAN_MIN (64ull << 10)
#define PAT_SPAN_MAX (64ull << 20)

struct bench {
	struct lunar_opts opts;
	uint64_t size, count, baseline_bytes;
	unsigned threads, replicas;
	unsigned depth; /* calls each thread keeps in flight in put and get */
	unsigned batch; /* objects a call in put and get (lunar_batch_*) */
	const char *prefix;
	int keep;
	int zero_copy; /* values and get buffers in lunar_alloc memory */
	enum bench_check check;
	const char *sync_path; /* --sync-file: phases start with other processes */
	unsigned sync_procs;
	struct bench_sync sync;
	pid_t pid;
	struct lunar_client *c;
	unsigned char *pattern; /* size + span bytes */
	uint64_t span_words;
	uint64_t *lat; /* one latency per object, for the phase running */
	/* The start gate: workers wait until every thread of the phase exists. */
	pthread_mutex_t gate_lock;
	pthread_cond_t gate_cond;
	int gate_open;
	atomic_uint_fast64_t errors_shown;
};

struct worker {
	struct bench *b;
	pthread_t tid;
	enum phase phase;
	uint64_t first, n;
	unsigned char *buf; /* this thread's get buffers: bench_slots of size bytes */
	uint64_t busy_ns, errors;
	char *key;
	char **keys;	 /* --batch: a key buffer per object of a call */
	size_t key_head; /* bytes of "<prefix>-<pid>-" at the start of key */
};

struct figures {
	uint64_t ops, errors, wall_ns, busy_ns;
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC: comparable across processes */
};

static const char usage_text[] =
    "usage: lunar-bench [OPTIONS]\n"
    "       lunar-bench --master URL [OPTIONS]     (see lunar-bench --master x --help)\n"
    "       lunar-bench --trace FILE --block-size SIZE [OPTIONS]   (likewise)\n"
    "       lunar-bench --tcp-baseline [--size SIZE] [--threads T] [--count N]\n"
    "              [--server-cpus LIST] [--direction get|put|both]\n"
    "              [--send copy|sendfile|zerocopy|staged|crc|uring]\n"
    "              (plain loopback TCP, blocking and busy-poll receive: the wire remote\n"
    "              transfers are measured against; a get's round trip, a 16-byte\n"
    "              request -> SIZE bytes (tcp_*), and a put's, 16 + SIZE bytes -> 16\n"
    "              (tcp_put_*); both unless --direction says. SIZE bytes go by send\n"
    "              (copy, the default), sendfile from a memfd, MSG_ZEROCOPY\n"
    "              (*_zerocopy_sent and *_zerocopy_copied: sends the kernel copied\n"
    "              after all), or io_uring's sendmsg (uring); staged and crc\n"
    "              first do what a put's sending side does: a copy taking the\n"
    "              CRC32C into a buffer of the sender's (a staged value's), or a\n"
    "              CRC32C pass (a registered one's))\n"
    "       lunar-bench --evict-round N   (the master's eviction round at N objects,\n"
    "                                      in process)\n"
    "\n"
    "Puts COUNT objects of SIZE bytes through the node's lunar-proxy from THREADS\n"
    "threads sharing one client, reads each back with lunar_get_into and checks\n"
    "every byte (see --check), then removes them (unless --keep; by force, as\n"
    "the gets leased them: a keyed node's proxy needs --admin-calls). Prints the\n"
    "configuration and then one key=value line per figure; exit 1 if any\n"
    "operation failed or any byte read back was wrong.\n"
    "\n"
    "Options:\n"
    "  --socket PATH          proxy socket (default $LUNAR_SOCKET, then the default path)\n"
    "  --size SIZE            object size, e.g. 4KiB, 1MiB (default 4KiB)\n"
    "  --count N              number of objects (default 10000)\n"
    "  --threads T            threads, each with its share of the objects (default 1)\n"
    "  --depth D              each thread keeps D puts, then D gets, in flight\n"
    "                         (lunar_put_async, lunar_get_async; default 1: the\n"
    "                         synchronous calls); exists, verify and rm stay\n"
    "                         synchronous. With D > 1, THREADS x D is at most 256\n"
    "  --batch K              put and get K objects a call (lunar_batch_put,\n"
    "                         lunar_batch_get_into; default 1), not with --depth\n"
    "  --replicas R           replicas per object (default 1)\n"
    "  --prefix STR           key prefix; keys are STR-<pid>-<i> (default lunar-bench)\n"
    "  --keep                 leave the objects in the store\n"
    "  --zero-copy            values and get buffers in lunar_alloc memory (shared\n"
    "                         with the proxy: no staging copy)\n"
    "  --check full|sampled   full (default): the get phase compares every byte;\n"
    "                         sampled: it compares the first word of every 4 KiB\n"
    "                         and the last word (another object's bytes or an\n"
    "                         unwritten page are caught), as redis-benchmark\n"
    "                         checks nothing, and a verify phase then gets every\n"
    "                         object again and compares every byte\n"
    "  --timeout-ms N         per-call timeout (default $LUNAR_TIMEOUT_MS, then 30000)\n"
    "  --tenant NAME          tenant (default \"default\")\n"
    "  --baseline-size SIZE   source (and destination) set for the copy baseline\n"
    "                         (default 256MiB each, well beyond the last-level cache\n"
    "                         so both ends are cold; 0 skips it)\n"
    "  --sync-file PATH       start every phase together with the other processes\n"
    "  --sync-procs N         given the same PATH, N of them in all (a new path per\n"
    "                         run; it is created as zeros); a process gives up when\n"
    "                         the others have not come within 60 s\n"
    "  -h, --help             this text\n"
    "\n"
    "Figures (GB = 1e9 bytes, latencies per call, percentiles nearest-rank):\n"
    "  {put,exists,get,verify,rm}_ops, _errors, _wall_s, _ops_per_s, _gb_per_s\n"
    "  (put/get/verify),\n"
    "  _mean_us, _p50_us, _p90_us, _p99_us, _p999_us, _max_us; errors;\n"
    "  memcpy_gb_per_s, nt_copy_gb_per_s (one thread, SIZE blocks, cold source\n"
    "  and destination); memcpy_hot_dst_gb_per_s (the same into one reused\n"
    "  destination, cached when SIZE is below the last-level cache).\n"
    "  ops_per_s and gb_per_s count time inside liblunar calls: ops divided by the\n"
    "  busiest thread's summed call time (checking the bytes read is outside it;\n"
    "  with --depth, a call's time is its start's and its lunar_wait's, and its\n"
    "  latency runs from its start to the end of its lunar_wait; with --batch,\n"
    "  each object's latency is its batch call's);\n"
    "  _wall_s is the phase's wall-clock time, checking included; _start_ns and\n"
    "  _end_ns bound it on CLOCK_MONOTONIC (to add up several processes).\n"
    "\n"
    "Exit codes: 0 ok, 1 an operation failed, 2 usage error, 3 cannot connect.\n";

static void *alloc_touched(size_t len, int fill)
{
	void *p = aligned_alloc(BENCH_ALIGN, bench_round_up(len ? len : 1, BENCH_ALIGN));

	/* Fault the pages in now so no phase times page faults. */
	if (p)
		memset(p, fill, len);
	return p;
}

/* The bytes object i holds: a deterministic function of i alone. */
static const unsigned char *pattern_of(const struct bench *b, uint64_t i)
{
	return b->pattern + (i % b->span_words) * 8;
}

static int pattern_init(struct bench *b)
{
	uint64_t span = b->count * 8, len, *w;

	span = span < PAT_SPAN_MIN ? PAT_SPAN_MIN : span > PAT_SPAN_MAX ? PAT_SPAN_MAX : span;
	b->span_words = span / 8;
	len = bench_round_up(b->size + span, 8);
	b->pattern = aligned_alloc(BENCH_ALIGN, bench_round_up(len, BENCH_ALIGN));
	if (!b->pattern)
		return -1;
	w = (uint64_t *)b->pattern;
	for (uint64_t j = 0; j < len / 8; j++)
		w[j] = bench_splitmix64(j);
	return 0;
}

/* Object i's key: the worker's "<prefix>-<pid>-", then i in decimal. No
 * printf per call: it took 5 % of 8 client threads' CPU on 4 KiB puts, and
 * redis-benchmark formats no key per request either. */
/* Object i's key into key, a buffer that starts with the worker's head. */
static void key_at(const struct worker *w, char *key, uint64_t i)
{
	char digits[20], *p = key + w->key_head;
	int n = 0;

	do
		digits[n++] = (char)('0' + i % 10);
	while ((i /= 10));
	while (n)
		*p++ = digits[--n];
	*p = '\0';
}

static void key_of(struct worker *w, uint64_t i)
{
	key_at(w, w->key, i);
}

/* Get buffers (and calls in flight) a thread has. */
static unsigned bench_slots(const struct bench *b)
{
	return b->depth > b->batch ? b->depth : b->batch;
}

static void report_error(struct worker *w, const char *what, uint64_t i, const char *detail)
{
	struct bench *b = w->b;

	uint64_t seen = atomic_fetch_add(&b->errors_shown, 1);

	w->errors++;
	if (seen < BENCH_ERR_SHOWN)
		fprintf(stderr, "lunar-bench: %s %s (object %llu): %s\n", what, w->key,
			(unsigned long long)i, detail);
	if (seen == BENCH_ERR_SHOWN)
		fprintf(stderr, "lunar-bench: further failures are counted, not shown\n");
}

/* Report a get of object i that returned got, or bytes other than its
 * own: every byte compared when full, else a sample (bench_sampled_equal). */
static void check_read(struct worker *w, const unsigned char *buf, uint64_t i, int64_t got,
		       int full)
{
	const struct bench *b = w->b;
	const unsigned char *want = pattern_of(b, i);
	char msg[128];

	if (got < 0) {
		snprintf(msg, sizeof(msg), "%s (%d)", lunar_strerror((int)got), (int)got);
		report_error(w, phase_names[w->phase], i, msg);
	} else if ((uint64_t)got != b->size) {
		snprintf(msg, sizeof(msg), "%lld bytes, want %llu", (long long)got,
			 (unsigned long long)b->size);
		report_error(w, phase_names[w->phase], i, msg);
	} else if (full ? memcmp(buf, want, b->size) != 0
			: !bench_sampled_equal(buf, want, b->size)) {
		uint64_t at = 0;

		while (buf[at] == want[at])
			at++;
		snprintf(msg, sizeof(msg), "wrong bytes from offset %llu", (unsigned long long)at);
		report_error(w, phase_names[w->phase], i, msg);
	}
}

static int64_t one_op(struct worker *w, uint64_t i)
{
	struct bench *b = w->b;
	struct lunar_put_cfg cfg = {.replica_num = b->replicas};

	switch (w->phase) {
	case PH_PUT: return lunar_put(b->c, w->key, pattern_of(b, i), b->size, &cfg);
	/* Right after the put nothing is leased yet: the full path to the master. */
	case PH_EXISTS: return lunar_exists(b->c, w->key) == 1 ? 0 : LUNAR_ERR_OBJECT_NOT_FOUND;
	case PH_GET:
	case PH_VERIFY: return lunar_get_into(b->c, w->key, w->buf, b->size);
	/* Force: the get phase just leased every object for kv_lease_ttl. */
	case PH_RM: return lunar_remove(b->c, w->key, 1);
	}
	return LUNAR_ERR_INTERNAL;
}

static int is_read(const struct worker *w)
{
	return w->phase == PH_GET || w->phase == PH_VERIFY;
}

static void report_rc(struct worker *w, uint64_t i, int64_t rc)
{
	char msg[160];

	/* The rm phase removes by force (the gets leased every object): a
	 * node's proxy without --admin-calls may not. */
	snprintf(msg, sizeof(msg), "%s (%d)%s", lunar_strerror((int)rc), (int)rc,
		 w->phase == PH_RM && rc == LUNAR_ERR_UNAUTHORIZED
		     ? ": removing leased objects needs a proxy with --admin-calls (or use --keep)"
		     : "");
	report_error(w, phase_names[w->phase], i, msg);
}

/* The result rc of object i's call (its bytes in buf for a read). */
static void op_done(struct worker *w, const unsigned char *buf, uint64_t i, int64_t rc)
{
	if (is_read(w))
		check_read(w, buf, i, rc, w->phase == PH_VERIFY || w->b->check == BENCH_CHECK_FULL);
	else if (rc < 0)
		report_rc(w, i, rc);
}

static void run_sync(struct worker *w)
{
	struct bench *b = w->b;
	uint64_t t0, dt;
	int64_t rc;

	for (uint64_t i = w->first; i < w->first + w->n; i++) {
		key_of(w, i);
		if (is_read(w))
			bench_poison_samples(w->buf, pattern_of(b, i), b->size);
		t0 = lc_now_ns();
		rc = one_op(w, i);
		dt = lc_now_ns() - t0;
		b->lat[i] = dt;
		w->busy_ns += dt;
		op_done(w, w->buf, i, rc);
	}
}

/* One of the calls --depth keeps in flight. */
struct flight {
	struct lunar_pending *p;
	uint64_t i, t0;
};

/* Start object i's put or get into buf; a call that cannot start is done. */
static void flight_start(struct worker *w, struct flight *f, unsigned char *buf, uint64_t i)
{
	struct bench *b = w->b;
	struct lunar_put_cfg cfg = {.replica_num = b->replicas};
	uint64_t t1;
	int rc;

	key_of(w, i);
	if (is_read(w))
		bench_poison_samples(buf, pattern_of(b, i), b->size);
	f->i = i;
	f->t0 = lc_now_ns();
	rc = w->phase == PH_PUT
		 ? lunar_put_async(b->c, w->key, pattern_of(b, i), b->size, &cfg, &f->p)
		 : lunar_get_async(b->c, w->key, buf, b->size, &f->p);
	t1 = lc_now_ns();
	w->busy_ns += t1 - f->t0;
	if (rc) {
		b->lat[i] = t1 - f->t0;
		op_done(w, buf, i, rc);
	}
}

static void flight_wait(struct worker *w, struct flight *f, const unsigned char *buf)
{
	uint64_t t1 = lc_now_ns(), t2;
	int64_t rc = lunar_wait(f->p);

	t2 = lc_now_ns();
	f->p = NULL;
	w->busy_ns += t2 - t1;
	w->b->lat[f->i] = t2 - f->t0;
	op_done(w, buf, f->i, rc);
}

/* --depth: the oldest call is waited for, and its place takes the next
 * (a call that could not start leaves its place empty). */
static void run_async(struct worker *w)
{
	struct bench *b = w->b;
	struct flight fl[BENCH_MAX_DEPTH] = {0};
	uint64_t i = w->first, end = w->first + w->n;
	unsigned pending = 0;

	for (unsigned k = 0; i < end || pending; k = (k + 1) % b->depth) {
		unsigned char *buf = w->buf + (uint64_t)k * b->size;

		if (fl[k].p) {
			flight_wait(w, &fl[k], buf);
			pending--;
		}
		if (i < end) {
			flight_start(w, &fl[k], buf, i++);
			pending += fl[k].p != NULL;
		}
	}
}

/* --batch: b->batch objects a call; each object's latency is its call's. */
static void run_batch(struct worker *w)
{
	struct bench *b = w->b;
	struct lunar_put_cfg cfg = {.replica_num = b->replicas};
	const char *keys[LUNAR_BATCH_MAX];
	struct iovec iov[LUNAR_BATCH_MAX];
	const struct iovec *iovs[LUNAR_BATCH_MAX];
	int cnt[LUNAR_BATCH_MAX], put_res[LUNAR_BATCH_MAX];
	int64_t get_res[LUNAR_BATCH_MAX];
	uint64_t end = w->first + w->n;

	for (uint64_t i = w->first; i < end; i += b->batch) {
		unsigned k = end - i < b->batch ? (unsigned)(end - i) : b->batch;
		uint64_t t0, dt;
		int rc;

		for (unsigned j = 0; j < k; j++) {
			unsigned char *buf = w->buf + (uint64_t)j * b->size;

			key_at(w, w->keys[j], i + j);
			keys[j] = w->keys[j];
			if (w->phase == PH_GET)
				bench_poison_samples(buf, pattern_of(b, i + j), b->size);
			iov[j] = (struct iovec){
			    w->phase == PH_GET ? buf : (void *)pattern_of(b, i + j), b->size};
			iovs[j] = &iov[j];
			cnt[j] = 1;
		}
		t0 = lc_now_ns();
		rc = w->phase == PH_PUT ? lunar_batch_put(b->c, k, keys, iovs, cnt, &cfg, put_res)
					: lunar_batch_get_into(b->c, k, keys, iovs, cnt, get_res);
		dt = lc_now_ns() - t0;
		w->busy_ns += dt;
		for (unsigned j = 0; j < k; j++) {
			b->lat[i + j] = dt;
			key_of(w, i + j); /* named in a report */
			op_done(w, w->buf + (uint64_t)j * b->size, i + j,
				rc		     ? rc
				: w->phase == PH_PUT ? put_res[j]
						     : get_res[j]);
		}
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct bench *b = w->b;

	pthread_mutex_lock(&b->gate_lock);
	while (!b->gate_open)
		pthread_cond_wait(&b->gate_cond, &b->gate_lock);
	pthread_mutex_unlock(&b->gate_lock);
	if (b->batch > 1 && (w->phase == PH_PUT || w->phase == PH_GET))
		run_batch(w);
	else if (b->depth > 1 && (w->phase == PH_PUT || w->phase == PH_GET))
		run_async(w);
	else
		run_sync(w);
	return NULL;
}

static void gate_set(struct bench *b, int open)
{
	pthread_mutex_lock(&b->gate_lock);
	b->gate_open = open;
	pthread_cond_broadcast(&b->gate_cond);
	pthread_mutex_unlock(&b->gate_lock);
}

/* Run one phase on every worker; the clock starts once all threads exist. */
static int run_phase(struct bench *b, struct worker *ws, enum phase ph, struct figures *f)
{
	unsigned started = 0;
	uint64_t t0;

	gate_set(b, 0);
	for (; started < b->threads; started++) {
		ws[started].phase = ph;
		ws[started].busy_ns = ws[started].errors = 0;
		if (pthread_create(&ws[started].tid, NULL, worker_main, &ws[started]))
			break;
	}
	if (started < b->threads)
		fprintf(stderr, "lunar-bench: cannot start thread %u\n", started);
	*f = (struct figures){0};
	t0 = lc_now_ns();
	gate_set(b, 1);
	for (unsigned t = 0; t < started; t++) {
		pthread_join(ws[t].tid, NULL);
		f->ops += ws[t].n;
		f->errors += ws[t].errors;
		if (ws[t].busy_ns > f->busy_ns)
			f->busy_ns = ws[t].busy_ns;
	}
	f->start_ns = t0;
	f->end_ns = lc_now_ns();
	f->wall_ns = f->end_ns - t0;
	return started == b->threads ? 0 : -1;
}

static void print_figures(const struct bench *b, const char *name, const struct figures *f,
			  int with_bytes)
{
	uint64_t n = f->ops;
	double busy_s = (double)f->busy_ns / 1e9;

	printf("%s_ops=%llu\n", name, (unsigned long long)n);
	printf("%s_errors=%llu\n", name, (unsigned long long)f->errors);
	printf("%s_wall_s=%.6f\n", name, (double)f->wall_ns / 1e9);
	printf("%s_start_ns=%llu\n%s_end_ns=%llu\n", name, (unsigned long long)f->start_ns, name,
	       (unsigned long long)f->end_ns);
	printf("%s_ops_per_s=%.1f\n", name, busy_s > 0 ? (double)n / busy_s : 0.0);
	if (with_bytes)
		printf("%s_gb_per_s=%.3f\n", name,
		       busy_s > 0 ? (double)n * (double)b->size / busy_s / 1e9 : 0.0);
	bench_print_lat(name, b->lat, n);
	fflush(stdout);
}

#if defined(__SSE2__)
/* Non-temporal copy: 16-byte aligned dst and src, stores bypass the cache. */
static void nt_copy(void *dst, const void *src, size_t n)
{
	__m128i *d = dst;
	const __m128i *s = src;
	size_t blocks = n / 64, rest;

	for (size_t i = 0; i < blocks; i++, s += 4, d += 4) {
		__m128i a = _mm_load_si128(s), b = _mm_load_si128(s + 1);
		__m128i c = _mm_load_si128(s + 2), e = _mm_load_si128(s + 3);

		_mm_stream_si128(d, a);
		_mm_stream_si128(d + 1, b);
		_mm_stream_si128(d + 2, c);
		_mm_stream_si128(d + 3, e);
	}
	for (rest = n % 64; rest >= 16; rest -= 16, s++, d++)
		_mm_stream_si128(d, _mm_load_si128(s));
	if (rest)
		memcpy(d, s, rest);
	/* Orders the streaming stores before anything after the copy. */
	_mm_sfence();
}
#endif

static void plain_copy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
}

/* Best pass, in GB/s, of copying chunk k of src into chunk k of dst (dst_stride
 * 0: every chunk into the one dst) for every k in turn. */
static double copy_rate(void (*copy)(void *, const void *, size_t), unsigned char *dst,
			uint64_t dst_stride, const unsigned char *src, uint64_t chunks,
			uint64_t stride, uint64_t size)
{
	uint64_t t0, dt, best = UINT64_MAX, spent = 0;

	for (int pass = 0; pass < BENCH_BASELINE_PASSES && (pass < 2 || spent < BENCH_BASELINE_NS);
	     pass++) {
		t0 = lc_now_ns();
		for (uint64_t k = 0; k < chunks; k++) {
			copy(dst + k * dst_stride, src + k * stride, size);
			/* Keep the compiler from dropping a copy nobody reads. */
			__asm__ volatile("" : : "r"(dst) : "memory");
		}
		dt = lc_now_ns() - t0;
		spent += dt;
		if (dt < best)
			best = dt;
	}
	return (double)(chunks * size) / ((double)best / 1e9) / 1e9;
}

/*
 * Single-thread copy baselines over source and destination sets larger than
 * the LLC, so each block is cold at both ends, as a stored object is when
 * read and the buffer it goes to (on its way to the GPU). memcpy is also
 * measured into one reused destination, which stays in the cache for sizes
 * below the LLC: the best a copy can do when its destination is hot.
 */
static void baseline(const struct bench *b)
{
	uint64_t stride = bench_round_up(b->size, BENCH_ALIGN);
	uint64_t chunks = b->baseline_bytes / stride;
	unsigned char *src, *dst;

	if (!b->baseline_bytes)
		return;
	if (chunks < 2)
		chunks = 2;
	src = alloc_touched(chunks * stride, 0x5a);
	dst = alloc_touched(chunks * stride, 0);
	if (!src || !dst) {
		fprintf(stderr, "lunar-bench: no memory for the 2 x %llu-byte copy baseline\n",
			(unsigned long long)(chunks * stride));
		free(src);
		free(dst);
		return;
	}
	printf("baseline_src_bytes=%llu\nbaseline_dst_bytes=%llu\n",
	       (unsigned long long)(chunks * stride), (unsigned long long)(chunks * stride));
	printf("memcpy_gb_per_s=%.3f\n",
	       copy_rate(plain_copy, dst, stride, src, chunks, stride, b->size));
#if defined(__SSE2__)
	printf("nt_copy_gb_per_s=%.3f\n",
	       copy_rate(nt_copy, dst, stride, src, chunks, stride, b->size));
#endif
	printf("memcpy_hot_dst_gb_per_s=%.3f\n",
	       copy_rate(plain_copy, dst, 0, src, chunks, stride, b->size));
	free(src);
	free(dst);
}

static int parse_one(struct bench *b, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	uint64_t x;
	int missing = 0, rc;

	if ((v = bench_opt_value(argc, argv, i, "--socket", &missing)))
		b->opts.socket_path = v;
	else if ((v = bench_opt_value(argc, argv, i, "--tenant", &missing)))
		b->opts.tenant = v;
	else if ((v = bench_opt_value(argc, argv, i, "--prefix", &missing)))
		b->prefix = v;
	else if ((v = bench_opt_value(argc, argv, i, "--sync-file", &missing)))
		b->sync_path = v;
	else if ((v = bench_opt_value(argc, argv, i, "--sync-procs", &missing))) {
		rc = bench_parse_num("--sync-procs", v, 0, 1, 1000000, &x);
		b->sync_procs = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--size", &missing)))
		return bench_parse_num("--size", v, 1, 1, BENCH_MAX_SIZE, &b->size);
	else if ((v = bench_opt_value(argc, argv, i, "--count", &missing)))
		return bench_parse_num("--count", v, 0, 1, UINT32_MAX, &b->count);
	else if ((v = bench_opt_value(argc, argv, i, "--baseline-size", &missing)))
		return bench_parse_num("--baseline-size", v, 1, 0, INT64_MAX / 4,
				       &b->baseline_bytes);
	else if ((v = bench_opt_value(argc, argv, i, "--threads", &missing))) {
		rc = bench_parse_num("--threads", v, 0, 1, BENCH_MAX_THREADS, &x);
		b->threads = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--depth", &missing))) {
		rc = bench_parse_num("--depth", v, 0, 1, BENCH_MAX_DEPTH, &x);
		b->depth = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--batch", &missing))) {
		rc = bench_parse_num("--batch", v, 0, 1, LUNAR_BATCH_MAX, &x);
		b->batch = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--replicas", &missing))) {
		rc = bench_parse_num("--replicas", v, 0, 1, UINT_MAX, &x);
		b->replicas = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--timeout-ms", &missing))) {
		rc = bench_parse_num("--timeout-ms", v, 0, 0, UINT_MAX, &x);
		b->opts.timeout_ms = (unsigned)x;
		return rc;
	} else if (!strcmp(a, "--keep"))
		b->keep = 1;
	else if (!strcmp(a, "--zero-copy"))
		b->zero_copy = 1;
	else if ((v = bench_opt_value(argc, argv, i, "--check", &missing))) {
		if (bench_parse_check(v, &b->check))
			return bench_usage_error("--check is full or sampled, not '%s'", v);
	} else if (missing)
		return bench_usage_error("option %s needs a value", a);
	else
		return bench_usage_error("unknown argument '%s'", a);
	return EXIT_OK;
}

static int parse_args(struct bench *b, int argc, char **argv)
{
	int rc;

	for (int i = 1; i < argc; i++) {
		rc = parse_one(b, argc, argv, &i);
		if (rc)
			return rc;
	}
	if (!b->sync_path != !b->sync_procs)
		return bench_usage_error("--sync-file and --sync-procs go together");
	if (b->depth > 1 && b->batch > 1)
		return bench_usage_error("--depth and --batch do not go together");
	/* The threads share one session: each may hold depth slots at once. */
	if (b->depth > 1 && (uint64_t)b->threads * b->depth > BENCH_MAX_DEPTH)
		return bench_usage_error("--threads x --depth is more than %d, a session's "
					 "completion slots",
					 BENCH_MAX_DEPTH);
	if (strlen(b->prefix) + BENCH_KEY_ROOM > LUNAR_KEY_MAX)
		return bench_usage_error("--prefix is longer than %d bytes",
					 LUNAR_KEY_MAX - BENCH_KEY_ROOM);
	return EXIT_OK;
}

static void print_config(struct bench *b)
{
	uint64_t arena =
	    bench_round_up((uint64_t)b->threads * bench_slots(b) * b->size * 2, 1ull << 20);

	/* Every call in flight may have one value staged in the arena each way. */
	b->opts.arena_bytes = arena < BENCH_MIN_ARENA ? BENCH_MIN_ARENA : (size_t)arena;
	printf("socket=%s\n", b->opts.socket_path      ? b->opts.socket_path
			      : getenv("LUNAR_SOCKET") ? getenv("LUNAR_SOCKET")
						       : "default");
	printf("size_bytes=%llu\n", (unsigned long long)b->size);
	printf("count=%llu\n", (unsigned long long)b->count);
	printf("threads=%u\n", b->threads);
	printf("depth=%u\n", b->depth);
	printf("batch=%u\n", b->batch);
	printf("replicas=%u\n", b->replicas);
	printf("key_prefix=%s-%d-\n", b->prefix, (int)b->pid);
	printf("keep=%d\n", b->keep);
	printf("zero_copy=%d\n", b->zero_copy);
	printf("check=%s\n", b->check == BENCH_CHECK_FULL ? "full" : "sampled");
	printf("sync_procs=%u\n", b->sync_procs);
	printf("arena_bytes=%zu\n", b->opts.arena_bytes);
	printf("baseline_bytes=%llu\n", (unsigned long long)b->baseline_bytes);
	fflush(stdout);
}

/* A key buffer of w's that starts with "<prefix>-<pid>-"; NULL: ENOMEM. */
static char *key_buf(const struct bench *b, struct worker *w)
{
	size_t room = strlen(b->prefix) + BENCH_KEY_ROOM;
	char *k = malloc(room);

	if (k)
		w->key_head = (size_t)snprintf(k, room, "%s-%d-", b->prefix, (int)b->pid);
	return k;
}

static void worker_free(const struct bench *b, struct worker *w)
{
	free(w->buf);
	free(w->key);
	for (unsigned j = 0; w->keys && j < b->batch; j++)
		free(w->keys[j]);
	free(w->keys);
}

/* w's get buffers and key buffers; -1 on ENOMEM (worker_free frees). */
static int worker_alloc(const struct bench *b, struct worker *w)
{
	w->buf = alloc_touched(b->size * bench_slots(b), 0);
	w->key = key_buf(b, w);
	if (!w->buf || !w->key)
		return -1;
	if (b->batch <= 1)
		return 0;
	if (!(w->keys = calloc(b->batch, sizeof(*w->keys))))
		return -1;
	for (unsigned j = 0; j < b->batch; j++)
		if (!(w->keys[j] = key_buf(b, w)))
			return -1;
	return 0;
}

static void workers_free(struct bench *b, struct worker *ws)
{
	for (unsigned t = 0; ws && t < b->threads; t++)
		worker_free(b, &ws[t]);
	free(ws);
}

/* Split the objects evenly; give each thread its buffers up front. */
static struct worker *workers_alloc(struct bench *b)
{
	struct worker *ws = calloc(b->threads, sizeof(*ws));

	if (!ws)
		return NULL;
	for (unsigned t = 0; t < b->threads; t++) {
		ws[t].b = b;
		ws[t].first = b->count * t / b->threads;
		ws[t].n = b->count * (t + 1) / b->threads - ws[t].first;
		if (worker_alloc(b, &ws[t])) {
			workers_free(b, ws);
			return NULL;
		}
	}
	return ws;
}

/*
 * --zero-copy: move the pattern and the get buffers into memory shared with
 * the proxy, so puts and gets skip the staging copy through the arena.
 */
static int zero_copy_init(struct bench *b, struct worker *ws)
{
	uint64_t len = bench_round_up(b->size + b->span_words * 8, 8);
	unsigned char *p = lunar_alloc(b->c, len);

	if (!p)
		return -1;
	memcpy(p, b->pattern, len);
	free(b->pattern);
	b->pattern = p;
	for (unsigned t = 0; t < b->threads; t++) {
		unsigned char *buf = lunar_alloc(b->c, b->size * bench_slots(b));

		if (!buf)
			return -1;
		memset(buf, 0, b->size * bench_slots(b));
		free(ws[t].buf);
		ws[t].buf = buf;
	}
	return 0;
}

/* Give the shared memory back; the buffers are then owned by no one. */
static void zero_copy_fini(struct bench *b, struct worker *ws)
{
	if (!b->zero_copy)
		return;
	for (unsigned t = 0; t < b->threads; t++) {
		lunar_free(b->c, ws[t].buf);
		ws[t].buf = NULL;
	}
	lunar_free(b->c, b->pattern);
	b->pattern = NULL;
}

/* put, exists, get (checked), verify with --check sampled, then rm unless
 * --keep; returns the failure count or -1. */
static int64_t run_phases(struct bench *b, struct worker *ws)
{
	struct figures f;
	int64_t errors = 0;

	for (int ph = PH_PUT; ph <= PH_RM; ph++) {
		if (ph == PH_RM && b->keep)
			break;
		if (ph == PH_VERIFY && b->check == BENCH_CHECK_FULL)
			continue;
		if (b->sync_path && bench_sync_wait(&b->sync, (unsigned)ph, BENCH_SYNC_MS))
			return -1;
		if (run_phase(b, ws, (enum phase)ph, &f))
			return -1;
		print_figures(b, phase_names[ph], &f, ph != PH_EXISTS && ph != PH_RM);
		errors += (int64_t)f.errors;
	}
	return errors;
}

int main(int argc, char **argv)
{
	struct bench b = {.size = 4096,
			  .count = 10000,
			  .threads = 1,
			  .depth = 1,
			  .batch = 1,
			  .replicas = 1,
			  .prefix = "lunar-bench",
			  .baseline_bytes = 256ull << 20,
			  .gate_lock = PTHREAD_MUTEX_INITIALIZER,
			  .gate_cond = PTHREAD_COND_INITIALIZER};
	struct worker *ws = NULL;
	int64_t errors;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--master", 8) && (argv[i][8] == '=' || !argv[i][8]))
			return bench_master_main(argc, argv);
		if (!strncmp(argv[i], "--trace", 7) && (argv[i][7] == '=' || !argv[i][7]))
			return bench_trace_main(argc, argv);
		if (!strcmp(argv[i], "--tcp-baseline"))
			return bench_tcp_main(argc, argv);
		if (!strncmp(argv[i], "--evict-round", 13) && (argv[i][13] == '=' || !argv[i][13]))
			return bench_evict_main(argc, argv);
	}
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return EXIT_OK;
		}
	rc = parse_args(&b, argc, argv);
	if (rc)
		return rc;
	b.pid = getpid();
	print_config(&b);
	b.lat = calloc(b.count, sizeof(*b.lat));
	ws = workers_alloc(&b);
	if (!b.lat || !ws || pattern_init(&b)) {
		fprintf(stderr, "lunar-bench: out of memory for %llu objects of %llu bytes\n",
			(unsigned long long)b.count, (unsigned long long)b.size);
		rc = EXIT_FAIL;
		goto out_free;
	}
	rc = lunar_connect(&b.opts, &b.c);
	if (rc) {
		fprintf(stderr, "lunar-bench: cannot connect to the proxy: %s (%d)\n",
			lunar_strerror(rc), rc);
		rc = EXIT_NOCONN;
		goto out_free;
	}
	if (b.sync_path && bench_sync_open(&b.sync, b.sync_path, b.sync_procs)) {
		lunar_close(b.c);
		rc = EXIT_FAIL;
		goto out_free;
	}
	if (b.zero_copy && zero_copy_init(&b, ws)) {
		fprintf(stderr, "lunar-bench: lunar_alloc failed for --zero-copy\n");
		lunar_close(b.c);
		rc = EXIT_FAIL;
		goto out_free;
	}
	errors = run_phases(&b, ws);
	zero_copy_fini(&b, ws);
	lunar_close(b.c);
	printf("errors=%lld\n", (long long)(errors < 0 ? 1 : errors));
	baseline(&b);
	rc = errors == 0 ? EXIT_OK : EXIT_FAIL;
out_free:
	bench_sync_close(&b.sync);
	workers_free(&b, ws);
	free(b.pattern);
	free(b.lat);
	return rc;
}
