/*
 * test_python.c - runs the Python packages' tests (python/tests, standard
 * unittest, a real lunar-proxy of their own) as part of `make test`:
 * "sh python/tests/run.sh" from the repository root with $BUILD passed on
 * and $LUNAR_LIB pointing at $BUILD/lib/liblunar.so. Exits 77 (skipped)
 * when no usable python3 is found or liblunar.so has a sanitizer
 * (LUNAR_TEST_SANITIZER, set by make asan/tsan), 1 when a test fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SKIP 77
/* Below run.sh's own bound, so a hang is reported as ours. */
#define PY_TIMEOUT_MS 240000

extern char **environ;

/* 1 if name is an executable file in one of $PATH's directories. */
static int in_path(const char *name)
{
	const char *path = getenv("PATH");
	char buf[PATH_MAX];

	while (path && *path) {
		const char *end = strchrnul(path, ':');
		int len = (int)(end - path);

		snprintf(buf, sizeof(buf), "%.*s/%s", len ? len : 1, len ? path : ".", name);
		if (access(buf, X_OK) == 0)
			return 1;
		path = *end ? end + 1 : end;
	}
	return 0;
}

static unsigned long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long)ts.tv_sec * 1000ul + (unsigned long)ts.tv_nsec / 1000000ul;
}

/* Run argv, wait up to timeout_ms (then SIGKILL); its exit status, or -1. */
static int run(char *const argv[], int quiet, unsigned long timeout_ms)
{
	posix_spawn_file_actions_t fa;
	unsigned long deadline = now_ms() + timeout_ms;
	int status, rc;
	pid_t pid;

	posix_spawn_file_actions_init(&fa);
	if (quiet) {
		posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
		posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	}
	rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (rc) {
		fprintf(stderr, "test_python: cannot run %s: %s\n", argv[0], strerror(rc));
		return -1;
	}
	for (;;) {
		rc = waitpid(pid, &status, WNOHANG);
		if (rc == pid)
			break;
		if (rc < 0 && errno != EINTR)
			return -1;
		if (now_ms() > deadline) {
			fprintf(stderr, "test_python: %s still running after %lu ms; killing it\n",
				argv[0], timeout_ms);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		usleep(20000);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(void)
{
	char *const version[] = {"python3", "-c",
				 "import sys, ctypes; sys.exit(sys.version_info < (3, 8))", NULL};
	char *const unittest[] = {"sh", "python/tests/run.sh", NULL};
	const char *build = getenv("BUILD");
	char lib[PATH_MAX];
	struct stat st;
	int rc;

	if (getenv("LUNAR_TEST_SANITIZER")) {
		printf("SKIP: liblunar.so is built with a sanitizer (%s), which python3 cannot "
		       "load without its runtime\n",
		       getenv("LUNAR_TEST_SANITIZER"));
		return SKIP;
	}
	if (!in_path("python3")) {
		printf("SKIP: python3 is not installed (not in $PATH)\n");
		return SKIP;
	}
	if (run(version, 1, 30000) != 0) {
		printf("SKIP: python3 is older than 3.8 or has no ctypes\n");
		return SKIP;
	}
	if (stat("python/tests", &st) != 0 || !S_ISDIR(st.st_mode)) {
		fprintf(stderr,
			"test_python: run from the repository root (no python/tests here)\n");
		return 1;
	}
	if (!build || !*build)
		build = "build";
	setenv("BUILD", build, 1);
	snprintf(lib, sizeof(lib), "%s/lib/liblunar.so", build);
	if (build[0] != '/') {
		char cwd[PATH_MAX / 2];

		if (getcwd(cwd, sizeof(cwd)))
			snprintf(lib, sizeof(lib), "%s/%s/lib/liblunar.so", cwd, build);
	}
	setenv("LUNAR_LIB", lib, 0);
	rc = run(unittest, 0, PY_TIMEOUT_MS);
	if (rc == SKIP)
		return SKIP;
	if (rc != 0) {
		fprintf(stderr, "test_python: python/tests/run.sh failed (%d)\n", rc);
		return 1;
	}
	return 0;
}
