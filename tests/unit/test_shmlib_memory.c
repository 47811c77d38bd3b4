/*
 * test_shmlib_memory.c - liblunar's zero-copy memory against a fake proxy
 * (test_shmlib_fake.h): lunar_alloc, lunar_register and unregister, a
 * registration across a proxy restart and one that times out, and a full
 * arena.
 */
#include "tests/unit/test_shmlib_fake.h"
#include "tests/cmocka_main.h"

static void test_shmlib_alloc(void **state)
{
	struct lunar_client *c;
	uint8_t *p, *q, *a[16], *big;
	int n = 0, nadd, ndel;

	fake_start(&F);
	c = connect_fake(0);
	p = lunar_alloc(c, 4096);
	q = lunar_alloc(c, 4096);
	assert_non_null(p);
	assert_non_null(q);
	fill(p, 4096, 9);
	assert_int_equal(lunar_put(c, "zc", p, 4096, NULL), 0);
	assert_read_in_place(p);
	assert_int_equal(lunar_get_into(c, "zc", q, 4096), 4096);
	assert_int_not_equal(fake_last_region(), 0);
	assert_memory_equal(p, q, 4096);
	lunar_free(c, p);
	lunar_free(c, q);
	lunar_free(c, &n); /* not ours: ignored */
	lunar_free(c, NULL);
	lunar_free(NULL, q);
	/* Blocks come out of one registered chunk, freed space is reused, and
	 * lunar_alloc memory is not bounded by the arena. */
	for (n = 0; n < 16; n++) {
		a[n] = lunar_alloc(c, FAKE_ARENA * 3);
		assert_non_null(a[n]);
		memset(a[n], n, FAKE_ARENA * 3);
	}
	for (n = 0; n < 16; n++)
		lunar_free(c, a[n]);
	for (n = 0; n < 16; n++)
		assert_non_null(a[n] = lunar_alloc(c, FAKE_ARENA * 3));
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 1);
	/* Larger than a chunk: a chunk of its own. */
	big = lunar_alloc(c, (64u << 20) + 1);
	assert_non_null(big);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 2);
	fill(big + (64u << 20) - 99, 100, 4);
	assert_int_equal(lunar_put(c, "big", big + (64u << 20) - 99, 100, NULL), 0);
	assert_read_in_place(big + (64u << 20) - 99);
	assert_int_equal(lunar_get_into(c, "big", a[3], 100), 100);
	assert_memory_equal(a[3], big + (64u << 20) - 99, 100);
	lunar_free(c, big);
	for (n = 0; n < 16; n++)
		lunar_free(c, a[n]);
	/* lunar_close unmaps the chunks; it unregisters nothing one by one. */
	lunar_close(c);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(ndel, 0);
	fake_stop(&F);
}

static void test_shmlib_register(void **state)
{
	enum { LEN = 64 * 1024 };
	static uint8_t out[LEN];
	uint8_t *p, *u, *view, *heap = calloc(1, LEN), *a;
	int fd, ufd, nadd, ndel, rc;
	struct lunar_client *c;

	fake_start(&F);
	c = connect_fake(0);
	p = memfd_map(LEN, 1, &fd);
	u = memfd_map(LEN, 0, &ufd);
	/* Not memfd memory, not sealed, not wholly inside the mapping, not
	 * shared or not writable: refused before the proxy hears of it. */
	assert_int_equal(lunar_register(c, heap, LEN), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, u, LEN), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, p + 4096, LEN), LUNAR_ERR_INVALID_PARAMS);
	view = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	assert_int_equal(lunar_register(c, view, LEN), LUNAR_ERR_INVALID_PARAMS);
	munmap(view, LEN);
	view = mmap(NULL, LEN, PROT_READ, MAP_SHARED, fd, 0);
	assert_int_equal(lunar_register(c, view, LEN), LUNAR_ERR_INVALID_PARAMS);
	munmap(view, LEN);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 0);
	/* Sealed memfd memory: registered once however often asked; a range
	 * overlapping it is refused. */
	assert_int_equal(lunar_register(c, p + 100, LEN - 200), 0);
	assert_int_equal(lunar_register(c, p + 100, LEN - 200), 0);
	assert_int_equal(lunar_register(c, p, LEN), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_register(c, p + 200, 10), LUNAR_ERR_INVALID_PARAMS);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 1);
	/* Puts read it in place, gets write it in place. */
	fill(p + 100, 5000, 3);
	assert_int_equal(lunar_put(c, "reg", p + 100, 5000, NULL), 0);
	assert_read_in_place(p + 100);
	assert_int_equal(lunar_get_into(c, "reg", p + 20000, 5000), 5000);
	assert_int_not_equal(fake_last_region(), 0);
	assert_memory_equal(p + 20000, p + 100, 5000);
	/* A buffer reaching outside the range is staged. */
	assert_int_equal(lunar_put(c, "edge", p + 50, 5000, NULL), 0);
	assert_int_equal(fake_last_region(), 0);
	assert_int_equal(lunar_get_into(c, "edge", out, LEN), 5000);
	assert_memory_equal(out, p + 50, 5000);
	/* Unregistered: the proxy is told, calls stage it again. */
	assert_int_equal(lunar_unregister(c, p + 100), 0);
	assert_int_equal(lunar_unregister(c, p + 100), LUNAR_ERR_INVALID_PARAMS);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(ndel, 1);
	assert_int_equal(lunar_get_into(c, "reg", p + 30000, 5000), 5000);
	assert_int_equal(fake_last_region(), 0);
	assert_memory_equal(p + 30000, p + 100, 5000);
	/* lunar_alloc memory is registered already. */
	a = lunar_alloc(c, 4096);
	assert_non_null(a);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(lunar_register(c, a + 64, 100), 0);
	assert_int_equal(lunar_unregister(c, a + 64), 0);
	fake_regs_seen(&rc, &ndel);
	assert_int_equal(rc, nadd);
	assert_int_equal(ndel, 1);
	memcpy(a, "alloc", 5);
	assert_int_equal(lunar_put(c, "alloc", a, 5, NULL), 0);
	assert_read_in_place(a);
	/* The caller closed its descriptor: /proc/self/map_files opens the
	 * memfd when we are privileged enough, else the range is refused. */
	close(fd);
	rc = lunar_register(c, p, 8192);
	assert_true(rc == 0 || rc == LUNAR_ERR_INVALID_PARAMS);
	if (!rc) {
		assert_int_equal(lunar_put(c, "mapfile", p + 4000, 100, NULL), 0);
		assert_read_in_place(p + 4000);
	}
	/* The table holds LC_MAX_REGIONS ranges (the chunk and maybe p among
	 * them); pages of one mapping are ranges of their own. */
	view = memfd_map(4096 * (LC_MAX_REGIONS + 1), 1, &fd);
	for (int i = 0; i <= LC_MAX_REGIONS; i++)
		if ((rc = lunar_register(c, view + 4096 * i, 1)) != 0)
			break;
	assert_int_equal(rc, LUNAR_ERR_NO_AVAILABLE_HANDLE);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd - ndel, LC_MAX_REGIONS);
	lunar_close(c);
	munmap(view, 4096 * (LC_MAX_REGIONS + 1));
	close(fd);
	munmap(p, LEN);
	munmap(u, LEN);
	close(ufd);
	free(heap);
	fake_stop(&F);
}

static void test_shmlib_reg_restart(void **state)
{
	enum { LEN = 16 * 1024 };
	struct lunar_client *c;
	uint8_t *p, *a;
	uint32_t r0;
	int fd, nadd, ndel;

	fake_start(&F);
	c = connect_fake(0);
	p = memfd_map(LEN, 1, &fd);
	assert_int_equal(lunar_register(c, p, LEN), 0);
	a = lunar_alloc(c, 1000);
	assert_non_null(a);
	fill(p, 1000, 5);
	fill(a, 1000, 6);
	assert_int_equal(lunar_put(c, "r1", p, 1000, NULL), 0);
	r0 = fake_last_region();
	assert_int_not_equal(r0, 0);
	fake_stop(&F);
	assert_int_equal(lunar_health(c), 1);
	/* The proxy is back: the next call reconnects, and both ranges are
	 * registered with it (new region numbers) before the call runs. */
	fake_start(&F);
	assert_int_equal(lunar_put(c, "r2", p, 1000, NULL), 0);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 4);
	assert_int_not_equal(fake_last_region(), r0);
	assert_read_in_place(p);
	assert_int_equal(lunar_put(c, "a2", a, 1000, NULL), 0);
	assert_read_in_place(a);
	assert_int_equal(lunar_get_into(c, "r2", a, 1000), 1000);
	assert_memory_equal(a, p, 1000);
	/* A proxy that refuses them: staged, still correct. */
	fake_stop(&F);
	assert_int_equal(lunar_health(c), 1);
	F.refuse_reg = LUNAR_ERR_TENANT_QUOTA_EXCEEDED;
	fake_start(&F);
	fill(p, 1000, 7);
	assert_int_equal(lunar_put(c, "r3", p, 1000, NULL), 0);
	assert_int_equal(fake_last_region(), 0);
	assert_int_equal(lunar_get_into(c, "r3", a, 1000), 1000);
	assert_int_equal(fake_last_region(), 0);
	assert_memory_equal(a, p, 1000);
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(nadd, 6);
	/* The range stays in the table, unshared; a live proxy's refusal of a
	 * new registration is the caller's answer. */
	assert_int_equal(lunar_register(c, p + LEN / 2, 100), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lunar_unregister(c, p), 0);
	assert_int_equal(lunar_register(c, p, LEN), LUNAR_ERR_TENANT_QUOTA_EXCEEDED);
	assert_null(lunar_alloc(c, (64u << 20) + 1));
	fake_regs_seen(&nadd, &ndel);
	assert_int_equal(ndel, 0); /* nothing was shared with this session */
	lunar_free(c, a);
	lunar_close(c);
	munmap(p, LEN);
	close(fd);
	fake_stop(&F);
}

static void test_shmlib_reg_timeout(void **state)
{
	struct lunar_client *c;
	uint64_t t0, dt;
	uint8_t *p;
	int fd;

	fake_start(&F);
	c = connect_fake(300);
	p = memfd_map(8192, 1, &fd);
	fake_set(&F.reg_silent, 1);
	t0 = lc_now_ms();
	assert_int_equal(lunar_register(c, p, 8192), LUNAR_ERR_PROXY_UNAVAILABLE);
	dt = lc_now_ms() - t0;
	assert_true(dt >= 250 && dt < 1500);
	/* A late reply would answer the next request: the session was
	 * dropped, and a new one serves the next call. */
	fake_set(&F.reg_silent, 0);
	assert_int_equal(lunar_register(c, p, 8192), 0);
	assert_int_equal(fake_nsess(), 2);
	memcpy(p, "hello", 5);
	assert_int_equal(lunar_put(c, "hello", p, 5, NULL), 0);
	assert_read_in_place(p);
	lunar_close(c);
	munmap(p, 8192);
	close(fd);
	fake_stop(&F);
}

struct wide_put {
	struct lunar_client *c;
	uint8_t *val;
	int rc;
};

static void *wide_put_run(void *arg)
{
	struct wide_put *w = arg;

	w->rc = lunar_put(w->c, "first", w->val, FAKE_ARENA / 4 * 3, NULL);
	return NULL;
}

static void test_shmlib_arena_full(void **state)
{
	uint8_t *val = calloc(1, FAKE_ARENA);
	struct wide_put w;
	pthread_t th;
	uint64_t t0;

	fake_start(&F);
	w = (struct wide_put){connect_fake(5000), val, -1};
	/* A slow put holds most of the arena with its staged value; the next
	 * one waits for the space, then goes through. */
	fake_set(&F.delay_ms, 300);
	pthread_create(&th, NULL, wide_put_run, &w);
	usleep(100 * 1000);
	t0 = lc_now_ms();
	assert_int_equal(lunar_put(w.c, "wide", val, FAKE_ARENA / 2, NULL), 0);
	assert_true(lc_now_ms() - t0 >= 350);
	pthread_join(th, NULL);
	assert_int_equal(w.rc, 0);
	fake_set(&F.delay_ms, 0);
	assert_int_equal(lunar_get_size(w.c, "wide"), FAKE_ARENA / 2);
	free(val);
	lunar_close(w.c);
	fake_stop(&F);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_shmlib_alloc, test_shmlib_register,
		     test_shmlib_reg_restart, test_shmlib_reg_timeout, test_shmlib_arena_full)
