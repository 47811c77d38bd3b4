/*
 * bench.h - what lunar-bench's modes share: option parsing, the
 * deterministic value pattern, latency percentiles and key=value figure
 * lines (SPEC §12), and the entry points of the master-RPC and trace-replay
 * modes. Everything here is for the benchmark only; nothing is installed.
 */
#ifndef LUNAR_TOOLS_BENCH_BENCH_H
#define LUNAR_TOOLS_BENCH_BENCH_H

#include <sched.h>
#include <stddef.h>
#include <stdint.h>

enum { BENCH_EXIT_OK = 0, BENCH_EXIT_FAIL = 1, BENCH_EXIT_USAGE = 2, BENCH_EXIT_NOCONN = 3 };

#define BENCH_ALIGN 64

/* bench_usage_error - print "lunar-bench: <why>" and the --help hint;
 * returns BENCH_EXIT_USAGE. */
__attribute__((format(printf, 1, 2))) int bench_usage_error(const char *fmt, ...);

/*
 * bench_opt_value - the value of --name VALUE or --name=VALUE at argv[*i]
 * (advancing *i past a separate value); NULL when argv[*i] is not --name,
 * or when its value is missing, which sets *missing.
 */
const char *bench_opt_value(int argc, char **argv, int *i, const char *name, int *missing);

/* bench_parse_num - a number (is_size: with KiB/MiB/... suffixes) in
 * [min, max] into *out; BENCH_EXIT_USAGE after printing why otherwise. */
int bench_parse_num(const char *flag, const char *s, int is_size, uint64_t min, uint64_t max,
		    uint64_t *out);

/* bench_parse_cpus - a CPU list ("1", "0-3", "0,2-3") into *set; each CPU
 * below CPU_SETSIZE; BENCH_EXIT_USAGE after printing why otherwise. */
int bench_parse_cpus(const char *flag, const char *s, cpu_set_t *set);

/* bench_splitmix64 - SplitMix64's output for state x (x + the golden gamma,
 * mixed): a well-spread 64-bit number per x. Pure. */
uint64_t bench_splitmix64(uint64_t x);
/* bench_round_up - x rounded up to a multiple of to (> 0). Pure. */
uint64_t bench_round_up(uint64_t x, uint64_t to);

/*
 * bench_pattern_alloc - len bytes (rounded up to 8) of one fixed
 * pseudo-random sequence, the same in every process, so a value can be a
 * window of it chosen by the object's number and be checked by anyone.
 * NULL on ENOMEM; free() it.
 */
unsigned char *bench_pattern_alloc(uint64_t len);

/*
 * How a get phase checks the bytes it read. FULL compares every byte of
 * every value in the timed loop. SAMPLED compares a few words per value
 * there (bench_sampled_equal), as redis-benchmark checks none, and then runs
 * a verify phase that reads every object again and compares every byte.
 */
enum bench_check { BENCH_CHECK_FULL, BENCH_CHECK_SAMPLED };

/* bench_parse_check - "full" or "sampled" into *out: 0, or -1. */
int bench_parse_check(const char *s, enum bench_check *out);

/*
 * bench_sampled_equal - whether got and want (len bytes each) agree on the
 * 8 bytes at the start of every 4 KiB and on the last 8. A value is a window
 * of the pattern chosen by its object's number, so another object's bytes,
 * a stale buffer or a page left unwritten fail it; any other wrong byte is
 * left to the verify phase.
 */
int bench_sampled_equal(const void *got, const void *want, uint64_t len);

/*
 * bench_poison_samples - write into buf (len bytes) the complement of want
 * at every word bench_sampled_equal looks at, so that a read which leaves
 * any of them unwritten fails even when buf held this very value before.
 */
void bench_poison_samples(void *buf, const void *want, uint64_t len);

/* A growable array of latencies in nanoseconds; zeroed = empty. */
struct bench_lat {
	uint64_t *v;
	uint64_t n, cap;
};

/* bench_lat_add - append one sample; -1 on ENOMEM (the sample is lost). */
int bench_lat_add(struct bench_lat *l, uint64_t ns);
/* bench_lat_fini - free the samples; l is empty again. */
void bench_lat_fini(struct bench_lat *l);

/* bench_pct_us - nearest-rank percentile p of sorted v[0..n), in µs. */
double bench_pct_us(const uint64_t *v, uint64_t n, double p);

/*
 * bench_print_lat - sort v[0..n) in place and print name_mean_us, _p50_us,
 * _p90_us, _p99_us, _p999_us and _max_us lines.
 */
void bench_print_lat(const char *name, uint64_t *v, uint64_t n);

/* bench_vm_rss_kib - VmRSS of pid from /proc/<pid>/status, or -1. */
int64_t bench_vm_rss_kib(int pid);

/* A barrier across processes that map one file: each phase starts once
 * every process reached it (lunar-bench --sync-file). */
struct bench_sync {
	uint32_t *count; /* arrivals per barrier, in the shared mapping */
	unsigned procs;
};

/* bench_sync_open - map path (created as zeros if absent: a fresh path per
 * run), shared by procs processes. 0, or -1 after printing why. */
int bench_sync_open(struct bench_sync *s, const char *path, unsigned procs);
/* bench_sync_wait - arrive at barrier k (< 1024) and sleep until all procs
 * have: 0; -1 after printing why when they have not within timeout_ms, or
 * more arrived than procs (a file used before). */
int bench_sync_wait(struct bench_sync *s, unsigned k, unsigned timeout_ms);
/* bench_sync_close - unmap the file (it stays on disk); a second call does
 * nothing. */
void bench_sync_close(struct bench_sync *s);

/* The modes: bench_master_main (master RPC), bench_trace_main (trace
 * replay), bench_evict_main (eviction rounds on an in-process master). Each
 * parses its own argv (after the mode flag), runs on the calling thread and
 * returns a BENCH_EXIT_* code. */
int bench_master_main(int argc, char **argv);
int bench_trace_main(int argc, char **argv);
int bench_evict_main(int argc, char **argv);
/* bench_tcp_main - lunar-bench --tcp-baseline (tcp_base.c): plain loopback
 * TCP request/answer, blocking and busy-poll, as tcp_<style>_* figures. */
int bench_tcp_main(int argc, char **argv);

#endif /* LUNAR_TOOLS_BENCH_BENCH_H */
