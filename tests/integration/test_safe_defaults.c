/*
 * test_safe_defaults.c - a daemon never serves the network without the
 * cluster key by accident (SPEC §13): a master or proxy asked to listen
 * beyond loopback without a key exits 2 saying why; --insecure lets it,
 * with a warning; a key file that group or others can read is refused; and
 * `lunarctl keygen` writes a 0600 key it never overwrites.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "harness.h"
#include "tests/cmocka_main.h"

/* Run argv to its end (at most 10 s); its exit code, or -1. */
static int exit_code(const char *name, char *const argv[], struct h_proc **out)
{
	struct h_proc *p = h_spawn(name, argv);
	int st;

	H_ASSERT(p);
	st = h_wait_exit(p, 10000);
	*out = p;
	if (st == -1) {
		h_kill(p);
		return -1;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *keygen(const char *name)
{
	static char path[PATH_MAX];
	struct h_proc *p;
	char *argv[] = {(char *)h_bin("lunarctl"), "keygen", path, NULL};

	snprintf(path, sizeof(path), "%s", h_path(name));
	H_ASSERT_EQ(exit_code("keygen", argv, &p), 0);
	return path;
}

static void test_safe_defaults_master_refuses_open_bind_without_key(void **state)
{
	struct h_proc *p;
	char *argv[] = {(char *)h_bin("lunar-master"),
			"--listen",
			"0.0.0.0",
			"--port",
			"0",
			"--http-port",
			"0",
			NULL};

	H_ASSERT_EQ(exit_code("master-open", argv, &p), 2);
	H_ASSERT(h_log_has(p, "without a cluster key"));
	H_ASSERT(h_log_has(p, "--cluster-key"));
}

static void test_safe_defaults_master_open_bind_with_insecure_warns(void **state)
{
	char port[16];
	int rpc = h_free_port();
	struct h_proc *p;
	char *argv[] = {(char *)h_bin("lunar-master"),
			"--listen",
			"0.0.0.0",
			"--port",
			port,
			"--http-port",
			"0",
			"--insecure",
			NULL};

	snprintf(port, sizeof(port), "%d", rpc);
	p = h_spawn("master-insecure", argv);
	H_ASSERT(p);
	H_ASSERT_EQ(h_wait_tcp(p, rpc, H_READY_TIMEOUT_MS), 0);
	/* the warning follows the ready line, after the listeners */
	H_ASSERT_EQ(h_wait_log(p, "--insecure: anyone who reaches 0.0.0.0", H_READY_TIMEOUT_MS), 0);
	H_ASSERT(WIFEXITED(h_stop(p)));
}

static void test_safe_defaults_master_open_bind_with_key(void **state)
{
	char port[16];
	int rpc = h_free_port();
	const char *key = keygen("master.key");
	struct h_proc *p;
	char *argv[] = {(char *)h_bin("lunar-master"),
			"--listen",
			"0.0.0.0",
			"--port",
			port,
			"--http-port",
			"0",
			"--cluster-key",
			(char *)key,
			NULL};

	snprintf(port, sizeof(port), "%d", rpc);
	p = h_spawn("master-keyed", argv);
	H_ASSERT(p);
	H_ASSERT_EQ(h_wait_log(p, H_MASTER_READY, H_READY_TIMEOUT_MS), 0);
	H_ASSERT_EQ(h_wait_tcp(p, rpc, H_READY_TIMEOUT_MS), 0);
	H_ASSERT(!h_log_has(p, "--insecure"));
	H_ASSERT(WIFEXITED(h_stop(p)));
}

static void test_safe_defaults_readable_key_file_refused(void **state)
{
	char key[PATH_MAX], sock[PATH_MAX];
	struct h_proc *p;
	char *master[] = {(char *)h_bin("lunar-master"),
			  "--port",
			  "0",
			  "--http-port",
			  "0",
			  "--cluster-key",
			  key,
			  NULL};
	char *proxy[] = {(char *)h_bin("lunar-proxy"),
			 "--embedded-master",
			 "--socket",
			 sock,
			 "--data-port",
			 "0",
			 "--http-port",
			 "0",
			 "--segment-size",
			 "16MiB",
			 "--cluster-key",
			 key,
			 NULL};

	snprintf(key, sizeof(key), "%s", keygen("shared.key"));
	h_named_sock(sock, "readable-key");
	H_ASSERT_EQ(chmod(key, 0644), 0);
	H_ASSERT_EQ(exit_code("master-readable-key", master, &p), 2);
	H_ASSERT(h_log_has(p, "group or others"));
	H_ASSERT_EQ(exit_code("proxy-readable-key", proxy, &p), 2);
	H_ASSERT(h_log_has(p, "group or others"));
	/* The same file at 0600 is taken. */
	H_ASSERT_EQ(chmod(key, 0600), 0);
	p = h_spawn("proxy-good-key", proxy);
	H_ASSERT(p);
	H_ASSERT_EQ(h_wait_proxy(p, sock, H_READY_TIMEOUT_MS), 0);
	H_ASSERT(WIFEXITED(h_stop(p)));
}

static void test_safe_defaults_proxy_refuses_open_host_without_key(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *p;
	char *argv[] = {(char *)h_bin("lunar-proxy"),
			"--embedded-master",
			"--socket",
			sock,
			"--host",
			"0.0.0.0",
			"--data-port",
			"0",
			"--http-port",
			"0",
			NULL};

	h_named_sock(sock, "open-host");
	H_ASSERT_EQ(exit_code("proxy-open", argv, &p), 2);
	H_ASSERT(h_log_has(p, "without a cluster key"));
}

static void test_safe_defaults_keygen_never_overwrites(void **state)
{
	const char *key = keygen("once.key");
	struct stat st;
	struct h_proc *p;
	char *argv[] = {(char *)h_bin("lunarctl"), "keygen", (char *)key, NULL};
	FILE *f;
	unsigned char before[32], after[32];

	H_ASSERT_EQ(stat(key, &st), 0);
	H_ASSERT_EQ(st.st_mode & 0777, 0600);
	H_ASSERT_EQ(st.st_size, 32);
	f = fopen(key, "rb");
	H_ASSERT(f && fread(before, 1, 32, f) == 32);
	fclose(f);
	H_ASSERT_EQ(exit_code("keygen-again", argv, &p), 1);
	H_ASSERT(h_log_has(p, "never overwritten"));
	f = fopen(key, "rb");
	H_ASSERT(f && fread(after, 1, 32, f) == 32);
	fclose(f);
	H_ASSERT(!memcmp(before, after, 32));
}

/* These daemons must find no key unless a test gives one. */
static int keyless_setup(void **state)
{
	h_keyless();
	return h_setup(state);
}

LUNAR_TEST_MAIN(keyless_setup, h_teardown, test_safe_defaults_master_refuses_open_bind_without_key,
		test_safe_defaults_master_open_bind_with_insecure_warns,
		test_safe_defaults_master_open_bind_with_key,
		test_safe_defaults_readable_key_file_refused,
		test_safe_defaults_proxy_refuses_open_host_without_key,
		test_safe_defaults_keygen_never_overwrites)
