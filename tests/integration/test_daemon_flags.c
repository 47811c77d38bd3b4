/*
 * test_daemon_flags.c - the command lines of lunar-master and lunar-proxy:
 * --help names every flag a user may need (--version too), --version
 * answers, and a bad command line exits 2 with a message that names the
 * real fault (an unknown flag is called unknown wherever it stands, even
 * last, where it once read as a known flag short of its value).
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

static void test_daemon_flags_master(void **state)
{
	(void)state;
	check_daemon("lunar-master", "--eviction-high-watermark-ratio");
}

static void test_daemon_flags_proxy(void **state)
{
	static char out[1 << 16];

	(void)state;
	check_daemon("lunar-proxy", "--segment-size");
	/* where the socket goes when --socket is not given */
	H_ASSERT_EQ(run("lunar-proxy", out, sizeof(out), "--help", NULL), 0);
	EXPECT_IN(out, "/run/lunar/proxy.sock");
	EXPECT_IN(out, "XDG_RUNTIME_DIR");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_daemon_flags_master),
	    cmocka_unit_test(test_daemon_flags_proxy),
	};

	return cmocka_run_group_tests(tests, h_setup, h_teardown);
}
