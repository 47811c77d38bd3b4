/*
 * test_step3_fork_cancel.c - what an application's own threads and
 * processes may do to a handle without hurting each other.
 *
 * fork: a child inherits the parent's handle, whose ring, slots and arena
 * it shares while its indexes into them are private copies. Every call on
 * the inherited handle must fail with ILLEGAL_CLIENT without touching them;
 * lunar_close in the child must return; a fresh handle in the child works;
 * the parent's handle keeps its bytes and works on. (Before, the child's
 * put succeeded through the parent's session, and parent and child took
 * the same slots and arena cells.)
 *
 * cancel: a thread cancelled while its put waits on the proxy must not take
 * the handle's locks, slots or session with it: the call runs to its end,
 * and the handle's other threads (lunar_alloc of a new chunk, which takes
 * the registration table for writing, then exists, put and get) go on.
 * (Before, the cancelled thread left the table read-locked and both hung.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define VAL_LEN	 4096u
#define CHUNK	 (48u << 20) /* more than any chunk made so far: lunar_alloc makes one */
#define DELAY_MS 1000

static char sock[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	return 0;
}

/* Wait up to timeout_ms for pid; its exit code, or -1 (then it is killed). */
static int child_exit_code(pid_t pid, int timeout_ms)
{
	int status = 0;
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (h_now_ms() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -1;
		}
		h_sleep_ms(10);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* In the child: each step's failure is its own exit code. */
static int child_main(struct lunar_client *inherited)
{
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 5000};
	struct lunar_client *fresh = NULL;
	uint8_t v[VAL_LEN], back[VAL_LEN];

	h_fill(v, sizeof(v), h_seed("fork/child"));
	if (lunar_put(inherited, "fork/child", v, sizeof(v), NULL) != LUNAR_ERR_ILLEGAL_CLIENT)
		return 10;
	if (lunar_get_into(inherited, "fork/parent", back, sizeof(back)) !=
	    LUNAR_ERR_ILLEGAL_CLIENT)
		return 11;
	if (lunar_exists(inherited, "fork/parent") != LUNAR_ERR_ILLEGAL_CLIENT ||
	    lunar_health(inherited) != LUNAR_ERR_ILLEGAL_CLIENT)
		return 12;
	if (lunar_alloc(inherited, VAL_LEN) != NULL)
		return 13;
	lunar_close(inherited);
	if (lunar_connect(&o, &fresh))
		return 14;
	if (lunar_put(fresh, "fork/child-fresh", v, sizeof(v), NULL) ||
	    lunar_get_into(fresh, "fork/parent", back, sizeof(back)) != VAL_LEN ||
	    h_verify(back, sizeof(back), h_seed("fork/parent")) >= 0)
		return 15;
	lunar_close(fresh);
	return 0;
}

static void test_step3_fork_child_cannot_use_the_parents_handle(void **state)
{
	struct h_proc *proxy = h_start_proxy("fork", sock, H_EMBEDDED, NULL);
	struct lunar_client *c;
	uint8_t v[VAL_LEN], back[VAL_LEN];
	int code;
	pid_t pid;

	(void)state;
	H_ASSERT(proxy != NULL);
	c = h_client(sock);
	h_fill(v, sizeof(v), h_seed("fork/parent"));
	H_ASSERT_EQ(lunar_put(c, "fork/parent", v, sizeof(v), NULL), 0);
	fflush(NULL);
	pid = fork();
	H_ASSERT(pid >= 0);
	if (pid == 0)
		_exit(child_main(c));
	code = child_exit_code(pid, 20000);
	H_ASSERT_MSG(code == 0, "the child failed at step %d (see child_main)", code);

	/* The parent's handle is untouched, and its session still serves. */
	H_ASSERT_EQ(lunar_get_into(c, "fork/parent", back, sizeof(back)), VAL_LEN);
	H_ASSERT(h_verify(back, sizeof(back), h_seed("fork/parent")) < 0);
	H_ASSERT_EQ(lunar_exists(c, "fork/child"), 0);
	H_ASSERT_EQ(lunar_exists(c, "fork/child-fresh"), 1);
	H_ASSERT_EQ(lunar_put(c, "fork/parent-after", v, sizeof(v), NULL), 0);
	H_ASSERT_EQ(lunar_health(c), 0);
	lunar_close(c);
	h_stop(proxy);
}

struct call {
	struct lunar_client *c;
	int rc;
	int done; /* atomic */
};

static void *delayed_put(void *arg)
{
	struct call *k = arg;
	uint8_t v[VAL_LEN];

	h_fill(v, sizeof(v), h_seed("cancel/victim"));
	k->rc = lunar_put(k->c, "cancel/victim", v, sizeof(v), NULL);
	__atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The handle's other threads, after the cancel. */
static void *bystander(void *arg)
{
	struct call *k = arg;
	uint8_t v[VAL_LEN], back[VAL_LEN];
	void *p = lunar_alloc(k->c, CHUNK);

	h_fill(v, sizeof(v), h_seed("cancel/bystander"));
	if (!p)
		k->rc = 1;
	else if (lunar_exists(k->c, "cancel/victim") != 1)
		k->rc = 2;
	else if (lunar_put(k->c, "cancel/bystander", v, sizeof(v), NULL))
		k->rc = 3;
	else if (lunar_get_into(k->c, "cancel/bystander", back, sizeof(back)) != VAL_LEN ||
		 h_verify(back, sizeof(back), h_seed("cancel/bystander")) >= 0)
		k->rc = 4;
	lunar_free(k->c, p);
	__atomic_store_n(&k->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* Join t within timeout_ms; 0, or -1 when it still runs (then it is left). */
static int join_within(pthread_t t, unsigned timeout_ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += timeout_ms / 1000;
	ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return pthread_timedjoin_np(t, NULL, &ts) ? -1 : 0;
}

static void test_step3_cancelled_thread_leaves_the_handle_usable(void **state)
{
	struct h_proc *proxy = h_start_proxy("cancel", sock, H_EMBEDDED, "--debug-put-delay", "1s",
					     NULL);
	struct lunar_client *c;
	struct call victim = {0}, other = {0};
	pthread_t tv, tb;

	(void)state;
	H_ASSERT(proxy != NULL);
	c = h_client(sock);
	victim.c = other.c = c;
	H_ASSERT_EQ(pthread_create(&tv, NULL, delayed_put, &victim), 0);
	h_sleep_ms(DELAY_MS / 4); /* the put waits on the proxy now */
	H_ASSERT_EQ(pthread_cancel(tv), 0);
	/* The call runs to its end: the put is committed, and returns. */
	H_ASSERT_MSG(join_within(tv, 4 * DELAY_MS) == 0, "the cancelled put never returned");
	H_ASSERT_MSG(__atomic_load_n(&victim.done, __ATOMIC_ACQUIRE) && victim.rc == 0,
		     "the cancelled put was cut short (done %d, rc %d)", victim.done, victim.rc);

	H_ASSERT_EQ(pthread_create(&tb, NULL, bystander, &other), 0);
	H_ASSERT_MSG(join_within(tb, 10000) == 0,
		     "the handle's other thread hangs after the cancel (lunar_alloc/exists)");
	H_ASSERT_MSG(other.rc == 0, "the other thread's calls failed at step %d", other.rc);
	lunar_close(c);
	h_stop(proxy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_step3_fork_child_cannot_use_the_parents_handle),
	    cmocka_unit_test(test_step3_cancelled_thread_leaves_the_handle_usable),
	};

	return cmocka_run_group_tests(tests, setup, h_teardown);
}
