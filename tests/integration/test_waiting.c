/*
 * test_waiting.c - how the proxy and its clients wait.
 *
 * The hints a lunar-proxy writes into every client's ring for how its
 * threads wait (shm-abi.md, Completing):
 *  - loop_cpu names the CPU the loop runs on (plus one), so a would-be
 *    spinner on that CPU sleeps (and may be woken elsewhere) instead;
 *  - crowded turns on while more clients are busy than there are CPUs
 *    beside the loop (each waiter then yields between looks, unless its
 *    requests take under 1.8 us), and off when they go quiet;
 *  - a client that overwrites its own hints is still served, and never
 *    changes what another client is told; the proxy never reads them;
 *  - a proxy given a CPU of its own (taskset, CPUAffinity=) is not crowded
 *    by one busy client, and a client whose one CPU is not the loop's
 *    spins for its requests rather than yielding between looks.
 *
 * A busy path makes no system calls: while one client thread calls
 * exists and get back to back, the proxy drains its ring without entering
 * the kernel, looking at its sockets only every 100 µs. Counted by perf on
 * the raw_syscalls:sys_enter tracepoint of the proxy's process: fewer than
 * one system call per four client calls (about 0.07 here; a loop that
 * looked at its sockets between every two polls of the rings made about 3
 * a call). Skipped, with the reason, where perf cannot count it or the
 * build has a sanitizer (LUNAR_TEST_SANITIZER, set by make asan/tsan).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include "atomic.h"
#include "cpus.h"
#include "harness.h"
#include "harness_raw.h"
#include "tests/cmocka_main.h"

#define MAX_RAW 16
#define BUSY_MS 700
#define VALUE	4096

static char sock[PATH_MAX];
static struct h_proc *proxy;

/* One HEALTH request on each of c[0..n) at once, then wait for them all. */
static void round_of_health(struct raw *c, unsigned n, uint64_t seq)
{
	for (unsigned i = 0; i < n; i++) {
		struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 0, .seq = seq};

		c[i].slots[0].state = LC_SLOT_PENDING;
		raw_submit(&c[i], &q);
	}
	for (unsigned i = 0; i < n; i++)
		H_ASSERT_MSG(raw_wait_done(&c[i], 0, 5000), "HEALTH on client %u never completed",
			     i);
}

/* c's crowded hint once it equals want, or its value after ms: the loop
 * reassesses just after completing a request, so the hint may trail. */
static uint32_t crowded_within(const struct raw *c, uint32_t want, unsigned ms)
{
	uint64_t end = h_now_ms() + ms;
	uint32_t v;

	while ((v = LC_READ_ONCE(c->ring->crowded)) != want && h_now_ms() < end)
		h_sleep_ms(1);
	return v;
}

/* The CPUs a proxy with this process's affinity counts beside its loop:
 * its own but the loop's, or, confined to one CPU, the others online. */
static unsigned proxy_spare_cpus(void)
{
	unsigned ours = lc_usable_cpus();

	return (ours > 1 ? ours : lc_online_cpus()) - 1;
}

static void test_waiting_wait_hints(void **state)
{
	/* The proxy is our child, with our CPU affinity. */
	unsigned spare = proxy_spare_cpus(), n = spare + 1, rounds = 0;
	struct raw c[MAX_RAW];
	uint32_t cpu;

	(void)state;
	if (n > MAX_RAW) {
		printf("skipped: %u CPUs would need %u raw clients, the test has room for %d\n",
		       spare + 1, n, MAX_RAW);
		skip();
	}
	for (unsigned i = 0; i < n; i++)
		raw_open(&c[i], sock);

	/* Alone, a client learns where the loop runs, and is not crowded
	 * unless the loop has no CPU to spare. */
	round_of_health(c, 1, 1);
	cpu = LC_READ_ONCE(c[0].ring->loop_cpu);
	printf("  loop on CPU %u; %u CPUs beside it\n", cpu - 1, spare);
	H_ASSERT_MSG(cpu >= 1 && cpu < 0xdeadbeefu, "loop_cpu hint %u", cpu);
	H_ASSERT_EQ(crowded_within(&c[0], spare ? 0 : 1, 100), spare ? 0 : 1);
	if (!spare) {
		for (unsigned i = 0; i < n; i++)
			raw_close(&c[i]);
		return; /* one CPU: crowded whenever anyone is busy */
	}

	/* One client scribbles over its hints: it is still served and the
	 * others never see its values. */
	LC_WRITE_ONCE(c[n - 1].ring->crowded, 0xdeadbeefu);
	LC_WRITE_ONCE(c[n - 1].ring->loop_cpu, 0xdeadbeefu);

	/* spare + 1 clients busy together: crowded, told to each of them. */
	while (!LC_READ_ONCE(c[0].ring->crowded) && rounds < 2000)
		round_of_health(c, n, 2 + rounds++);
	printf("  %u busy clients: crowded after %u rounds\n", n, rounds);
	for (unsigned i = 0; i < n; i++) {
		cpu = LC_READ_ONCE(c[i].ring->loop_cpu);
		H_ASSERT_MSG(crowded_within(&c[i], 1, 100) == 1,
			     "client %u of %u busy ones not told the proxy is crowded", i, n);
		H_ASSERT_MSG(cpu >= 1 && cpu < 0xdeadbeefu, "client %u: loop_cpu hint %u", i, cpu);
	}

	/* Quiet for a while, then one client alone: no longer crowded. */
	h_sleep_ms(20);
	round_of_health(c, 1, 6000);
	H_ASSERT_EQ(crowded_within(&c[0], 0, 100), 0);
	for (unsigned i = 0; i < n; i++)
		raw_close(&c[i]);
}

/* The count a `perf stat -x,` run wrote to out_path, or -1. */
static long long perf_count(const char *out_path)
{
	char line[512];
	long long n = -1;
	FILE *f = fopen(out_path, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "raw_syscalls:sys_enter") && line[0] >= '0' && line[0] <= '9')
			n = strtoll(line, NULL, 10);
	fclose(f);
	return n;
}

/* Narrows this thread's CPU affinity to cpu; the one it had into *was. */
static void pin_to(unsigned cpu, cpu_set_t *was)
{
	cpu_set_t one;

	H_ASSERT_EQ(sched_getaffinity(0, sizeof(*was), was), 0);
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	H_ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
}

/* One window: p's system calls over 1 s of perf while c makes exists and
 * get calls for BUSY_MS from this thread on CPU cpu; the calls made into
 * *calls. */
static long long busy_window(const struct h_proc *p, struct lunar_client *c, unsigned cpu,
			     const char *out, long long *calls)
{
	char cmd[PATH_MAX * 2], buf[VALUE];
	cpu_set_t was;
	uint64_t end;
	FILE *perf;

	snprintf(cmd, sizeof(cmd),
		 "perf stat -x, -e raw_syscalls:sys_enter -p %d -o %s -- sleep 1 >/dev/null 2>&1",
		 (int)p->pid, out);
	perf = popen(cmd, "r");
	H_ASSERT(perf);
	h_sleep_ms(150); /* perf attached */
	pin_to(cpu, &was);
	*calls = 0;
	end = h_now_ms() + BUSY_MS;
	while (h_now_ms() < end) {
		H_ASSERT_EQ(lunar_exists(c, "busy"), 1);
		H_ASSERT_EQ(lunar_get_into(c, "busy", buf, sizeof(buf)), VALUE);
		*calls += 2;
	}
	H_ASSERT_EQ(sched_setaffinity(0, sizeof(was), &was), 0);
	H_ASSERT_EQ(pclose(perf), 0);
	return perf_count(out);
}

/* 1 if perf counts system calls here (out: its output file), else says
 * why the caller skips and returns 0. */
static int perf_counts_syscalls(const char *out)
{
	char cmd[PATH_MAX * 2];

	if (getenv("LUNAR_TEST_SANITIZER")) {
		printf("skipped: built with a sanitizer (%s), which slows the loop past its "
		       "3 µs polling window\n",
		       getenv("LUNAR_TEST_SANITIZER"));
		return 0;
	}
	snprintf(cmd, sizeof(cmd),
		 "perf stat -x, -e raw_syscalls:sys_enter -o %s -- sleep 0.1 >/dev/null 2>&1", out);
	if (system(cmd) != 0 || perf_count(out) < 0) {
		printf("skipped: perf cannot count raw_syscalls:sys_enter here (no perf, no "
		       "tracefs, or no permission)\n");
		return 0;
	}
	return 1;
}

/* Bench calls: lunar-bench --count BENCH_COUNT puts, checks, gets and
 * removes as many objects. */
#define BENCH_COUNT 10000
#define BENCH_CALLS (4 * BENCH_COUNT)

/* Runs fn(arg) with this thread's affinity narrowed to cpu, then restores
 * it; what fn returned. Children started in fn inherit the narrow one. */
static struct h_proc *on_cpu(unsigned cpu, struct h_proc *(*fn)(void *arg), void *arg)
{
	cpu_set_t all, one;
	struct h_proc *p;

	H_ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	H_ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
	p = fn(arg);
	H_ASSERT_EQ(sched_setaffinity(0, sizeof(all), &all), 0);
	H_ASSERT(p);
	return p;
}

/* The last and the first CPU this process may use. */
static unsigned last_cpu(void)
{
	cpu_set_t all;
	unsigned c = CPU_SETSIZE - 1;

	H_ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
	while (!CPU_ISSET(c, &all))
		c--;
	return c;
}

static unsigned first_cpu(void)
{
	cpu_set_t all;
	unsigned c = 0;

	H_ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
	while (!CPU_ISSET(c, &all))
		c++;
	return c;
}

static struct h_proc *start_own_proxy(void *sock_path)
{
	return h_start_proxy("own-cpu", sock_path, H_EMBEDDED, "--segment-size", "16MiB", NULL);
}

/* A busy client keeps the loop polling: under one system call per four
 * calls (about 0.05 here). The proxy runs on the last CPU and the client
 * thread on the first: left to the scheduler, this VM at times put both on
 * one CPU, where the client sleeps for its calls (loop_cpu hint) and the
 * loop idles into its yields between them (5,000-90,000 calls a window
 * against 350,000-470,000). A window in which this VM stalls the client
 * anyway does the same, so the bound must hold in one of three windows. */
static void test_waiting_busy_path_makes_no_syscalls(void **state)
{
	char own[PATH_MAX], out[PATH_MAX], buf[VALUE];
	long long calls = 0, syscalls = -1;
	struct lunar_client *c;
	struct h_proc *p;

	(void)state;
	if (lc_usable_cpus() < 2) {
		printf("skipped: one CPU here; the client and the loop must take turns on it\n");
		skip();
	}
	snprintf(out, sizeof(out), "%s", h_path("perf.txt"));
	if (!perf_counts_syscalls(out))
		skip();
	h_named_sock(own, "own-busy");
	p = on_cpu(last_cpu(), start_own_proxy, own);
	c = h_client(own);
	H_ASSERT(c);
	h_fill(buf, sizeof(buf), 7);
	H_ASSERT_EQ(lunar_put(c, "busy", buf, sizeof(buf), NULL), 0);
	for (int i = 0; i < 1000; i++) /* warm: the spin budget learns */
		H_ASSERT_EQ(lunar_exists(c, "busy"), 1);
	for (int w = 0; w < 3 && (syscalls < 0 || syscalls * 4 >= calls); w++) {
		syscalls = busy_window(p, c, first_cpu(), out, &calls);
		printf("  %lld calls in %d ms; the proxy made %lld system calls in 1 s (%.3f a "
		       "call)\n",
		       calls, BUSY_MS, syscalls, (double)syscalls / (double)calls);
		H_ASSERT(syscalls >= 0);
	}
	H_ASSERT_MSG(syscalls * 4 < calls, "the proxy made %lld system calls for %lld calls",
		     syscalls, calls);
	lunar_close(c);
	h_stop(p);
}

/* Confined to one CPU, the proxy counts the machine's others as its
 * clients' (they run there): one busy client does not crowd it. Skipped on
 * one CPU. */
static void test_waiting_own_cpu_proxy_not_crowded_by_one(void **state)
{
	char own[PATH_MAX];
	struct h_proc *p;
	struct raw c;
	uint64_t end;

	(void)state;
	if (lc_usable_cpus() < 2) {
		printf("skipped: one CPU here; a proxy cannot have one of its own\n");
		skip();
	}
	h_named_sock(own, "own-crowd");
	p = on_cpu(last_cpu(), start_own_proxy, own);
	raw_open(&c, own);
	end = h_now_ms() + 20; /* many of the loop's crowding checks */
	for (uint64_t seq = 1; h_now_ms() < end; seq++)
		round_of_health(&c, 1, seq);
	printf("  loop on CPU %u, one busy client: crowded %u\n",
	       LC_READ_ONCE(c.ring->loop_cpu) - 1, LC_READ_ONCE(c.ring->crowded));
	H_ASSERT_EQ(LC_READ_ONCE(c.ring->loop_cpu), last_cpu() + 1);
	H_ASSERT_EQ(LC_READ_ONCE(c.ring->crowded), 0);
	raw_close(&c);
	h_stop(p);
}

/* A command to spawn: perf counting a lunar-bench run's system calls. */
struct bench_run {
	char *const *argv;
};

static struct h_proc *start_bench(void *run)
{
	return h_spawn("own-cpu-bench", ((struct bench_run *)run)->argv);
}

/* A client process whose single CPU is not the loop's has it to spare: its
 * thread spins for fast requests rather than calling sched_yield between
 * looks. Counted by perf over a lunar-bench run of BENCH_CALLS calls
 * (puts, exists, gets, removes): under one system call per four calls,
 * its set-up included, in one of three runs (a run in which this VM
 * stalls the client lets the loop idle into its sleeps). About 0.07 here;
 * 2.6 when such a process counted the loop as on its one CPU and never
 * spun. Skipped on one CPU, and where perf cannot count. */
static void test_waiting_own_cpu_proxy_lets_a_one_cpu_client_spin(void **state)
{
	char own[PATH_MAX], out[PATH_MAX], count[16];
	unsigned last, first;
	long long syscalls = -1;
	struct h_proc *p, *b;

	(void)state;
	snprintf(out, sizeof(out), "%s", h_path("perf-bench.txt"));
	if (lc_usable_cpus() < 2) {
		printf("skipped: one CPU here; a proxy cannot have one of its own\n");
		skip();
	}
	if (!perf_counts_syscalls(out))
		skip();
	last = last_cpu();
	first = first_cpu();
	h_named_sock(own, "own-spin");
	p = on_cpu(last, start_own_proxy, own);
	snprintf(count, sizeof(count), "%d", BENCH_COUNT);
	char *const argv[] = {"perf",
			      "stat",
			      "-x,",
			      "-e",
			      "raw_syscalls:sys_enter",
			      "-o",
			      out,
			      "--",
			      (char *)h_bin("lunar-bench"),
			      "--socket",
			      own,
			      "--size",
			      "1KiB",
			      "--count",
			      count,
			      "--baseline-size",
			      "0",
			      "--zero-copy",
			      NULL};
	struct bench_run run = {argv};

	for (int i = 0; i < 3 && (syscalls < 0 || syscalls * 4 >= BENCH_CALLS); i++) {
		unlink(out);
		b = on_cpu(first, start_bench, &run);
		H_ASSERT_EQ(h_wait_exit(b, 60000), 0);
		syscalls = perf_count(out);
		printf("  proxy on CPU %u, client on CPU %u: %lld system calls for %d calls "
		       "(%.3f a call)\n",
		       last, first, syscalls, BENCH_CALLS, (double)syscalls / BENCH_CALLS);
		H_ASSERT(syscalls >= 0);
	}
	H_ASSERT_MSG(syscalls * 4 < BENCH_CALLS, "the client made %lld system calls for %d calls",
		     syscalls, BENCH_CALLS);
	h_stop(p);
}

static int setup(void **state)
{
	(void)state;
	proxy = h_embedded_node(sock, NULL, "--segment-size", "16MiB", NULL);
	return proxy ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_embedded_node_stop(NULL);
	return 0;
}

LUNAR_TEST_MAIN(setup, teardown, test_waiting_wait_hints, test_waiting_busy_path_makes_no_syscalls,
		test_waiting_own_cpu_proxy_not_crowded_by_one,
		test_waiting_own_cpu_proxy_lets_a_one_cpu_client_spin)
