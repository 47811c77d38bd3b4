/*
 * memc-bench.c - set/get throughput and latency of a memcached over its UNIX
 * socket with the ASCII protocol, for tools/bench-vs-peers.sh: THREADS threads,
 * one connection each, set COUNT values of SIZE bytes, then get each back and
 * check every byte (--check as lunar-bench's: with sampled, a sample in the
 * get phase and every byte in a verify phase after it; the compares are
 * outside the time counted, as in lunar-bench). Prints the configuration,
 * then one key=value line per figure, named as lunar-bench names them (set_
 * for put).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "clock.h"
#include "parse.h"
#include "bench/bench.h"

#define MB_MAX_THREADS 256
#define MB_LINE_MAX    256

struct cfg {
	const char *sock;
	uint64_t size, count;
	unsigned threads;
	enum bench_check check;
	unsigned char *pattern; /* size + 8 * count bytes: value i starts at 8 * i */
	uint64_t *lat;
};

enum mb_phase { MB_SET, MB_GET, MB_VERIFY };
static const char *const mb_phase_names[] = {"set", "get", "verify"};

struct worker {
	const struct cfg *c;
	pthread_t tid;
	int fd;
	enum mb_phase phase;
	uint64_t first, n, busy_ns, errors;
	char *io; /* one request or one reply */
	size_t io_cap;
};

static int write_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n) {
		ssize_t k = write(fd, b, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static int read_all(int fd, void *p, size_t n)
{
	char *b = p;

	while (n) {
		ssize_t k = read(fd, b, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* One reply line (without CRLF) into line; a byte at a time is fine for
 * lines: the values themselves are read in one piece. */
static int read_line(int fd, char *line, size_t cap)
{
	size_t n = 0;

	for (;;) {
		if (n + 1 >= cap || read_all(fd, line + n, 1))
			return -1;
		if (line[n] == '\n') {
			line[n > 0 && line[n - 1] == '\r' ? n - 1 : n] = '\0';
			return 0;
		}
		n++;
	}
}

static int do_set(struct worker *w, uint64_t i)
{
	const struct cfg *c = w->c;
	char line[MB_LINE_MAX];
	int h = snprintf(w->io, w->io_cap, "set mb-%" PRIu64 " 0 0 %" PRIu64 "\r\n", i, c->size);

	/* Header, value and CRLF in one write, as a client library would. */
	memcpy(w->io + h, c->pattern + 8 * i, c->size);
	memcpy(w->io + h + c->size, "\r\n", 2);
	if (write_all(w->fd, w->io, (size_t)h + c->size + 2) ||
	    read_line(w->fd, line, sizeof(line)))
		return -1;
	return strcmp(line, "STORED") ? -1 : 0;
}

/* Get value i into w->io. */
static int do_get(struct worker *w, uint64_t i)
{
	const struct cfg *c = w->c;
	char line[MB_LINE_MAX], want[MB_LINE_MAX];
	int h = snprintf(w->io, w->io_cap, "get mb-%" PRIu64 "\r\n", i);

	if (write_all(w->fd, w->io, (size_t)h) || read_line(w->fd, line, sizeof(line)))
		return -1;
	snprintf(want, sizeof(want), "VALUE mb-%" PRIu64 " 0 %" PRIu64, i, c->size);
	if (strcmp(line, want))
		return -1;
	if (read_all(w->fd, w->io, c->size + 2) || read_line(w->fd, line, sizeof(line)))
		return -1;
	return strcmp(line, "END") ? -1 : 0;
}

/* Compare the value read for i: every byte when full, else a sample. */
static int check_get(const struct worker *w, uint64_t i, int full)
{
	const struct cfg *c = w->c;
	const unsigned char *want = c->pattern + 8 * i;

	return (full ? memcmp(w->io, want, c->size) != 0
		     : !bench_sampled_equal(w->io, want, c->size))
		   ? -1
		   : 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t t0, dt;

	for (uint64_t i = w->first; i < w->first + w->n; i++) {
		int get = w->phase != MB_SET, rc;

		if (get)
			bench_poison_samples(w->io, w->c->pattern + 8 * i, w->c->size);
		t0 = lc_now_ns();
		rc = get ? do_get(w, i) : do_set(w, i);
		dt = lc_now_ns() - t0;
		w->c->lat[i] = dt;
		w->busy_ns += dt;
		/* Compared outside the timing, as lunar-bench does. */
		if (!rc && get)
			rc = check_get(w, i,
				       w->phase == MB_VERIFY || w->c->check == BENCH_CHECK_FULL);
		if (rc && w->errors++ < 3)
			fprintf(stderr, "memc-bench: %s mb-%" PRIu64 " failed\n",
				mb_phase_names[w->phase], i);
	}
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t run_phase(struct cfg *c, struct worker *ws, enum mb_phase ph)
{
	const char *name = mb_phase_names[ph];
	uint64_t t0 = lc_now_ns(), wall, busy = 0, errors = 0;
	double s;

	for (unsigned t = 0; t < c->threads; t++) {
		ws[t].phase = ph;
		ws[t].busy_ns = ws[t].errors = 0;
		if (pthread_create(&ws[t].tid, NULL, worker_main, &ws[t])) {
			fprintf(stderr, "memc-bench: cannot start a thread\n");
			exit(1);
		}
	}
	for (unsigned t = 0; t < c->threads; t++) {
		pthread_join(ws[t].tid, NULL);
		errors += ws[t].errors;
		busy = ws[t].busy_ns > busy ? ws[t].busy_ns : busy;
	}
	wall = lc_now_ns() - t0;
	s = (double)busy / 1e9;
	qsort(c->lat, c->count, sizeof(*c->lat), cmp_u64);
	printf("%s_ops=%" PRIu64 "\n%s_errors=%" PRIu64 "\n", name, c->count, name, errors);
	printf("%s_wall_s=%.6f\n", name, (double)wall / 1e9);
	printf("%s_ops_per_s=%.1f\n", name, s > 0 ? (double)c->count / s : 0.0);
	printf("%s_gb_per_s=%.3f\n", name,
	       s > 0 ? (double)c->count * (double)c->size / s / 1e9 : 0.0);
	printf("%s_p50_us=%.2f\n%s_p99_us=%.2f\n", name, bench_pct_us(c->lat, c->count, 50), name,
	       bench_pct_us(c->lat, c->count, 99));
	fflush(stdout);
	return errors;
}

static int connect_unix(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || strlen(path) >= sizeof(a.sun_path)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	strcpy(a.sun_path, path);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	return fd;
}

static int parse(struct cfg *c, int argc, char **argv)
{
	uint64_t t = 1;

	for (int i = 1; i + 1 < argc; i += 2) {
		const char *k = argv[i], *v = argv[i + 1];
		int bad = 0;

		if (!strcmp(k, "--socket"))
			c->sock = v;
		else if (!strcmp(k, "--size"))
			bad = lc_parse_size(v, &c->size) || !c->size || c->size > (1ull << 30);
		else if (!strcmp(k, "--count"))
			bad = lc_parse_u64(v, &c->count) || !c->count || c->count > (1ull << 26);
		else if (!strcmp(k, "--threads"))
			bad = lc_parse_u64(v, &t) || !t || t > MB_MAX_THREADS;
		else if (!strcmp(k, "--check"))
			bad = bench_parse_check(v, &c->check);
		else
			bad = 1;
		if (bad) {
			fprintf(stderr, "memc-bench: bad argument %s %s\n", k, v);
			return -1;
		}
	}
	if (!c->sock || argc % 2 == 0) {
		fprintf(stderr, "usage: memc-bench --socket PATH [--size SIZE] [--count N] "
				"[--threads T] [--check full|sampled]\n");
		return -1;
	}
	c->threads = (unsigned)t;
	return 0;
}

int main(int argc, char **argv)
{
	struct cfg c = {.size = 4096, .count = 10000};
	struct worker *ws;
	uint64_t errors;

	if (parse(&c, argc, argv))
		return 2;
	c.pattern = bench_pattern_alloc(c.size + 8 * c.count);
	c.lat = calloc(c.count, sizeof(*c.lat));
	ws = calloc(c.threads, sizeof(*ws));
	if (!c.pattern || !c.lat || !ws)
		return 1;
	printf("socket=%s\nsize_bytes=%" PRIu64 "\ncount=%" PRIu64 "\nthreads=%u\ncheck=%s\n",
	       c.sock, c.size, c.count, c.threads,
	       c.check == BENCH_CHECK_FULL ? "full" : "sampled");
	for (unsigned t = 0; t < c.threads; t++) {
		ws[t].c = &c;
		ws[t].first = c.count * t / c.threads;
		ws[t].n = c.count * (t + 1) / c.threads - ws[t].first;
		ws[t].io_cap = c.size + MB_LINE_MAX;
		ws[t].io = malloc(ws[t].io_cap);
		ws[t].fd = connect_unix(c.sock);
		if (!ws[t].io || ws[t].fd < 0) {
			fprintf(stderr, "memc-bench: cannot connect to %s\n", c.sock);
			return 3;
		}
	}
	errors = run_phase(&c, ws, MB_SET);
	errors += run_phase(&c, ws, MB_GET);
	if (c.check == BENCH_CHECK_SAMPLED)
		errors += run_phase(&c, ws, MB_VERIFY);
	printf("errors=%" PRIu64 "\n", errors);
	for (unsigned t = 0; t < c.threads; t++) {
		close(ws[t].fd);
		free(ws[t].io);
	}
	free(ws);
	free(c.lat);
	free(c.pattern);
	return errors ? 1 : 0;
}
