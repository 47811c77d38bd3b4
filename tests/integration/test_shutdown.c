/*
 * test_shutdown.c - daemons stop promptly on SIGTERM, whatever state their
 * peers are in: a proxy whose master is gone must not wait out its RPC
 * timeout (5 s) on the way down, and exits 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define STOP_BOUND_MS 2000

/* SIGTERM p; its exit status, and how long it took in *ms. */
static int term_and_time(struct h_proc *p, pid_t pid, uint64_t *ms)
{
	uint64_t t0 = h_now_ms();
	int st;

	kill(pid, SIGTERM);
	st = h_wait_exit(p, 10000);
	*ms = h_now_ms() - t0;
	return st;
}

static void test_shutdown_proxy_after_master_died(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *master, *proxy;
	int port = h_free_port(), st;
	uint64_t ms;
	pid_t pid;

	(void)state;
	/* Given a master and a proxy that mounted its segment */
	master = h_start_master("master", port, NULL);
	H_ASSERT(master != NULL);
	snprintf(sock, sizeof(sock), "%s", h_path("p.sock"));
	proxy = h_start_proxy("proxy", sock, port, "--segment-size", "16MiB", NULL);
	H_ASSERT(proxy != NULL);
	pid = proxy->pid;
	/* When the master dies and, a second later, the proxy is told to stop */
	h_kill(master);
	h_sleep_ms(1000);
	st = term_and_time(proxy, pid, &ms);
	/* Then it is gone within the bound, cleanly */
	printf("proxy stopped %llu ms after SIGTERM\n", (unsigned long long)ms);
	H_ASSERT(st != -1 && ms < STOP_BOUND_MS);
	H_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void test_shutdown_embedded_proxy(void **state)
{
	char sock[PATH_MAX];
	struct h_proc *proxy;
	uint64_t ms;
	int st;

	(void)state;
	snprintf(sock, sizeof(sock), "%s", h_path("e.sock"));
	proxy = h_start_proxy("embedded", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(proxy != NULL);
	st = term_and_time(proxy, proxy->pid, &ms);
	H_ASSERT(st != -1 && ms < STOP_BOUND_MS);
	H_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

LUNAR_TEST_MAIN_EACH(h_setup, h_teardown, test_shutdown_proxy_after_master_died,
		     test_shutdown_embedded_proxy)
