/*
 * test_demo.c - `make demo` works: tools/demo.sh, run from the repository
 * root with $BUILD set, ends by itself within 120 s with exit 0 and prints
 * lunar-bench's figures (a "put_gb_per_s=" line). The script's output goes to
 * demo.log in the test's temporary directory and is printed on failure.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define DEMO_SCRIPT	"tools/demo.sh"
#define DEMO_TIMEOUT_MS 120000
#define LOG_MAX		(4u * 1024u * 1024u)

/* The whole log, NUL-terminated (at most LOG_MAX bytes); free() it. */
static char *read_log(const char *path)
{
	char *buf = malloc(LOG_MAX + 1);
	size_t len = 0;
	ssize_t n;
	int fd;

	H_ASSERT(buf != NULL);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	H_ASSERT_MSG(fd >= 0, "open %s: %s", path, strerror(errno));
	while (len < LOG_MAX && (n = read(fd, buf + len, LOG_MAX - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	return buf;
}

static void test_demo_runs_and_prints_bench_figures(void **state)
{
	char *const argv[] = {"bash", DEMO_SCRIPT, NULL};
	struct h_proc *p;
	uint64_t t0;
	char *log;
	int status;
	pid_t pgid;

	(void)state;
	H_ASSERT_MSG(access(DEMO_SCRIPT, R_OK) == 0,
		     "%s not found (run from the repository root): %s", DEMO_SCRIPT,
		     strerror(errno));
	/* The demo finds the binaries through $BUILD, like `make demo`. */
	setenv("BUILD", getenv("BUILD") && *getenv("BUILD") ? getenv("BUILD") : "build", 1);
	/* Scratch files the script makes with mktemp land in our temp dir. */
	setenv("TMPDIR", h_tmpdir(), 1);

	t0 = h_now_ms();
	p = h_spawn("demo", argv);
	H_ASSERT(p != NULL);
	pgid = p->pid; /* h_spawn made it a group leader */
	status = h_wait_exit(p, DEMO_TIMEOUT_MS);
	if (status == -1 && p->running) {
		h_stop(p);
		H_ASSERT_MSG(0, "%s still running after %d s", DEMO_SCRIPT, DEMO_TIMEOUT_MS / 1000);
	}
	/* Whatever the script left behind in its group must not outlive us. */
	if (kill(-pgid, 0) == 0) {
		fprintf(stderr, "test_demo: %s left processes running; killing them\n",
			DEMO_SCRIPT);
		kill(-pgid, SIGKILL);
	}
	print_message("%s took %llu ms\n", DEMO_SCRIPT, (unsigned long long)(h_now_ms() - t0));
	H_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (wait status 0x%x)",
		     DEMO_SCRIPT, status);
	log = read_log(p->log);
	H_ASSERT_MSG(strstr(log, "put_gb_per_s=") != NULL, "%s printed no put_gb_per_s= figure",
		     DEMO_SCRIPT);
	free(log);
}

LUNAR_TEST_MAIN(h_setup, h_teardown, test_demo_runs_and_prints_bench_figures)
