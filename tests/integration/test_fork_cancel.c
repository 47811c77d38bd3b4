/*
 * test_fork_cancel.c - what an application's own threads and
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
 * mooncake_store_setup is no cancellation point either: one cancelled while
 * the proxy hangs must not leave the store's lock held.
 *
 * A child forked while another thread opens sessions holds no session
 * socket (before, a child forked inside a handshake kept one unlisted), and
 * lunar_close in a child whose handle lists a session released after a
 * failed reconnect frees it once (before, twice: the child crashed), and
 * leaves one whose release the parent had begun at the fork.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "harness.h"
#include "shmlib/shm_int.h"
#include "store_c.h"
#include "tests/cmocka_main.h"

#define VAL_LEN	 4096u
#define CHUNK	 (48u << 20) /* more than any chunk made so far: lunar_alloc makes one */
#define DELAY_MS 1000

static char sock[PATH_MAX];

/* An embedded node on a socket of this test's own; put_delay (a test hook)
 * holds every put before its commit. */
static struct h_proc *start_proxy(const char *name, const char *put_delay)
{
	h_named_sock(sock, name);
	if (put_delay)
		return h_start_proxy(name, sock, H_EMBEDDED, "--debug-put-delay", put_delay, NULL);
	return h_start_proxy(name, sock, H_EMBEDDED, NULL);
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

static void test_fork_cancel_child_cannot_use_the_parents_handle(void **state)
{
	struct h_proc *proxy = start_proxy("fork", NULL);
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
	lc_store_release(&k->done, 1); /* pairs with the acquire of victim.done in the test */
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
	lc_store_release(&k->done, 1); /* read by no one after the join */
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

static void test_fork_cancel_cancelled_thread_leaves_the_handle_usable(void **state)
{
	struct h_proc *proxy = start_proxy("cancel", "1s");
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
	/* acquire: pairs with the release in delayed_put */
	H_ASSERT_MSG(lc_load_acquire(&victim.done) && victim.rc == 0,
		     "the cancelled put was cut short (done %d, rc %d)", victim.done, victim.rc);

	H_ASSERT_EQ(pthread_create(&tb, NULL, bystander, &other), 0);
	H_ASSERT_MSG(join_within(tb, 10000) == 0,
		     "the handle's other thread hangs after the cancel (lunar_alloc/exists)");
	H_ASSERT_MSG(other.rc == 0, "the other thread's calls failed at step %d", other.rc);
	lunar_close(c);
	h_stop(proxy);
}

/* Sessions opened and closed as fast as they go, until stop. */
struct churn {
	int stop;   /* atomic */
	int opened; /* atomic */
};

static void *churn_main(void *arg)
{
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 5000};
	struct churn *k = arg;

	while (!lc_load_acquire(&k->stop)) { /* pairs with the release that stops churn */
		struct lunar_client *c;

		if (!lunar_connect(&o, &c)) {
			lc_store_release(&k->opened, k->opened + 1); /* only this thread writes */
			lunar_close(c);
		}
	}
	return NULL;
}

/* The sockets this process holds. (A child has fewer than its parent when
 * the parent holds sessions: the fork handler closes the child's copies.) */
static int count_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[300], link[64];
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len > 0 && (link[len] = 0, !strncmp(link, "socket:", 7)))
			n++;
	}
	closedir(d);
	return n;
}

static void test_fork_cancel_forked_child_holds_no_session_socket(void **state)
{
	struct h_proc *proxy = start_proxy("forkfd", NULL);
	struct churn k = {0};
	int before = count_sockets(), held = 0, forks = 0;
	uint64_t start, now;
	pthread_t t;

	(void)state;
	H_ASSERT(proxy != NULL && before >= 0);
	H_ASSERT_EQ(pthread_create(&t, NULL, churn_main, &k), 0);
	/* 3 s, and on until 100 of each (a sanitizer's build forks slowly) */
	start = now = h_now_ms();
	while (now < start + 3000 || ((forks <= 100 || lc_load_acquire(&k.opened) <= 100) &&
				      now < start + H_BOUND_MS(10000))) {
		pid_t pid = fork();

		H_ASSERT(pid >= 0);
		if (pid == 0)
			_exit(count_sockets() > before);
		forks++;
		held += child_exit_code(pid, 5000) != 0;
		now = h_now_ms();
	}
	lc_store_release(&k.stop, 1); /* pairs with the acquire in churn_main */
	pthread_join(t, NULL);
	print_message("%d of %d children forked beside %d session opens held a session socket\n",
		      held, forks, k.opened);
	H_ASSERT(forks > 100 && k.opened > 100);
	H_ASSERT_MSG(held == 0, "%d of %d forked children held a session socket", held, forks);
	h_stop(proxy);
}

/* 1 when [p, p + len) is mapped here. */
static int mapped(uintptr_t p, size_t len)
{
	return msync((void *)p, len, MS_ASYNC) == 0;
}

/* A node with a handle on it whose session a call in flight holds (the
 * reference is taken here) and a dying proxy broke; its region in *region. */
static struct h_proc *held_broken_session(const char *name, struct lunar_client **c,
					  struct shm_conn **held, uintptr_t *region, size_t *len)
{
	struct h_proc *proxy = start_proxy(name, NULL);
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 1000};

	H_ASSERT(proxy != NULL);
	H_ASSERT_EQ(lunar_connect(&o, c), 0);
	H_ASSERT_EQ(lunar_exists(*c, "held/none"), 0);
	*held = (*c)->conn;
	*region = (uintptr_t)(*held)->base;
	*len = (*held)->size;
	shm_conn_get(*held);
	shm_conn_break(*held, "test: proxy gone");
	return proxy;
}

/*
 * A session released after the reconnect that replaced it: while a call
 * still holds it, a reconnect leaves it on the handle's list, and the call's
 * release then unmaps it. (The reference is taken here directly: a real
 * call in flight holds the registration table's read lock, which a
 * reconnect waits for, so the order cannot be arranged from outside.) A
 * child's lunar_close must not unmap its region a second time: a sentinel
 * mapped in its place must survive.
 */
static void test_fork_cancel_forked_close_after_failed_reconnect(void **state)
{
	struct lunar_client *c = NULL;
	char moved[PATH_MAX + 8];
	struct shm_conn *old;
	int code, exists;
	uintptr_t region;
	size_t len = 0;
	struct h_proc *proxy = held_broken_session("forget", &c, &old, &region, &len);
	pid_t pid;

	(void)state;
	snprintf(moved, sizeof(moved), "%s.moved", sock);
	H_ASSERT(rename(sock, moved) == 0);
	exists = lunar_exists(c, "held/none"); /* the reconnect fails */
	H_ASSERT(rename(moved, sock) == 0);
	shm_conn_put(old); /* the call ends: the region goes */
	H_ASSERT_EQ(exists, LUNAR_ERR_PROXY_UNAVAILABLE);
	H_ASSERT_MSG(!mapped(region, len), "the released session's region is still mapped");
	H_ASSERT(mmap((void *)region, len, PROT_READ,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) == (void *)region);
	pid = fork();
	if (pid == 0) {
		lunar_close(c); /* the inherited handle, with the released session */
		_exit(mapped(region, len) ? 0 : 3);
	}
	code = pid > 0 ? child_exit_code(pid, 10000) : -2;
	munmap((void *)region, len);
	H_ASSERT_MSG(code == 0,
		     "the child's lunar_close of the inherited handle failed (%d; 3: it unmapped "
		     "the released session's region again)",
		     code);
	/* The parent's handle reconnects. */
	H_ASSERT_EQ(lunar_health(c), 0);
	lunar_close(c);
	h_stop(proxy);
}

/*
 * A fork while a session's release has begun: it is off the fork list, and
 * its region and allocator may be half gone in the child's copy. The child
 * must leave them (here they are still whole, so an unmap would show).
 * shm_fork_close is the release's first step, taken here directly as the
 * window is a few instructions wide.
 */
static void test_fork_cancel_forked_close_during_release(void **state)
{
	struct lunar_client *c = NULL;
	struct shm_conn *old;
	uintptr_t region;
	size_t len = 0;
	struct h_proc *proxy = held_broken_session("halfgone", &c, &old, &region, &len);
	int code;
	pid_t pid;

	(void)state;
	H_ASSERT_EQ(lunar_exists(c, "held/none"), 0); /* reconnected */
	shm_fork_close(old);			      /* the call's release has begun */
	pid = fork();
	if (pid == 0) {
		lunar_close(c);
		_exit(mapped(region, len) ? 0 : 3);
	}
	code = pid > 0 ? child_exit_code(pid, 10000) : -2;
	shm_conn_put(old); /* the release ends */
	H_ASSERT_MSG(code == 0,
		     "the child's lunar_close unmapped a session the parent was releasing (%d)",
		     code);
	H_ASSERT_MSG(!mapped(region, len), "the released session's region is still mapped");
	H_ASSERT_EQ(lunar_health(c), 0);
	lunar_close(c);
	h_stop(proxy);
}

static void *store_setup(void *arg)
{
	mooncake_store_t st = arg;

	return (void *)(intptr_t)mooncake_store_setup(st, "", "", 0, 0, "tcp", "", "");
}

/* A thread whose cancel is pending when it calls setup (held off until
 * then): setup's own log line must not act on it. */
static int cancel_sent; /* atomic */

static void *store_setup_cancel_pending(void *arg)
{
	int old;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
	while (!lc_load_acquire(&cancel_sent)) /* pairs with the release after pthread_cancel */
		h_sleep_ms(5);
	pthread_setcancelstate(old, NULL);
	return store_setup(arg);
}

static void test_fork_cancel_cancelled_store_setup_leaves_it_usable(void **state)
{
	struct h_proc *proxy = start_proxy("storecancel", NULL);
	mooncake_store_t st = mooncake_store_create();
	pthread_t t;
	void *ret = NULL;

	(void)state;
	H_ASSERT(proxy != NULL && st != NULL);
	setenv("LUNAR_SOCKET", sock, 1);
	setenv("LUNAR_TIMEOUT_MS", "800", 1);
	kill(proxy->pid, SIGSTOP);
	if (pthread_create(&t, NULL, store_setup, st)) {
		kill(proxy->pid, SIGCONT);
		H_ASSERT_MSG(0, "pthread_create failed");
	}
	h_sleep_ms(300); /* in the handshake with the stopped proxy */
	pthread_cancel(t);
	pthread_join(t, &ret);
	kill(proxy->pid, SIGCONT);
	H_ASSERT_MSG(ret != PTHREAD_CANCELED, "the setup was cancelled inside the call");
	H_ASSERT_EQ(pthread_create(&t, NULL, store_setup, st), 0);
	H_ASSERT_MSG(join_within(t, 5000) == 0, "a second setup hangs after the cancel");
	unsetenv("LUNAR_TIMEOUT_MS");
	H_ASSERT_EQ(mooncake_store_health_check(st), 0);
	/* A cancel pending before the call acts after it, not in its log line. */
	H_ASSERT_EQ(pthread_create(&t, NULL, store_setup_cancel_pending, st), 0);
	H_ASSERT_EQ(pthread_cancel(t), 0);
	lc_store_release(&cancel_sent, 1); /* pairs with store_setup_cancel_pending's acquire */
	H_ASSERT_EQ(pthread_join(t, &ret), 0);
	H_ASSERT_MSG(ret == (void *)0, "setup with a cancel pending gave %p (PTHREAD_CANCELED %p)",
		     ret, PTHREAD_CANCELED);
	mooncake_store_destroy(st);
	h_stop(proxy);
}

LUNAR_TEST_MAIN(h_setup, h_teardown, test_fork_cancel_child_cannot_use_the_parents_handle,
		test_fork_cancel_cancelled_thread_leaves_the_handle_usable,
		test_fork_cancel_cancelled_store_setup_leaves_it_usable,
		test_fork_cancel_forked_child_holds_no_session_socket,
		test_fork_cancel_forked_close_after_failed_reconnect,
		test_fork_cancel_forked_close_during_release)
