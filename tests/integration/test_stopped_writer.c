/*
 * test_stopped_writer.c - a proxy stopped (SIGSTOP) in the middle of a put
 * to a peer's segment is declared dead by the master, but wakes up later and
 * sends the rest of its bytes. Master with --client-ttl 1s; proxy A (no
 * segment) writes a large value to B's segment; A is stopped half-way and
 * the master drops its put. A value put through B meanwhile must not share
 * its bytes with the range A is still writing: once A has woken and given
 * up, it reads byte-exact. The same for an upsert A was writing, and for a
 * put during which B is declared dead too and re-mounts: the master then
 * forgot A's write, and B's fresh segment takes a value where it was; that
 * case again in a keyless cluster, where no capability is there to void.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http_get.h"

#define MIB (1024u * 1024u)
/* Larger than what the sockets between A and B buffer while B sleeps,
 * so A is stopped with bytes still to send. */
#define VAL_LEN (40u * MIB + 4096u + 8u)
/* The dropped writes' ranges stay taken for put_start_release_timeout
 * (600 s): B's segment holds three values with room to spare, so the
 * master never evicts the value under test (watermark 0.90). */
#define SEG_B	       "256MiB"
#define CLIENT_TIMEOUT 30000

#define WAIT_MS H_BOUND_MS(10000) /* for the master to see what the test waits on */
/* B's transfer timeout (ENG_DEFAULT_TIMEOUT_MS): B gives up on A's write
 * that long after its header came, and A's late bytes no longer land. */
#define B_TIMEOUT_MS 5000

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME];
static int master_http;
static struct h_proc *proxy_a, *proxy_b;
static struct lunar_client *ca, *cb;

static int setup(void **state)
{
	struct h_proc *master;
	int port;

	(void)state;
	if (!(master = h_cluster_master(&port, "--client-ttl", "1s", NULL)))
		return -1;
	master_http = hg_log_http_port(master->log);
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	proxy_a = h_start_proxy("proxyA", sock_a, port, "--segment-size", "0", "--ping-interval",
				"100ms", "--arena-size", "64MiB", NULL);
	/* B's app clears each case's key with a forced remove: keyed, an
	 * admin call (keyless, every call is anyone's). */
	proxy_b = h_start_peer("proxyB", sock_b, port, seg_b, "--segment-size", SEG_B,
			       "--ping-interval", "100ms", "--arena-size", "64MiB",
			       h_cluster_key() ? "--admin-calls" : NULL, NULL);
	if (!proxy_a || !proxy_b)
		return -1;
	ca = h_client_try(sock_a, CLIENT_TIMEOUT, NULL);
	cb = h_client_try(sock_b, CLIENT_TIMEOUT, NULL);
	return ca && cb ? 0 : -1;
}

static int keyless_setup(void **state)
{
	h_keyless();
	return setup(state);
}

static int teardown(void **state)
{
	(void)state;
	if (proxy_a && proxy_a->running)
		kill(-proxy_a->pid, SIGCONT);
	if (proxy_b && proxy_b->running)
		kill(-proxy_b->pid, SIGCONT);
	lunar_close(ca);
	lunar_close(cb);
	ca = cb = NULL;
	h_stop(proxy_a);
	h_stop(proxy_b);
	h_cleanup();
	return 0;
}

/* Every value of these tests goes to B's segment. */
static const char *const seg_b_only[1] = {seg_b};
static const struct lunar_put_cfg on_b = {
    .replica_num = 1, .preferred_segments = seg_b_only, .preferred_count = 1};

/* The write through A, on a thread of its own: A will sleep in the middle. */
struct write_job {
	const char *key;
	const uint8_t *buf;
	int upsert;
	int rc;
};

static void *write_main(void *arg)
{
	struct write_job *j = arg;

	j->rc = j->upsert ? lunar_upsert(ca, j->key, j->buf, VAL_LEN, &on_b)
			  : lunar_put(ca, j->key, j->buf, VAL_LEN, &on_b);
	return NULL;
}

/* The sum of the master's counters named in samples (NULL-terminated). */
static int64_t master_count(const char *const *samples)
{
	static char text[1 << 17];
	int64_t sum = 0, v;

	H_ASSERT_EQ(hg_get(master_http, "/metrics", text, sizeof(text)), 200);
	for (; *samples; samples++)
		if ((v = hg_metric(text, *samples)) > 0)
			sum += v;
	return sum;
}

static const char *const write_starts[] = {"lunar_master_calls_total{method=\"PutStart\"}",
					   "lunar_master_calls_total{method=\"BatchPutStart\"}",
					   "lunar_master_calls_total{method=\"UpsertStart\"}",
					   "lunar_master_calls_total{method=\"BatchUpsertStart\"}",
					   NULL};
static const char *const clients[] = {"lunar_master_clients", NULL};
static const char *const remounts[] = {"lunar_master_calls_total{method=\"ReMountSegment\"}", NULL};

/* Wait until the master's figures in samples change from; fails the test
 * with what when they do not within WAIT_MS. */
static void master_count_wait(const char *const *samples, int64_t from, const char *what)
{
	uint64_t end = h_now_ms() + WAIT_MS;

	while (master_count(samples) == from) {
		H_ASSERT_MSG(h_now_ms() < end, "%s in %d ms", what, WAIT_MS);
		h_sleep_ms(20);
	}
}

static void signal_group(struct h_proc *p, int sig)
{
	H_ASSERT(p->running);
	H_ASSERT_EQ(kill(-p->pid, sig), 0);
}

/* B sleeps while A's write of job->key starts (the master has it) and fills
 * the socket buffers; then A sleeps too, with most of the value still to
 * send. */
static void stop_mid_write(struct write_job *job, pthread_t *th)
{
	int64_t starts = master_count(write_starts);

	signal_group(proxy_b, SIGSTOP);
	H_ASSERT_EQ(pthread_create(th, NULL, write_main, job), 0);
	master_count_wait(write_starts, starts, "A's write did not reach the master");
	h_sleep_ms(600);
	signal_group(proxy_a, SIGSTOP);
}

/* A wakes, sends what it had left, and fails its write; new_key reads
 * byte-exact through B, then goes (room for the next case: the dropped
 * write's range stays taken). */
static void wake_and_check(struct write_job *job, pthread_t th, const char *new_key)
{
	signal_group(proxy_a, SIGCONT);
	pthread_join(th, NULL);
	print_message("the stopped writer's %s: %d (%s)\n", job->upsert ? "upsert" : "put", job->rc,
		      h_code(job->rc));
	H_ASSERT_MSG(job->rc != 0, "a write dropped by the master was committed");
	h_expect_seeded(cb, new_key, VAL_LEN, h_seed(new_key));
	H_ASSERT_EQ(lunar_remove(cb, new_key, 1), 0);
}

/*
 * A writes old_key (a put, or an upsert of a value already there) and is
 * stopped half-way until the master has declared it dead; new_key is put
 * through B meanwhile, then A wakes. new_key must read byte-exact.
 */
static void check_stopped_writer(const char *old_key, const char *new_key, int upsert)
{
	uint8_t *old = malloc(VAL_LEN), *val = malloc(VAL_LEN);
	static struct write_job job; /* its thread outlives a failed assertion */
	pthread_t th;
	int64_t alive;

	job = (struct write_job){.key = old_key, .buf = old, .upsert = upsert, .rc = 1};
	H_ASSERT(old && val);
	h_fill(old, VAL_LEN, h_seed(old_key));
	h_fill(val, VAL_LEN, h_seed(new_key));
	if (upsert)
		H_ASSERT_EQ(lunar_put(ca, old_key, "small", 5, &on_b), 0);
	alive = master_count(clients);
	stop_mid_write(&job, &th);
	signal_group(proxy_b, SIGCONT);
	/* The master declares A dead (one client fewer) and drops its write.
	 * B slept too: where that took long (a slow machine, a sanitizer) the
	 * master declared B dead as well, and B must mount again before the
	 * new value can go there (its HEALTH pings, and mounts when told). */
	master_count_wait(clients, alive, "the master did not declare A dead");
	h_wait_health(cb, 0, WAIT_MS);
	H_ASSERT_EQ(lunar_put(cb, new_key, val, VAL_LEN, &on_b), 0);
	wake_and_check(&job, th, new_key);
	free(old);
	free(val);
}

/*
 * Both sleep until the master has declared both dead: it forgets B's
 * segment, and A's write there with it. B wakes and re-mounts a segment the
 * master sees empty, and a new value goes where A was writing (the first
 * case: nothing else was ever placed there). When A wakes, B must have
 * ended A's transfer at the re-mount: the rest of A's bytes would land on
 * the new value.
 */
static void check_owner_remount(const char *old_key, const char *new_key)
{
	uint8_t *old = malloc(VAL_LEN), *val = malloc(VAL_LEN);
	static struct write_job job; /* its thread outlives a failed assertion */
	uint64_t end = h_now_ms() + WAIT_MS, woke;
	int64_t alive, mounts;
	pthread_t th;

	job = (struct write_job){.key = old_key, .buf = old, .rc = 1};
	H_ASSERT(old && val);
	h_fill(old, VAL_LEN, h_seed(old_key));
	h_fill(val, VAL_LEN, h_seed(new_key));
	/* A's write goes on a connection A has: a new one would wait for
	 * B's handshake, and bring a capability that B's re-mount voids. */
	H_ASSERT_EQ(lunar_put(ca, old_key, "small", 5, &on_b), 0);
	H_ASSERT_EQ(lunar_remove(cb, old_key, 1), 0);
	alive = master_count(clients);
	mounts = master_count(remounts);
	stop_mid_write(&job, &th);
	while (master_count(clients) > alive - 2) {
		H_ASSERT_MSG(h_now_ms() < end, "the master did not declare A and B dead in %d ms",
			     WAIT_MS);
		h_sleep_ms(20);
	}
	woke = h_now_ms();
	signal_group(proxy_b, SIGCONT);
	master_count_wait(remounts, mounts, "B did not re-mount");
	H_ASSERT_EQ(lunar_put(cb, new_key, val, VAL_LEN, &on_b), 0);
	/* Else B gave up on A's write by itself: nothing tested. */
	H_ASSERT_MSG(h_now_ms() - woke < B_TIMEOUT_MS, "the new value came after B's timeout");
	wake_and_check(&job, th, new_key);
	free(old);
	free(val);
}

static void test_stopped_writer_bytes_do_not_land_after_the_owner_remounts(void **state)
{
	(void)state;
	check_owner_remount("stopped-writer/remount", "stopped-writer/after-remount");
}

/* Keyless, B refuses the rest of A's write by the mount it names. */
static void test_stopped_writer_keyless_bytes_do_not_land_after_the_owner_remounts(void **state)
{
	(void)state;
	check_owner_remount("stopped-writer/keyless-remount", "stopped-writer/keyless-after");
}

static void test_stopped_writer_put_bytes_do_not_land_on_a_new_value(void **state)
{
	(void)state;
	check_stopped_writer("stopped-writer/put", "stopped-writer/after-put", 0);
}

static void test_stopped_writer_upsert_bytes_do_not_land_on_a_new_value(void **state)
{
	(void)state;
	check_stopped_writer("stopped-writer/upsert", "stopped-writer/after-upsert", 1);
}

int main(void)
{
	/* The re-mount cases first: B's segment is empty when A's write
	 * begins. Keyed first: h_keyless holds for the rest. */
	const struct CMUnitTest keyed[] = {
	    cmocka_unit_test(test_stopped_writer_bytes_do_not_land_after_the_owner_remounts),
	    cmocka_unit_test(test_stopped_writer_put_bytes_do_not_land_on_a_new_value),
	    cmocka_unit_test(test_stopped_writer_upsert_bytes_do_not_land_on_a_new_value),
	};
	const struct CMUnitTest keyless[] = {
	    cmocka_unit_test(
		test_stopped_writer_keyless_bytes_do_not_land_after_the_owner_remounts),
	};
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	rc = cmocka_run_group_tests_name("keyed", keyed, setup, teardown);
	return rc | cmocka_run_group_tests_name("keyless", keyless, keyless_setup, teardown);
}
