/*
 * test_shmlib_threads.c - liblunar's threads against a fake proxy
 * (test_shmlib_fake.h): many threads on one handle, a call that takes no
 * lock, and reconnects churning under calls.
 */
#include "tests/unit/test_shmlib_fake.h"
#include "tests/cmocka_main.h"

struct worker {
	struct lunar_client *c;
	int id;
	int errors;
};

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	uint8_t val[2000], out[2000];
	char key[32];

	for (int j = 0; j < 300; j++) {
		size_t len = 1 + (size_t)((w->id * 131 + j * 17) % (int)sizeof(val));
		/* Every third value lives in lunar_alloc memory. */
		uint8_t *v = j % 3 ? val : lunar_alloc(w->c, len);

		if (!v) {
			w->errors++;
			continue;
		}
		snprintf(key, sizeof(key), "t%d-%d", w->id, j);
		fill(v, len, (unsigned)(w->id * 1000 + j));
		w->errors += lunar_put(w->c, key, v, len, NULL) != 0;
		w->errors += lunar_get_into(w->c, key, out, sizeof(out)) != (int64_t)len;
		w->errors += memcmp(v, out, len) != 0;
		w->errors += lunar_exists(w->c, key) != 1;
		if (v != val)
			lunar_free(w->c, v);
	}
	return NULL;
}

static void test_shmlib_threads(void **state)
{
	enum { T = 12 };
	struct worker w[T];
	pthread_t th[T];
	struct lunar_client *c;

	/* Fewer slots and ring entries than threads: both must be waited for. */
	F.slots = 4;
	F.entries = 2;
	fake_start(&F);
	c = connect_fake(0);
	for (int i = 0; i < T; i++) {
		w[i] = (struct worker){c, i, 0};
		pthread_create(&th[i], NULL, worker_run, &w[i]);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].errors, 0);
	}
	lunar_close(c);
	fake_stop(&F);
}

struct call {
	struct lunar_client *c;
	int rc;
	int done; /* atomic */
};

static void *call_run(void *arg)
{
	struct call *k = arg;
	uint8_t v[512] = {1}, out[512];

	k->rc = lunar_put(k->c, "nolock", v, sizeof(v), NULL);
	if (!k->rc)
		k->rc = lunar_get_into(k->c, "nolock", out, sizeof(out)) == sizeof(v) ? 0 : -1;
	lc_store_release(&k->done, 1);
	return NULL;
}

static void test_shmlib_call_takes_no_lock(void **state)
{
	struct call k = {NULL, -1, 0};
	struct shm_conn *cn;
	pthread_t th;
	uint64_t end;
	int done;

	fake_start(&F);
	k.c = connect_fake(5000);
	cn = k.c->conn;
	/* Another thread holds the handle's lock (a reconnect) and the
	 * session's (a waiter for a slot or a large arena block): a call
	 * with its session up and small arguments goes through all the same. */
	pthread_mutex_lock(&k.c->lock);
	pthread_mutex_lock(&cn->lock);
	pthread_create(&th, NULL, call_run, &k);
	end = lc_now_ms() + 2000;
	while (!(done = lc_load_acquire(&k.done)) && lc_now_ms() < end)
		usleep(1000);
	pthread_mutex_unlock(&cn->lock);
	pthread_mutex_unlock(&k.c->lock);
	pthread_join(th, NULL);
	assert_true(done);
	assert_int_equal(k.rc, 0);
	lunar_close(k.c);
	fake_stop(&F);
}

struct churn {
	struct lunar_client *c;
	uint8_t *reg; /* registered: 256 bytes a thread */
	int stop;     /* atomic */
	int ok;	      /* atomic */
};

static void *churn_run(void *arg)
{
	static int ids;
	struct churn *k = arg;
	int id = lc_fetch_add(&ids, 1);
	uint8_t *v = k->reg + 256 * (id % 4), out[256];
	char key[16];

	snprintf(key, sizeof(key), "churn%d", id);
	while (!lc_load_acquire(&k->stop))
		if (!lunar_put(k->c, key, v, 256, NULL) &&
		    lunar_get_into(k->c, key, out, sizeof(out)) == 256)
			lc_fetch_add(&k->ok, 1);
	return NULL;
}

static int sessions_kept(const struct lunar_client *c)
{
	int n = 0;

	for (const struct shm_conn *cn = c->conns; cn; cn = cn->older)
		n++;
	return n;
}

static void test_shmlib_reconnect_churn(void **state)
{
	struct churn k = {NULL, NULL, 0, 0};
	pthread_t th[4];
	int fd, fds;

	fake_start(&F);
	k.c = connect_fake(2000);
	/* A round trip first: the fake closes its copies of the handshake's
	 * descriptors after the welcome, and lunar_register looks through
	 * this process's descriptors (TSan would call that a race). */
	assert_int_equal(lunar_health(k.c), 0);
	k.reg = memfd_map(4096, 1, &fd);
	assert_int_equal(lunar_register(k.c, k.reg, 4096), 0);
	fds = test_open_fds();
	/* Calls from four threads while the proxy dies and comes back 20
	 * times: each time some thread reconnects while others call. */
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, churn_run, &k);
	for (int r = 0; r < 20; r++) {
		usleep(20 * 1000);
		fake_stop(&F);
		usleep(2 * 1000);
		fake_start(&F);
	}
	usleep(20 * 1000);
	lc_store_release(&k.stop, 1);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_true(lc_load_acquire(&k.ok) > 0);
	/* One more reconnect with no call in flight frees every replaced
	 * session: one struct is left, and the descriptors are as before. */
	fake_stop(&F);
	fake_start(&F);
	for (int i = 0; i < 3 && lunar_health(k.c) != 0; i++)
		;
	assert_int_equal(lunar_health(k.c), 0);
	assert_int_equal(sessions_kept(k.c), 1);
	assert_int_equal(test_open_fds(), fds);
	lunar_close(k.c);
	munmap(k.reg, 4096);
	close(fd);
	fake_stop(&F);
}

LUNAR_TEST_MAIN_EACH(setup, teardown, test_shmlib_threads, test_shmlib_call_takes_no_lock,
		     test_shmlib_reconnect_churn)
