/*
 * test_memory_cgroup.c - a proxy in a memory cgroup too small for its
 * segment: started with --segment-size 1GiB in a cgroup of 320 MiB (no swap
 * to spill to), it fits its segment under the limit and says so (before, the
 * prefault alone had the OOM killer end it). Hard-pinned puts fill it: the
 * first that does not fit gets NO_AVAILABLE_HANDLE, well before 1 GiB; the
 * cgroup saw no OOM kill, the proxy runs on, the values read back
 * byte-exact, and once one is removed a put fits again. The cgroup is made
 * here, as root: a child of the test's own cgroup, v2 where the memory
 * controller is delegated to it, else v1's memory hierarchy; the test skips,
 * saying why, where it cannot make one, and under a sanitizer (whose shadow
 * memory and quarantine are not the proxy's).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "case_util.h"

#define MIB	  (1024ull * 1024ull)
#define LIMIT	  (320ull * MIB)
#define VALUE	  (4u * 1024u * 1024u)
#define MAX_PUTS  (1024u / 4u) /* a 1 GiB segment's worth */
#define FIT_WARN  "does not fit the memory cgroup"
#define V1_MEMORY "/sys/fs/cgroup/memory"

static char cg[1536], sock[PATH_MAX], why[1024];
static int v2;
static struct h_proc *proxy;
static uint8_t *buf;

/* Write s to dir/file; 0 or -errno. */
static int put_file(const char *dir, const char *file, const char *s)
{
	char path[PATH_MAX + 64];
	FILE *f;
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "we");
	if (!f)
		return -errno;
	if (fputs(s, f) < 0)
		rc = -errno;
	if (fclose(f) && !rc)
		rc = -errno;
	return rc;
}

/* The number after key (NULL: the first) in dir/file; -1 if none. */
static long long file_num(const char *dir, const char *file, const char *key)
{
	char path[PATH_MAX + 64], line[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f)) {
		size_t kl = key ? strlen(key) : 0;

		if (key && (strncmp(line, key, kl) || line[kl] != ' '))
			continue;
		v = strtoll(line + kl, NULL, 10);
		break;
	}
	if (f)
		fclose(f);
	return v;
}

/* Our cgroup path in the hierarchy of controller (NULL: v2). */
static int own_path(const char *controller, char *out, size_t cap)
{
	char line[1024];
	FILE *f = fopen("/proc/self/cgroup", "re");
	int rc = -1;

	while (f && rc && fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;

		if (!path)
			continue;
		*ctl++ = '\0';
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		if (controller ? strstr(ctl, controller) != NULL : !strcmp(line, "0") && !*ctl) {
			snprintf(out, cap, "%s", path);
			rc = 0;
		}
	}
	if (f)
		fclose(f);
	return rc;
}

/* A v2 child of our cgroup, when the memory controller is delegated to
 * our children (cgroup.subtree_control); 0 or -1 with why. */
static int make_v2(void)
{
	char path[1024], ctl[256] = "";
	FILE *f;

	if (own_path(NULL, path, sizeof(path))) {
		snprintf(why, sizeof(why), "no cgroup v2 line in /proc/self/cgroup");
		return -1;
	}
	snprintf(cg, sizeof(cg), "/sys/fs/cgroup%.1000s", path);
	if (access(cg, F_OK) && !access("/sys/fs/cgroup/unified", F_OK))
		snprintf(cg, sizeof(cg), "/sys/fs/cgroup/unified%.1000s", path);
	snprintf(path, sizeof(path), "%.1000s/cgroup.subtree_control", cg);
	f = fopen(path, "re");
	if (f) {
		if (!fgets(ctl, sizeof(ctl), f))
			ctl[0] = '\0';
		fclose(f);
	}
	if (!strstr(ctl, "memory")) {
		snprintf(why, sizeof(why), "cgroup v2: no memory controller in %.400s", path);
		return -1;
	}
	snprintf(cg + strlen(cg), sizeof(cg) - strlen(cg), "/lunar-test-%d", (int)getpid());
	if (mkdir(cg, 0755)) {
		snprintf(why, sizeof(why), "cgroup v2: mkdir %.400s: %s", cg, strerror(errno));
		return -1;
	}
	v2 = 1;
	put_file(cg, "memory.swap.max", "0");
	return 0;
}

/* A v1 memory child of our memory cgroup; 0 or -1 with why. */
static int make_v1(void)
{
	char path[1024], prior[480];

	snprintf(prior, sizeof(prior), "%.470s", why);
	if (access(V1_MEMORY "/memory.limit_in_bytes", F_OK) ||
	    own_path("memory", path, sizeof(path))) {
		snprintf(why, sizeof(why), "%.480s; no cgroup v1 memory hierarchy", prior);
		return -1;
	}
	snprintf(cg, sizeof(cg), V1_MEMORY "%.1000s/lunar-test-%d", strcmp(path, "/") ? path : "",
		 (int)getpid());
	if (mkdir(cg, 0755)) {
		snprintf(why, sizeof(why), "%.480s; cgroup v1: mkdir %.400s: %s", prior, cg,
			 strerror(errno));
		return -1;
	}
	v2 = 0;
	return 0;
}

static int make_cgroup(void)
{
	char lim[32];
	int rc;

	if (make_v2() && make_v1())
		return -1;
	snprintf(lim, sizeof(lim), "%llu", LIMIT);
	rc = put_file(cg, v2 ? "memory.max" : "memory.limit_in_bytes", lim);
	/* v1 with swap accounting: no swap either. */
	if (!rc && !v2 && !access(V1_MEMORY "/memory.memsw.limit_in_bytes", F_OK))
		rc = put_file(cg, "memory.memsw.limit_in_bytes", lim);
	if (rc) {
		snprintf(why, sizeof(why), "cannot set the limit of %.800s: %s", cg, strerror(-rc));
		rmdir(cg);
		cg[0] = '\0';
		return -1;
	}
	return 0;
}

static long long oom_kills(void)
{
	return v2 ? file_num(cg, "memory.events", "oom_kill")
		  : file_num(cg, "memory.oom_control", "oom_kill");
}

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	buf = malloc(VALUE);
	return buf ? 0 : -1;
}

static int teardown(void **state)
{
	int rc = case_teardown(state);

	free(buf);
	buf = NULL;
	/* Empty once its one process was reaped. */
	for (int i = 0; cg[0] && i < 50 && rmdir(cg) && errno == EBUSY; i++)
		h_sleep_ms(20);
	cg[0] = '\0';
	return rc;
}

/* The proxy, started inside the cgroup by a shell that joins it first. */
static void start_in_cgroup(void)
{
	char procs[sizeof(cg) + 16];
	char *argv[] = {"/bin/sh",
			"-c",
			"echo $$ > \"$0\" && exec \"$@\"",
			procs,
			(char *)h_bin("lunar-proxy"),
			"--socket",
			sock,
			"--embedded-master",
			"--host",
			"127.0.0.1",
			"--data-port",
			"0",
			"--http-port",
			"0",
			"--segment-size",
			"1GiB",
			NULL};

	snprintf(procs, sizeof(procs), "%s/cgroup.procs", cg);
	h_named_sock(sock, "cg");
	proxy = track(h_spawn("proxy", argv));
	H_ASSERT(proxy != NULL);
	H_ASSERT(h_wait_proxy(proxy, sock, H_READY_TIMEOUT_MS) == 0);
}

static void test_memory_cgroup_full_segment_is_back_pressure(void **state)
{
	struct lunar_put_cfg pinned = {.hard_pin = 1};
	struct lunar_client *c;
	char key[64];
	unsigned n = 0;
	int rc = 0;

	(void)state;
	print_message("  cgroup %s (v%d), memory limit %llu MiB\n", cg, v2 ? 2 : 1, LIMIT / MIB);
	start_in_cgroup();
	c = h_client(sock);
	while (n < MAX_PUTS) {
		snprintf(key, sizeof(key), "cgroup/%u", n);
		h_fill(buf, VALUE, h_seed(key));
		rc = lunar_put(c, key, buf, VALUE, &pinned);
		if (rc)
			break;
		n++;
	}
	print_message("  %u puts of 4 MiB fit; the next: %d (%s); peak %lld MiB; OOM kills %lld\n",
		      n, rc, h_code(rc),
		      file_num(cg, v2 ? "memory.peak" : "memory.max_usage_in_bytes", NULL) /
			  (long long)MIB,
		      oom_kills());
	H_ASSERT_EQ(rc, LUNAR_ERR_NO_AVAILABLE_HANDLE);
	H_ASSERT_MSG(n > 0 && (uint64_t)n * VALUE < LIMIT, "%u puts of 4 MiB in a %llu MiB cgroup",
		     n, LIMIT / MIB);
	H_ASSERT_MSG(h_alive(proxy), "the proxy died");
	H_ASSERT_EQ(oom_kills(), 0);
	/* It keeps serving: what it holds reads back, and room made is used. */
	H_ASSERT_EQ(lunar_health(c), 0);
	for (unsigned i = 0; i < n; i += n / 4 + 1) {
		snprintf(key, sizeof(key), "cgroup/%u", i);
		check_seeded(c, key, buf, VALUE, h_seed(key));
	}
	H_ASSERT_EQ(lunar_remove(c, "cgroup/0", 1), 0);
	snprintf(key, sizeof(key), "cgroup/%u", n);
	put_seeded(c, key, buf, VALUE, h_seed(key), &pinned);
	check_seeded(c, key, buf, VALUE, h_seed(key));
	lunar_close(c);
	H_ASSERT(h_alive(proxy));
	H_ASSERT_EQ(oom_kills(), 0);
	/* And it said why its segment is smaller than asked. */
	H_ASSERT(h_wait_log(proxy, FIT_WARN, 0) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_memory_cgroup_full_segment_is_back_pressure, setup,
					    teardown),
	};

	if (h_sanitizer()) {
		printf("skipped: under %s the proxy's memory is the sanitizer's (shadow, "
		       "quarantine), not its own\n",
		       h_sanitizer());
		return 77;
	}
	if (make_cgroup()) {
		printf("skipped: no memory cgroup could be made: %s\n", why);
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
