/*
 * test_faults_proxy.c - faults a proxy meets at its front door and at its
 * end, each ending with the harness's aftermath (harness_after.h) where the
 * proxy lives on: a local user it does not allow, counted by reason; a
 * client breaking the protocol, told PROTOCOL_ERROR in its slot before the
 * hang-up and counted; lunarctl against a stopped proxy and a stopped
 * master (exit 3 within --timeout-ms, a JSON error with -o json); a client
 * that takes leases on key after key, stopped by --max-client-leases with
 * BUSY (counted); SIGTERM with clients mid-call (each call ends, with its
 * result or PROXY_UNAVAILABLE, and the proxy exits 0 within its grace).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "case_util.h"
#include "harness_after.h"
#include "harness_raw.h"

#define NOBODY	    65534
#define REJECTED(r) "lunar_proxy_rejected_connections_total{reason=\"" r "\"}"
#define VIOLATIONS  "lunar_proxy_client_violations_total"

static char sock[PATH_MAX];
static struct h_proc *proxy;
static int http;
static struct h_after after;

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	h_named_sock(sock, "faults-proxy");
	proxy = track(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "64MiB", NULL));
	if (!proxy)
		return -1;
	http = http_port_of(proxy);
	return 0;
}

/* A proxy that lets one client lease 64 keys, for 2 s leases. */
static int setup_leases(void **state)
{
	if (case_setup(state))
		return -1;
	h_named_sock(sock, "faults-leases");
	proxy = track(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "64MiB",
				    "--max-client-leases", "64", "--kv-lease-ttl", "2s", NULL));
	if (!proxy)
		return -1;
	http = http_port_of(proxy);
	return 0;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

/* --- 7. a local user the proxy does not allow --- */

static int connect_refused(void *arg)
{
	struct lunar_opts o = {.socket_path = arg, .timeout_ms = 5000};
	struct lunar_client *c = NULL;
	int rc = lunar_connect(&o, &c);

	if (rc != LUNAR_ERR_UNAUTHORIZED) {
		fprintf(stderr, "uid %u: lunar_connect = %d (%s)\n", (unsigned)getuid(), rc,
			h_code(rc));
		return 1;
	}
	return 0;
}

static void test_faults_unauthorized_uid_counted(void **state)
{
	int64_t before;

	(void)state;
	if (geteuid() != 0) {
		printf("  skipped: needs root to run a client as uid %d\n", NOBODY);
		skip();
	}
	/* Open to everyone on the file system: the refusal is SO_PEERCRED's. */
	H_ASSERT(chmod(h_tmpdir(), 0755) == 0);
	H_ASSERT(chmod(sock, 0666) == 0);
	h_after_begin(&after, sock, proxy, http);
	before = h_metric_sum(http, REJECTED("unauthorized"));
	H_ASSERT(before >= 0);
	for (int i = 0; i < 3; i++)
		H_ASSERT_EQ(h_run_as(NOBODY, NOBODY, connect_refused, sock), 0);
	H_ASSERT_EQ(h_metric_sum(http, REJECTED("unauthorized")), before + 3);
	H_ASSERT_EQ(h_metric_sum(http, REJECTED("too_many_clients")), 0);
	h_after_end(&after);
	H_ASSERT(chmod(h_tmpdir(), 0700) == 0);
}

/* --- 12. a protocol violation: the code in the slot, then the hang-up --- */

static int hung_up(int fd, int ms)
{
	struct pollfd p = {fd, POLLIN | POLLRDHUP, 0};
	char b;

	return poll(&p, 1, ms) == 1 && recv(fd, &b, 1, MSG_DONTWAIT) <= 0;
}

static void violate(struct lc_sqe q, const char *what, int told)
{
	struct raw c;

	raw_open(&c, sock);
	c.slots[q.slot < c.h.slot_count ? q.slot : 0].state = LC_SLOT_PENDING;
	raw_submit(&c, &q);
	H_ASSERT_MSG(hung_up(c.sock, 2000), "%s: no hang-up within 2 s", what);
	if (told) {
		H_ASSERT_MSG(raw_wait_done(&c, q.slot, 100), "%s: slot %u never completed", what,
			     q.slot);
		H_ASSERT_EQ(c.slots[q.slot].result, LUNAR_ERR_PROTOCOL);
		H_ASSERT_EQ(c.slots[q.slot].seq, q.seq);
	}
	printf("  %-28s -> hang-up%s\n", what, told ? ", PROTOCOL_ERROR in its slot first" : "");
	raw_close(&c);
}

static void test_faults_protocol_error_before_hangup(void **state)
{
	struct lc_item bad = {.key_len = 1, .key_off = UINT64_MAX - 2};
	struct raw tmp;
	int64_t before;

	(void)state;
	h_after_begin(&after, sock, proxy, http);
	before = h_metric_sum(http, VIOLATIONS);
	violate((struct lc_sqe){.op = 0xffff, .slot = 1, .seq = 41}, "unknown op", 1);
	raw_open(&tmp, sock);
	{
		/* A key past the region, named in a well-formed request. */
		struct lc_sqe q = {.op = LC_OP_EXISTS, .slot = 2, .count = 1, .seq = 42};

		q.arg_len = sizeof(bad);
		q.arg_off = raw_put(&tmp, &bad, sizeof(bad));
		tmp.slots[2].state = LC_SLOT_PENDING;
		raw_submit(&tmp, &q);
		H_ASSERT_MSG(hung_up(tmp.sock, 2000), "key past the region: no hang-up");
		H_ASSERT(raw_wait_done(&tmp, 2, 100));
		H_ASSERT_EQ(tmp.slots[2].result, LUNAR_ERR_PROTOCOL);
		printf("  %-28s -> hang-up, PROTOCOL_ERROR in its slot first\n",
		       "key past the region");
	}
	raw_close(&tmp);
	/* No slot to be told in: only the hang-up. */
	violate((struct lc_sqe){.op = LC_OP_HEALTH, .slot = UINT32_MAX, .seq = 43},
		"slot out of range", 0);
	H_ASSERT_EQ(h_metric_sum(http, VIOLATIONS), before + 3);
	h_after_end(&after);
}

/* --- 11. lunarctl against a stopped proxy or master --- */

#define CTL_TIMEOUT "700"

/* Run lunarctl with args; its exit code, stdout in out; fails past 5 s. */
static int ctl(char *out, size_t cap, uint64_t *ms, const char *const *args)
{
	const char *argv[16];
	char path[PATH_MAX];
	uint64_t t0 = h_now_ms();
	int n = 0, status = 0;
	FILE *f;
	pid_t pid;

	argv[n++] = h_bin("lunarctl");
	argv[n++] = "--timeout-ms";
	argv[n++] = CTL_TIMEOUT;
	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	snprintf(path, sizeof(path), "%s", h_path("ctl.out"));
	fflush(NULL);
	pid = fork();
	H_ASSERT(pid >= 0);
	if (pid == 0) {
		if (!freopen(path, "w", stdout) || !freopen("/dev/null", "w", stderr))
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (h_now_ms() - t0 > 5000) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			H_ASSERT_MSG(0, "lunarctl %s still ran after 5 s", args[-1]);
		}
		h_sleep_ms(5);
	}
	*ms = h_now_ms() - t0;
	out[0] = '\0';
	f = fopen(path, "r");
	if (f) {
		out[fread(out, 1, cap - 1, f)] = '\0';
		fclose(f);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void expect_exit3(const char *what, const char *const *args, int json)
{
	char out[4096];
	uint64_t ms;
	int rc = ctl(out, sizeof(out), &ms, args);

	printf("  %-34s exit %d in %llu ms\n", what, rc, (unsigned long long)ms);
	H_ASSERT_MSG(rc == 3, "%s: exit %d, expected 3; output: %s", what, rc, out);
	H_ASSERT_MSG(ms < 700 + 1500, "%s took %llu ms with --timeout-ms " CTL_TIMEOUT, what,
		     (unsigned long long)ms);
	if (json)
		H_ASSERT_MSG(out[0] == '{' && strstr(out, "\"error\":"),
			     "%s: no JSON error object: %s", what, out);
}

static void test_faults_lunarctl_stopped_daemons(void **state)
{
	char hp[32], mp[32];
	struct h_proc *master;
	int port = h_free_port();

	(void)state;
	master = track(h_start_master("master", port, NULL));
	H_ASSERT(master != NULL);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", http);
	snprintf(mp, sizeof(mp), "127.0.0.1:%d", http_port_of(master));
	H_ASSERT_EQ(h_stop_group(proxy), 0);
	H_ASSERT_EQ(h_stop_group(master), 0);
	expect_exit3("status (socket)", (const char *const[]){"--socket", sock, "status", NULL}, 0);
	expect_exit3("-o json get (socket)",
		     (const char *const[]){"--socket", sock, "-o", "json", "get", "k", NULL}, 1);
	expect_exit3("-o json keys (proxy HTTP)",
		     (const char *const[]){"--http", hp, "-o", "json", "keys", NULL}, 1);
	expect_exit3("segment list (master)",
		     (const char *const[]){"--master", mp, "segment", "list", NULL}, 0);
	expect_exit3("-o json segment list (master)",
		     (const char *const[]){"--master", mp, "-o", "json", "segment", "list", NULL},
		     1);
	kill(-proxy->pid, SIGCONT);
	kill(-master->pid, SIGCONT);
	/* Woken, both serve again: the aftermath of the proxy. */
	h_after_begin(&after, sock, proxy, http);
	h_after_end(&after);
}

/* --- 9. a client that takes leases and never finishes --- */

#define LEASE_CAP  64
#define LEASE_KEYS 80
#define CAP_BUSY   "lunar_proxy_lease_cap_busy_total"

static void lease_key(char key[32], int i)
{
	snprintf(key, 32, "faults/lease-%d", i);
}

static void test_faults_lease_cap_busy(void **state)
{
	struct lunar_client *c = h_client(sock);
	uint64_t t0;
	char key[32];
	int64_t busy;

	(void)state;
	for (int i = 0; i < LEASE_KEYS; i++) {
		lease_key(key, i);
		H_ASSERT_EQ(lunar_put(c, key, key, strlen(key), NULL), 0);
	}
	lunar_close(c);
	h_after_begin(&after, sock, proxy, http);
	busy = h_metric_sum(http, CAP_BUSY);
	c = h_client(sock);
	t0 = h_now_ms();
	for (int i = 0; i < LEASE_CAP; i++) {
		lease_key(key, i);
		H_ASSERT_EQ(lunar_exists(c, key), 1);
	}
	/* One key more is one lease too many; the keys it holds still read. */
	lease_key(key, LEASE_CAP);
	H_ASSERT_EQ(lunar_exists(c, key), LUNAR_ERR_BUSY);
	H_ASSERT_EQ(lunar_get_size(c, key), LUNAR_ERR_BUSY);
	H_ASSERT_EQ(h_metric_sum(http, CAP_BUSY), busy + 2);
	lease_key(key, 5);
	H_ASSERT_EQ(lunar_get_size(c, key), (int64_t)strlen(key));
	/* A key it removes no longer counts. */
	lease_key(key, 0);
	H_ASSERT_EQ(lunar_remove(c, key, 1), 0);
	lease_key(key, LEASE_CAP);
	H_ASSERT_EQ(lunar_exists(c, key), 1);
	lease_key(key, LEASE_CAP + 1);
	H_ASSERT_EQ(lunar_exists(c, key), LUNAR_ERR_BUSY);
	/* Its leases run out (2 s): it may read new keys again. */
	while (h_now_ms() < t0 + 2500)
		h_sleep_ms(50);
	for (int i = LEASE_CAP + 1; i < LEASE_KEYS; i++) {
		lease_key(key, i);
		H_ASSERT_EQ(lunar_exists(c, key), 1);
	}
	/* The baseline had every key: the one removed comes back. */
	lease_key(key, 0);
	H_ASSERT_EQ(lunar_put(c, key, key, strlen(key), NULL), 0);
	lunar_close(c);
	h_after_end(&after);
}

/* --- 10. SIGTERM with clients mid-call --- */

#define LOADERS 6

struct load {
	atomic_int calls_after_term; /* calls that ended after the SIGTERM */
	atomic_int other_codes;	     /* ended with no result nor PROXY_UNAVAILABLE */
	atomic_ullong longest_ms;
	atomic_int term;
	int first_bad;
};

static struct load *ld;

static void loader(int ready_fd, void *arg)
{
	int me = (int)(intptr_t)arg;
	struct lunar_client *c;
	static uint8_t buf[256 * 1024];
	char key[64];
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	c = h_client_try(sock, 3000, &rc);
	if (!c)
		_exit(2);
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	for (unsigned i = 0;; i++) {
		uint64_t t0 = h_now_ms(), ms;
		int64_t r;

		snprintf(key, sizeof(key), "faults/term/%d/%u", me, i);
		r = i % 2 ? lunar_get_into(c, key, buf, sizeof(buf))
			  : lunar_put(c, key, buf, 1 + (i * 4099u) % sizeof(buf), NULL);
		ms = h_now_ms() - t0;
		if (!atomic_load(&ld->term))
			continue;
		atomic_fetch_add(&ld->calls_after_term, 1);
		if (ms > atomic_load(&ld->longest_ms))
			atomic_store(&ld->longest_ms, ms);
		/* A put's result may be NO_AVAILABLE_HANDLE: six writers fill the
		 * segment faster than an on-demand eviction round frees it, and
		 * that back-pressure is the call's result, not a stop fault. */
		if (r < 0 && r != LUNAR_ERR_PROXY_UNAVAILABLE && r != LUNAR_ERR_OBJECT_NOT_FOUND &&
		    !(i % 2 == 0 && r == LUNAR_ERR_NO_AVAILABLE_HANDLE)) {
			if (atomic_fetch_add(&ld->other_codes, 1) == 0)
				ld->first_bad = (int)r;
		}
		if (r == LUNAR_ERR_PROXY_UNAVAILABLE)
			_exit(0);
	}
}

static void test_faults_sigterm_under_load(void **state)
{
	pid_t pid[LOADERS];
	uint64_t t0;
	int status;

	(void)state;
	ld = mmap(NULL, sizeof(*ld), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	H_ASSERT(ld != MAP_FAILED);
	memset(ld, 0, sizeof(*ld));
	for (int i = 0; i < LOADERS; i++) {
		pid[i] = h_fork_ready(loader, (void *)(intptr_t)i, NULL);
		H_ASSERT(pid[i] > 0);
	}
	h_sleep_ms(300);
	atomic_store(&ld->term, 1);
	t0 = h_now_ms();
	kill(proxy->pid, SIGTERM);
	status = h_wait_exit(proxy, H_STOP_GRACE_MS);
	printf("  proxy exited in %llu ms, status 0x%x\n", (unsigned long long)(h_now_ms() - t0),
	       status);
	H_ASSERT_MSG(status >= 0, "the proxy still ran %d ms after SIGTERM", H_STOP_GRACE_MS);
	H_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "proxy status 0x%x", status);
	for (int i = 0; i < LOADERS; i++) {
		uint64_t end = h_now_ms() + H_CLIENT_TIMEOUT_MS;
		pid_t w;

		while ((w = waitpid(pid[i], &status, WNOHANG)) == 0 && h_now_ms() < end)
			h_sleep_ms(5);
		if (w == 0) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], &status, 0);
		}
		H_ASSERT_MSG(w == pid[i] && WIFEXITED(status) && WEXITSTATUS(status) == 0,
			     "client %d never saw PROXY_UNAVAILABLE (status 0x%x)", i, status);
	}
	printf("  %d calls ended after the SIGTERM, the longest in %llu ms\n",
	       atomic_load(&ld->calls_after_term),
	       (unsigned long long)atomic_load(&ld->longest_ms));
	H_ASSERT_MSG(atomic_load(&ld->other_codes) == 0,
		     "%d calls ended with other codes, first %d", atomic_load(&ld->other_codes),
		     ld->first_bad);
	H_ASSERT(atomic_load(&ld->longest_ms) < H_CLIENT_TIMEOUT_MS);
	munmap(ld, sizeof(*ld));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_faults_unauthorized_uid_counted, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_protocol_error_before_hangup, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_faults_lunarctl_stopped_daemons, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_lease_cap_busy, setup_leases, teardown),
	    cmocka_unit_test_setup_teardown(test_faults_sigterm_under_load, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
