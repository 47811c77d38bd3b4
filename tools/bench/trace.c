/*
 * trace.c - lunar-bench --trace: replay a Mooncake FAST'25 request trace
 * (one JSON object a line, "hash_ids": the request's prefix blocks) through a
 * running proxy with prefix semantics: match the longest run of leading
 * blocks present, read those back and check every byte, put the rest. In the
 * same run, an exact LRU cache of the same capacity in blocks replays the
 * same trace, as the yardstick for the store's hit ratio.
 */
#include "bench.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "clock.h"
#include "lunar.h"

#define TR_KEY_MAX	 96
#define TR_PREFIX_MAX	 64
#define TR_SPAN_WORDS	 (1ull << 20)  /* distinct block contents for ids mod 2^20 */
#define TR_CHUNK_BYTES	 (32ull << 20) /* bytes one batch call moves at most */
#define TR_MIN_ARENA	 (64ull << 20)
#define TR_ERR_SHOWN	 5
#define TR_NIL		 UINT32_MAX
#define TR_MAX_BLOCK	 (1ull << 30)
#define TR_DEFAULT_RATIO 0.05

/* The trace: request r's blocks are ids[off[r] .. off[r + 1]). */
struct trace {
	uint64_t *ids;	 /* as written in the file */
	uint32_t *dense; /* the same ids renumbered 0.. by first appearance */
	size_t nids, capids;
	size_t *off;
	size_t nreq, capreq;
	uint64_t unique, max_per_req;
	uint64_t limit; /* read at most this many requests; 0: all */
	/* id -> dense number, open addressing; slot empty when key is UINT64_MAX */
	uint64_t *hkey;
	uint32_t *hval;
	size_t hcap;
};

struct tr {
	/* configuration */
	const char *path, *prefix;
	uint64_t block, cap_blocks;
	double cap_ratio;
	int have_blocks, simulate_only;
	double check; /* --check: least hit ratio, as a share of the infinite cache's */
	struct lunar_opts opts;
	unsigned chunk;
	struct trace t;
	/* replay state */
	struct lunar_client *c;
	unsigned char *pattern, *buf;
	char (*keys)[TR_KEY_MAX];
	const char **keyp;
	struct iovec *iov;
	const struct iovec **iovp;
	int *iovcnt, *res;
	int64_t *res64;
	/* figures */
	uint64_t requested, matched, served, lru_hits;
	uint64_t put_blocks, put_ok, put_soft, put_errors;
	uint64_t get_soft, get_errors, verify_errors, match_errors, shown;
	uint64_t wall_ns;
	struct bench_lat lat_match, lat_get, lat_put;
};

static const char usage_text[] =
    "usage: lunar-bench --trace FILE --block-size SIZE [OPTIONS]\n"
    "\n"
    "Replays a Mooncake trace (JSONL, \"hash_ids\" per request) through the\n"
    "node's proxy: for each request in order, lunar_prefix_match over its blocks'\n"
    "keys (PREFIX-<id>), lunar_batch_get_into the matched blocks (every byte\n"
    "checked: a block's bytes are a function of its id), lunar_batch_put the rest.\n"
    "Also replays the trace through an exact LRU cache of the same capacity.\n"
    "\n"
    "Options:\n"
    "  --trace FILE            the trace\n"
    "  --block-size SIZE       bytes per block, e.g. 64KiB\n"
    "  --capacity-blocks N     the LRU's capacity: give the proxy's segment bytes /\n"
    "                          block size to compare like with like\n"
    "  --capacity-ratio R      or a share of the trace's unique blocks (default 0.05)\n"
    "  --socket PATH           proxy socket (default $LUNAR_SOCKET, then the default)\n"
    "  --prefix STR            key prefix (default blk)\n"
    "  --tenant NAME           tenant (default \"default\")\n"
    "  --timeout-ms N          per-call timeout (default $LUNAR_TIMEOUT_MS, then 30000)\n"
    "  --requests N            replay only the first N requests\n"
    "  --check SHARE           exit 1 unless hit_ratio >= SHARE x infinite_hit_ratio\n"
    "                          (and no read returned wrong bytes, as always)\n"
    "  --simulate-only         no proxy: print the trace's figures and the LRU's only\n"
    "\n"
    "Figures: trace_requests, trace_blocks, trace_unique_blocks; requests,\n"
    "blocks_requested, prefix_hit_blocks, hit_blocks (read and checked), hit_ratio\n"
    "(hit_blocks / blocks_requested), lru_hit_ratio, prefix_lru_hit_ratio (an LRU\n"
    "that touches a request's blocks last to first), infinite_hit_ratio (every\n"
    "block kept); put_* and get_* counts, with\n"
    "soft errors (NO_AVAILABLE_HANDLE, a block gone between match and get)\n"
    "counted apart from errors; wall_s, blocks_per_s; match_, get_batch_ and\n"
    "put_batch_ latencies per call. Exit 1 on any error other than a soft one.\n";

/* --- the trace ------------------------------------------------------------ */

static int grow(void **v, size_t *cap, size_t need, size_t each)
{
	size_t cap2 = *cap ? *cap : 1024;
	void *p;

	if (need <= *cap)
		return 0;
	while (cap2 < need)
		cap2 *= 2;
	p = realloc(*v, cap2 * each);
	if (!p)
		return -1;
	*v = p;
	*cap = cap2;
	return 0;
}

static int map_grow(struct trace *t)
{
	size_t cap = t->hcap ? t->hcap * 2 : 1u << 16;
	uint64_t *k = malloc(cap * sizeof(*k));
	uint32_t *v = malloc(cap * sizeof(*v));

	if (!k || !v) {
		free(k);
		free(v);
		return -1;
	}
	memset(k, 0xff, cap * sizeof(*k));
	for (size_t i = 0; i < t->hcap; i++) {
		size_t j;

		if (t->hkey[i] == UINT64_MAX)
			continue;
		for (j = bench_splitmix64(t->hkey[i]) & (cap - 1); k[j] != UINT64_MAX;)
			j = (j + 1) & (cap - 1);
		k[j] = t->hkey[i];
		v[j] = t->hval[i];
	}
	free(t->hkey);
	free(t->hval);
	t->hkey = k;
	t->hval = v;
	t->hcap = cap;
	return 0;
}

/* The dense number of id, giving it the next one when it is new. */
static int dense_of(struct trace *t, uint64_t id, uint32_t *out)
{
	size_t j;

	if ((t->unique + 1) * 2 > t->hcap && map_grow(t))
		return -1;
	for (j = bench_splitmix64(id) & (t->hcap - 1); t->hkey[j] != UINT64_MAX;
	     j = (j + 1) & (t->hcap - 1))
		if (t->hkey[j] == id) {
			*out = t->hval[j];
			return 0;
		}
	if (t->unique >= TR_NIL)
		return -1;
	t->hkey[j] = id;
	t->hval[j] = (uint32_t)t->unique;
	*out = (uint32_t)t->unique++;
	return 0;
}

static int trace_push_id(struct trace *t, uint64_t id)
{
	size_t cap = t->capids;

	if (grow((void **)&t->ids, &cap, t->nids + 1, sizeof(*t->ids)))
		return -1;
	if (cap != t->capids) {
		/* dense keeps ids' capacity */
		uint32_t *d = realloc(t->dense, cap * sizeof(*d));

		if (!d)
			return -1;
		t->dense = d;
		t->capids = cap;
	}
	if (dense_of(t, id, &t->dense[t->nids]))
		return -1;
	t->ids[t->nids++] = id;
	return 0;
}

static int trace_end_request(struct trace *t, size_t first)
{
	if (grow((void **)&t->off, &t->capreq, t->nreq + 2, sizeof(*t->off)))
		return -1;
	t->off[t->nreq] = first;
	t->off[++t->nreq] = t->nids;
	if (t->nids - first > t->max_per_req)
		t->max_per_req = t->nids - first;
	return 0;
}

static const char *skip_ws(const char *p)
{
	while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
		p++;
	return p;
}

static int bad_line(const char *path, unsigned long lineno, const char *why)
{
	fprintf(stderr, "lunar-bench: %s:%lu: %s\n", path, lineno, why);
	return -1;
}

/*
 * One line of this exact format: a JSON object whose only array is
 * "hash_ids", a list of non-negative integers. Other members are skipped
 * unread; a blank line is no request.
 */
static int parse_line(struct trace *t, const char *path, unsigned long lineno, const char *line)
{
	const char *p = skip_ws(line);
	size_t first = t->nids;

	if (!*p)
		return 0;
	if (*p != '{')
		return bad_line(path, lineno, "not a JSON object");
	p = strstr(p, "\"hash_ids\"");
	if (!p)
		return bad_line(path, lineno, "no \"hash_ids\" member");
	p = skip_ws(p + strlen("\"hash_ids\""));
	if (*p++ != ':')
		return bad_line(path, lineno, "expected ':' after \"hash_ids\"");
	p = skip_ws(p);
	if (*p++ != '[')
		return bad_line(path, lineno, "\"hash_ids\" is not an array");
	p = skip_ws(p);
	while (*p != ']') {
		uint64_t v = 0;
		const char *d = p;

		for (; *p >= '0' && *p <= '9'; p++) {
			if (v > (UINT64_MAX - 9) / 10)
				return bad_line(path, lineno, "id too large");
			v = v * 10 + (uint64_t)(*p - '0');
		}
		if (p == d)
			return bad_line(path, lineno, "expected a non-negative integer id");
		if (trace_push_id(t, v))
			return bad_line(path, lineno, "out of memory");
		p = skip_ws(p);
		if (*p == ',')
			p = skip_ws(p + 1);
		else if (*p != ']')
			return bad_line(path, lineno, "expected ',' or ']' in \"hash_ids\"");
	}
	if (!strchr(p, '}'))
		return bad_line(path, lineno, "unterminated object");
	return trace_end_request(t, first) ? bad_line(path, lineno, "out of memory") : 0;
}

static int trace_load(struct trace *t, const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t cap = 0;
	unsigned long lineno = 0;
	int rc = 0;

	if (!f) {
		perror(path);
		return -1;
	}
	while (!rc && (!t->limit || t->nreq < t->limit) && getline(&line, &cap, f) >= 0)
		rc = parse_line(t, path, ++lineno, line);
	if (!rc && ferror(f)) {
		perror(path);
		rc = -1;
	}
	free(line);
	fclose(f);
	if (!rc && !t->nreq) {
		fprintf(stderr, "lunar-bench: %s holds no request\n", path);
		rc = -1;
	}
	return rc;
}

static void trace_free(struct trace *t)
{
	free(t->ids);
	free(t->dense);
	free(t->off);
	free(t->hkey);
	free(t->hval);
}

/* --- the exact LRU yardstick ----------------------------------------------- */

struct lru {
	uint32_t *prev, *next;
	uint8_t *in;
	uint32_t head, tail; /* most and least recently used */
	uint64_t size, cap;
};

static void lru_unlink(struct lru *l, uint32_t x)
{
	if (l->prev[x] != TR_NIL)
		l->next[l->prev[x]] = l->next[x];
	else
		l->head = l->next[x];
	if (l->next[x] != TR_NIL)
		l->prev[l->next[x]] = l->prev[x];
	else
		l->tail = l->prev[x];
}

static void lru_push_front(struct lru *l, uint32_t x)
{
	l->prev[x] = TR_NIL;
	l->next[x] = l->head;
	if (l->head != TR_NIL)
		l->prev[l->head] = x;
	l->head = x;
	if (l->tail == TR_NIL)
		l->tail = x;
}

static void lru_touch(struct lru *l, uint32_t x)
{
	if (l->in[x]) {
		lru_unlink(l, x);
		lru_push_front(l, x);
		return;
	}
	if (!l->cap)
		return;
	if (l->size == l->cap) {
		uint32_t victim = l->tail;

		lru_unlink(l, victim);
		l->in[victim] = 0;
		l->size--;
	}
	lru_push_front(l, x);
	l->in[x] = 1;
	l->size++;
}

/* Blocks an LRU of cap blocks serves with prefix semantics, or -1 on ENOMEM.
 * tail_first: a request's blocks are touched last to first, so that of two
 * blocks of one request the later goes first (a block is worth nothing
 * once one before it is gone: the prefix-aware variant). */
static int64_t lru_hits(const struct trace *t, uint64_t cap, int tail_first)
{
	struct lru l = {.head = TR_NIL, .tail = TR_NIL, .cap = cap};
	int64_t hits = 0;

	l.prev = malloc(t->unique * sizeof(*l.prev));
	l.next = malloc(t->unique * sizeof(*l.next));
	l.in = calloc(t->unique, 1);
	if (!l.prev || !l.next || !l.in) {
		hits = -1;
		goto out;
	}
	for (size_t r = 0; r < t->nreq; r++) {
		size_t a = t->off[r], z = t->off[r + 1], k = a;

		while (k < z && l.in[t->dense[k]])
			k++;
		hits += (int64_t)(k - a);
		for (k = a; k < z; k++)
			lru_touch(&l, t->dense[tail_first ? a + z - 1 - k : k]);
	}
out:
	free(l.prev);
	free(l.next);
	free(l.in);
	return hits;
}

/* --- replay through the proxy ---------------------------------------------- */

static const unsigned char *block_bytes(const struct tr *b, uint64_t id)
{
	return b->pattern + (id % TR_SPAN_WORDS) * 8;
}

static void shout(struct tr *b, const char *what, const char *key, int64_t rc)
{
	if (b->shown++ < TR_ERR_SHOWN)
		fprintf(stderr, "lunar-bench: %s %s: %s (%lld)\n", what, key,
			rc < 0 ? lunar_strerror((int)rc) : "wrong size or bytes", (long long)rc);
}

/* Longest matched prefix of keys[0..n), in LUNAR_BATCH_MAX pieces. */
static size_t replay_match(struct tr *b, size_t n)
{
	size_t m = 0;

	while (m < n) {
		size_t k = n - m < LUNAR_BATCH_MAX ? n - m : LUNAR_BATCH_MAX;
		uint64_t t0 = lc_now_ns();
		int64_t rc = lunar_prefix_match(b->c, k, b->keyp + m);

		bench_lat_add(&b->lat_match, lc_now_ns() - t0);
		if (rc < 0) {
			b->match_errors++;
			shout(b, "prefix_match", b->keyp[m], rc);
			break;
		}
		m += (size_t)rc;
		if ((size_t)rc < k)
			break;
	}
	return m;
}

static void check_get(struct tr *b, const uint64_t *ids, size_t j)
{
	int64_t r = b->res64[j];

	if (r == (int64_t)b->block &&
	    !memcmp(b->buf + j * b->block, block_bytes(b, ids[j]), b->block))
		b->served++;
	else if (r == LUNAR_ERR_OBJECT_NOT_FOUND)
		b->get_soft++; /* evicted between the match and the read */
	else if (r >= 0) {
		b->verify_errors++;
		shout(b, "get", b->keyp[j], r);
	} else {
		b->get_errors++;
		shout(b, "get", b->keyp[j], r);
	}
}

static void replay_gets(struct tr *b, const uint64_t *ids, size_t m)
{
	for (size_t at = 0; at < m; at += b->chunk) {
		size_t k = m - at < b->chunk ? m - at : b->chunk;
		uint64_t t0;

		for (size_t j = 0; j < k; j++)
			b->iov[j] = (struct iovec){b->buf + j * b->block, b->block};
		t0 = lc_now_ns();
		/* A failed call stores its code as every key's result too. */
		lunar_batch_get_into(b->c, k, b->keyp + at, b->iovp, b->iovcnt, b->res64);
		bench_lat_add(&b->lat_get, lc_now_ns() - t0);
		for (size_t j = 0; j < k; j++)
			check_get(b, ids + at, j);
	}
}

static void replay_puts(struct tr *b, const uint64_t *ids, size_t from, size_t n)
{
	for (size_t at = from; at < n; at += b->chunk) {
		size_t k = n - at < b->chunk ? n - at : b->chunk;
		uint64_t t0;

		for (size_t j = 0; j < k; j++)
			b->iov[j] = (struct iovec){(void *)block_bytes(b, ids[at + j]), b->block};
		t0 = lc_now_ns();
		lunar_batch_put(b->c, k, b->keyp + at, b->iovp, b->iovcnt, NULL, b->res);
		bench_lat_add(&b->lat_put, lc_now_ns() - t0);
		b->put_blocks += k;
		for (size_t j = 0; j < k; j++) {
			int r = b->res[j];

			if (!r)
				b->put_ok++;
			else if (r == LUNAR_ERR_NO_AVAILABLE_HANDLE ||
				 r == LUNAR_ERR_TENANT_QUOTA_EXCEEDED)
				b->put_soft++; /* the store is full: a miss, not a failure */
			else {
				b->put_errors++;
				shout(b, "put", b->keyp[at + j], r);
			}
		}
	}
}

static void replay(struct tr *b)
{
	uint64_t t0 = lc_now_ns();

	for (size_t r = 0; r < b->t.nreq; r++) {
		const uint64_t *ids = b->t.ids + b->t.off[r];
		size_t n = b->t.off[r + 1] - b->t.off[r], m;

		for (size_t j = 0; j < n; j++) {
			snprintf(b->keys[j], TR_KEY_MAX, "%s-%" PRIu64, b->prefix, ids[j]);
			b->keyp[j] = b->keys[j];
		}
		b->requested += n;
		m = replay_match(b, n);
		b->matched += m;
		replay_gets(b, ids, m);
		replay_puts(b, ids, m, n);
	}
	b->wall_ns = lc_now_ns() - t0;
}

static int replay_alloc(struct tr *b)
{
	size_t n = b->t.max_per_req ? b->t.max_per_req : 1;

	b->pattern = bench_pattern_alloc(b->block + TR_SPAN_WORDS * 8);
	b->buf =
	    aligned_alloc(BENCH_ALIGN, bench_round_up((uint64_t)b->chunk * b->block, BENCH_ALIGN));
	b->keys = calloc(n, sizeof(*b->keys));
	b->keyp = calloc(n, sizeof(*b->keyp));
	b->iov = calloc(b->chunk, sizeof(*b->iov));
	b->iovp = calloc(b->chunk, sizeof(*b->iovp));
	b->iovcnt = calloc(b->chunk, sizeof(*b->iovcnt));
	b->res = calloc(b->chunk, sizeof(*b->res));
	b->res64 = calloc(b->chunk, sizeof(*b->res64));
	if (!b->pattern || !b->buf || !b->keys || !b->keyp || !b->iov || !b->iovp || !b->iovcnt ||
	    !b->res || !b->res64)
		return -1;
	/* Fault the read buffer in now, not inside the first timed call. */
	memset(b->buf, 0, (size_t)b->chunk * b->block);
	for (unsigned j = 0; j < b->chunk; j++) {
		b->iovp[j] = &b->iov[j];
		b->iovcnt[j] = 1;
	}
	return 0;
}

static void replay_free(struct tr *b)
{
	free(b->pattern);
	free(b->buf);
	free(b->keys);
	free(b->keyp);
	free(b->iov);
	free(b->iovp);
	free(b->iovcnt);
	free(b->res);
	free(b->res64);
	bench_lat_fini(&b->lat_match);
	bench_lat_fini(&b->lat_get);
	bench_lat_fini(&b->lat_put);
}

/* --- figures ---------------------------------------------------------------- */

static double share(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0.0;
}

static uint64_t hard_errors(const struct tr *b)
{
	return b->put_errors + b->get_errors + b->verify_errors + b->match_errors;
}

static void print_replay(struct tr *b)
{
	double secs = (double)b->wall_ns / 1e9;

	printf("requests=%zu\n", b->t.nreq);
	printf("blocks_requested=%" PRIu64 "\n", b->requested);
	printf("prefix_hit_blocks=%" PRIu64 "\n", b->matched);
	printf("hit_blocks=%" PRIu64 "\n", b->served);
	printf("hit_ratio=%.4f\n", share(b->served, b->requested));
	printf("prefix_hit_ratio=%.4f\n", share(b->matched, b->requested));
	printf("put_blocks=%" PRIu64 "\n", b->put_blocks);
	printf("put_ok=%" PRIu64 "\n", b->put_ok);
	printf("put_soft_errors=%" PRIu64 "\n", b->put_soft);
	printf("put_errors=%" PRIu64 "\n", b->put_errors);
	printf("get_soft_errors=%" PRIu64 "\n", b->get_soft);
	printf("get_errors=%" PRIu64 "\n", b->get_errors);
	printf("verify_errors=%" PRIu64 "\n", b->verify_errors);
	printf("match_errors=%" PRIu64 "\n", b->match_errors);
	printf("wall_s=%.6f\n", secs);
	printf("blocks_per_s=%.1f\n", secs > 0 ? (double)b->requested / secs : 0.0);
	printf("read_gb_per_s=%.3f\n",
	       secs > 0 ? (double)b->served * (double)b->block / secs / 1e9 : 0.0);
	printf("write_gb_per_s=%.3f\n",
	       secs > 0 ? (double)b->put_ok * (double)b->block / secs / 1e9 : 0.0);
	printf("match_calls=%" PRIu64 "\n", b->lat_match.n);
	bench_print_lat("match", b->lat_match.v, b->lat_match.n);
	printf("get_batch_calls=%" PRIu64 "\n", b->lat_get.n);
	bench_print_lat("get_batch", b->lat_get.v, b->lat_get.n);
	printf("put_batch_calls=%" PRIu64 "\n", b->lat_put.n);
	bench_print_lat("put_batch", b->lat_put.v, b->lat_put.n);
	printf("errors=%" PRIu64 "\n", hard_errors(b));
}

/* --- setup ------------------------------------------------------------------ */

static int parse_one(struct tr *b, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	uint64_t x;
	int missing = 0, rc;

	if ((v = bench_opt_value(argc, argv, i, "--trace", &missing)))
		b->path = v;
	else if ((v = bench_opt_value(argc, argv, i, "--socket", &missing)))
		b->opts.socket_path = v;
	else if ((v = bench_opt_value(argc, argv, i, "--tenant", &missing)))
		b->opts.tenant = v;
	else if ((v = bench_opt_value(argc, argv, i, "--prefix", &missing)))
		b->prefix = v;
	else if ((v = bench_opt_value(argc, argv, i, "--block-size", &missing)))
		return bench_parse_num("--block-size", v, 1, 1, TR_MAX_BLOCK, &b->block);
	else if ((v = bench_opt_value(argc, argv, i, "--capacity-blocks", &missing))) {
		b->have_blocks = 1;
		return bench_parse_num("--capacity-blocks", v, 0, 0, UINT32_MAX, &b->cap_blocks);
	} else if ((v = bench_opt_value(argc, argv, i, "--capacity-ratio", &missing))) {
		char *end;

		b->cap_ratio = strtod(v, &end);
		if (end == v || *end || !(b->cap_ratio >= 0 && b->cap_ratio <= 1))
			return bench_usage_error("bad value '%s' for --capacity-ratio (want 0..1)",
						 v);
	} else if ((v = bench_opt_value(argc, argv, i, "--timeout-ms", &missing))) {
		rc = bench_parse_num("--timeout-ms", v, 0, 0, UINT32_MAX, &x);
		b->opts.timeout_ms = (unsigned)x;
		return rc;
	} else if ((v = bench_opt_value(argc, argv, i, "--requests", &missing))) {
		return bench_parse_num("--requests", v, 0, 1, UINT32_MAX, &b->t.limit);
	} else if ((v = bench_opt_value(argc, argv, i, "--check", &missing))) {
		char *end;

		b->check = strtod(v, &end);
		if (end == v || *end || !(b->check > 0 && b->check <= 1))
			return bench_usage_error("bad value '%s' for --check (want 0..1)", v);
	} else if (!strcmp(a, "--simulate-only"))
		b->simulate_only = 1;
	else if (missing)
		return bench_usage_error("option %s needs a value", a);
	else
		return bench_usage_error("unknown argument '%s' for --trace mode", a);
	return BENCH_EXIT_OK;
}

static int parse_args(struct tr *b, int argc, char **argv)
{
	int rc;

	for (int i = 1; i < argc; i++) {
		rc = parse_one(b, argc, argv, &i);
		if (rc)
			return rc;
	}
	if (!b->path)
		return bench_usage_error("--trace needs a file");
	if (!b->block)
		return bench_usage_error("--trace needs --block-size");
	if (strlen(b->prefix) > TR_PREFIX_MAX)
		return bench_usage_error("--prefix is longer than %d bytes", TR_PREFIX_MAX);
	return BENCH_EXIT_OK;
}

static void print_config(struct tr *b)
{
	uint64_t staged = 2ull * b->chunk * b->block + (4ull << 20);

	/* One batch call's values staged in the arena, with room to spare. */
	staged = bench_round_up(staged, 1ull << 20);
	b->opts.arena_bytes = staged < TR_MIN_ARENA ? TR_MIN_ARENA : staged;
	printf("mode=trace\n");
	printf("trace=%s\n", b->path);
	printf("block_size_bytes=%" PRIu64 "\n", b->block);
	printf("capacity_blocks=%" PRIu64 "\n", b->cap_blocks);
	printf("capacity_from=%s\n", b->have_blocks ? "capacity-blocks" : "capacity-ratio");
	printf("capacity_bytes=%" PRIu64 "\n", b->cap_blocks * b->block);
	printf("key_prefix=%s-\n", b->prefix);
	printf("simulate_only=%d\n", b->simulate_only);
	if (!b->simulate_only) {
		printf("socket=%s\n", b->opts.socket_path      ? b->opts.socket_path
				      : getenv("LUNAR_SOCKET") ? getenv("LUNAR_SOCKET")
							       : "default");
		printf("chunk_keys=%u\n", b->chunk);
		printf("arena_bytes=%zu\n", b->opts.arena_bytes);
	}
	printf("trace_requests=%zu\n", b->t.nreq);
	printf("trace_blocks=%zu\n", b->t.nids);
	printf("trace_unique_blocks=%" PRIu64 "\n", b->t.unique);
	printf("trace_max_blocks_per_request=%" PRIu64 "\n", b->t.max_per_req);
	fflush(stdout);
}

static int run_store(struct tr *b)
{
	int rc;

	if (replay_alloc(b)) {
		fprintf(stderr, "lunar-bench: out of memory for the replay\n");
		return BENCH_EXIT_FAIL;
	}
	rc = lunar_connect(&b->opts, &b->c);
	if (rc) {
		fprintf(stderr, "lunar-bench: cannot connect to the proxy: %s (%d)\n",
			lunar_strerror(rc), rc);
		return BENCH_EXIT_NOCONN;
	}
	replay(b);
	lunar_close(b->c);
	print_replay(b);
	return hard_errors(b) ? BENCH_EXIT_FAIL : BENCH_EXIT_OK;
}

/* --check: the replay's hit ratio against the infinite cache's (inf
 * blocks); rc as it was, or BENCH_EXIT_FAIL. */
static int check_replay(const struct tr *b, int64_t inf, int rc)
{
	double want = b->check * share((uint64_t)inf, b->t.nids);
	double got = share(b->served, b->requested);
	int ok = got >= want && !hard_errors(b);

	printf("check_min_hit_ratio=%.4f\n", want);
	printf("check=%s\n", ok ? "ok" : "failed");
	if (!ok)
		fprintf(stderr,
			"lunar-bench: --check: hit ratio %.4f (least %.4f), %" PRIu64 " errors\n",
			got, want, hard_errors(b));
	return ok ? rc : BENCH_EXIT_FAIL;
}

int bench_trace_main(int argc, char **argv)
{
	struct tr b = {.prefix = "blk", .cap_ratio = TR_DEFAULT_RATIO};
	uint64_t chunk;
	int64_t lru, inf;
	int rc;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage_text, stdout);
			return BENCH_EXIT_OK;
		}
	rc = parse_args(&b, argc, argv);
	if (rc)
		return rc;
	if (trace_load(&b.t, b.path)) {
		trace_free(&b.t);
		return BENCH_EXIT_FAIL;
	}
	if (!b.have_blocks)
		b.cap_blocks = (uint64_t)(b.cap_ratio * (double)b.t.unique + 0.5);
	chunk = TR_CHUNK_BYTES / b.block;
	b.chunk = (unsigned)(chunk < 1 ? 1 : chunk > LUNAR_BATCH_MAX ? LUNAR_BATCH_MAX : chunk);
	print_config(&b);
	lru = lru_hits(&b.t, b.cap_blocks, 0);
	if (lru < 0) {
		rc = BENCH_EXIT_FAIL;
		goto out;
	}
	rc = b.simulate_only ? BENCH_EXIT_OK : run_store(&b);
	printf("lru_capacity_blocks=%" PRIu64 "\n", b.cap_blocks);
	printf("lru_hit_blocks=%" PRId64 "\n", lru);
	printf("lru_hit_ratio=%.4f\n", share((uint64_t)lru, b.t.nids));
	printf("prefix_lru_hit_ratio=%.4f\n",
	       share((uint64_t)lru_hits(&b.t, b.cap_blocks, 1), b.t.nids));
	inf = lru_hits(&b.t, b.t.unique, 0);
	printf("infinite_hit_ratio=%.4f\n", share((uint64_t)inf, b.t.nids));
	if (b.check > 0 && !b.simulate_only)
		rc = check_replay(&b, inf, rc);
out:
	replay_free(&b);
	trace_free(&b.t);
	return rc;
}
