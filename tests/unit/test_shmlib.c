/*
 * test_shmlib.c - liblunar against a fake proxy (test_shmlib_fake.h): the
 * handshake and what it refuses, argument checks, put and get, batch get, and
 * a proxy that dies or hangs under a call.
 */
#include "tests/unit/test_shmlib_fake.h"
#include "tests/cmocka_main.h"

/* --- the tests --- */

static void test_shmlib_handshake(void **state)
{
	struct lunar_opts o = {.socket_path = F.path, .tenant = "team-a"};
	struct lunar_client *c = NULL;
	char tenant[LC_TENANT_MAX];

	fake_start(&F);
	assert_int_equal(lunar_connect(&o, &c), 0);
	fake_tenant(tenant);
	assert_string_equal(tenant, "team-a");
	assert_int_equal(lunar_health(c), 0);
	lunar_close(c);
	lunar_close(NULL);
	/* No options: $LUNAR_SOCKET, empty tenant (the proxy's default). */
	setenv("LUNAR_SOCKET", F.path, 1);
	assert_int_equal(lunar_connect(NULL, &c), 0);
	unsetenv("LUNAR_SOCKET");
	fake_tenant(tenant);
	assert_string_equal(tenant, "");
	assert_int_equal(lunar_exists(c, "yes-please"), 1);
	assert_int_equal(lunar_exists(c, "no-thanks"), 0);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_refused(void **state)
{
	struct lunar_opts o = {.socket_path = F.path};
	struct lunar_client *c = NULL;
	char longname[LC_TENANT_MAX + 8];

	o.socket_path = "/nonexistent/lunar.sock";
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_PROXY_UNAVAILABLE);
	o.socket_path = F.path;
	F.refuse = LUNAR_ERR_TOO_MANY_CLIENTS;
	fake_start(&F);
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_TOO_MANY_CLIENTS);
	assert_null(c);
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	o.tenant = longname;
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_INVALID_PARAMS);
	o.tenant = "bad tenant";
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_connect(NULL, NULL), LUNAR_ERR_INVALID_PARAMS);
	fake_stop(&F);
}

static void test_shmlib_bad_header(void **state)
{
	struct lunar_opts o = {.socket_path = F.path};
	struct lunar_client *c = NULL;

	F.bad_magic = 1;
	fake_start(&F);
	assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_PROTOCOL);
	fake_stop(&F);
}

/* What the proxy writes into the ring never stalls a call: the producers'
 * words are the library's own, and a consumer index out of bounds fails the
 * call at once (it used to pass; a far-behind one waited out the timeout). */
static void test_shmlib_ring_scribbled(void **state)
{
	struct lunar_client *c;

	F.ring_scribble = 1; /* with prod_head shared, the commit waited forever */
	fake_start(&F);
	c = connect_fake(1000);
	assert_int_equal(lunar_put(c, "k", "v", 1, NULL), 0);
	assert_int_equal(lunar_exists(c, "k"), 1);
	lunar_close(c);
	fake_stop(&F);
	F.ring_scribble = 2;
	fake_start(&F);
	c = connect_fake(1000);
	assert_int_equal(lunar_put(c, "k", "v", 1, NULL), LUNAR_ERR_PROTOCOL);
	lunar_close(c);
	fake_stop(&F);
}

/* A wake-up descriptor whose write could block (a pipe, a blocking
 * eventfd) is refused at the handshake. */
static void test_shmlib_bad_eventfd(void **state)
{
	struct lunar_opts o = {.socket_path = F.path, .timeout_ms = 1000};
	struct lunar_client *c = NULL;

	for (int mode = 1; mode <= 2; mode++) {
		F.bad_evfd = mode;
		fake_start(&F);
		assert_int_equal(lunar_connect(&o, &c), LUNAR_ERR_PROTOCOL);
		fake_stop(&F);
	}
}

static void test_shmlib_arguments(void **state)
{
	char big[LUNAR_KEY_MAX + 2];
	const char *keys[3] = {"k1", "bad\nkey", "k3"};
	struct iovec v[LUNAR_IOV_MAX + 1] = {{big, 1}};
	const struct iovec *iovs[3] = {v, v, v};
	int cnts[3] = {1, 1, 1}, res[3];
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_int_equal(lunar_put(NULL, "k", "v", 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_exists(NULL, "k"), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_put(c, NULL, "v", 1, NULL), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_put(c, "", "v", 1, NULL), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_put(c, "a\tb", "v", 1, NULL), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_exists(c, big), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lunar_remove_by_regex(c, big, 0), LUNAR_ERR_INVALID_PARAMS);
	big[LUNAR_KEY_MAX] = 0;
	assert_int_equal(lunar_exists(c, big), 0);
	assert_int_equal(lunar_put(c, "k", "v", 0, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_put(c, "k", NULL, 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_putv(c, "k", v, 0, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_putv(c, "k", NULL, 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_putv(c, "k", v, LUNAR_IOV_MAX + 1, NULL), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_getv(c, "k", v, -1), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_get_into(c, "k", big, 0), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_remove_by_regex(c, NULL, 0), LUNAR_ERR_INVALID_PARAMS);
	/* Batches: n == 0 does nothing, bad arrays fail the call, bad keys
	 * fail alone. */
	assert_int_equal(lunar_batch_exists(c, 0, NULL, NULL), 0);
	assert_int_equal(lunar_batch_exists(c, LUNAR_BATCH_MAX + 1, keys, res),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_batch_exists(c, 3, NULL, res), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_batch_put(c, 3, keys, NULL, cnts, NULL, res),
			 LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_batch_put(c, 3, keys, iovs, cnts, NULL, res), 0);
	assert_int_equal(res[0], 0);
	assert_int_equal(res[1], LUNAR_ERR_INVALID_KEY);
	assert_int_equal(res[2], 0);
	assert_int_equal(lunar_batch_exists(c, 3, keys, res), 0);
	assert_int_equal(res[0], 1);
	assert_int_equal(res[1], LUNAR_ERR_INVALID_KEY);
	assert_int_equal(res[2], 1);
	assert_int_equal(lunar_register(NULL, big, 16), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, NULL, 16), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, big, 0), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, (void *)-4096, 8192), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_unregister(c, big), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_unregister(NULL, big), LUNAR_ERR_INVALID_PARAMS);
	assert_null(lunar_alloc(c, 0));
	assert_null(lunar_alloc(NULL, 64));
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_put_get(void **state)
{
	static uint8_t val[10000], out[12000];
	struct iovec in[3] = {{val, 1}, {val + 1, 4999}, {val + 5000, 5000}};
	struct iovec dst[4] = {
	    {out, 3000}, {out + 3000, 0}, {out + 3000, 3000}, {out + 6000, 6000}};
	const char *pk[4] = {"p0", "p1", "p2", "p3"};
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	fill(val, sizeof(val), 1);
	assert_int_equal(lunar_putv(c, "obj", in, 3, NULL), 0);
	assert_int_equal(lunar_get_size(c, "obj"), (int64_t)sizeof(val));
	memset(out, 0xee, sizeof(out));
	assert_int_equal(lunar_getv(c, "obj", dst, 4), (int64_t)sizeof(val));
	assert_memory_equal(out, val, sizeof(val));
	assert_int_equal(out[sizeof(val)], 0xee); /* nothing past the value */
	assert_int_equal(lunar_get_into(c, "obj", out, 100), LUNAR_ERR_BUFFER_OVERFLOW);
	assert_int_equal(lunar_get_into(c, "none", out, 100), LUNAR_ERR_OBJECT_NOT_FOUND);
	/* put keeps the first value, upsert replaces it. */
	assert_int_equal(lunar_put(c, "obj", "x", 1, NULL), 0);
	assert_int_equal(lunar_get_size(c, "obj"), (int64_t)sizeof(val));
	assert_int_equal(lunar_upsert(c, "obj", "xyz", 3, NULL), 0);
	assert_int_equal(lunar_get_into(c, "obj", out, sizeof(out)), 3);
	assert_memory_equal(out, "xyz", 3);
	/* The arena's first eighth is cells for small calls (16 of 8 KiB,
	 * fewer than the 64 slots): a value larger than the rest can never be
	 * staged and bounces through lunar_alloc memory, one a little smaller
	 * is staged. */
	{
		size_t most = FAKE_ARENA - FAKE_ARENA / 8, len = most - 4096;
		uint8_t *huge = calloc(1, FAKE_ARENA + 1);

		assert_int_equal(lunar_put(c, "huge", huge, most + 1, NULL), 0);
		assert_int_equal(lunar_get_size(c, "huge"), (int64_t)(most + 1));
		assert_int_equal(lunar_remove(c, "huge", 0), 0);
		fill(huge, len, 5);
		assert_int_equal(lunar_put(c, "big", huge, len, NULL), 0);
		assert_int_equal(lunar_get_size(c, "big"), (int64_t)len);
		assert_int_equal(lunar_remove(c, "big", 0), 0);
		/* A destination larger than the arena still takes a small value. */
		assert_int_equal(lunar_get_into(c, "obj", huge, FAKE_ARENA + 1), 3);
		assert_memory_equal(huge, "xyz", 3);
		assert_int_equal(lunar_get_into(c, "none", huge, FAKE_ARENA + 1),
				 LUNAR_ERR_OBJECT_NOT_FOUND);
		free(huge);
	}
	assert_int_equal(lunar_put(c, "p0", "a", 1, NULL), 0);
	assert_int_equal(lunar_put(c, "p1", "b", 1, NULL), 0);
	assert_int_equal(lunar_put(c, "p3", "d", 1, NULL), 0);
	assert_int_equal(lunar_prefix_match(c, 4, pk), 2);
	assert_int_equal(lunar_prefix_match(c, 0, pk), 0);
	assert_int_equal(lunar_remove(c, "p0", 0), 0);
	assert_int_equal(lunar_remove(c, "p0", 1), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(lunar_remove_by_regex(c, "p", 0), 2);
	assert_int_equal(lunar_remove_all(c, 1), 1);
	assert_int_equal(lunar_exists(c, "obj"), 0);
	lunar_close(c);
	fake_stop(&F);
}

/* Each staged piece of a value starts on a cache line of the arena,
 * whatever the length of the keys before it and of the pieces beside it:
 * the copies into and out of a piece (the kernel's, into and out of a
 * socket) run at half speed or worse when it does not. */
static void test_shmlib_staged_values_line_aligned(void **state)
{
	static uint8_t val[1080], out[1080];
	struct iovec in[2] = {{val, 1003}, {val + 1003, 77}};
	struct iovec dst[2] = {{out, 77}, {out + 77, 1003}};
	char key[80];
	struct lunar_client *c;

	(void)state;
	fake_start(&F);
	c = connect_fake(0);
	fill(val, sizeof(val), 9);
	for (size_t len = 1; len < sizeof(key) - 10; len++) {
		memset(key, 'k', len);
		key[len] = '\0';
		assert_int_equal(lunar_putv(c, key, in, 2, NULL), 0);
		memset(out, 0, sizeof(out));
		assert_int_equal(lunar_getv(c, key, dst, 2), (int64_t)sizeof(val));
		assert_memory_equal(out, val, sizeof(val));
	}
	assert_int_equal(fake_unaligned(), 0);
	lunar_close(c);
	fake_stop(&F);
}

/* When the proxy asks (LC_WELCOME_SEG_CRC), a put's staged pieces carry
 * the CRC32C of their bytes, taken in the staging copy, and say so
 * (LC_SQE_SEG_CRC): the proxy then sends them without a pass of its own. A
 * put of registered memory, which is not copied, and a get carry none, nor
 * does any put when the proxy did not ask. */
static void test_shmlib_staged_puts_carry_crcs(void **state)
{
	static uint8_t val[70000], out[70000];
	struct iovec in[3] = {{val, 1}, {val + 1, 4095}, {val + 4096, sizeof(val) - 4096}};
	struct lunar_client *c;
	uint8_t *reg;

	(void)state;
	fill(val, sizeof(val), 3);
	fake_start(&F);
	c = connect_fake(0);
	assert_int_equal(lunar_putv(c, "unasked", in, 3, NULL), 0);
	assert_int_equal(fake_crc_puts(), 0);
	lunar_close(c);
	fake_stop(&F);
	F.welcome_flags = LC_WELCOME_SEG_CRC;
	fake_start(&F);
	c = connect_fake(0);
	assert_int_equal(lunar_putv(c, "three", in, 3, NULL), 0);
	assert_int_equal(lunar_put(c, "one", val, 100, NULL), 0);
	assert_int_equal(fake_crc_puts(), 2);
	assert_int_equal(lunar_get_into(c, "three", out, sizeof(out)), (int64_t)sizeof(val));
	assert_memory_equal(out, val, sizeof(val));
	reg = lunar_alloc(c, 4096);
	assert_non_null(reg);
	memcpy(reg, val, 4096);
	assert_int_equal(lunar_put(c, "registered", reg, 4096, NULL), 0);
	assert_int_equal(fake_crc_puts(), 2);
	assert_int_equal(fake_crc_wrong(), 0);
	lunar_free(c, reg);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_batch_get(void **state)
{
	enum { N = 40 };
	static uint8_t vals[N][300], outs[N][300];
	const char *keys[N];
	char names[N][16];
	struct iovec vin[N], vout[N];
	const struct iovec *iin[N], *iout[N];
	int cnt[N], pres[N];
	int64_t gres[N];
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	for (int i = 0; i < N; i++) {
		snprintf(names[i], sizeof(names[i]), "b%d", i);
		keys[i] = names[i];
		fill(vals[i], 100 + i, (unsigned)i);
		vin[i] = (struct iovec){vals[i], 100 + (size_t)i};
		vout[i] = (struct iovec){outs[i], i == 7 ? 50 : 300};
		iin[i] = &vin[i];
		iout[i] = &vout[i];
		cnt[i] = 1;
	}
	assert_int_equal(lunar_batch_put(c, N - 1, keys, iin, cnt, NULL, pres), 0);
	assert_int_equal(lunar_batch_get_into(c, N, keys, iout, cnt, gres), 0);
	for (int i = 0; i < N - 1; i++) {
		if (i == 7) {
			assert_int_equal(gres[i], LUNAR_ERR_BUFFER_OVERFLOW);
			continue;
		}
		assert_int_equal(pres[i], 0);
		assert_int_equal(gres[i], 100 + i);
		assert_memory_equal(outs[i], vals[i], 100 + (size_t)i);
	}
	assert_int_equal(gres[N - 1], LUNAR_ERR_OBJECT_NOT_FOUND);
	/* Destinations too big to stage together: sizes first, then the get. */
	for (int i = 0; i < 3; i++) {
		vout[i] = (struct iovec){calloc(1, FAKE_ARENA / 2), FAKE_ARENA / 2};
		keys[i] = i == 1 ? "missing" : names[i];
	}
	vout[2].iov_len = 50; /* too small for b2's 102 bytes */
	assert_int_equal(lunar_batch_get_into(c, 3, keys, iout, cnt, gres), 0);
	assert_int_equal(gres[0], 100);
	assert_memory_equal(vout[0].iov_base, vals[0], 100);
	assert_int_equal(gres[1], LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(gres[2], LUNAR_ERR_BUFFER_OVERFLOW);
	for (int i = 0; i < 3; i++)
		free(vout[i].iov_base);
	lunar_close(c);
	fake_stop(&F);
}

static void *killer_run(void *arg)
{
	usleep(150 * 1000);
	fake_stop(&F);
	return NULL;
}

static void *hung_exists_run(void *arg)
{
	return (void *)(intptr_t)lunar_exists(arg, "before");
}

static void test_shmlib_proxy_death(void **state)
{
	struct lunar_client *c;
	pthread_t killer, hung[6];
	void *ret;
	uint64_t t0;
	char out[8];

	fake_start(&F);
	c = connect_fake(10000);
	assert_int_equal(lunar_put(c, "before", "v", 1, NULL), 0);
	/* The proxy stops answering, then dies while the call waits. */
	lc_store_release(&F.hang, 1);
	pthread_create(&killer, NULL, killer_run, NULL);
	for (int i = 0; i < 6; i++)
		pthread_create(&hung[i], NULL, hung_exists_run, c);
	t0 = lc_now_ms();
	assert_int_equal(lunar_exists(c, "before"), LUNAR_ERR_PROXY_UNAVAILABLE);
	assert_true(lc_now_ms() - t0 < 2000);
	for (int i = 0; i < 6; i++) {
		pthread_join(hung[i], &ret);
		assert_int_equal((intptr_t)ret, LUNAR_ERR_PROXY_UNAVAILABLE);
	}
	pthread_join(killer, NULL);
	/* Down: quick failures, health says 1. */
	t0 = lc_now_ms();
	assert_int_equal(lunar_exists(c, "before"), LUNAR_ERR_PROXY_UNAVAILABLE);
	assert_int_equal(lunar_health(c), 1);
	assert_true(lc_now_ms() - t0 < 1000);
	/* Back: the next call reconnects. */
	lc_store_release(&F.hang, 0);
	fake_start(&F);
	assert_int_equal(lunar_health(c), 0);
	assert_int_equal(lunar_get_into(c, "before", out, sizeof(out)), 1);
	lunar_close(c);
	fake_stop(&F);
}

static void test_shmlib_timeout(void **state)
{
	struct lunar_client *c;
	uint64_t t0, dt;
	int nadd, ndel;
	uint8_t *p;

	fake_start(&F);
	c = connect_fake(300);
	p = lunar_alloc(c, 64);
	assert_non_null(p);
	lc_store_release(&F.hang, 1);
	t0 = lc_now_ms();
	assert_int_equal(lunar_put(c, "slow", "v", 1, NULL), LUNAR_ERR_PROXY_UNAVAILABLE);
	dt = lc_now_ms() - t0;
	assert_true(dt >= 250 && dt < 1500);
	/* The timed-out session is dropped; a new one serves the next call.
	 * lunar_alloc memory stays valid, shared with the new session. */
	lc_store_release(&F.hang, 0);
	memcpy(p, "late", 4);
	assert_int_equal(lunar_put(c, "slow", p, 4, NULL), 0);
	assert_read_in_place(p);
	assert_int_equal(fake_nsess(), 2);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 2);
	assert_int_equal(lunar_exists(c, "slow"), 1);
	lunar_free(c, p);
	lunar_close(c);
	fake_stop(&F);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_shmlib_handshake, test_shmlib_refused,
		     test_shmlib_bad_header, test_shmlib_ring_scribbled, test_shmlib_bad_eventfd,
		     test_shmlib_arguments, test_shmlib_put_get,
		     test_shmlib_staged_values_line_aligned, test_shmlib_staged_puts_carry_crcs,
		     test_shmlib_batch_get, test_shmlib_proxy_death, test_shmlib_timeout)
