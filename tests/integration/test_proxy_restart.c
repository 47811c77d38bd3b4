/*
 * test_proxy_restart.c - the proxy dies and comes back under a running
 * client (SPEC §5.7). A client thread loops put/get/remove of 2 MiB values
 * in lunar_alloc memory through a handle whose arena is 1 MiB, so every
 * success is a zero-copy one. The proxy is SIGKILLed: calls fail with
 * PROXY_UNAVAILABLE, each within a second, and lunar_health says 1. The
 * proxy restarts on the same socket with the same flags: within 10 s the
 * same handle succeeds again, by itself, still in place (the chunk was
 * registered again: the new proxy maps it). A second proxy, holding every
 * put for 2 s (--debug-put-delay), is killed under a put from the app's own
 * registered memfd: that call returns PROXY_UNAVAILABLE within a second of
 * the kill, the memory stays usable, and after the restart the same memory
 * is registered again and used in place. And a put sent the moment a
 * freshly started proxy answers on its socket finds the segment mounted,
 * even with the heartbeat thread held back (--debug-heartbeat-delay).
 * Last, a hung proxy (SIGSTOPped: its socket still takes connections into
 * the backlog, nobody answers): threads of one handle that all find the
 * session broken fail within about their own timeout, not one reconnect
 * attempt after another.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define MIB	       (1024u * 1024u)
#define ARENA	       MIB
#define VAL_LEN	       (2u * MIB + 99) /* larger than the arena: only in place */
#define FAIL_MAX_MS    1000	       /* a failing call must not take longer */
#define RECOVER_MS     10000	       /* restart to first success, at most */
#define WARM_SUCCESSES 20
#define MAX_ERRORS     8

enum phase { PH_UP, PH_DEAD, PH_RESTARTED, PH_COUNT };

static char sock[PATH_MAX];
static struct h_proc *proxy;
static struct lunar_client *cl;

/* Written by the worker, read by the main thread (cmocka stays there). */
struct run {
	atomic_int phase;
	atomic_int stop;
	atomic_int ok[PH_COUNT];   /* full put+get+verify rounds */
	atomic_int fail[PH_COUNT]; /* calls that returned PROXY_UNAVAILABLE */
	atomic_uint_fast64_t first_ok_ms[PH_COUNT];
	uint64_t max_fail_ms;
	uint64_t max_ok_ms[PH_COUNT]; /* slowest successful call */
	atomic_int nerr;
	char err[MAX_ERRORS][160];
};

static struct run run;

static int setup(void **state)
{
	struct lunar_opts o = {.timeout_ms = 5000, .arena_bytes = ARENA};
	int rc;

	(void)state;
	proxy = h_embedded_node(sock, NULL, "--segment-size", "64MiB", NULL);
	if (!proxy)
		return -1;
	o.socket_path = sock;
	rc = lunar_connect(&o, &cl);
	if (rc)
		fprintf(stderr, "lunar_connect: %d (%s)\n", rc, h_code(rc));
	return rc ? -1 : 0;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(cl);
	cl = NULL;
	h_cleanup();
	return 0;
}

static void record(const char *fmt, ...)
{
	int i = atomic_load(&run.nerr);
	va_list ap;

	if (i >= MAX_ERRORS)
		return;
	va_start(ap, fmt);
	vsnprintf(run.err[i], sizeof(run.err[0]), fmt, ap);
	atomic_store(&run.nerr, i + 1);
	va_end(ap);
}

/*
 * One call's outcome: 0 when it succeeded, 1 when it failed as allowed
 * (PROXY_UNAVAILABLE, fast), -1 otherwise (recorded). nf_ok: OBJECT_NOT_FOUND
 * is fine too (the object was written to the proxy that died).
 */
static int judge(const char *what, int i, int ph, int64_t rc, uint64_t took, int nf_ok)
{
	if (rc >= 0) {
		if (took > run.max_ok_ms[ph])
			run.max_ok_ms[ph] = took;
		return 0;
	}
	if (rc == LUNAR_ERR_PROXY_UNAVAILABLE || (nf_ok && rc == LUNAR_ERR_OBJECT_NOT_FOUND)) {
		if (took > run.max_fail_ms)
			run.max_fail_ms = took;
		if (took > FAIL_MAX_MS)
			record("round %d phase %d: %s failed after %llu ms (%s)", i, ph, what,
			       (unsigned long long)took, h_code(rc));
		atomic_fetch_add(&run.fail[ph], 1);
		return 1;
	}
	record("round %d phase %d: %s = %lld (%s) after %llu ms", i, ph, what, (long long)rc,
	       h_code(rc), (unsigned long long)took);
	return -1;
}

static void *worker_main(void *arg)
{
	uint8_t *src = lunar_alloc(cl, VAL_LEN), *dst = lunar_alloc(cl, VAL_LEN);
	char key[64];

	(void)arg;
	if (!src || !dst) {
		record("lunar_alloc failed");
		return NULL;
	}
	for (int i = 0; !atomic_load(&run.stop); i++) {
		int put_ph = atomic_load(&run.phase), ph, r;
		uint64_t t0 = h_now_ms();
		int64_t rc, bad;

		snprintf(key, sizeof(key), "restart/%d", i);
		h_fill(src, VAL_LEN, h_seed(key));
		rc = lunar_put(cl, key, src, VAL_LEN, NULL);
		if ((r = judge("put", i, put_ph, rc, h_now_ms() - t0, 0)) != 0)
			goto next;
		memset(dst, 0, VAL_LEN);
		ph = atomic_load(&run.phase);
		t0 = h_now_ms();
		rc = lunar_get_into(cl, key, dst, VAL_LEN);
		if ((r = judge("get", i, ph, rc, h_now_ms() - t0, ph != put_ph)) != 0)
			goto next;
		if (rc != VAL_LEN || (bad = h_verify(dst, VAL_LEN, h_seed(key))) >= 0) {
			record("round %d: get %lld bytes, wrong at %lld", i, (long long)rc,
			       (long long)(rc == VAL_LEN ? bad : -1));
			r = -1;
			goto next;
		}
		if (atomic_fetch_add(&run.ok[ph], 1) == 0)
			atomic_store(&run.first_ok_ms[ph], h_now_ms());
		t0 = h_now_ms();
		rc = lunar_remove(cl, key, 1);
		r = judge("remove", i, ph, rc, h_now_ms() - t0, ph != put_ph);
	next:
		if (r < 0 && run.nerr >= MAX_ERRORS)
			break;
		if (r)
			h_sleep_ms(10); /* an app would back off too */
	}
	lunar_free(cl, src);
	lunar_free(cl, dst);
	return NULL;
}

static int wait_ok(enum phase ph, int n, uint64_t deadline)
{
	while (atomic_load(&run.ok[ph]) < n && h_now_ms() < deadline && run.nerr == 0)
		h_sleep_ms(20);
	return atomic_load(&run.ok[ph]) >= n;
}

static void report(void)
{
	print_message("rounds ok: up %d, dead %d, restarted %d; PROXY_UNAVAILABLE calls: %d "
		      "(slowest %llu ms); slowest ok call after restart %llu ms\n",
		      atomic_load(&run.ok[PH_UP]), atomic_load(&run.ok[PH_DEAD]),
		      atomic_load(&run.ok[PH_RESTARTED]),
		      atomic_load(&run.fail[PH_DEAD]) + atomic_load(&run.fail[PH_RESTARTED]) +
			  atomic_load(&run.fail[PH_UP]),
		      (unsigned long long)run.max_fail_ms,
		      (unsigned long long)run.max_ok_ms[PH_RESTARTED]);
	for (int i = 0; i < run.nerr; i++)
		print_message("worker: %s\n", run.err[i]);
}

static void test_proxy_restart_client_recovers_zero_copy(void **state)
{
	uint64_t killed_at, restarted_at, health_t0;
	pthread_t th;
	int health, maps;

	(void)state;
	H_ASSERT_EQ(pthread_create(&th, NULL, worker_main, NULL), 0);
	if (!wait_ok(PH_UP, WARM_SUCCESSES, h_now_ms() + 10000)) {
		atomic_store(&run.stop, 1);
		pthread_join(th, NULL);
		report();
		H_ASSERT_MSG(0, "the client never got going before the kill");
	}
	H_ASSERT_MSG(h_pid_maps_count(proxy->pid, "memfd:lunar-alloc") >= 1,
		     "the proxy does not map the client's lunar_alloc chunk");

	h_kill(proxy);
	killed_at = h_now_ms();
	atomic_store(&run.phase, PH_DEAD);
	h_sleep_ms(300);
	health_t0 = h_now_ms();
	health = lunar_health(cl);
	print_message("lunar_health while dead = %d in %llu ms\n", health,
		      (unsigned long long)(h_now_ms() - health_t0));
	h_sleep_ms(1200);

	/* From the spawn on, the new proxy may answer. */
	restarted_at = h_now_ms();
	atomic_store(&run.phase, PH_RESTARTED);
	proxy = h_start_proxy("proxy-2", sock, H_EMBEDDED, "--segment-size", "64MiB", NULL);
	if (proxy)
		wait_ok(PH_RESTARTED, WARM_SUCCESSES, restarted_at + RECOVER_MS);
	maps = proxy ? h_pid_maps_count(proxy->pid, "memfd:lunar-alloc") : -1;
	atomic_store(&run.stop, 1);
	pthread_join(th, NULL);
	report();
	print_message("dead for %llu ms; first success %lld ms after the restart\n",
		      (unsigned long long)(restarted_at - killed_at),
		      atomic_load(&run.ok[PH_RESTARTED])
			  ? (long long)(atomic_load(&run.first_ok_ms[PH_RESTARTED]) - restarted_at)
			  : -1ll);

	H_ASSERT_MSG(proxy != NULL, "the proxy did not restart");
	H_ASSERT_EQ(health, 1);
	H_ASSERT_MSG(run.nerr == 0, "worker: %s", run.err[0]);
	H_ASSERT_MSG(atomic_load(&run.fail[PH_DEAD]) > 0,
		     "no call failed while the proxy was dead");
	H_ASSERT_EQ(atomic_load(&run.ok[PH_DEAD]), 0);
	H_ASSERT_MSG(atomic_load(&run.ok[PH_RESTARTED]) >= WARM_SUCCESSES,
		     "%d rounds succeeded within %d ms of the restart",
		     atomic_load(&run.ok[PH_RESTARTED]), RECOVER_MS);
	H_ASSERT_MSG(maps >= 1, "the restarted proxy does not map the lunar_alloc chunk (%d)",
		     maps);
	H_ASSERT_EQ(lunar_health(cl), 0);
}

/* --- a call in flight from registered memory when the proxy dies --- */

#define REG_LEN (8u * MIB)

struct inflight {
	struct lunar_client *c;
	const void *buf;
	atomic_int done;
	int rc;
	uint64_t returned_at;
};

static void *inflight_put(void *arg)
{
	struct inflight *f = arg;

	f->rc = lunar_put(f->c, "restart/inflight", f->buf, VAL_LEN, NULL);
	f->returned_at = h_now_ms();
	atomic_store(&f->done, 1);
	return NULL;
}

static struct h_proc *start_slow_proxy(const char *name, const char *path)
{
	return h_start_proxy(name, path, H_EMBEDDED, "--segment-size", "64MiB", "--debug-put-delay",
			     "2s", NULL);
}

static void test_proxy_restart_inflight_put_from_registered_memory(void **state)
{
	struct lunar_opts o = {.timeout_ms = 10000, .arena_bytes = ARENA};
	const char *key = "restart/after";
	struct inflight f = {0};
	struct lunar_client *c = NULL;
	char path[PATH_MAX];
	struct h_proc *px;
	uint64_t killed_at, end;
	uint8_t *mem;
	pthread_t th;
	int fd, rc = -1;

	(void)state;
	snprintf(path, sizeof(path), "%s", h_path("slow.sock"));
	px = start_slow_proxy("slow", path);
	H_ASSERT(px != NULL);
	o.socket_path = path;
	H_ASSERT_EQ(lunar_connect(&o, &c), 0);
	fd = memfd_create("t3-app-restart", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	H_ASSERT(fd >= 0 && ftruncate(fd, REG_LEN) == 0 &&
		 fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	mem = mmap(NULL, REG_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	H_ASSERT(mem != MAP_FAILED);
	H_ASSERT_EQ(lunar_register(c, mem, REG_LEN), 0);
	H_ASSERT(h_pid_maps_count(px->pid, "memfd:t3-app-restart") >= 1);

	h_fill(mem + 4096, VAL_LEN, h_seed("restart/inflight"));
	f.c = c;
	f.buf = mem + 4096;
	H_ASSERT_EQ(pthread_create(&th, NULL, inflight_put, &f), 0);
	h_sleep_ms(400);
	H_ASSERT_MSG(!atomic_load(&f.done), "the put returned %d (%s) before the kill", f.rc,
		     h_code(f.rc));
	/* Timed from the signal: h_kill also waits to reap the proxy. */
	killed_at = h_now_ms();
	h_kill(px);
	for (end = killed_at + 5000; !atomic_load(&f.done) && h_now_ms() < end;)
		h_sleep_ms(5);
	H_ASSERT_MSG(atomic_load(&f.done), "the put in flight still hangs 5 s after the kill");
	pthread_join(th, NULL);
	print_message("in-flight put returned %d (%s) %llu ms after the kill\n", f.rc, h_code(f.rc),
		      (unsigned long long)(f.returned_at - killed_at));
	H_ASSERT_EQ(f.rc, LUNAR_ERR_PROXY_UNAVAILABLE);
	H_ASSERT_MSG(f.returned_at - killed_at <= FAIL_MAX_MS, "it took %llu ms",
		     (unsigned long long)(f.returned_at - killed_at));
	/* The app's memory is its own still: no SIGBUS, bytes as they were. */
	H_ASSERT(h_verify(mem + 4096, VAL_LEN, h_seed("restart/inflight")) < 0);
	memset(mem, 0x5a, REG_LEN);
	H_ASSERT_EQ(lunar_health(c), 1);

	px = start_slow_proxy("slow-2", path);
	H_ASSERT_MSG(px != NULL, "the slow proxy did not restart");
	h_fill(mem + 2 * 4096 + 1, VAL_LEN, h_seed(key));
	for (end = h_now_ms() + RECOVER_MS; h_now_ms() < end; h_sleep_ms(100)) {
		rc = lunar_put(c, key, mem + 2 * 4096 + 1, VAL_LEN, NULL);
		if (rc != LUNAR_ERR_PROXY_UNAVAILABLE)
			break;
	}
	H_ASSERT_EQ(rc, 0);
	H_ASSERT_MSG(h_pid_maps_count(px->pid, "memfd:t3-app-restart") >= 1,
		     "the restarted proxy does not map the registered memfd");
	memset(mem + 4 * MIB, 0, VAL_LEN);
	H_ASSERT_EQ(lunar_get_into(c, key, mem + 4 * MIB, VAL_LEN), VAL_LEN);
	H_ASSERT(h_verify(mem + 4 * MIB, VAL_LEN, h_seed(key)) < 0);
	H_ASSERT_EQ(lunar_exists(c, "restart/inflight"), 0);
	lunar_close(c);
	munmap(mem, REG_LEN);
	close(fd);
	h_stop(px);
}

/* --- the first call to a proxy that has just started --- */

#define FIRST_PUT_STARTS 3

/* Connects the moment the socket answers: no harness wait in between. */
static struct lunar_client *connect_asap(struct h_proc *px, const char *path)
{
	uint64_t end = h_now_ms() + 10000;
	struct lunar_client *c = NULL;

	while (!c && h_alive(px) && h_now_ms() < end)
		if (!(c = h_client_try(path, 1000, NULL)))
			h_sleep_ms(1);
	return c;
}

static void test_proxy_restart_first_put_finds_segment(void **state)
{
	char path[PATH_MAX], *argv[] = {(char *)h_bin("lunar-proxy"),
					"--socket",
					path,
					"--embedded-master",
					"--host",
					"127.0.0.1",
					"--data-port",
					"0",
					"--http-port",
					"0",
					"--segment-size",
					"64MiB",
					"--debug-heartbeat-delay",
					"10s",
					NULL};
	static uint8_t val[4096];

	(void)state;
	snprintf(path, sizeof(path), "%s", h_path("first.sock"));
	h_fill(val, sizeof(val), h_seed("restart/first"));
	for (int i = 0; i < FIRST_PUT_STARTS; i++) {
		struct h_proc *px = h_spawn("first", argv);
		struct lunar_client *c;
		int rc;

		H_ASSERT(px != NULL);
		c = connect_asap(px, path);
		H_ASSERT_MSG(c != NULL, "start %d: no connection", i);
		rc = lunar_put(c, "restart/first", val, sizeof(val), NULL);
		lunar_close(c);
		h_stop(px);
		unlink(path);
		H_ASSERT_MSG(rc == 0, "start %d: the first put got %d (%s)", i, rc, h_code(rc));
	}
}

/* --- many threads reconnecting to a hung proxy --- */

#define HUNG_THREADS	8
#define HUNG_TIMEOUT_MS 1000
/* A call may wait its timeout for the reply and again for the fence
 * (docs/shm-abi.md), plus slack for a loaded host. */
#define HUNG_MAX_MS	2500
#define HUNG_RECOVER_MS 5000

struct hung_call {
	struct lunar_client *c;
	int rc[2];
	uint64_t took[2];
};

/* The main thread and the callers start each round together. Static: a
 * test that fails to start a thread leaves the others waiting on it. */
static pthread_barrier_t hung_go;

/* Two calls, each started with every other thread's: the first times out
 * on the hung session, the second finds it broken and reconnects. */
static void *hung_calls(void *arg)
{
	struct hung_call *h = arg;

	for (int i = 0; i < 2; i++) {
		uint64_t t0;

		pthread_barrier_wait(&hung_go);
		t0 = h_now_ms();
		h->rc[i] = lunar_exists(h->c, "restart/hung");
		h->took[i] = h_now_ms() - t0;
	}
	return NULL;
}

static void test_proxy_restart_hung_proxy_reconnects_bounded(void **state)
{
	struct hung_call calls[HUNG_THREADS];
	pthread_t th[HUNG_THREADS];
	struct lunar_client *c;
	char path[PATH_MAX];
	struct h_proc *px;
	uint64_t slowest = 0, end;
	int bad = -1, rc;

	(void)state;
	snprintf(path, sizeof(path), "%s", h_path("hung.sock"));
	px = h_start_proxy("hung", path, H_EMBEDDED, NULL);
	H_ASSERT(px != NULL);
	c = h_client_try(path, HUNG_TIMEOUT_MS, &rc);
	H_ASSERT_MSG(c != NULL, "connect: %d (%s)", rc, h_code(rc));
	H_ASSERT_EQ(lunar_exists(c, "restart/hung"), 0);
	H_ASSERT_EQ(pthread_barrier_init(&hung_go, NULL, HUNG_THREADS + 1), 0);
	for (int i = 0; i < HUNG_THREADS; i++) {
		calls[i] = (struct hung_call){.c = c};
		H_ASSERT_EQ(pthread_create(&th[i], NULL, hung_calls, &calls[i]), 0);
	}

	H_ASSERT_EQ(kill(-px->pid, SIGSTOP), 0);
	/* No assertion until SIGCONT: a failing one would leave it stopped. */
	pthread_barrier_wait(&hung_go);
	pthread_barrier_wait(&hung_go);
	for (int i = 0; i < HUNG_THREADS; i++)
		pthread_join(th[i], NULL);
	kill(-px->pid, SIGCONT);
	pthread_barrier_destroy(&hung_go);

	for (int i = 0; i < HUNG_THREADS; i++) {
		print_message("thread %d: %d (%s) in %llu ms, then %d (%s) in %llu ms\n", i,
			      calls[i].rc[0], h_code(calls[i].rc[0]),
			      (unsigned long long)calls[i].took[0], calls[i].rc[1],
			      h_code(calls[i].rc[1]), (unsigned long long)calls[i].took[1]);
		if (calls[i].took[1] > slowest)
			slowest = calls[i].took[1];
		if (bad < 0 && (calls[i].rc[0] != LUNAR_ERR_PROXY_UNAVAILABLE ||
				calls[i].rc[1] != LUNAR_ERR_PROXY_UNAVAILABLE))
			bad = i;
	}
	H_ASSERT_MSG(bad < 0, "thread %d: not PROXY_UNAVAILABLE from a stopped proxy", bad);
	H_ASSERT_MSG(slowest <= HUNG_MAX_MS,
		     "the slowest second call took %llu ms with a %u ms timeout",
		     (unsigned long long)slowest, HUNG_TIMEOUT_MS);

	/* Once the proxy runs again, the handle reconnects by itself. */
	for (end = h_now_ms() + HUNG_RECOVER_MS; h_now_ms() < end; h_sleep_ms(50))
		if ((rc = lunar_exists(c, "restart/hung")) == 0)
			break;
	H_ASSERT_EQ(rc, 0);
	lunar_close(c);
	h_stop(px);
}

LUNAR_TEST_MAIN(setup, teardown, test_proxy_restart_client_recovers_zero_copy,
		test_proxy_restart_inflight_put_from_registered_memory,
		test_proxy_restart_first_put_finds_segment,
		test_proxy_restart_hung_proxy_reconnects_bounded)
