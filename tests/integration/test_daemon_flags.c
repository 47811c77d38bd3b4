/*
 * test_daemon_flags.c - the command lines of lunar-master and lunar-proxy:
 * --help names every flag a user may need (--version too), --version
 * answers, and a bad command line exits 2 with a message that names the
 * real fault (an unknown flag is called unknown wherever it stands, even
 * last, where it once read as a known flag short of its value). --config
 * FILE takes the same settings from a file, under the command line's, and
 * names the file's line at fault.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define RUN_TIMEOUT_MS 5000

/* Run bin with the NULL-terminated arguments to its end; its exit code, its
 * output (stdout and stderr) in out. */
static int run(const char *bin, char *out, size_t cap, ...)
{
	char *argv[16];
	struct h_proc *p;
	va_list ap;
	int n = 0, st;
	FILE *f;
	size_t len;

	argv[n++] = (char *)h_bin(bin);
	va_start(ap, cap);
	while (n < 15 && (argv[n] = va_arg(ap, char *)) != NULL)
		n++;
	va_end(ap);
	argv[n] = NULL;
	p = h_spawn(bin, argv);
	H_ASSERT(p != NULL);
	st = h_wait_exit(p, RUN_TIMEOUT_MS);
	H_ASSERT_MSG(st >= 0 && WIFEXITED(st), "%s did not exit by itself", bin);
	f = fopen(p->log, "r");
	H_ASSERT(f != NULL);
	len = fread(out, 1, cap - 1, f);
	out[len] = '\0';
	fclose(f);
	/* The next run appends to the same log: start it empty. */
	H_ASSERT(truncate(p->log, 0) == 0);
	return WEXITSTATUS(st);
}

#define EXPECT_IN(hay, needle) H_ASSERT_MSG(strstr(hay, needle), "no '%s' in:\n%s", needle, hay)

static void check_daemon(const char *bin, const char *known_flag)
{
	static char out[1 << 16];

	H_ASSERT_EQ(run(bin, out, sizeof(out), "--help", NULL), 0);
	EXPECT_IN(out, "--version");
	EXPECT_IN(out, known_flag);
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--version", NULL), 0);
	EXPECT_IN(out, bin);
	/* unknown, last, first, or with a value */
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--client-ttl", "1s", "--no-such-flag", NULL), 2);
	EXPECT_IN(out, "unknown flag");
	EXPECT_IN(out, "no-such-flag");
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--no-such-flag", "--client-ttl", "1s", NULL), 2);
	EXPECT_IN(out, "unknown flag");
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--no-such-flag=3", NULL), 2);
	EXPECT_IN(out, "unknown flag");
	/* a known flag short of its value */
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--client-ttl", NULL), 2);
	EXPECT_IN(out, "needs a value");
	/* a bad value */
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--client-ttl", "soon", NULL), 2);
	EXPECT_IN(out, "client-ttl");
}

/* An empty path or address is refused like any bad value, not taken as
 * "none" or "any". */
static void check_empty_values(const char *bin, const char *const *flags)
{
	static char out[1 << 16];

	for (; *flags; flags++) {
		char arg[64];

		snprintf(arg, sizeof(arg), "%s=", *flags);
		H_ASSERT_EQ(run(bin, out, sizeof(out), arg, NULL), 2);
		EXPECT_IN(out, *flags + 2);
	}
}

static void test_daemon_flags_master(void **state)
{
	(void)state;
	check_daemon("lunar-master", "--eviction-high-watermark-ratio");
	check_empty_values("lunar-master", (const char *const[]){"--listen", NULL});
}

static void test_daemon_flags_proxy(void **state)
{
	static char out[1 << 16];

	(void)state;
	check_daemon("lunar-proxy", "--segment-size");
	check_empty_values("lunar-proxy", (const char *const[]){"--socket", "--master", "--host",
								"--disk-dir", "--config", NULL});
	/* where the socket goes when --socket is not given */
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--help", NULL), 0);
	EXPECT_IN(out, "/run/lunar/proxy.sock");
	EXPECT_IN(out, "XDG_RUNTIME_DIR");
	/* the lease cache: one key a shard at least, 4 Mi keys at most */
	EXPECT_IN(out, "--lease-cache-keys");
	EXPECT_IN(out, "--busy-poll-us");
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--lease-cache-keys", "63", NULL), 2);
	EXPECT_IN(out, "lease-cache-keys");
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--lease-cache-keys", "4194305", NULL), 2);
	EXPECT_IN(out, "lease-cache-keys");
	/* an address peers can keep: 65 bytes at most */
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--embedded-master", "--host",
			"h234567890123456789012345678901234567890123456789012345678901234567",
			NULL),
		    2);
	EXPECT_IN(out, "65 bytes at most");
	/* busy polling: off, or up to a millisecond */
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--busy-poll-us", "1001", NULL), 2);
	EXPECT_IN(out, "busy-poll-us");
}

/* A master given without its scheme says which forms --master takes, in
 * the proxy and in lunar-bench --master, instead of a bare "Invalid
 * argument" from the first dial. */
static void test_daemon_flags_master_url(void **state)
{
	static char out[1 << 16];
	static const char *const bad[] = {
	    "127.0.0.1:50051", "tcp://127.0.0.1", "tcp://:50051", "tcp://h:0",
	    "tcp://h:65536",   "ipc://",	  "http://h:1",	  NULL};

	(void)state;
	for (const char *const *u = bad; *u; u++) {
		H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--master", *u, NULL), 2);
		EXPECT_IN(out, "tcp://HOST:PORT");
		EXPECT_IN(out, *u);
		H_ASSERT_EQ(run("lunar-bench", out, sizeof(out), "--master", *u, NULL), 2);
		EXPECT_IN(out, "tcp://HOST:PORT");
	}
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--help", NULL), 0);
	EXPECT_IN(out, "tcp://HOST:PORT");
}

/* Write text to the config file name in the test's directory; its path. */
static const char *conf(const char *name, const char *text)
{
	const char *path = h_path(name);
	FILE *f = fopen(path, "w");

	H_ASSERT(f != NULL);
	H_ASSERT(fputs(text, f) >= 0);
	H_ASSERT_EQ(fclose(f), 0);
	return path;
}

/* Malformed files and settings: exit 2, the file and its line named. */
static void check_config_errors(const char *bin)
{
	static const struct {
		const char *file, *text, *says[2];
	} bad[] = {
	    {"unknown.conf",
	     "# ok\n\nclient-ttl = 1s\nno-such-flag = 3\n",
	     {"no-such-flag", "line 4"}},
	    {"badvalue.conf", "client-ttl soon\n", {"client-ttl", "line 1"}},
	    {"syntax.conf", "client-ttl 1s\n--client-ttl 2s\n", {"line 2"}},
	    {"quote.conf", "listen \"127.0.0.1\n", {"closing quote"}},
	    {"nested.conf", "config = /etc/other.conf\n", {"do not nest"}},
	    {"empty.conf", "client-ttl =\n", {"client-ttl"}},
	};
	static char out[1 << 16];
	const char *c;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		c = conf(bad[i].file, bad[i].text);
		H_ASSERT_EQ(run(bin, out, sizeof(out), "--config", c, NULL), 2);
		for (int k = 0; k < 2 && bad[i].says[k]; k++)
			EXPECT_IN(out, bad[i].says[k]);
	}
	c = conf("nul.conf", "client-ttl 1s");
	{
		FILE *f = fopen(c, "a");

		H_ASSERT(f && fputc('\0', f) == 0 && fputs("x\n", f) >= 0 && fclose(f) == 0);
	}
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--config", c, NULL), 2);
	EXPECT_IN(out, "a NUL byte");
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--config", h_tmpdir(), NULL), 2);
	EXPECT_IN(out, "not a regular file");
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--config", h_path("absent.conf"), NULL), 2);
	EXPECT_IN(out, "absent.conf");
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--config", NULL), 2);
	EXPECT_IN(out, "--config needs a value");
	c = conf("ok.conf", "client-ttl 1s\n");
	H_ASSERT_EQ(run(bin, out, sizeof(out), "--config", c, "--config", c, NULL), 2);
	EXPECT_IN(out, "--config given twice");
}

/* Start argv as name, see it ready and listening on port, stop it cleanly. */
static void master_serves_on(const char *name, char *const argv[], int port)
{
	struct h_proc *m = h_spawn(name, argv);

	H_ASSERT(m != NULL);
	H_ASSERT_EQ(h_wait_log(m, H_MASTER_READY, H_READY_TIMEOUT_MS), 0);
	H_ASSERT_EQ(h_wait_tcp(m, port, H_READY_TIMEOUT_MS), 0);
	H_ASSERT(h_stop(m) == 0);
}

/* The master listens where its file says, unless the command line says
 * otherwise. */
static void test_daemon_flags_master_config(void **state)
{
	char text[128], portstr[16];
	int file_port = h_free_port(), cli_port = h_free_port();
	const char *c;

	(void)state;
	H_ASSERT(file_port > 0 && cli_port > 0 && file_port != cli_port);
	snprintf(text, sizeof(text), "listen = 127.0.0.1\nport %d\nhttp-port=0\n", file_port);
	c = conf("master.conf", text);
	master_serves_on("master-conf",
			 (char *[]){(char *)h_bin("lunar-master"), "--config", (char *)c, NULL},
			 file_port);
	snprintf(portstr, sizeof(portstr), "%d", cli_port);
	master_serves_on("master-cli",
			 (char *[]){(char *)h_bin("lunar-master"), "--port", portstr, "--config",
				    (char *)c, NULL},
			 cli_port);
	check_config_errors("lunar-master");
}

/* A proxy set up entirely from its file, a quoted path with a blank in it. */
static void test_daemon_flags_proxy_config(void **state)
{
	char text[PATH_MAX + 256], sock[PATH_MAX];
	struct h_proc *p;
	const char *c;

	(void)state;
	snprintf(sock, sizeof(sock), "%s", h_path("a proxy.sock"));
	snprintf(text, sizeof(text),
		 "# a single node\nembedded-master\nsegment-size = 16MiB\nsocket \"%s\"\n"
		 "host 127.0.0.1\ndata-port 0\nhttp-port = 0\nclient-ttl 5s\n",
		 sock);
	c = conf("proxy.conf", text);
	p = h_spawn("proxy-conf",
		    (char *[]){(char *)h_bin("lunar-proxy"), "--config", (char *)c, NULL});
	H_ASSERT(p != NULL);
	H_ASSERT_EQ(h_wait_proxy(p, sock, H_READY_TIMEOUT_MS), 0);
	H_ASSERT(h_stop(p) == 0);
	check_config_errors("lunar-proxy");
}

LUNAR_TEST_MAIN(h_setup, h_teardown, test_daemon_flags_master, test_daemon_flags_proxy,
		test_daemon_flags_master_url, test_daemon_flags_master_config,
		test_daemon_flags_proxy_config)
