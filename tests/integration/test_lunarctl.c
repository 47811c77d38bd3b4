/*
 * test_lunarctl.c - the admin CLI of SPEC §11 as an operator runs it: the
 * real $BUILD/bin/lunarctl, forked with its output in files, against a
 * lunar-proxy with an embedded master on known HTTP and socket addresses
 * (data verbs, keys, stat, segment and client lists, metrics, disk status,
 * rm over many keys, exit codes), and against a lunar-master + lunar-proxy
 * pair through --master.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define CTL_TIMEOUT_MS 30000
#define CTL_MAX_ARGV   24
#define OUT_MAX	       (1u << 20)

static char sock[PATH_MAX];
static char http[64]; /* the embedded proxy's HTTP address */

/* One lunarctl run: exit code (-1: killed or timed out), stdout, stderr. */
struct run {
	int rc;
	char out[OUT_MAX];
	char err[OUT_MAX];
};

static struct run R;

static int setup(void **state)
{
	char portstr[16];
	int port;

	(void)state;
	if (h_init() != 0)
		return -1;
	unsetenv("LUNAR_SOCKET");
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	port = h_free_port();
	if (port <= 0)
		return -1;
	snprintf(http, sizeof(http), "127.0.0.1:%d", port);
	snprintf(portstr, sizeof(portstr), "%d", port);
	if (!h_start_proxy("proxy", sock, H_EMBEDDED, "--http-port", portstr, NULL))
		return -1;
	return 0;
}

static void slurp(const char *path, char *buf)
{
	size_t len = 0;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	buf[0] = '\0';
	if (fd < 0)
		return;
	while (len < OUT_MAX - 1 && (n = read(fd, buf + len, OUT_MAX - 1 - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
}

/* Run lunarctl with argv (NULL-terminated) and stdin from in_path (or
 * /dev/null); fill R. Bounded by CTL_TIMEOUT_MS. */
static void ctl_runv(const char *in_path, const char *const *args)
{
	const char *argv[CTL_MAX_ARGV + 1];
	char out[PATH_MAX], err[PATH_MAX];
	int n = 0, status = 0;
	uint64_t t0 = h_now_ms();
	pid_t pid, w;

	argv[n++] = h_bin("lunarctl");
	for (; *args && n < CTL_MAX_ARGV; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	snprintf(out, sizeof(out), "%s", h_path("ctl.out"));
	snprintf(err, sizeof(err), "%s", h_path("ctl.err"));
	pid = fork();
	H_ASSERT(pid >= 0);
	if (pid == 0) {
		int i = open(in_path ? in_path : "/dev/null", O_RDONLY);
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (i < 0 || o < 0 || e < 0 || dup2(i, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(126);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	while ((w = waitpid(pid, &status, WNOHANG)) == 0 && h_now_ms() - t0 < CTL_TIMEOUT_MS)
		h_sleep_ms(5);
	if (w == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	R.rc = w == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	slurp(out, R.out);
	slurp(err, R.err);
	H_ASSERT_MSG(R.rc != 126 && R.rc != 127, "cannot run %s", argv[0]);
}

#define CTL_IN(in, ...)                                                                            \
	do {                                                                                       \
		const char *const ctl_args_[] = {__VA_ARGS__, NULL};                               \
		ctl_runv(in, ctl_args_);                                                           \
	} while (0)
/* lunarctl against the embedded proxy (socket and HTTP) plus arguments. */
#define CTL(...) CTL_IN(NULL, "--socket", sock, "--http", http, __VA_ARGS__)

/* The exit code is want, else fail showing what lunarctl printed. */
#define EXPECT_RC(want)                                                                            \
	H_ASSERT_MSG(R.rc == (want), "lunarctl exit %d, expected %d\nstdout:\n%s\nstderr:\n%s",    \
		     R.rc, (want), R.out, R.err)
#define EXPECT_IN(buf, needle)                                                                     \
	H_ASSERT_MSG(strstr(buf, needle) != NULL,                                                  \
		     "'%s' missing from lunarctl's " #buf "\nstdout:\n%s\nstderr:\n%s", needle,    \
		     R.out, R.err)
#define EXPECT_NOT_IN(buf, needle)                                                                 \
	H_ASSERT_MSG(strstr(buf, needle) == NULL,                                                  \
		     "'%s' unexpected in lunarctl's " #buf "\nstdout:\n%s\nstderr:\n%s", needle,   \
		     R.out, R.err)

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* A file of len bytes of key's pattern; returns its path (static). */
static const char *value_file(const char *name, size_t len)
{
	static char path[PATH_MAX];
	char *buf = malloc(len);
	FILE *f;

	H_ASSERT(buf != NULL);
	snprintf(path, sizeof(path), "%s", h_path(name));
	h_fill(buf, len, h_seed(name));
	f = fopen(path, "wb");
	H_ASSERT(f != NULL);
	H_ASSERT(fwrite(buf, 1, len, f) == len);
	H_ASSERT(fclose(f) == 0);
	free(buf);
	return path;
}

static void put_small(const char *key, const char *tenant)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s", value_file("small.bin", 100));
	if (tenant)
		CTL("--tenant", tenant, "put", key, path);
	else
		CTL("put", key, path);
	EXPECT_RC(0);
}

static void test_lunarctl_put_get_exists_rm(void **state)
{
	char in[PATH_MAX], back[PATH_MAX], cmp[2 * PATH_MAX + 16];
	struct lunar_client *reader;

	(void)state;
	snprintf(in, sizeof(in), "%s", value_file("rt.bin", 300000));
	snprintf(back, sizeof(back), "%s", h_path("rt.back"));
	CTL("put", "rt-key", in);
	EXPECT_RC(0);
	EXPECT_IN(R.out, "300000 bytes");
	CTL("get", "rt-key", back);
	EXPECT_RC(0);
	snprintf(cmp, sizeof(cmp), "cmp -s '%s' '%s'", in, back);
	H_ASSERT_MSG(system(cmp) == 0, "get wrote other bytes than put stored");
	CTL("exists", "rt-key");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "1");
	CTL("-o", "json", "exists", "rt-key");
	EXPECT_IN(R.out, "\"exists\":true");
	/* A live reader holds a read lease: a plain rm refuses, --force
	 * removes. (The leases lunarctl's own reads took went when it exited.) */
	reader = h_client(sock);
	H_ASSERT_EQ(lunar_exists(reader, "rt-key"), 1);
	CTL("rm", "rt-key");
	EXPECT_RC(1);
	EXPECT_IN(R.err, "--force");
	CTL("rm", "--force", "rt-key");
	EXPECT_RC(0);
	lunar_close(reader);
	CTL("exists", "rt-key");
	EXPECT_RC(1);
	EXPECT_IN(R.out, "0");
	/* put from stdin */
	CTL_IN(in, "--socket", sock, "put", "rt-stdin", "-");
	EXPECT_RC(0);
	CTL("stat", "rt-stdin");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "300000");
}

static void test_lunarctl_keys_text_and_json(void **state)
{
	(void)state;
	put_small("keys-alpha", NULL);
	put_small("keys-beta", NULL);
	CTL("keys", "^keys-");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 2, "want 2 keys:\n%s", R.out);
	EXPECT_IN(R.out, "keys-alpha");
	EXPECT_IN(R.out, "keys-beta");
	EXPECT_IN(R.out, "100\n");
	CTL("-o", "json", "keys", "^keys-");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 1 && R.out[0] == '{', "want one object:\n%s", R.out);
	EXPECT_IN(R.out, "\"key\":\"keys-alpha\"");
	EXPECT_IN(R.out, "\"size\":100");
	CTL("keys", "^keys-", "--limit", "1");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 1, "--limit 1 listed:\n%s", R.out);
	EXPECT_IN(R.err, "--limit");
	put_small("keys-other", "t-keys");
	CTL("keys", "^keys-");
	EXPECT_NOT_IN(R.out, "keys-other");
	CTL("keys", "^keys-", "--all-tenants");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "t-keys");
	EXPECT_IN(R.out, "keys-other");
	CTL("--tenant", "t-keys", "keys");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 1, "tenant t-keys:\n%s", R.out);
}

static void test_lunarctl_stat_shows_size_and_replica(void **state)
{
	(void)state;
	put_small("stat-key", NULL);
	CTL("stat", "stat-key");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "size:");
	EXPECT_IN(R.out, " 100\n");
	EXPECT_IN(R.out, "MEMORY");
	EXPECT_IN(R.out, "replicas:     1");
	CTL("-o", "json", "stat", "stat-key");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "\"size\":100");
	EXPECT_IN(R.out, "\"type\":\"MEMORY\"");
	CTL("stat", "stat-missing");
	EXPECT_RC(1);
	EXPECT_IN(R.err, "OBJECT_NOT_FOUND");
}

static void test_lunarctl_segment_and_client_list(void **state)
{
	(void)state;
	CTL("segment", "list");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 2, "want header + one segment:\n%s", R.out);
	EXPECT_IN(R.out, "NAME");
	EXPECT_IN(R.out, "DRAINING");
	EXPECT_IN(R.out, "64.0MiB");
	CTL("-o", "json", "segment", "list");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "\"segments\":[{");
	CTL("client", "list");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 2, "want header + one client:\n%s", R.out);
	EXPECT_IN(R.out, "LAST_PING");
	EXPECT_IN(R.out, "yes");
	CTL("-o", "json", "client", "list");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "\"alive\":true");
}

static void test_lunarctl_metrics(void **state)
{
	(void)state;
	CTL("metrics");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "lunar_proxy_requests_total");
	EXPECT_IN(R.out, "lunar_master_keys");
	CTL("-o", "json", "metrics");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 1 && R.out[0] == '{', "want one object:\n%s", R.out);
	EXPECT_IN(R.out, "\"lunar_master_keys\":");
}

static void test_lunarctl_rm_regex_needs_yes(void **state)
{
	(void)state;
	put_small("rx-1", NULL);
	put_small("rx-2", NULL);
	put_small("rx-keep", NULL);
	CTL("rm", "--regex", "^rx-[0-9]$");
	EXPECT_RC(2);
	EXPECT_IN(R.err, "--yes");
	/* keys, not exists: exists would lease the key, and rm skips leased keys */
	CTL("keys", "^rx-");
	H_ASSERT_MSG(count_lines(R.out) == 3, "rm without --yes removed keys:\n%s", R.out);
	CTL("rm", "--regex", "^rx-[0-9]$", "--yes");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "removed 2 keys");
	CTL("exists", "rx-2");
	EXPECT_RC(1);
	CTL("exists", "rx-keep");
	EXPECT_RC(0);
	/* rm --all, in a tenant of its own */
	put_small("all-1", "t-all");
	put_small("all-2", "t-all");
	CTL("--tenant", "t-all", "rm", "--all");
	EXPECT_RC(2);
	CTL("--tenant", "t-all", "-o", "json", "rm", "--all", "--yes");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "\"removed\":2");
	CTL("exists", "rx-keep");
	EXPECT_RC(0);
}

static void test_lunarctl_cannot_connect_exits_3(void **state)
{
	char dead[64];

	(void)state;
	CTL_IN(NULL, "--socket", h_path("nobody.sock"), "status");
	EXPECT_RC(3);
	snprintf(dead, sizeof(dead), "127.0.0.1:%d", h_free_port());
	CTL_IN(NULL, "--http", dead, "keys");
	EXPECT_RC(3);
	EXPECT_IN(R.err, dead);
	CTL_IN(NULL, "--master", dead, "-o", "json", "segment", "list");
	EXPECT_RC(3);
	EXPECT_IN(R.out, "\"error\"");
}

static void test_lunarctl_usage_errors_exit_2(void **state)
{
	static const char *const documented[] = {
	    "status",	  "put KEY",	  "get KEY",	    "exists KEY",   "rm [--force] KEY",
	    "rm --regex", "rm --all",	  "keys [PATTERN]", "--limit",	    "--all-tenants",
	    "stat KEY",	  "segment list", "client list",    "metrics",	    "disk status",
	    "--master",	  "--http",	  "--socket",	    "-o, --output", "--yes",
	    "--tenant",	  "--timeout-ms"};

	(void)state;
	CTL("frobnicate");
	EXPECT_RC(2);
	EXPECT_IN(R.err, "unknown verb");
	CTL_IN(NULL, "--socket", sock);
	EXPECT_RC(2);
	CTL("segment", "frob");
	EXPECT_RC(2);
	CTL("stat");
	EXPECT_RC(2);
	CTL("keys", "--yes");
	EXPECT_RC(2);
	CTL_IN(NULL, "--master", "tcp://127.0.0.1:50051", "keys");
	EXPECT_RC(2);
	CTL("rm", "--regex", "x", "--all", "--yes");
	EXPECT_RC(2);
	CTL_IN(NULL, "--help");
	EXPECT_RC(0);
	for (size_t i = 0; i < sizeof(documented) / sizeof(documented[0]); i++)
		EXPECT_IN(R.out, documented[i]);
}

static void test_lunarctl_disk_status(void **state)
{
	(void)state;
	CTL("disk", "status");
	if (R.rc == 1) {
		EXPECT_IN(R.err, "no disk tier on this proxy");
		CTL("-o", "json", "disk", "status");
		EXPECT_RC(1);
		EXPECT_IN(R.out, "\"error\"");
	} else {
		/* The proxy grew GET /disk/status: it must answer something. */
		EXPECT_RC(0);
		H_ASSERT_MSG(R.out[0] != '\0', "disk status printed nothing");
	}
}

static void test_lunarctl_master_pair(void **state)
{
	char mport[16], mhttp[16], phttp[16], master[64], proxy_http[64], psock[PATH_MAX];
	struct h_proc *m, *p;
	int mp = h_free_port(), hp = h_free_port(), pp = h_free_port();

	(void)state;
	H_ASSERT(mp > 0 && hp > 0 && pp > 0 && mp != hp && hp != pp && mp != pp);
	snprintf(mport, sizeof(mport), "%d", mp);
	snprintf(mhttp, sizeof(mhttp), "%d", hp);
	snprintf(phttp, sizeof(phttp), "%d", pp);
	snprintf(master, sizeof(master), "127.0.0.1:%d", hp);
	snprintf(proxy_http, sizeof(proxy_http), "127.0.0.1:%d", pp);
	snprintf(psock, sizeof(psock), "%s", h_path("pair.sock"));
	m = h_start_master("pair-master", mp, "--http-port", mhttp, NULL);
	H_ASSERT(m != NULL);
	p = h_start_proxy("pair-proxy", psock, mp, "--http-port", phttp, NULL);
	H_ASSERT(p != NULL);

	CTL_IN(NULL, "--master", master, "segment", "list");
	EXPECT_RC(0);
	H_ASSERT_MSG(count_lines(R.out) == 2, "want header + one segment:\n%s", R.out);
	CTL_IN(NULL, "--master", master, "client", "list");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "yes");
	CTL_IN(NULL, "--socket", psock, "put", "pair-key", value_file("pair.bin", 4096));
	EXPECT_RC(0);
	CTL_IN(NULL, "--master", master, "keys");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "pair-key");
	CTL_IN(NULL, "--master", master, "stat", "pair-key");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "MEMORY");
	CTL_IN(NULL, "--master", master, "metrics");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "lunar_master_keys");
	EXPECT_NOT_IN(R.out, "lunar_proxy_requests_total");
	/* This proxy has no embedded master: its /admin/ answers 404. */
	CTL_IN(NULL, "--http", proxy_http, "keys");
	EXPECT_RC(1);
	EXPECT_IN(R.err, "this endpoint has no master (give --master HOST:PORT)");
	CTL_IN(NULL, "--http", proxy_http, "metrics");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "lunar_proxy_requests_total");

	h_stop(p);
	h_stop(m);
}

/* A value larger than the only segment (64 MiB): the code engines act on
 * (NO_AVAILABLE_HANDLE), and the master's reason as the proxy passed it on
 * (lunar_error_detail), with the value's size and the largest segment's. */
static void test_lunarctl_put_larger_than_segment_says_why(void **state)
{
	(void)state;
	CTL("put", "too-big", value_file("big.bin", (64u << 20) + 4096));
	EXPECT_RC(1);
	EXPECT_IN(R.err, "NO_AVAILABLE_HANDLE");
	EXPECT_IN(R.err, "67112960 bytes");
	EXPECT_IN(R.err,
		  "larger than every segment of the cluster (the largest holds 67108864 bytes)");
}

/* Admin verbs without --http or --master ask the proxy behind --socket,
 * which tells its HTTP address in the handshake: not whichever proxy holds
 * the default port 9300. Two proxies with segments of different sizes on
 * ports of their own; each one's metrics show its own segment. */
static void test_lunarctl_socket_picks_its_proxy(void **state)
{
	char mport[16], ha[16], hb[16], sa[PATH_MAX], sb[PATH_MAX];
	struct h_proc *m, *a, *b;
	int mp = h_free_port(), pa = h_free_port(), pb = h_free_port();

	(void)state;
	H_ASSERT(mp > 0 && pa > 0 && pb > 0 && mp != pa && pa != pb && mp != pb);
	snprintf(mport, sizeof(mport), "%d", mp);
	snprintf(ha, sizeof(ha), "%d", pa);
	snprintf(hb, sizeof(hb), "%d", pb);
	snprintf(sa, sizeof(sa), "%s", h_path("two-a.sock"));
	snprintf(sb, sizeof(sb), "%s", h_path("two-b.sock"));
	m = h_start_master("two-master", mp, NULL);
	H_ASSERT(m != NULL);
	a = h_start_proxy("two-a", sa, mp, "--http-port", ha, "--segment-size", "64MiB", NULL);
	H_ASSERT(a != NULL);
	b = h_start_proxy("two-b", sb, mp, "--http-port", hb, "--segment-size", "32MiB", NULL);
	H_ASSERT(b != NULL);

	CTL_IN(NULL, "--socket", sb, "metrics");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "lunar_proxy_segment_bytes 33554432");
	CTL_IN(NULL, "--socket", sa, "metrics");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "lunar_proxy_segment_bytes 67108864");
	CTL_IN(NULL, "--socket", sb, "disk", "status");
	EXPECT_RC(1);
	EXPECT_IN(R.err, "no disk tier on this proxy");
	/* the embedded proxy of the other tests, on its own port: its /admin/ */
	put_small("via-socket", NULL);
	CTL_IN(NULL, "--socket", sock, "keys");
	EXPECT_RC(0);
	EXPECT_IN(R.out, "via-socket");
	/* a named socket nobody serves: cannot connect, not the default port */
	CTL_IN(NULL, "--socket", h_path("nobody.sock"), "metrics");
	EXPECT_RC(3);
	EXPECT_IN(R.err, "nobody.sock");

	h_stop(b);
	h_stop(a);
	h_stop(m);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_lunarctl_put_get_exists_rm,
		test_lunarctl_keys_text_and_json, test_lunarctl_stat_shows_size_and_replica,
		test_lunarctl_segment_and_client_list, test_lunarctl_metrics,
		test_lunarctl_rm_regex_needs_yes, test_lunarctl_cannot_connect_exits_3,
		test_lunarctl_usage_errors_exit_2, test_lunarctl_disk_status,
		test_lunarctl_master_pair, test_lunarctl_socket_picks_its_proxy,
		test_lunarctl_put_larger_than_segment_says_why)
