/*
 * test_faults_clients.c - application processes that die or race on one
 * proxy (SPEC §3, §5.6), each case ending with the harness's aftermath
 * (harness_after.h): a well-behaved client ran put/get throughout with no
 * error, and the proxy's descriptors and mappings and the master's used
 * bytes and keys are back at their baseline. A client SIGKILLed mid-put,
 * mid-get (the proxy copying into its region), and with 64 registered
 * regions and 1,000 asynchronous calls in flight; 32 clients putting one
 * key at once; one batch naming a key twice.
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
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case_util.h"
#include "harness_after.h"

#define MIB	      (1024u * 1024u)
#define HUP_IN_FLIGHT "lunar_proxy_client_hangups_total{calls=\"in_flight\"}"
#define HUP_NONE      "lunar_proxy_client_hangups_total{calls=\"none\"}"

static char sock[PATH_MAX];
static struct h_proc *proxy;
static int http;
static struct h_after after;

static int start(void **state, const char *name, const char *hook, const char *delay)
{
	if (case_setup(state))
		return -1;
	h_named_sock(sock, name);
	proxy = track(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "128MiB", hook,
				    delay, NULL));
	if (!proxy)
		return -1;
	http = http_port_of(proxy);
	return 0;
}

static int setup(void **state)
{
	return start(state, "faults", "--debug-put-delay", "0");
}

/* The mid-put case holds every put 1 s before its commit. */
static int setup_put_held(void **state)
{
	return start(state, "faults-put-held", "--debug-put-delay", "1s");
}

/* The mid-get case holds every get 200 ms before its reads: the kill finds
 * the child's calls in the proxy, not between two of them. */
static int setup_get_held(void **state)
{
	return start(state, "faults-get-held", "--debug-get-delay", "200ms");
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

static pid_t fork_child(void (*fn)(int ready_fd, void *arg), void *arg)
{
	pid_t pid = h_fork_ready(fn, arg, NULL);

	H_ASSERT_MSG(pid > 0, "the child never got ready");
	return pid;
}

static void kill_child(pid_t pid)
{
	int status = 0;

	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	H_ASSERT_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		     "the child ended by itself before the kill (status 0x%x)", status);
}

static struct lunar_client *child_connect(void)
{
	struct lunar_client *c;
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	c = h_client_try(sock, H_CLIENT_TIMEOUT_MS, &rc);
	if (!c) {
		fprintf(stderr, "child: connect = %d (%s)\n", rc, h_code(rc));
		_exit(2);
	}
	return c;
}

/* --- 1. SIGKILL mid-put --- */

static void child_put(int ready_fd, void *arg)
{
	struct lunar_client *c = child_connect();
	uint8_t *buf = malloc(4 * MIB);
	int rc;

	(void)arg;
	h_fill(buf, 4 * MIB, 1);
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	rc = lunar_put(c, "faults/mid-put", buf, 4 * MIB, NULL); /* held 1 s */
	fprintf(stderr, "child: put returned %d before the kill\n", rc);
	_exit(3);
}

static void test_faults_kill_mid_put(void **state)
{
	struct lunar_client *c;
	int64_t hup, clean;
	uint64_t end;
	pid_t pid;

	(void)state;
	h_after_begin(&after, sock, proxy, http);
	hup = h_metric_sum(http, HUP_IN_FLIGHT);
	pid = fork_child(child_put, NULL);
	h_sleep_ms(400); /* inside the proxy's 1 s hold before PutEnd */
	kill_child(pid);
	clean = h_metric_sum(http, HUP_NONE);
	c = h_client(sock);
	H_ASSERT_EQ(lunar_exists(c, "faults/mid-put"), 0);
	lunar_close(c);
	/* The death counted as one mid-call, a lunar_close as none. */
	end = h_now_ms() + 2000;
	while (h_metric_sum(http, HUP_NONE) == clean && h_now_ms() < end)
		h_sleep_ms(10);
	H_ASSERT_EQ(h_metric_sum(http, HUP_NONE), clean + 1);
	H_ASSERT_EQ(h_metric_sum(http, HUP_IN_FLIGHT), hup + 1);
	h_after_end(&after);
	c = h_client(sock);
	H_ASSERT_EQ(lunar_exists(c, "faults/mid-put"), 0);
	lunar_close(c);
}

/* --- 2. SIGKILL while the proxy copies into the client's region mid-get --- */

#define GET_KEYS    6
#define GET_LEN	    (12u * MIB)
#define GET_THREADS 4

static void *get_loop(void *arg)
{
	struct lunar_client *c = arg;
	uint8_t *buf = lunar_alloc(c, GET_LEN); /* the proxy writes into it */
	char key[32];

	for (unsigned i = 0; buf; i++) {
		snprintf(key, sizeof(key), "faults/get-%u", i % GET_KEYS);
		if (lunar_get_into(c, key, buf, GET_LEN) != (int64_t)GET_LEN)
			fprintf(stderr, "child: get %s failed\n", key);
	}
	return NULL;
}

static void child_get(int ready_fd, void *arg)
{
	struct lunar_client *c = child_connect();
	pthread_t th[GET_THREADS];

	(void)arg;
	for (int i = 0; i < GET_THREADS; i++)
		if (pthread_create(&th[i], NULL, get_loop, c))
			_exit(2);
	h_sleep_ms(100);
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	pause();
	_exit(3);
}

/* 300 ms, and until the proxy served a first GET_LEN value since got0
 * (bounded: the assertion after the kill tells). */
static void wait_first_get(int64_t got0)
{
	uint64_t t0 = h_now_ms(), end = t0 + (uint64_t)H_BOUND_MS(5000);

	while (h_now_ms() < end &&
	       (h_now_ms() < t0 + 300 ||
		h_metric_sum(http, "lunar_proxy_get_bytes_total") - got0 < (int64_t)GET_LEN))
		h_sleep_ms(10);
}

static void test_faults_kill_mid_get(void **state)
{
	struct lunar_client *c = h_client(sock);
	uint8_t *buf = malloc(GET_LEN);
	int64_t hup, got0;
	char key[32];
	pid_t pid;

	(void)state;
	H_ASSERT(buf != NULL);
	for (unsigned i = 0; i < GET_KEYS; i++) {
		snprintf(key, sizeof(key), "faults/get-%u", i);
		put_seeded(c, key, buf, GET_LEN, h_seed(key), NULL);
	}
	lunar_close(c);
	h_after_begin(&after, sock, proxy, http);
	hup = h_metric_sum(http, HUP_IN_FLIGHT);
	got0 = h_metric_sum(http, "lunar_proxy_get_bytes_total");
	pid = fork_child(child_get, NULL);
	/* Four threads get 12 MiB values back to back into shared memory
	 * (no copy of their own after a call: under TSan a 12 MiB memcpy
	 * outlasts the wait below), each held 200 ms in the proxy before its
	 * reads: the kill lands in held calls, and the proxy then writes into
	 * a region whose process is gone. Killed once a first value was read,
	 * and after 300 ms. */
	wait_first_get(got0);
	kill_child(pid);
	printf("  the child read %lld MiB before its death\n",
	       (long long)(h_metric_sum(http, "lunar_proxy_get_bytes_total") - got0) / MIB);
	H_ASSERT(h_metric_sum(http, "lunar_proxy_get_bytes_total") - got0 >= (int64_t)GET_LEN);
	h_after_end(&after);
	H_ASSERT_EQ(h_metric_sum(http, HUP_IN_FLIGHT), hup + 1);
	c = h_client(sock);
	for (unsigned i = 0; i < GET_KEYS; i++) {
		snprintf(key, sizeof(key), "faults/get-%u", i);
		check_seeded(c, key, buf, GET_LEN, h_seed(key));
	}
	lunar_close(c);
	free(buf);
}

/* --- 3. 64 registered regions, 1,000 asynchronous calls in flight --- */

#define A_HANDLES 4 /* each with 16 regions and 250 calls */
#define A_REGIONS (64 / A_HANDLES)
#define A_CALLS	  (1000 / A_HANDLES)
#define A_LEN	  (16u * 1024u)
#define A_REGION  ((A_CALLS / A_REGIONS + 1) * A_LEN)

static void child_async(int ready_fd, void *arg)
{
	static struct lunar_pending *pend[A_HANDLES][A_CALLS];
	struct lunar_client *c[A_HANDLES];
	uint8_t *reg[A_HANDLES][A_REGIONS];
	char key[64];

	(void)arg;
	for (int h = 0; h < A_HANDLES; h++) {
		c[h] = child_connect();
		for (int r = 0; r < A_REGIONS; r++) {
			int fd = memfd_create("faults-async", MFD_ALLOW_SEALING | MFD_CLOEXEC);

			if (fd < 0 || ftruncate(fd, A_REGION) ||
			    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
				_exit(2);
			reg[h][r] = mmap(NULL, A_REGION, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (reg[h][r] == MAP_FAILED || lunar_register(c[h], reg[h][r], A_REGION)) {
				fprintf(stderr, "child: register %d/%d failed\n", h, r);
				_exit(2);
			}
			memset(reg[h][r], 0x5a, A_REGION);
		}
	}
	for (int i = 0; i < A_CALLS; i++) {
		for (int h = 0; h < A_HANDLES; h++) {
			uint8_t *p = reg[h][i % A_REGIONS] + (size_t)(i / A_REGIONS) * A_LEN;
			int rc;

			snprintf(key, sizeof(key), "faults/async/%d/%d", h, i);
			if (i % 2)
				rc = lunar_get_async(c[h], "faults/async-src", p, A_LEN,
						     &pend[h][i]);
			else
				rc = lunar_put_async(c[h], key, p, A_LEN, NULL, &pend[h][i]);
			if (rc) {
				fprintf(stderr, "child: async call %d/%d = %d (%s)\n", h, i, rc,
					h_code(rc));
				_exit(2);
			}
		}
	}
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	pause();
	_exit(3);
}

static void test_faults_kill_async_regions(void **state)
{
	struct lunar_client *c = h_client(sock);
	uint8_t buf[A_LEN];
	int64_t hup, maps;
	pid_t pid;

	(void)state;
	memset(buf, 0x33, sizeof(buf));
	H_ASSERT_EQ(lunar_put(c, "faults/async-src", buf, sizeof(buf), NULL), 0);
	lunar_close(c);
	h_after_begin(&after, sock, proxy, http);
	hup = h_metric_sum(http, HUP_IN_FLIGHT);
	pid = fork_child(child_async, NULL);
	maps = h_pid_maps_count(proxy->pid, "memfd:faults-async");
	printf("  proxy maps %lld of the child's 64 regions at the kill\n", (long long)maps);
	H_ASSERT_EQ(maps, 64);
	kill_child(pid);
	/* What the dead client committed stays; the test removes it, so the
	 * master's figures may come back to the baseline. */
	c = h_client(sock);
	H_ASSERT(lunar_remove_by_regex(c, "^faults/async/", 1) >= 0);
	lunar_close(c);
	h_after_end(&after);
	H_ASSERT_EQ(h_pid_maps_count(proxy->pid, "memfd:faults-async"), 0);
	H_ASSERT_EQ(h_metric_sum(http, HUP_IN_FLIGHT), hup + A_HANDLES); /* a session each */
}

/* --- 5. 32 clients put the same key at once --- */

#define RACERS	 32
#define RACE_LEN (1u * MIB)

struct race {
	atomic_int go;
	atomic_int done;
	int put_rc[RACERS];
	int64_t seen[RACERS]; /* which racer's bytes each read back, -1: none */
};

static struct race *race;

static void child_race(int ready_fd, void *arg)
{
	int me = (int)(intptr_t)arg;
	struct lunar_client *c = child_connect();
	uint8_t *buf = malloc(RACE_LEN);

	h_fill(buf, RACE_LEN, 1000 + (uint64_t)me);
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	while (!atomic_load(&race->go))
		;
	race->put_rc[me] = lunar_put(c, "faults/race", buf, RACE_LEN, NULL);
	atomic_fetch_add(&race->done, 1);
	while (atomic_load(&race->done) < RACERS)
		h_sleep_ms(1);
	race->seen[me] = -1;
	if (lunar_get_into(c, "faults/race", buf, RACE_LEN) == (int64_t)RACE_LEN)
		for (int w = 0; w < RACERS; w++)
			if (h_verify(buf, RACE_LEN, 1000 + (uint64_t)w) < 0)
				race->seen[me] = w;
	lunar_close(c);
	_exit(0);
}

static void test_faults_same_key_race(void **state)
{
	pid_t pid[RACERS];
	struct lunar_client *c;
	int64_t used;

	(void)state;
	race = mmap(NULL, sizeof(*race), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	H_ASSERT(race != MAP_FAILED);
	memset(race, 0, sizeof(*race));
	h_after_begin(&after, sock, proxy, http);
	for (int i = 0; i < RACERS; i++)
		pid[i] = fork_child(child_race, (void *)(intptr_t)i);
	atomic_store(&race->go, 1);
	for (int i = 0; i < RACERS; i++) {
		int status = 0;

		waitpid(pid[i], &status, 0);
		H_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "racer %d: 0x%x", i,
			     status);
	}
	for (int i = 0; i < RACERS; i++) {
		H_ASSERT_MSG(race->put_rc[i] == 0, "racer %d's put = %d (%s)", i, race->put_rc[i],
			     h_code(race->put_rc[i]));
		H_ASSERT_MSG(race->seen[i] >= 0 && race->seen[i] == race->seen[0],
			     "racer %d read racer %lld's bytes, racer 0 read %lld's", i,
			     (long long)race->seen[i], (long long)race->seen[0]);
	}
	printf("  all %d racers read racer %lld's value\n", RACERS, (long long)race->seen[0]);
	/* One allocation: the background client idle, one value's bytes more. */
	h_after_pause(&after);
	used = h_metric_sum(http, "lunar_master_segment_used_bytes") - after.used;
	H_ASSERT_MSG(used >= (int64_t)RACE_LEN && used < 2 * (int64_t)RACE_LEN,
		     "%lld bytes used for one %u-byte value", (long long)used, RACE_LEN);
	H_ASSERT_EQ(h_metric_sum(http, "lunar_master_keys"), after.keys + 1);
	h_after_resume(&after);
	c = h_client(sock);
	H_ASSERT_EQ(lunar_remove(c, "faults/race", 1), 0);
	lunar_close(c);
	h_after_end(&after);
	munmap(race, sizeof(*race));
}

/* --- 6. one batch names a key twice --- */

static void test_faults_batch_duplicate_keys(void **state)
{
	enum { N = 6 };
	const char *keys[N] = {"faults/dup-a", "faults/dup-b", "faults/dup-a",
			       "faults/dup-a", "faults/dup-c", "faults/dup-b"};
	static uint8_t vals[N][4096];
	struct iovec iov[N];
	const struct iovec *iovs[N];
	int cnt[N], res[N], first[N] = {1, 1, 0, 0, 1, 0};
	struct lunar_client *c;
	uint8_t out[4096];

	(void)state;
	h_after_begin(&after, sock, proxy, http);
	c = h_client(sock);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < N; i++) {
			h_fill(vals[i], sizeof(vals[i]), 500 + (uint64_t)i);
			iov[i] = (struct iovec){vals[i], sizeof(vals[i])};
			iovs[i] = &iov[i];
			cnt[i] = 1;
			res[i] = 12345;
		}
		H_ASSERT_EQ(lunar_batch_put(c, N, keys, iovs, cnt, NULL, res), 0);
		for (int i = 0; i < N; i++) {
			/* The first occurrence puts, a later one gets its
			 * result (lunar.h); on a later round every key is
			 * there already: put of an existing key is 0. */
			H_ASSERT_EQ(res[i], 0);
		}
		/* Each key holds its first occurrence's bytes, every round. */
		for (int i = 0; i < N; i++) {
			if (!first[i])
				continue;
			H_ASSERT_EQ(lunar_get_into(c, keys[i], out, sizeof(out)), sizeof(out));
			H_ASSERT_EQ(h_verify(out, sizeof(out), 500 + (uint64_t)i), -1);
		}
	}
	for (int i = 0; i < N; i++)
		if (first[i])
			H_ASSERT_EQ(lunar_remove(c, keys[i], 1), 0);
	lunar_close(c);
	h_after_end(&after);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_faults_kill_mid_put, setup_put_held, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_kill_mid_get, setup_get_held, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_kill_async_regions, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_same_key_race, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_batch_duplicate_keys, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
