/*
 * util.c - lunar-bench's shared helpers: option parsing, the value pattern,
 * latency percentiles and /proc reading (see bench.h).
 */
#include "bench.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

int bench_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("lunar-bench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'lunar-bench --help' for details.\n", stderr);
	return BENCH_EXIT_USAGE;
}

const char *bench_opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n) || (a[n] != '=' && a[n] != '\0'))
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	return argv[++*i];
}

int bench_parse_num(const char *flag, const char *s, int is_size, uint64_t min, uint64_t max,
		    uint64_t *out)
{
	uint64_t v;
	int rc = is_size ? lc_parse_size(s, &v) : lc_parse_u64(s, &v);

	if (rc || v < min || v > max)
		return bench_usage_error("bad value '%s' for %s (want %s from %llu to %llu)", s,
					 flag, is_size ? "a size" : "a number",
					 (unsigned long long)min, (unsigned long long)max);
	*out = v;
	return BENCH_EXIT_OK;
}

int bench_parse_cpus(const char *flag, const char *s, cpu_set_t *set)
{
	const char *p = s;

	CPU_ZERO(set);
	for (;;) {
		char *end;
		unsigned long lo = strtoul(p, &end, 10), hi = lo;

		if (end == p || *p == '-' || *p == '+')
			break;
		if (*end == '-') {
			p = end + 1;
			hi = strtoul(p, &end, 10);
			if (end == p || *p == '-' || *p == '+')
				break;
		}
		if (lo > hi || hi >= CPU_SETSIZE)
			break;
		for (unsigned long c = lo; c <= hi; c++)
			CPU_SET(c, set);
		if (!*end)
			return BENCH_EXIT_OK;
		if (*end != ',')
			break;
		p = end + 1;
	}
	return bench_usage_error("bad value '%s' for %s (want a CPU list such as 1 or 0-3,6)", s,
				 flag);
}

uint64_t bench_splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

uint64_t bench_round_up(uint64_t x, uint64_t to)
{
	return (x + to - 1) / to * to;
}

unsigned char *bench_pattern_alloc(uint64_t len)
{
	uint64_t words = bench_round_up(len ? len : 1, 8) / 8, *w;
	unsigned char *p = aligned_alloc(BENCH_ALIGN, bench_round_up(words * 8, BENCH_ALIGN));

	if (!p)
		return NULL;
	w = (uint64_t *)p;
	for (uint64_t j = 0; j < words; j++)
		w[j] = bench_splitmix64(j);
	return p;
}

int bench_parse_check(const char *s, enum bench_check *out)
{
	if (!strcmp(s, "full"))
		*out = BENCH_CHECK_FULL;
	else if (!strcmp(s, "sampled"))
		*out = BENCH_CHECK_SAMPLED;
	else
		return -1;
	return 0;
}

#define BENCH_SAMPLE_STRIDE 4096

int bench_sampled_equal(const void *got, const void *want, uint64_t len)
{
	const unsigned char *g = got, *w = want;
	uint64_t tail = len < 8 ? len : 8;

	for (uint64_t at = 0; at + 8 <= len; at += BENCH_SAMPLE_STRIDE)
		if (memcmp(g + at, w + at, 8))
			return 0;
	return !memcmp(g + len - tail, w + len - tail, tail);
}

/* Complement n bytes of want into buf. */
static void poison(unsigned char *buf, const unsigned char *want, uint64_t n)
{
	for (uint64_t k = 0; k < n; k++)
		buf[k] = (unsigned char)~want[k];
}

void bench_poison_samples(void *buf, const void *want, uint64_t len)
{
	unsigned char *b = buf;
	const unsigned char *w = want;
	uint64_t tail = len < 8 ? len : 8;

	for (uint64_t at = 0; at + 8 <= len; at += BENCH_SAMPLE_STRIDE)
		poison(b + at, w + at, 8);
	poison(b + len - tail, w + len - tail, tail);
}

int bench_lat_add(struct bench_lat *l, uint64_t ns)
{
	if (l->n == l->cap) {
		uint64_t cap = l->cap ? l->cap * 2 : 1024;
		uint64_t *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -1;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = ns;
	return 0;
}

void bench_lat_fini(struct bench_lat *l)
{
	free(l->v);
	*l = (struct bench_lat){0};
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

double bench_pct_us(const uint64_t *v, uint64_t n, double p)
{
	uint64_t rank = (uint64_t)(p / 100.0 * (double)n + 0.999999);

	if (!n)
		return 0.0;
	if (rank < 1)
		rank = 1;
	return (double)v[(rank > n ? n : rank) - 1] / 1e3;
}

void bench_print_lat(const char *name, uint64_t *v, uint64_t n)
{
	uint64_t sum = 0;

	qsort(v, n, sizeof(*v), cmp_u64);
	for (uint64_t i = 0; i < n; i++)
		sum += v[i];
	printf("%s_mean_us=%.2f\n", name, n ? (double)sum / (double)n / 1e3 : 0.0);
	printf("%s_p50_us=%.2f\n", name, bench_pct_us(v, n, 50));
	printf("%s_p90_us=%.2f\n", name, bench_pct_us(v, n, 90));
	printf("%s_p99_us=%.2f\n", name, bench_pct_us(v, n, 99));
	printf("%s_p999_us=%.2f\n", name, bench_pct_us(v, n, 99.9));
	printf("%s_max_us=%.2f\n", name, n ? (double)v[n - 1] / 1e3 : 0.0);
}

int64_t bench_vm_rss_kib(int pid)
{
	char path[64], line[256];
	long long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}
