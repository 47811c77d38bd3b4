/*
 * test_bench_modes.c - lunar-bench's measuring modes give their figures:
 * --evict-round evicts exactly ceil(N x 5 %) objects in one round, and
 * --trace --simulate-only counts the trace's unique blocks (skipped without
 * the trace beside the repo), and two processes against one proxy each
 * bound their phases on the shared monotonic clock (what bench-procs.sh
 * adds up), with every byte checked, --sync-file starts their phases
 * together, --check sampled adds a verify phase after the gets (also in
 * memc-bench, against memcached when there is one), --depth keeps puts
 * and gets in flight with every byte still checked, and the
 * copy baselines (cold source and destination, and memcpy into a cached
 * destination) are all given, and the wire's baseline runs with its server
 * threads placed (--server-cpus); against a node's proxy, whose forced
 * removals the master refuses, the rm phase says what would allow them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define TRACE "../shared/traces/synthetic_trace.jsonl"

/* Run cmd; its stdout into out (NUL-terminated); its exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
	FILE *f = popen(cmd, "r");
	size_t n = 0;
	int st;

	if (!f)
		return -1;
	while (n + 1 < cap && fgets(out + n, (int)(cap - n), f))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_bench_modes_evict_round(void **state)
{
	char cmd[512], out[4096];

	(void)state;
	snprintf(cmd, sizeof(cmd), "timeout 60 %s --evict-round 2000", h_bin("lunar-bench"));
	assert_int_equal(run(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "evicted=100\n"));
	assert_non_null(strstr(out, "eviction_round_ms="));
	snprintf(cmd, sizeof(cmd), "%s --evict-round 2000 --bogus 2>/dev/null",
		 h_bin("lunar-bench"));
	assert_int_equal(run(cmd, out, sizeof(out)), 2);
}

static void test_bench_modes_trace_simulation(void **state)
{
	char cmd[512], out[8192];

	(void)state;
	if (access(TRACE, R_OK)) {
		printf("skipped: no %s beside the repo\n", TRACE);
		skip();
	}
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --trace " TRACE " --block-size 64KiB --simulate-only "
		 "--capacity-ratio 0.1",
		 h_bin("lunar-bench"));
	assert_int_equal(run(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "trace_requests=3993\n"));
	assert_non_null(strstr(out, "trace_unique_blocks=43924\n"));
	assert_non_null(strstr(out, "lru_hit_ratio="));
}

/* Where the value of key=... in out starts; a failed assertion if absent. */
static const char *value_of(const char *out, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\n%s=", key);
	p = strstr(out, pat);
	H_ASSERT_MSG(p, "no %s in lunar-bench's output", key);
	return p + strlen(pat);
}

/* The count key=... in out. */
static unsigned long long figure(const char *out, const char *key)
{
	return strtoull(value_of(out, key), NULL, 10);
}

/* The rate key=... ("%.3f") in out: read as a count, a sanitizer's build,
 * which copies below 1 GB/s, would read as 0. */
static double rate(const char *out, const char *key)
{
	return strtod(value_of(out, key), NULL);
}

/* A fresh node (embedded master, 64 MiB segment) and, in cmd, a bounded
 * lunar-bench command line against it with args. */
static void bench_node(char cmd[PATH_MAX + 256], const char *args)
{
	char sock[PATH_MAX];

	H_ASSERT_EQ(h_init(), 0);
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	H_ASSERT(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "64MiB", NULL));
	snprintf(cmd, PATH_MAX + 256, "timeout 60 %s --socket %s %s", h_bin("lunar-bench"), sock,
		 args);
}

static void test_bench_modes_phase_clock(void **state)
{
	char cmd[PATH_MAX + 256], out[2][8192];
	unsigned long long before, after;
	FILE *f[2];

	(void)state;
	bench_node(cmd, "--size 4KiB --count 2000 --baseline-size 0");
	before = (unsigned long long)h_now_ms() * 1000000ull;
	for (int i = 0; i < 2; i++)
		H_ASSERT((f[i] = popen(cmd, "r")) != NULL);
	for (int i = 0; i < 2; i++) {
		size_t n = fread(out[i] + 1, 1, sizeof(out[i]) - 2, f[i]);

		out[i][0] = '\n';
		out[i][n + 1] = '\0';
		H_ASSERT_EQ(pclose(f[i]), 0);
	}
	after = (unsigned long long)h_now_ms() * 1000000ull + 1000000ull;
	for (int i = 0; i < 2; i++) {
		H_ASSERT_EQ(figure(out[i], "errors"), 0);
		H_ASSERT_EQ(figure(out[i], "get_ops"), 2000);
		H_ASSERT(strstr(out[i], "\nverify_ops=") == NULL); /* --check full */
		H_ASSERT(figure(out[i], "put_start_ns") >= before);
		H_ASSERT(figure(out[i], "put_start_ns") <= figure(out[i], "put_end_ns"));
		H_ASSERT(figure(out[i], "put_end_ns") <= figure(out[i], "get_start_ns"));
		H_ASSERT(figure(out[i], "get_start_ns") <= figure(out[i], "get_end_ns"));
		H_ASSERT(figure(out[i], "get_end_ns") <= after);
	}
	h_cleanup();
}

/* --sync-file: a process waits at each phase for the others. The first one
 * starts its puts only once the second, started 1 s later, is there, and
 * its gets only once the second has done its exists. A used file, or one
 * flag without the other, is refused. */
static void test_bench_modes_sync_file(void **state)
{
	char cmd[PATH_MAX + 256], args[PATH_MAX + 128], out[2][8192];
	unsigned long long second;
	FILE *f[2];

	(void)state;
	bench_node(cmd, "--size 4KiB --count 500 --baseline-size 0");
	snprintf(cmd + strlen(cmd), PATH_MAX + 256 - strlen(cmd), " --sync-file %s --sync-procs 2",
		 h_path("sync"));
	H_ASSERT((f[0] = popen(cmd, "r")) != NULL);
	usleep(1000000);
	second = (unsigned long long)h_now_ms() * 1000000ull;
	H_ASSERT((f[1] = popen(cmd, "r")) != NULL);
	for (int i = 0; i < 2; i++) {
		size_t n = fread(out[i] + 1, 1, sizeof(out[i]) - 2, f[i]);

		out[i][0] = '\n';
		out[i][n + 1] = '\0';
		H_ASSERT_EQ(pclose(f[i]), 0);
		H_ASSERT_EQ(figure(out[i], "errors"), 0);
	}
	H_ASSERT(figure(out[0], "put_start_ns") >= second);
	H_ASSERT(figure(out[0], "get_start_ns") >= figure(out[1], "exists_end_ns"));
	H_ASSERT(figure(out[1], "get_start_ns") >= figure(out[0], "exists_end_ns"));
	/* the file has seen its two processes: a third is told so */
	H_ASSERT_EQ(run(cmd, out[0], sizeof(out[0])), 1);
	strcat(cmd, " --sync-procs 0");
	H_ASSERT_EQ(run(cmd, out[0], sizeof(out[0])), 2);
	snprintf(args, sizeof(args), "%s --sync-file x 2>/dev/null", h_bin("lunar-bench"));
	H_ASSERT_EQ(run(args, out[0], sizeof(out[0])), 2);
	h_cleanup();
}

/*
 * Run cmd (a --check sampled run of n objects) into out, with a leading
 * newline for figure(): it passes, with a verify phase of n objects and no
 * error; cmd with a bad --check value exits 2 (cmd is changed).
 */
static void sampled_run(char *cmd, char *out, size_t cap, unsigned long long n)
{
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, cap - 1), 0);
	H_ASSERT(strstr(out, "\ncheck=sampled\n") != NULL);
	H_ASSERT_EQ(figure(out, "verify_ops"), n);
	H_ASSERT_EQ(figure(out, "verify_errors"), 0);
	H_ASSERT_EQ(figure(out, "errors"), 0);
}

/* cmd with --check some: a usage error (cmd is changed). */
static void bad_check_refused(char *cmd)
{
	char out[256];

	strcat(cmd, " --check some 2>/dev/null");
	H_ASSERT_EQ(run(cmd, out, sizeof(out)), 2);
}

/* memc-bench against a real memcached on a UNIX socket (skipped without
 * one): --check sampled adds its verify phase, and every value comes back
 * right. */
static void test_bench_modes_memc_sampled_check(void **state)
{
	char cmd[PATH_MAX + 256], msock[PATH_MAX], out[4096];
	char *argv[] = {"memcached", "-s", msock, "-m", "64", "-u", "root", NULL};
	struct h_proc *mc;

	(void)state;
	if (system("command -v memcached >/dev/null 2>&1")) {
		printf("skipped: no memcached on PATH (apt-get install memcached)\n");
		skip();
	}
	H_ASSERT_EQ(h_init(), 0);
	snprintf(msock, sizeof(msock), "%s", h_path("memc.sock"));
	if (geteuid() != 0)
		argv[5] = NULL; /* -u only for root, which memcached refuses to be */
	mc = h_spawn("memcached", argv);
	H_ASSERT(mc != NULL);
	for (int i = 0; i < 100 && access(msock, F_OK); i++)
		usleep(50000);
	H_ASSERT_MSG(!access(msock, F_OK), "memcached did not open %s", msock);
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --socket %s --size 64KiB --count 200 --threads 2 --check sampled",
		 h_bin("memc-bench"), msock);
	sampled_run(cmd, out, sizeof(out), 200);
	H_ASSERT_EQ(figure(out, "get_errors"), 0);
	bad_check_refused(cmd);
	h_cleanup();
}

/* --check sampled: the get phase is followed by a verify phase that gets
 * every object again (its every byte compared); a bad value is refused. */
static void test_bench_modes_sampled_check(void **state)
{
	char cmd[PATH_MAX + 256], out[8192];

	(void)state;
	bench_node(cmd, "--size 64KiB --count 300 --threads 2 --zero-copy --baseline-size 0 "
			"--check sampled");
	sampled_run(cmd, out, sizeof(out), 300);
	H_ASSERT_EQ(figure(out, "get_ops"), 300);
	H_ASSERT(strstr(out, "\nverify_gb_per_s=") != NULL);
	H_ASSERT(figure(out, "get_end_ns") <= figure(out, "verify_start_ns"));
	H_ASSERT(figure(out, "verify_end_ns") <= figure(out, "rm_start_ns"));
	bad_check_refused(cmd);
	h_cleanup();
}

/* One node's run with args: exit 0, the configuration line config (as
 * "name=value") printed, ops gets, no error; then each of bad (NULL-ended)
 * added to args is refused with exit 2. */
static void mode_runs(const char *args, const char *config, int64_t ops, const char *const *bad)
{
	char cmd[PATH_MAX + 256], more[PATH_MAX + 300], out[8192], line[64];

	bench_node(cmd, args);
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
	snprintf(line, sizeof(line), "\n%s\n", config);
	H_ASSERT_MSG(strstr(out, line) != NULL, "no %s in %s", config, out);
	H_ASSERT_EQ(figure(out, "get_ops"), ops);
	H_ASSERT_EQ(figure(out, "put_errors"), 0);
	H_ASSERT_EQ(figure(out, "get_errors"), 0);
	H_ASSERT_EQ(figure(out, "errors"), 0);
	for (; bad && *bad; bad++) {
		snprintf(more, sizeof(more), "%s %s 2>/dev/null", cmd, *bad);
		H_ASSERT_EQ(run(more, out, sizeof(out)), 2);
	}
	h_cleanup();
}

/* --depth: puts and gets kept in flight with the asynchronous calls, from
 * ordinary and from registered memory, every byte compared; a depth of 0,
 * and threads x depth past a session's 256 slots, are refused, while 300
 * threads of synchronous calls are not. */
static void test_bench_modes_depth(void **state)
{
	static const char *const bad[] = {"--depth 0", "--depth 257", "--depth 129", NULL};
	char cmd[PATH_MAX + 256], out[8192];

	(void)state;
	mode_runs("--size 4KiB --count 1001 --threads 2 --depth 8 --baseline-size 0", "depth=8",
		  1001, bad);
	mode_runs("--size 64KiB --count 301 --threads 1 --depth 5 --zero-copy --baseline-size 0",
		  "depth=5", 301, NULL);
	/* Synchronous threads are bounded by --threads alone. */
	bench_node(cmd, "--size 4KiB --count 1001 --baseline-size 0 --threads 300 --depth 1");
	H_ASSERT_EQ(run(cmd, out, sizeof(out)), 0);
	h_cleanup();
}

/* --batch: K objects a call (lunar_batch_put, lunar_batch_get_into), the
 * last call of a thread shorter, from ordinary and from registered memory,
 * every byte compared; 0, more than LUNAR_BATCH_MAX, and with --depth are
 * refused. */
static void test_bench_modes_batch(void **state)
{
	static const char *const bad[] = {"--batch 0", "--batch 1025", "--depth 2", NULL};

	(void)state;
	mode_runs("--size 4KiB --count 1001 --threads 2 --batch 16 --baseline-size 0", "batch=16",
		  1001, bad);
	mode_runs("--size 64KiB --count 301 --batch 7 --zero-copy --baseline-size 0", "batch=7",
		  301, NULL);
}

static void test_bench_modes_copy_baselines(void **state)
{
	char cmd[PATH_MAX + 256], out[8192];

	(void)state;
	bench_node(cmd, "--size 64KiB --count 16 --baseline-size 32MiB");
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
	H_ASSERT_EQ(figure(out, "baseline_src_bytes"), 32ull << 20);
	H_ASSERT_EQ(figure(out, "baseline_dst_bytes"), 32ull << 20);
	H_ASSERT_MSG(rate(out, "memcpy_gb_per_s") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "nt_copy_gb_per_s") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "memcpy_hot_dst_gb_per_s") > 0, "%s", out);
	h_cleanup();
}

/* The wire's baseline with its server threads placed on a CPU of ours,
 * in both directions unless told one, sending by copy unless told
 * sendfile, zerocopy or io_uring, or after a put's sending-side work
 * (staged, crc); a CPU list, a direction or a way to send it cannot read
 * is a usage error. */
static void test_bench_modes_tcp_baseline_placed(void **state)
{
	char cmd[PATH_MAX + 256], out[4096];
	cpu_set_t set;
	int cpu = 0;

	(void)state;
	H_ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
	while (!CPU_ISSET(cpu, &set))
		cpu++;
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --tcp-baseline --size 4KiB --count 200 --server-cpus %d",
		 h_bin("lunar-bench"), cpu);
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
	H_ASSERT_MSG(rate(out, "tcp_blocking_gbps") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_busypoll_gbps") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_put_blocking_gbps") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_put_busypoll_gbps") > 0, "%s", out);
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --tcp-baseline --size 64KiB --count 100 --direction put",
		 h_bin("lunar-bench"));
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
	H_ASSERT_MSG(rate(out, "tcp_put_blocking_gbps") > 0, "%s", out);
	H_ASSERT_MSG(!strstr(out, "\ntcp_blocking_gbps="), "%s", out);
	H_ASSERT_MSG(strstr(out, "\ntcp_send=copy\n"), "%s", out);
	/* Without the copy: from a memfd, and with MSG_ZEROCOPY, whose sends
	 * each complete (copied or not). */
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --tcp-baseline --size 64KiB --count 100 --send sendfile",
		 h_bin("lunar-bench"));
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
	H_ASSERT_MSG(strstr(out, "\ntcp_send=sendfile\n"), "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_busypoll_gbps") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_put_busypoll_gbps") > 0, "%s", out);
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --tcp-baseline --size 64KiB --count 100 --send zerocopy "
		 "--direction put",
		 h_bin("lunar-bench"));
	out[0] = '\n';
	H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
	H_ASSERT_MSG(rate(out, "tcp_put_blocking_gbps") > 0, "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_put_blocking_zerocopy_sent") >= 100, "%s", out);
	H_ASSERT_MSG(rate(out, "tcp_put_busypoll_zerocopy_sent") >= 100, "%s", out);
	/* With a put's sending-side work before each send (the put's
	 * ceiling), and through io_uring. */
	for (int i = 0; i < 3; i++) {
		static const char *const way[] = {"staged", "crc", "uring"};
		char want[64];

		snprintf(cmd, sizeof(cmd),
			 "timeout 60 %s --tcp-baseline --size 64KiB --count 100 --send %s "
			 "--direction put",
			 h_bin("lunar-bench"), way[i]);
		out[0] = '\n';
		H_ASSERT_EQ(run(cmd, out + 1, sizeof(out) - 1), 0);
		snprintf(want, sizeof(want), "\ntcp_send=%s\n", way[i]);
		H_ASSERT_MSG(strstr(out, want), "%s", out);
		H_ASSERT_MSG(rate(out, "tcp_put_busypoll_gbps") > 0, "%s", out);
	}
	for (int i = 0; i < 5; i++) {
		static const char *const bad[] = {"--server-cpus x", "--server-cpus 1-",
						  "--server-cpus 99999", "--direction sideways",
						  "--send carrier-pigeon"};

		snprintf(cmd, sizeof(cmd), "%s --tcp-baseline %s 2>/dev/null", h_bin("lunar-bench"),
			 bad[i]);
		H_ASSERT_EQ(run(cmd, out, sizeof(out)), 2);
	}
}

/* Against a node's proxy (no --admin-calls), the rm phase's forced
 * removals are refused: the bench fails and says what would allow them;
 * with --keep it has nothing to remove and passes. */
static void test_bench_modes_rm_needs_admin(void **state)
{
	char sock[PATH_MAX], cmd[PATH_MAX + 256], out[4096];
	int port;

	(void)state;
	H_ASSERT(h_cluster_master(&port, NULL) != NULL);
	snprintf(sock, sizeof(sock), "%s", h_path("node.sock"));
	H_ASSERT(h_start_proxy("proxy", sock, port, "--segment-size", "64MiB", NULL));
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --socket %s --size 4KiB --count 3 --baseline-size 0 2>&1",
		 h_bin("lunar-bench"), sock);
	H_ASSERT_EQ(run(cmd, out, sizeof(out)), 1);
	H_ASSERT_MSG(strstr(out, "UNAUTHORIZED (-2001): removing leased objects needs a proxy "
				 "with --admin-calls (or use --keep)"),
		     "%s", out);
	snprintf(cmd, sizeof(cmd),
		 "timeout 60 %s --socket %s --size 4KiB --count 3 --baseline-size 0 --keep",
		 h_bin("lunar-bench"), sock);
	H_ASSERT_EQ(run(cmd, out, sizeof(out)), 0);
	h_cleanup();
}

LUNAR_TEST_MAIN(NULL, NULL, test_bench_modes_evict_round, test_bench_modes_trace_simulation,
		test_bench_modes_phase_clock, test_bench_modes_sync_file,
		test_bench_modes_sampled_check, test_bench_modes_memc_sampled_check,
		test_bench_modes_depth, test_bench_modes_batch, test_bench_modes_copy_baselines,
		test_bench_modes_tcp_baseline_placed, test_bench_modes_rm_needs_admin)
