/*
 * harness_daemons.c - starting lunar-master and lunar-proxy for the
 * integration tests (see harness.h) and waiting until they answer: a TCP
 * port that connects, a proxy socket that completes a handshake; an
 * embedded-master node with its client; and the group fixtures.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define H_MAX_ARGS 48

static int tcp_connects(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int fd, ok;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

static int not_ready(struct h_proc *p, const char *what, uint64_t start)
{
	fprintf(stderr, "harness: %s not ready (%s) after %llu ms\n", p->name, what,
		(unsigned long long)(h_now_ms() - start));
	h_dump_log(p);
	return -1;
}

int h_wait_tcp(struct h_proc *p, int port, int timeout_ms)
{
	uint64_t start = h_now_ms(), end = start + (uint64_t)timeout_ms;

	for (;;) {
		if (tcp_connects(port))
			return 0;
		if (!h_alive(p))
			return not_ready(p, "it exited", start);
		if (h_now_ms() >= end)
			return not_ready(p, "no TCP listener", start);
		h_sleep_ms(20);
	}
}

int h_log_has(const struct h_proc *p, const char *text)
{
	static const char start_line[] = "==== harness: start:";
	char *buf, *from, *next;
	int found = 0;
	struct stat st;
	ssize_t n;
	int fd;

	fd = open(p->log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	if (fstat(fd, &st) != 0 || !(buf = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return 0;
	}
	n = pread(fd, buf, (size_t)st.st_size, 0);
	close(fd);
	if (n > 0) {
		buf[n] = '\0';
		from = buf;
		while ((next = memmem(from + 1, (size_t)(buf + n - from - 1), start_line,
				      sizeof(start_line) - 1)))
			from = next;
		found = memmem(from, (size_t)(buf + n - from), text, strlen(text)) != NULL;
	}
	free(buf);
	return found;
}

int h_wait_log(struct h_proc *p, const char *text, int timeout_ms)
{
	uint64_t start = h_now_ms(), end = start + (uint64_t)timeout_ms;

	for (;;) {
		if (h_log_has(p, text))
			return 0;
		if (!h_alive(p))
			return not_ready(p, "it exited", start);
		if (h_now_ms() >= end)
			return not_ready(p, text, start);
		h_sleep_ms(20);
	}
}

static int proxy_answers(const char *sockpath)
{
	struct lunar_client *c = NULL;
	int ok;

	c = h_client_try(sockpath, H_BOUND_MS(2000), NULL);
	if (!c)
		return 0;
	ok = lunar_health(c) == 0;
	lunar_close(c);
	return ok;
}

int h_wait_proxy(struct h_proc *p, const char *sockpath, int timeout_ms)
{
	uint64_t start = h_now_ms(), end = start + (uint64_t)timeout_ms;

	for (;;) {
		if (access(sockpath, F_OK) == 0 && proxy_answers(sockpath))
			return 0;
		if (!h_alive(p))
			return not_ready(p, "it exited", start);
		if (h_now_ms() >= end)
			return not_ready(p, "no healthy connection", start);
		h_sleep_ms(50);
	}
}

/* Appends the NULL-terminated va_list to argv; -1 when it does not fit. */
static int add_args(char **argv, int *n, va_list ap)
{
	const char *a;

	while ((a = va_arg(ap, const char *)) != NULL) {
		if (*n >= H_MAX_ARGS - 1)
			return -1;
		argv[(*n)++] = (char *)a;
	}
	argv[*n] = NULL;
	return 0;
}

static int check_bin(const char *path)
{
	if (access(path, X_OK) == 0)
		return 0;
	fprintf(stderr, "harness: %s is missing (%s); build it first (make BUILD=...)\n", path,
		strerror(errno));
	return -1;
}

static struct h_proc *start_master_v(const char *name, int port, va_list ap)
{
	char *argv[H_MAX_ARGS], portstr[16];
	const char *bin = h_bin("lunar-master");
	struct h_proc *p;
	int n = 0;

	if (check_bin(bin) != 0)
		return NULL;
	snprintf(portstr, sizeof(portstr), "%d", port);
	argv[n++] = (char *)bin;
	argv[n++] = "--listen";
	argv[n++] = "127.0.0.1";
	argv[n++] = "--port";
	argv[n++] = portstr;
	argv[n++] = "--http-port";
	argv[n++] = "0";
	if (add_args(argv, &n, ap) != 0)
		return NULL;
	p = h_spawn(name, argv);
	if (!p)
		return NULL;
	/* The ready line follows the RPC and the HTTP listener both. */
	if (h_wait_log(p, H_MASTER_READY, H_READY_TIMEOUT_MS) != 0 ||
	    h_wait_tcp(p, port, H_READY_TIMEOUT_MS) != 0) {
		h_kill(p);
		return NULL;
	}
	return p;
}

struct h_proc *h_start_master(const char *name, int port, ...)
{
	struct h_proc *p;
	va_list ap;

	va_start(ap, port);
	p = start_master_v(name, port, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_cluster_master(int *port, ...)
{
	struct h_proc *p;
	va_list ap;

	if (h_init() != 0 || (*port = h_free_port()) <= 0)
		return NULL;
	va_start(ap, port);
	p = start_master_v("master", *port, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_proxy_pair(int port, char sock_a[PATH_MAX], char sock_b[PATH_MAX])
{
	struct h_proc *a;

	snprintf(sock_a, PATH_MAX, "%s", h_path("a.sock"));
	snprintf(sock_b, PATH_MAX, "%s", h_path("b.sock"));
	a = h_start_proxy("proxyA", sock_a, port, "--segment-size", "64MiB", NULL);
	if (!a || !h_start_proxy("proxyB", sock_b, port, "--segment-size", "64MiB", NULL))
		return NULL;
	return a;
}

int h_remote_pair(char sock_a[PATH_MAX], char sock_b[PATH_MAX], char seg_b[H_SEG_NAME],
		  struct h_proc **a, struct h_proc **b)
{
	int port;

	*a = *b = NULL;
	if (!h_cluster_master(&port, NULL))
		return -1;
	snprintf(sock_a, PATH_MAX, "%s", h_path("a.sock"));
	snprintf(sock_b, PATH_MAX, "%s", h_path("b.sock"));
	*a = h_start_proxy("proxyA", sock_a, port, "--segment-size", "0", NULL);
	*b = h_start_peer("proxyB", sock_b, port, seg_b, "--segment-size", "64MiB", NULL);
	return *a && *b ? 0 : -1;
}

/* data_port 0: the kernel picks it. */
/* Whether this process has CAP_SYS_PTRACE, which reads any process's /proc. */
static int can_ptrace_any(void)
{
	unsigned long long caps = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	fclose(f);
	return (caps >> 19) & 1; /* CAP_SYS_PTRACE */
}

static struct h_proc *start_proxy_v(const char *name, const char *sockpath, int master_port,
				    int data_port, va_list ap)
{
	char *argv[H_MAX_ARGS], master[64], port[16];
	const char *bin = h_bin("lunar-proxy");
	struct h_proc *p;
	int n = 0, first_extra, rc, has_segment = 0, seg_zero = 0;

	if (check_bin(bin) != 0)
		return NULL;
	argv[n++] = (char *)bin;
	argv[n++] = "--socket";
	argv[n++] = (char *)sockpath;
	if (master_port == H_EMBEDDED) {
		argv[n++] = "--embedded-master";
	} else {
		snprintf(master, sizeof(master), "tcp://127.0.0.1:%d", master_port);
		argv[n++] = "--master";
		argv[n++] = master;
	}
	argv[n++] = "--host";
	argv[n++] = "127.0.0.1";
	snprintf(port, sizeof(port), "%d", data_port);
	argv[n++] = "--data-port";
	argv[n++] = port;
	argv[n++] = "--http-port";
	argv[n++] = "0";
	first_extra = n;
	rc = add_args(argv, &n, ap);
	if (rc != 0 || n + 3 >= H_MAX_ARGS)
		return NULL;
	for (int i = first_extra; i < n; i++)
		if (strcmp(argv[i], "--segment-size") == 0) {
			has_segment = 1;
			seg_zero = i + 1 < n && !strcmp(argv[i + 1], "0");
		}
	if (!has_segment) {
		argv[n++] = "--segment-size";
		argv[n++] = "64MiB";
	}
	/* Tests read the proxy's /proc/<pid>/fd, maps, mem and syscall, which a
	 * proxy that is not dumpable keeps from a test without CAP_SYS_PTRACE. */
	if (!can_ptrace_any())
		argv[n++] = "--dumpable";
	argv[n] = NULL;
	p = h_spawn(name, argv);
	if (!p)
		return NULL;
	if (h_wait_proxy(p, sockpath, H_READY_TIMEOUT_MS) != 0 ||
	    (!seg_zero && h_rdma_wait_segment(p) != 0)) {
		h_kill(p);
		return NULL;
	}
	return p;
}

struct h_proc *h_start_proxy(const char *name, const char *sockpath, int master_port, ...)
{
	struct h_proc *p;
	va_list ap;

	va_start(ap, master_port);
	p = start_proxy_v(name, sockpath, master_port, 0, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_start_peer(const char *name, const char *sockpath, int master_port,
			    char seg[H_SEG_NAME], ...)
{
	struct h_proc *p;
	int port = h_free_port();
	va_list ap;

	if (port <= 0)
		return NULL;
	snprintf(seg, H_SEG_NAME, "127.0.0.1:%d", port);
	va_start(ap, seg);
	p = start_proxy_v(name, sockpath, master_port, port, ap);
	va_end(ap);
	return p;
}

struct h_proc *h_embedded_node(char sock[PATH_MAX], struct lunar_client **cl, ...)
{
	struct h_proc *p;
	va_list ap;

	if (h_init() != 0)
		return NULL;
	snprintf(sock, PATH_MAX, "%s", h_path("proxy.sock"));
	va_start(ap, cl);
	p = start_proxy_v("proxy", sock, H_EMBEDDED, 0, ap);
	va_end(ap);
	if (p && cl && !(*cl = h_client_try(sock, H_CLIENT_TIMEOUT_MS, NULL)))
		return NULL;
	return p;
}

int h_setup(void **state)
{
	(void)state;
	return h_init();
}

int h_teardown(void **state)
{
	(void)state;
	h_cleanup();
	return 0;
}

void h_embedded_node_stop(struct lunar_client **cl)
{
	if (cl && *cl) {
		lunar_close(*cl);
		*cl = NULL;
	}
	h_cleanup();
}
