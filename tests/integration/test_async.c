/*
 * test_async.c - lunar_put_async, lunar_get_async, lunar_ready and
 * lunar_wait against a real embedded-master proxy: one thread keeps many
 * calls in flight, from registered memory and from ordinary memory, bytes
 * verified; argument errors fail the start; a miss, a short buffer and a
 * value too large for the arena report as the synchronous calls do; the
 * key is the start's to read only; a registration made between the start
 * and the wait does not change where the bytes land, and an unregister
 * waits for a call pending in the range; a start finding every completion
 * slot held by pending calls reports BUSY at once; a proxy killed under
 * pending calls makes them ready, and every wait return PROXY_UNAVAILABLE,
 * at once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define KIB	1024u
#define MIB	(1024u * 1024u)
#define ARENA	MIB /* the proxy's minimum: a 3 MiB value cannot be staged */
#define DEPTH	32
#define ROUNDS	8
#define VAL_LEN (4u * KIB + 13)
#define BIG	(3u * MIB + 777)
#define SLOTS	256 /* a session's completion slots (docs/shm-abi.md) */
#define KILL_MS 2000

static char sock[PATH_MAX];
static struct lunar_client *cl; /* the group's, with the proxy's default arena */

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, &cl, "--segment-size", "128MiB", NULL) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	h_embedded_node_stop(&cl);
	return 0;
}

static void key_of(char *key, size_t len, const char *what, int i)
{
	snprintf(key, len, "async/%s/%d", what, i);
}

/*
 * ROUNDS x DEPTH puts, then gets, DEPTH in flight at once from this one
 * thread, each value in its own place of mem (len each), every byte
 * checked; the oldest call is waited for before the next takes its place.
 */
static void round_trip(const char *what, uint8_t *vals, uint8_t *dst)
{
	struct lunar_pending *p[DEPTH] = {0};
	int n = ROUNDS * DEPTH;
	char key[64];

	for (int i = 0; i < n + DEPTH; i++) {
		int k = i % DEPTH;

		if (p[k])
			H_ASSERT_EQ(lunar_wait(p[k]), 0);
		p[k] = NULL;
		if (i >= n)
			continue;
		key_of(key, sizeof(key), what, i);
		h_fill(vals + (size_t)k * VAL_LEN, VAL_LEN, h_seed(key));
		H_ASSERT_EQ(
		    lunar_put_async(cl, key, vals + (size_t)k * VAL_LEN, VAL_LEN, NULL, &p[k]), 0);
		H_ASSERT(p[k] != NULL);
	}
	for (int i = 0; i < n + DEPTH; i++) {
		int k = i % DEPTH;
		uint8_t *at = dst + (size_t)k * VAL_LEN;

		if (p[k]) {
			H_ASSERT_EQ(lunar_wait(p[k]), VAL_LEN);
			key_of(key, sizeof(key), what, i - DEPTH);
			H_ASSERT_MSG(h_verify(at, VAL_LEN, h_seed(key)) < 0, "%s: wrong bytes",
				     key);
		}
		p[k] = NULL;
		if (i >= n)
			continue;
		key_of(key, sizeof(key), what, i);
		memset(at, 0, VAL_LEN);
		H_ASSERT_EQ(lunar_get_async(cl, key, at, VAL_LEN, &p[k]), 0);
	}
}

static void test_async_registered_round_trip(void **state)
{
	uint8_t *vals = lunar_alloc(cl, DEPTH * VAL_LEN), *dst = lunar_alloc(cl, DEPTH * VAL_LEN);

	(void)state;
	H_ASSERT(vals && dst);
	round_trip("registered", vals, dst);
	lunar_free(cl, vals);
	lunar_free(cl, dst);
}

static void test_async_staged_round_trip(void **state)
{
	uint8_t *vals = malloc(DEPTH * VAL_LEN), *dst = malloc(DEPTH * VAL_LEN);

	(void)state;
	H_ASSERT(vals && dst);
	round_trip("staged", vals, dst);
	free(vals);
	free(dst);
}

/* Results as lunar_put and lunar_get_into give them; bad arguments fail
 * the start and leave *out NULL. */
static void test_async_results_and_errors(void **state)
{
	struct lunar_pending *p = (struct lunar_pending *)1;
	char buf[64] = "value", small[8];

	(void)state;
	H_ASSERT_EQ(lunar_put_async(cl, "", buf, sizeof(buf), NULL, &p), LUNAR_ERR_INVALID_KEY);
	H_ASSERT(p == NULL);
	H_ASSERT_EQ(lunar_put_async(cl, "async/err", NULL, 1, NULL, &p), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(lunar_get_async(cl, "async/err", buf, 0, &p), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(lunar_get_async(NULL, "async/err", buf, 1, &p), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(lunar_put_async(cl, "async/err", buf, 1, NULL, NULL), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(lunar_wait(NULL), LUNAR_ERR_INVALID_PARAMS);
	H_ASSERT_EQ(lunar_ready(NULL), 1);

	H_ASSERT_EQ(lunar_get_async(cl, "async/missing", buf, sizeof(buf), &p), 0);
	H_ASSERT_EQ(lunar_wait(p), LUNAR_ERR_OBJECT_NOT_FOUND);
	H_ASSERT_EQ(lunar_put_async(cl, "async/short", buf, sizeof(buf), NULL, &p), 0);
	H_ASSERT_EQ(lunar_wait(p), 0);
	H_ASSERT_EQ(lunar_get_async(cl, "async/short", small, sizeof(small), &p), 0);
	H_ASSERT_EQ(lunar_wait(p), LUNAR_ERR_BUFFER_OVERFLOW);
	/* lunar_ready turns 1 once the proxy is done, and stays so. */
	H_ASSERT_EQ(lunar_get_async(cl, "async/short", buf, sizeof(buf), &p), 0);
	for (uint64_t end = h_now_ms() + 5000; !lunar_ready(p) && h_now_ms() < end;)
		h_sleep_ms(1);
	H_ASSERT_EQ(lunar_ready(p), 1);
	H_ASSERT_EQ(lunar_wait(p), sizeof(buf));
	H_ASSERT(strcmp(buf, "value") == 0);
}

/* The key is read before the start returns: the caller may reuse it. */
static void test_async_key_read_at_start(void **state)
{
	char key[32] = "async/key/first", val[] = "key read at start";
	struct lunar_pending *p;

	(void)state;
	H_ASSERT_EQ(lunar_put_async(cl, key, val, sizeof(val), NULL, &p), 0);
	memset(key, 'x', sizeof(key) - 1);
	H_ASSERT_EQ(lunar_wait(p), 0);
	H_ASSERT_EQ(lunar_exists(cl, "async/key/first"), 1);
}

/* A value larger than the arena, from and into ordinary memory: the call
 * runs at the start (through lunar_alloc memory), and is ready at once. */
static void test_async_too_large_to_stage(void **state)
{
	struct lunar_client *c = h_client_arena(sock, H_CLIENT_TIMEOUT_MS, ARENA);
	uint8_t *val = malloc(BIG), *dst = calloc(1, BIG);
	struct lunar_pending *p;

	(void)state;
	H_ASSERT(val && dst);
	h_fill(val, BIG, h_seed("async/big"));
	H_ASSERT_EQ(lunar_put_async(c, "async/big", val, BIG, NULL, &p), 0);
	H_ASSERT_EQ(lunar_ready(p), 1);
	H_ASSERT_EQ(lunar_wait(p), 0);
	H_ASSERT_EQ(lunar_get_async(c, "async/big", dst, BIG, &p), 0);
	H_ASSERT_EQ(lunar_ready(p), 1);
	H_ASSERT_EQ(lunar_wait(p), BIG);
	H_ASSERT(h_verify(dst, BIG, h_seed("async/big")) < 0);
	free(val);
	free(dst);
	lunar_close(c);
}

/*
 * A get into a memfd that is not registered yet goes through the arena;
 * registering the memfd before the wait must not make the wait skip the
 * copy out (the placement is the start's).
 */
static void test_async_register_between_start_and_wait(void **state)
{
	struct lunar_pending *p;
	char val[VAL_LEN];
	uint8_t *mem;
	int fd;

	(void)state;
	h_fill(val, sizeof(val), h_seed("async/reg"));
	H_ASSERT_EQ(lunar_put(cl, "async/reg", val, sizeof(val), NULL), 0);
	mem = h_app_memfd("async-reg", MIB, &fd);
	H_ASSERT_EQ(lunar_get_async(cl, "async/reg", mem + 64, sizeof(val), &p), 0);
	H_ASSERT_EQ(lunar_register(cl, mem, MIB), 0);
	H_ASSERT_EQ(lunar_wait(p), sizeof(val));
	H_ASSERT_MSG(h_verify(mem + 64, sizeof(val), h_seed("async/reg")) < 0,
		     "the staged bytes were not copied out");
	H_ASSERT_EQ(lunar_unregister(cl, mem), 0);
	munmap(mem, MIB);
	close(fd);
}

/*
 * A put pending from a registered memfd: unregistering that range waits for
 * it (only this thread's lunar_wait ends it, so here until the handle's
 * timeout: BUSY), while another range, with nothing pending, goes at once;
 * the put is stored whole, and once it is waited for its range goes too.
 */
static void test_async_unregister_waits_for_pending(void **state)
{
	struct lunar_client *c = h_client_arena(sock, 300, ARENA);
	struct lunar_pending *p;
	char back[VAL_LEN];
	uint8_t *mem, *other;
	uint64_t t0;
	int fd, other_fd;

	(void)state;
	mem = h_app_memfd("async-unreg", MIB, &fd);
	other = h_app_memfd("async-other", MIB, &other_fd);
	H_ASSERT_EQ(lunar_register(c, mem, MIB), 0);
	H_ASSERT_EQ(lunar_register(c, other, MIB), 0);
	h_fill(mem + 128, VAL_LEN, h_seed("async/unreg"));
	H_ASSERT_EQ(lunar_put_async(c, "async/unreg", mem + 128, VAL_LEN, NULL, &p), 0);
	/* Done at the proxy (within its 300 ms), so the wait below succeeds. */
	while (!lunar_ready(p))
		h_sleep_ms(1);
	t0 = h_now_ms();
	H_ASSERT_EQ(lunar_unregister(c, other), 0);
	H_ASSERT_MSG(h_now_ms() - t0 < 250, "an idle range took %llu ms",
		     (unsigned long long)(h_now_ms() - t0));
	t0 = h_now_ms();
	H_ASSERT_EQ(lunar_unregister(c, mem), LUNAR_ERR_BUSY);
	H_ASSERT(h_now_ms() - t0 >= 250);
	H_ASSERT_EQ(lunar_wait(p), 0);
	H_ASSERT_EQ(lunar_unregister(c, mem), 0);
	H_ASSERT_EQ(lunar_get_into(c, "async/unreg", back, sizeof(back)), VAL_LEN);
	H_ASSERT(h_verify(back, VAL_LEN, h_seed("async/unreg")) < 0);
	lunar_close(c);
	munmap(mem, MIB);
	munmap(other, MIB);
	close(fd);
	close(other_fd);
}

/*
 * Every completion slot held by a call not yet waited for: the next start
 * (into a registered range) reports BUSY at once, only a wait freeing one,
 * and leaves nothing counted on its range, which unregisters at once while
 * the other calls (staged) are still pending; after a wait it starts.
 */
static void test_async_slots_bound_pending_calls(void **state)
{
	struct lunar_pending *p[SLOTS + 1];
	char buf[16];
	uint8_t *mem;
	uint64_t t0;
	int fd;

	(void)state;
	mem = h_app_memfd("async-slots", MIB, &fd);
	H_ASSERT_EQ(lunar_register(cl, mem, MIB), 0);
	H_ASSERT_EQ(lunar_put(cl, "async/slots", "0123456789abcdef", 16, NULL), 0);
	for (int i = 0; i < SLOTS; i++)
		H_ASSERT_EQ(lunar_get_async(cl, "async/slots", buf, sizeof(buf), &p[i]), 0);
	t0 = h_now_ms();
	H_ASSERT_EQ(lunar_get_async(cl, "async/slots", mem, 16, &p[SLOTS]), LUNAR_ERR_BUSY);
	H_ASSERT_MSG(h_now_ms() - t0 < 1000, "BUSY took %llu ms",
		     (unsigned long long)(h_now_ms() - t0));
	t0 = h_now_ms();
	H_ASSERT_EQ(lunar_unregister(cl, mem), 0);
	H_ASSERT_MSG(h_now_ms() - t0 < 1000, "the unregister took %llu ms",
		     (unsigned long long)(h_now_ms() - t0));
	H_ASSERT_EQ(lunar_wait(p[0]), 16);
	H_ASSERT_EQ(lunar_get_async(cl, "async/slots", buf, sizeof(buf), &p[SLOTS]), 0);
	for (int i = 1; i <= SLOTS; i++)
		H_ASSERT_EQ(lunar_wait(p[i]), 16);
	munmap(mem, MIB);
	close(fd);
}

/* Puts the proxy holds (--debug-put-delay) are pending when it is killed:
 * they turn ready and every wait returns PROXY_UNAVAILABLE soon after; the
 * values' memory is the app's still (no SIGBUS, bytes as they were). */
static void test_async_proxy_killed_under_pending_calls(void **state)
{
	struct lunar_pending *p[4];
	struct lunar_client *c;
	char path[PATH_MAX], key[64];
	struct h_proc *px;
	uint8_t *val;
	uint64_t killed_at;

	(void)state;
	snprintf(path, sizeof(path), "%s", h_path("slow.sock"));
	px = h_start_proxy("slow", path, H_EMBEDDED, "--segment-size", "64MiB", "--debug-put-delay",
			   "5s", NULL);
	H_ASSERT(px != NULL);
	c = h_client_arena(path, 10000, ARENA);
	val = lunar_alloc(c, 4 * VAL_LEN);
	H_ASSERT(val != NULL);
	for (int i = 0; i < 4; i++) {
		key_of(key, sizeof(key), "killed", i);
		h_fill(val + i * VAL_LEN, VAL_LEN, h_seed(key));
		H_ASSERT_EQ(lunar_put_async(c, key, val + i * VAL_LEN, VAL_LEN, NULL, &p[i]), 0);
	}
	h_sleep_ms(300);
	for (int i = 0; i < 4; i++)
		H_ASSERT_EQ(lunar_ready(p[i]), 0);
	killed_at = h_now_ms();
	h_kill(px);
	/* An event loop polling lunar_ready learns of the death too. */
	while (!lunar_ready(p[3]) && h_now_ms() - killed_at < KILL_MS)
		h_sleep_ms(1);
	H_ASSERT_EQ(lunar_ready(p[3]), 1);
	for (int i = 0; i < 4; i++)
		H_ASSERT_EQ(lunar_wait(p[i]), LUNAR_ERR_PROXY_UNAVAILABLE);
	H_ASSERT_MSG(h_now_ms() - killed_at < KILL_MS, "the waits took %llu ms",
		     (unsigned long long)(h_now_ms() - killed_at));
	for (int i = 0; i < 4; i++) {
		key_of(key, sizeof(key), "killed", i);
		H_ASSERT(h_verify(val + i * VAL_LEN, VAL_LEN, h_seed(key)) < 0);
	}
	lunar_free(c, val);
	lunar_close(c);
}

LUNAR_TEST_MAIN(setup, teardown, test_async_registered_round_trip, test_async_staged_round_trip,
		test_async_results_and_errors, test_async_key_read_at_start,
		test_async_too_large_to_stage, test_async_register_between_start_and_wait,
		test_async_unregister_waits_for_pending, test_async_slots_bound_pending_calls,
		test_async_proxy_killed_under_pending_calls)
