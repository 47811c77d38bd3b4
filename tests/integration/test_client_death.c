/*
 * test_client_death.c - a client that dies mid-put is seen at once by its
 * socket hang-up and its put is revoked at once (SPEC §3, §5.6), not after a
 * TTL. The proxy has an 8 MiB segment and --debug-put-delay 3s: a forked
 * child starts a 6 MiB put and is SIGKILLed inside the delay; the key never
 * appears, and the 6 MiB come back within a second. A put refused for space
 * is not held back by the delay.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define OBJ_LEN (6u * 1024u * 1024u)
#define KEY	"client-death/K"
#define OTHER	"client-death/other"

static char sock[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, NULL, "--segment-size", "8MiB", "--debug-put-delay", "3s",
			       NULL)
		   ? 0
		   : -1;
}

/* The doomed writer: its own connection, made after fork. Never returns. */
static void child_put(void)
{
	struct lunar_client *c;
	void *buf;
	int rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	buf = malloc(OBJ_LEN);
	c = h_client_try(sock, H_CLIENT_TIMEOUT_MS, &rc);
	if (!buf || !c) {
		fprintf(stderr, "child: connect failed: %d (%s)\n", rc, h_code(rc));
		_exit(2);
	}
	h_fill(buf, OBJ_LEN, h_seed("child bytes"));
	rc = lunar_put(c, KEY, buf, OBJ_LEN, NULL);
	/* Only reached if the parent failed to kill us in time. */
	fprintf(stderr, "child: put returned %d before it was killed\n", rc);
	_exit(3);
}

/* Puts OBJ_LEN bytes of seed_key's pattern under key: lunar_put's code. */
static int put_pattern(struct lunar_client *c, const char *key, const char *seed_key,
		       const struct lunar_put_cfg *cfg)
{
	return h_put_seeded(c, key, OBJ_LEN, h_seed(seed_key), cfg);
}

static void expect_pattern(struct lunar_client *c, const char *key)
{
	h_expect_seeded(c, key, OBJ_LEN, h_seed(key));
}

static void test_client_death_revokes_put_at_once(void **state)
{
	struct lunar_client *c;
	uint64_t killed, accepted_at = 0;
	int status = 0, rc = -1;
	pid_t pid;

	(void)state;
	fflush(NULL);
	pid = fork();
	H_ASSERT(pid >= 0);
	if (pid == 0)
		child_put();
	/* Connected after the fork, so the child holds none of our descriptors. */
	c = h_client(sock);
	h_sleep_ms(500);
	H_ASSERT_MSG(waitpid(pid, &status, WNOHANG) == 0,
		     "the writer ended before it was killed (status 0x%x)", status);
	kill(pid, SIGKILL);
	H_ASSERT_EQ(waitpid(pid, &status, 0), pid);
	killed = h_now_ms();
	H_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	H_ASSERT_EQ(lunar_exists(c, KEY), 0);

	/*
	 * Space freed: a second 6 MiB object fits in the 8 MiB segment. A put
	 * refused for space fails fast; an accepted one waits out the 3 s debug
	 * delay, so what must happen within 1 s is the start of the accepted put.
	 */
	for (;;) {
		uint64_t attempt = h_now_ms();

		rc = put_pattern(c, OTHER, OTHER, NULL);
		if (rc == 0) {
			accepted_at = attempt;
			break;
		}
		if (rc != LUNAR_ERR_NO_AVAILABLE_HANDLE || h_now_ms() > killed + 1000)
			break;
		h_sleep_ms(20);
	}
	H_ASSERT_EQ(rc, 0);
	H_ASSERT_MSG(accepted_at - killed <= 1000, "space came back %llu ms after the writer died",
		     (unsigned long long)(accepted_at - killed));
	expect_pattern(c, OTHER);
	H_ASSERT_EQ(lunar_exists(c, KEY), 0);

	/* Make room, then K itself can be written and read back. */
	H_ASSERT_EQ(lunar_remove(c, OTHER, 1), 0);
	H_ASSERT_EQ(put_pattern(c, KEY, KEY, NULL), 0);
	H_ASSERT_EQ(lunar_exists(c, KEY), 1);
	expect_pattern(c, KEY);
	H_ASSERT_EQ(lunar_remove(c, KEY, 1), 0);
	lunar_close(c);
}

/*
 * The loop above relies on a refused put failing fast: its first attempt
 * may reach the master just before the dead writer's revoke. The debug delay
 * holds back commits, so a put with nothing placed must not wait it out.
 */
static void test_client_death_put_refused_for_space_fails_fast(void **state)
{
	struct lunar_put_cfg pinned = {.hard_pin = 1}; /* not evicted to make room */
	struct lunar_client *c = h_client(sock);
	uint64_t t0;

	(void)state;
	H_ASSERT_EQ(put_pattern(c, KEY, KEY, &pinned), 0);
	t0 = h_now_ms();
	H_ASSERT_EQ(put_pattern(c, OTHER, OTHER, NULL), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	H_ASSERT_MSG(h_now_ms() - t0 < 1000, "a put refused for space took %llu ms",
		     (unsigned long long)(h_now_ms() - t0));
	H_ASSERT_EQ(lunar_remove(c, KEY, 1), 0);
	lunar_close(c);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_client_death_revokes_put_at_once,
		test_client_death_put_refused_for_space_fails_fast)
