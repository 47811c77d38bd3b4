/*
 * test_admin_http.c - who may read the /admin pages over HTTP (SPEC §13):
 * a keyed lunar-master serves them to loopback callers without a token;
 * to a caller from another address (a network namespace joined to this one
 * by a veth pair on 169.254.77.0/30, made here as root and always removed)
 * only with "Authorization: Bearer <token>", which lunarctl --cluster-key
 * sends; /metrics, /health and /ready stay open to all, and every refusal
 * is counted. The namespace cases are skipped, with the reason, when not
 * root or when namespaces or veth links are not permitted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "auth.h"
#include "harness.h"
#include "http_get.h"

#define NET_HOST   "169.254.77.1" /* ours, in this namespace */
#define NET_PEER   "169.254.77.2" /* the caller's, in the test's namespace */
#define NET_PREFIX "169.254.77.0/30"
#define BODY_MAX   (1 << 16)
#define REJECTED   "lunar_http_admin_rejected_total"

static char key_path[PATH_MAX];
static char token[AUTH_TOKEN_CHARS + 1];
static char ns_name[32], veth_host[16], veth_peer[16];
static int net_up; /* the namespace and the veth pair exist */
static char skip_why[256];

/* Run a command line quietly (the test's own `ip` calls): 0 when it succeeded. */
static int sh(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	strncat(cmd, " >/dev/null 2>&1", sizeof(cmd) - strlen(cmd) - 1);
	rc = system(cmd);
	return rc == 0 ? 0 : -1;
}

/* Remove what net_make created, and nothing else; safe to call twice. */
static void net_down(void)
{
	if (!ns_name[0])
		return;
	sh("ip netns del %s", ns_name); /* takes veth_peer, and with it veth_host */
	sh("ip link del %s", veth_host);
	ns_name[0] = '\0';
	net_up = 0;
}

/* The namespace and the veth pair: 0, or -1 with the reason in skip_why. */
static int net_make(void)
{
	static int registered;
	unsigned id = (unsigned)getpid() % 100000;

	if (geteuid() != 0)
		return snprintf(skip_why, sizeof(skip_why), "not root"), -1;
	if (sh("command -v ip"))
		return snprintf(skip_why, sizeof(skip_why), "no 'ip' command (iproute2)"), -1;
	if (!sh("ip -o addr show to %s | grep -q .", NET_PREFIX))
		return snprintf(skip_why, sizeof(skip_why), "%s is in use here", NET_PREFIX), -1;
	snprintf(ns_name, sizeof(ns_name), "lunar-admin-%u", id);
	snprintf(veth_host, sizeof(veth_host), "lnrah%u", id);
	snprintf(veth_peer, sizeof(veth_peer), "lnrap%u", id);
	if (!registered++)
		atexit(net_down); /* also when a failed assertion ends the test */
	if (sh("ip netns add %s", ns_name)) {
		ns_name[0] = '\0';
		return snprintf(skip_why, sizeof(skip_why), "'ip netns add' not permitted"), -1;
	}
	if (sh("ip link add %s type veth peer name %s", veth_host, veth_peer)) {
		net_down();
		return snprintf(skip_why, sizeof(skip_why), "veth links not permitted"), -1;
	}
	if (sh("ip link set %s netns %s", veth_peer, ns_name) ||
	    sh("ip addr add %s/30 dev %s", NET_HOST, veth_host) ||
	    sh("ip link set %s up", veth_host) ||
	    sh("ip -n %s addr add %s/30 dev %s", ns_name, NET_PEER, veth_peer) ||
	    sh("ip -n %s link set %s up", ns_name, veth_peer) ||
	    sh("ip -n %s link set lo up", ns_name)) {
		net_down();
		return snprintf(skip_why, sizeof(skip_why), "cannot set up the veth pair"), -1;
	}
	net_up = 1;
	return 0;
}

/* Enter the test's namespace (in a forked child): 0 or -1. */
static int enter_ns(void)
{
	char path[PATH_MAX];
	int fd, rc;

	snprintf(path, sizeof(path), "/var/run/netns/%s", ns_name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	rc = setns(fd, CLONE_NEWNET);
	close(fd);
	return rc;
}

/* A 32-byte key file, mode 0600, and its bearer token. */
static int make_key(void)
{
	struct auth_key k;
	char why[256];
	int fd;

	snprintf(key_path, sizeof(key_path), "%s", h_path("cluster.key"));
	if (getrandom(k.k, sizeof(k.k), 0) != (ssize_t)sizeof(k.k))
		return -1;
	fd = open(key_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, k.k, sizeof(k.k)) != (ssize_t)sizeof(k.k))
		return -1;
	close(fd);
	if (auth_init() || auth_key_load(key_path, &k, why, sizeof(why)))
		return -1;
	auth_http_token(&k, token);
	auth_key_wipe(&k);
	return 0;
}

/*
 * GET path from host:port, from inside the namespace when in_ns, with
 * authorization as the header's value when not NULL: the status (body in
 * body), or -1. The request runs in a forked child that reports through a
 * pipe, so the test process never leaves its own namespace.
 */
static int get_from(int in_ns, const char *host, int port, const char *path,
		    const char *authorization, char *body)
{
	int pfd[2], status = -1, wst;
	size_t len = 0;
	ssize_t n;
	char *resp = malloc(BODY_MAX), *b;
	pid_t pid;

	body[0] = '\0';
	if (!resp || pipe(pfd)) {
		free(resp);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
		struct timeval tv = {.tv_sec = 5};
		char req[1024];
		int fd, m;

		close(pfd[0]);
		if (in_ns && enter_ns())
			_exit(2);
		m = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", path,
			     host, authorization ? "Authorization: " : "",
			     authorization ? authorization : "", authorization ? "\r\n" : "");
		fd = socket(AF_INET, SOCK_STREAM, 0);
		inet_pton(AF_INET, host, &sa.sin_addr);
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
		    send(fd, req, (size_t)m, MSG_NOSIGNAL) != m)
			_exit(3);
		while ((n = recv(fd, req, sizeof(req), 0)) > 0)
			if (write(pfd[1], req, (size_t)n) != n)
				_exit(4);
		_exit(0);
	}
	close(pfd[1]);
	while (pid > 0 && len < BODY_MAX - 1 &&
	       (n = read(pfd[0], resp + len, BODY_MAX - 1 - len)) > 0)
		len += (size_t)n;
	close(pfd[0]);
	if (pid > 0 && waitpid(pid, &wst, 0) == pid && WIFEXITED(wst) && !WEXITSTATUS(wst)) {
		resp[len] = '\0';
		if (sscanf(resp, "HTTP/1.1 %d", &status) != 1)
			status = -1;
		b = strstr(resp, "\r\n\r\n");
		snprintf(body, BODY_MAX, "%s", b ? b + 4 : "");
	}
	free(resp);
	return status;
}

/* The value of a /metrics sample named exactly name (labels included), or -1. */
static long long sample(const char *metrics, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = metrics; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (!strncmp(p, name, n) && p[n] == ' ')
			return atoll(p + n + 1);
	return -1;
}

/* lunarctl with args, from inside the namespace: its exit code; stderr into err. */
static int ctl_in_ns(char *err, size_t cap, const char *const *args)
{
	const char *argv[16];
	char out_path[PATH_MAX], err_path[PATH_MAX];
	int n = 0, wst = 0, fd;
	pid_t pid;
	ssize_t got;

	argv[n++] = h_bin("lunarctl");
	while (*args && n < 15)
		argv[n++] = *args++;
	argv[n] = NULL;
	snprintf(out_path, sizeof(out_path), "%s", h_path("ctl.out"));
	snprintf(err_path, sizeof(err_path), "%s", h_path("ctl.err"));
	pid = fork();
	if (pid == 0) {
		int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		int e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || enter_ns())
			_exit(126);
		unsetenv(AUTH_KEY_ENV);
		alarm(30);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &wst, 0) != pid)
		return -1;
	err[0] = '\0';
	fd = open(err_path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		got = read(fd, err, cap - 1);
		err[got > 0 ? got : 0] = '\0';
		close(fd);
	}
	return WIFEXITED(wst) ? WEXITSTATUS(wst) : -1;
}

/* Wait until host:port accepts an HTTP GET /health from this namespace. */
static int wait_http(struct h_proc *p, const char *host, int port)
{
	char *body = malloc(BODY_MAX);
	uint64_t t0 = h_now_ms();
	int st = -1;

	while (body && h_alive(p) && h_now_ms() - t0 < H_READY_TIMEOUT_MS) {
		st = get_from(0, host, port, "/health", NULL, body);
		if (st == 200)
			break;
		h_sleep_ms(20);
	}
	free(body);
	return st == 200 ? 0 : -1;
}

struct fx {
	struct h_proc *master;
	int http_port;
	char *body;
};

static int setup(void **state)
{
	static struct fx f;

	h_keyless(); /* this test makes and hands out its keys itself */
	if (h_init() || make_key())
		return -1;
	f.body = malloc(BODY_MAX);
	*state = &f;
	return f.body ? 0 : -1;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	h_stop_all();
	net_down();
	free(f->body);
	h_cleanup();
	return 0;
}

/* After each case: its daemons stopped and the namespace gone, even when
 * an assertion failed half-way. */
static int case_teardown(void **state)
{
	(void)state;
	h_stop_all();
	net_down();
	return 0;
}

/* A keyed master listening on host; f->http_port its HTTP port. */
static struct h_proc *start_master(struct fx *f, const char *name, const char *host)
{
	char port[16], hport[16];
	char *argv[] = {(char *)h_bin("lunar-master"),
			"--listen",
			(char *)host,
			"--port",
			port,
			"--http-port",
			hport,
			"--cluster-key",
			key_path,
			NULL};
	struct h_proc *p;

	f->http_port = h_free_port();
	snprintf(port, sizeof(port), "%d", h_free_port());
	snprintf(hport, sizeof(hport), "%d", f->http_port);
	p = h_spawn(name, argv);
	H_ASSERT_MSG(p && wait_http(p, host, f->http_port) == 0, "%s did not serve HTTP on %s",
		     name, host);
	return p;
}

static void test_admin_http_loopback_needs_no_token(void **state)
{
	struct fx *f = *state;
	struct h_proc *p = start_master(f, "master-lo", "127.0.0.1");

	/* a keyed master still serves /admin to a loopback caller as it is */
	H_ASSERT_EQ(hg_get(f->http_port, "/admin/segments", f->body, BODY_MAX), 200);
	H_ASSERT_MSG(strstr(f->body, "\"status\""), "not a master's answer: %s", f->body);
	H_ASSERT_EQ(hg_get(f->http_port, "/admin/keys?tenant=default", f->body, BODY_MAX), 200);
	H_ASSERT_EQ(hg_get(f->http_port, "/metrics", f->body, BODY_MAX), 200);
	H_ASSERT_EQ(sample(f->body, REJECTED "{reason=\"no_token\"}"), 0);
	h_stop(p);
}

static void test_admin_http_other_address_needs_token(void **state)
{
	struct fx *f = *state;
	char hdr[AUTH_TOKEN_CHARS + 16], wrong[AUTH_TOKEN_CHARS + 16], err[4096];
	char addr[64];
	struct h_proc *p;

	if (net_make()) {
		printf("skipped: %s (needs a network namespace and a veth pair)\n", skip_why);
		skip();
	}
	p = start_master(f, "master-ll", NET_HOST);
	snprintf(hdr, sizeof(hdr), "Bearer %s", token);
	snprintf(wrong, sizeof(wrong), "Bearer %.63s%c", token, token[63] == '0' ? '1' : '0');

	/* from the other namespace, without the token: a bare 403 */
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/keys?tenant=", NULL, f->body), 403);
	H_ASSERT_MSG(!strcmp(f->body, "forbidden\n"), "refusal said: %s", f->body);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/stat?key=b", NULL, f->body), 403);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/nonesuch", NULL, f->body), 403);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/segments", wrong, f->body), 403);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/segments", token, f->body), 403);
	/* with it: served */
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/segments", hdr, f->body), 200);
	H_ASSERT_MSG(strstr(f->body, "\"status\""), "not a master's answer: %s", f->body);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/keys?tenant=", hdr, f->body), 200);
	/* /metrics, /health, /ready stay open */
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/health", NULL, f->body), 200);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/ready", NULL, f->body), 503);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/metrics", NULL, f->body), 200);
	/* five refusals so far: four without a Bearer token, one with a wrong one */
	H_ASSERT_EQ(sample(f->body, REJECTED "{reason=\"no_token\"}"), 4);
	H_ASSERT_EQ(sample(f->body, REJECTED "{reason=\"bad_token\"}"), 1);
	H_ASSERT_EQ(sample(f->body, REJECTED "{reason=\"keyless\"}"), 0);

	/* lunarctl: refused without the key, served with it */
	snprintf(addr, sizeof(addr), "%s:%d", NET_HOST, f->http_port);
	H_ASSERT_EQ(ctl_in_ns(err, sizeof(err),
			      (const char *const[]){"--master", addr, "segment", "list", NULL}),
		    1);
	H_ASSERT_MSG(strstr(err, "refused (HTTP 403)") && strstr(err, "--cluster-key"),
		     "lunarctl said: %s", err);
	H_ASSERT_EQ(ctl_in_ns(err, sizeof(err),
			      (const char *const[]){"--master", addr, "--cluster-key", key_path,
						    "segment", "list", NULL}),
		    0);
	H_ASSERT_EQ(ctl_in_ns(err, sizeof(err),
			      (const char *const[]){"--master", addr, "--cluster-key", key_path,
						    "-o", "json", "keys", "--all-tenants", NULL}),
		    0);
	/* a local caller dialling the non-loopback address is not loopback either */
	H_ASSERT_EQ(get_from(0, NET_HOST, f->http_port, "/admin/segments", NULL, f->body), 403);
	H_ASSERT_EQ(get_from(0, NET_HOST, f->http_port, "/metrics", NULL, f->body), 200);
	H_ASSERT_EQ(sample(f->body, REJECTED "{reason=\"no_token\"}"), 6);
	h_stop(p);
	/* logged, with the caller's address, at most once a second */
	H_ASSERT_MSG(h_log_has(p, "HTTP: refused"), "no refusal in the master's log");
	H_ASSERT_MSG(h_log_has(p, "refused /admin/keys to " NET_PEER), "no caller in the log");
	net_down();
}

static void test_admin_http_proxy_shares_the_gate(void **state)
{
	struct fx *f = *state;
	char hdr[AUTH_TOKEN_CHARS + 16], sock[PATH_MAX], hport[16];
	const char *type;
	struct h_proc *p;

	if (net_make()) {
		printf("skipped: %s (needs a network namespace and a veth pair)\n", skip_why);
		skip();
	}
	/* a proxy with an embedded master, its HTTP port on the veth address */
	h_named_sock(sock, "proxy-ll");
	f->http_port = h_free_port();
	snprintf(hport, sizeof(hport), "%d", f->http_port);
	p = h_start_proxy("proxy-ll", sock, H_EMBEDDED, "--host", NET_HOST, "--http-port", hport,
			  "--cluster-key", key_path, NULL);
	H_ASSERT_MSG(p != NULL, "the proxy did not start");
	snprintf(hdr, sizeof(hdr), "Bearer %s", token);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/clients", NULL, f->body), 403);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/admin/clients", hdr, f->body), 200);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/disk/status", NULL, f->body), 404);
	H_ASSERT_EQ(get_from(1, NET_HOST, f->http_port, "/metrics", NULL, f->body), 200);
	/* the proxy's and its master's families, and the gate's counter once */
	H_ASSERT_EQ(sample(f->body, REJECTED "{reason=\"no_token\"}"), 1);
	H_ASSERT_MSG(strstr(f->body, "lunar_proxy_requests_total") &&
			 strstr(f->body, "lunar_master_segments"),
		     "not both families: %.300s", f->body);
	type = strstr(f->body, "# TYPE " REJECTED " ");
	H_ASSERT_MSG(type && !strstr(type + 1, "# TYPE " REJECTED " "), "counter not once");
	h_stop(p);
	net_down();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_admin_http_loopback_needs_no_token, case_teardown),
	    cmocka_unit_test_teardown(test_admin_http_other_address_needs_token, case_teardown),
	    cmocka_unit_test_teardown(test_admin_http_proxy_shares_the_gate, case_teardown),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
