/*
 * test_grace.c - graceful unmount (lunar-proxy --grace): on SIGTERM the
 * proxy gives its segment back with a grace period. Meanwhile what it holds
 * stays readable from other nodes and no new data lands on it; then it exits
 * and its objects are gone (misses, never wrong bytes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define NOBJ 4
#define OBJ  (1u << 20)

static void key_of(int i, char *k, size_t n)
{
	snprintf(k, n, "grace/%d", i);
}

static void test_grace_drains_then_goes(void **state)
{
	char sa[PATH_MAX], sb[PATH_MAX], key[32];
	struct h_proc *master, *a, *b;
	struct lunar_client *c;
	unsigned char *buf = malloc(OBJ);
	int port, st = -1;
	uint64_t t0;

	(void)state;
	H_ASSERT(buf && h_init() == 0);
	port = h_free_port();
	master = h_start_master("master", port, "--client-ttl", "10s", NULL);
	snprintf(sa, sizeof(sa), "%s", h_path("a.sock"));
	snprintf(sb, sizeof(sb), "%s", h_path("b.sock"));
	/* Given A with no memory and B draining for 2 s on SIGTERM */
	a = h_start_proxy("a", sa, port, "--segment-size", "0", NULL);
	b = h_start_proxy("b", sb, port, "--segment-size", "32MiB", "--grace", "2s", NULL);
	H_ASSERT(master && a && b);
	c = h_client(sa);
	H_ASSERT(c != NULL);
	for (int i = 0; i < NOBJ; i++) {
		key_of(i, key, sizeof(key));
		h_fill(buf, OBJ, h_seed(key));
		H_ASSERT_EQ(lunar_put(c, key, buf, OBJ, NULL), 0); /* on B: the only segment */
	}
	/* When B is told to stop */
	kill(b->pid, SIGTERM);
	h_sleep_ms(300);
	/* Then during the grace B is alive, its objects read exact, nothing new lands */
	H_ASSERT(h_alive(b));
	for (int i = 0; i < NOBJ; i++) {
		key_of(i, key, sizeof(key));
		H_ASSERT_EQ(lunar_get_into(c, key, buf, OBJ), OBJ);
		H_ASSERT_EQ(h_verify(buf, OBJ, h_seed(key)), -1);
	}
	H_ASSERT_EQ(lunar_put(c, "grace/new", buf, OBJ, NULL), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	/* And after it, B exits cleanly and its objects are misses */
	t0 = h_now_ms();
	st = h_wait_exit(b, 6000);
	H_ASSERT(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	printf("B exited %llu ms after the check\n", (unsigned long long)(h_now_ms() - t0));
	for (int i = 0; i < NOBJ; i++) {
		int64_t rc;

		key_of(i, key, sizeof(key));
		rc = lunar_get_into(c, key, buf, OBJ);
		H_ASSERT(rc == LUNAR_ERR_OBJECT_NOT_FOUND);
	}
	lunar_close(c);
	free(buf);
	h_cleanup();
}

LUNAR_TEST_MAIN(NULL, NULL, test_grace_drains_then_goes)
