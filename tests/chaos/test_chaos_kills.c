/*
 * test_chaos_kills.c - a minute of clients dying (SPEC §5.6): four at a
 * time, children connect, register a few memfd regions of their own and
 * put, get and start asynchronous puts on two threads, and each is
 * SIGKILLed after a random 5..150 ms - at every point of every path. The
 * proxy must never fail the harness's aftermath: the background client saw
 * no error, and once the dead clients' committed keys are removed its
 * descriptors, mappings and the master's used bytes are back at the
 * baseline; lunar_proxy_client_hangups_total{calls="in_flight"} counted
 * the deaths mid-call. make chaos only (CHAOS_SECONDS, default 60).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/case_util.h"
#include "tests/integration/harness_after.h"

#define MIB	  (1024u * 1024u)
#define AT_ONCE	  4
#define REG_LEN	  (4u * MIB)
#define MAX_VAL	  (512u * 1024u)
#define KEYS_EACH 16 /* a child's keys: at most 8 MiB left behind */
#define IN_FLIGHT "lunar_proxy_client_hangups_total{calls=\"in_flight\"}"

static char sock[PATH_MAX];
static struct h_proc *proxy;
static int http;
static struct h_after after;

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	h_named_sock(sock, "kills");
	proxy = track(h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "256MiB", NULL));
	if (!proxy)
		return -1;
	http = http_port_of(proxy);
	return 0;
}

static int teardown(void **state)
{
	h_after_abandon(&after);
	return case_teardown(state);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

struct worker {
	struct lunar_client *c;
	uint8_t *reg[8];
	int nreg;
	uint64_t seed;
};

static void *work(void *arg)
{
	struct worker *w = arg;
	uint8_t *heap = malloc(MAX_VAL);
	struct lunar_pending *p[16];
	char key[64];

	for (uint64_t i = 0; heap; i++) {
		uint64_t r = rnd(&w->seed);
		size_t len = 1 + r % MAX_VAL;
		uint8_t *buf = w->nreg && r % 3 == 0 ? w->reg[(r >> 8) % w->nreg] : heap;
		int n = 0;

		snprintf(key, sizeof(key), "chaos/%d/%llu", (int)getpid(),
			 (unsigned long long)(i % KEYS_EACH));
		switch ((r >> 16) % 4) {
		case 0: lunar_put(w->c, key, buf, len, NULL); break;
		case 1: lunar_get_into(w->c, key, buf, MAX_VAL); break;
		case 2:
			for (; n < 16; n++)
				if (lunar_put_async(w->c, key, buf, len / 16 + 1, NULL, &p[n]))
					break;
			while (n > 0)
				lunar_wait(p[--n]);
			break;
		default: lunar_remove(w->c, key, 1);
		}
	}
	return NULL;
}

static void child(int ready_fd, void *arg)
{
	struct worker w = {.seed = (uint64_t)(uintptr_t)arg * 2654435761u + 1};
	pthread_t th[2];

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	w.c = h_client_try(sock, H_CLIENT_TIMEOUT_MS, NULL);
	if (!w.c)
		_exit(2);
	w.nreg = (int)(rnd(&w.seed) % 9);
	for (int i = 0; i < w.nreg; i++) {
		int fd = memfd_create("chaos-reg", MFD_ALLOW_SEALING | MFD_CLOEXEC);

		if (fd < 0 || ftruncate(fd, REG_LEN) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
			_exit(2);
		w.reg[i] = mmap(NULL, REG_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (w.reg[i] == MAP_FAILED || lunar_register(w.c, w.reg[i], REG_LEN))
			_exit(2);
	}
	if (write(ready_fd, "R", 1) != 1)
		_exit(2);
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, work, &w);
	pause();
	_exit(3);
}

static void remove_leftovers(void)
{
	struct lunar_client *c = h_client(sock);

	H_ASSERT(lunar_remove_by_regex(c, "^chaos/", 1) >= 0);
	lunar_close(c);
}

static void test_chaos_kills(void **state)
{
	const char *env = getenv("CHAOS_SECONDS");
	uint64_t secs = env ? strtoull(env, NULL, 10) : 60, end, seed = 0x5eed, kills = 0;
	pid_t pid[AT_ONCE] = {0};
	uint64_t deadline[AT_ONCE] = {0};
	int64_t hup;

	(void)state;
	h_after_begin(&after, sock, proxy, http);
	hup = h_metric_sum(http, IN_FLIGHT);
	end = h_now_ms() + secs * 1000;
	while (h_now_ms() < end) {
		for (int i = 0; i < AT_ONCE; i++) {
			if (!pid[i]) {
				void *arg = (void *)(uintptr_t)(kills + 1 + i);

				pid[i] = h_fork_ready(child, arg, NULL);
				H_ASSERT(pid[i] > 0);
				deadline[i] = h_now_ms() + 5 + rnd(&seed) % 146;
			} else if (h_now_ms() >= deadline[i]) {
				int status = 0;

				kill(pid[i], SIGKILL);
				waitpid(pid[i], &status, 0);
				H_ASSERT_MSG(WIFSIGNALED(status), "a child ended by itself: 0x%x",
					     status);
				pid[i] = 0;
				/* What the dead left behind, now and then. */
				if (++kills % 20 == 0)
					remove_leftovers();
			}
		}
		H_ASSERT(h_alive(proxy));
		h_sleep_ms(2);
	}
	for (int i = 0; i < AT_ONCE; i++) {
		if (pid[i]) {
			kill(pid[i], SIGKILL);
			waitpid(pid[i], NULL, 0);
			kills++;
		}
	}
	printf("  %llu clients killed in %llu s; %lld of them mid-call\n",
	       (unsigned long long)kills, (unsigned long long)secs,
	       (long long)(h_metric_sum(http, IN_FLIGHT) - hup));
	H_ASSERT(h_metric_sum(http, IN_FLIGHT) > hup);
	remove_leftovers();
	h_after_end(&after);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_chaos_kills, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
