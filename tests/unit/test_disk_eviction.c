/*
 * test_disk_eviction.c - the SSD bucket store making room: fifo, lru and
 * high-watermark eviction with notify (and a refusal that keeps a bucket),
 * injected ENOSPC, and a read in flight holding off deletion.
 */
#include <stdatomic.h>

#include "tests/unit/test_disk_util.h"
#include "tests/cmocka_main.h"

/* notify recorder: refuses buckets holding key `refuse` */
struct notes {
	pthread_mutex_t mu;
	char keys[64][32];
	int n, calls;
	const char *refuse;
	int refuse_all;
};

static int notify_rec(void *arg, const struct dsk_record *recs, size_t n)
{
	struct notes *no = arg;
	int rc = 0;

	pthread_mutex_lock(&no->mu);
	no->calls++;
	for (size_t i = 0; i < n; i++)
		if (no->refuse_all || (no->refuse && !strcmp(recs[i].key, no->refuse)))
			rc = -1;
	for (size_t i = 0; i < n && !rc && no->n < 64; i++)
		snprintf(no->keys[no->n++], 32, "%s", recs[i].key);
	pthread_mutex_unlock(&no->mu);
	return rc;
}

static int notes_n(struct notes *no)
{
	int n;

	pthread_mutex_lock(&no->mu);
	n = no->n;
	pthread_mutex_unlock(&no->mu);
	return n;
}

#define OBJ	   (64 * KIB)
#define PER_BUCKET (OBJ + 512)

static struct dsk_config cfg_evict(struct notes *no, unsigned nbuckets, enum dsk_policy pol)
{
	struct dsk_config cfg = cfg_base(nbuckets * PER_BUCKET);

	cfg.bucket_objects = 1;
	cfg.high_watermark = 1.0;
	cfg.policy = pol;
	cfg.notify = notify_rec;
	cfg.notify_arg = no;
	return cfg;
}

static void test_disk_fifo_evicts_oldest(void **st)
{
	struct notes no = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct dsk_config cfg = cfg_evict(&no, 4, DSK_FIFO);
	struct dsk_store *s = open_ok(&cfg, NULL);
	struct dsk_stats stt;
	char key[16];

	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(put_pat(s, key, OBJ, i, 0), 0);
		if (i == 1)
			assert_int_equal(get_pat(s, "k0", OBJ, 0, 0), OBJ); /* fifo ignores reads */
	}
	assert_int_equal(no.n, 2);
	assert_string_equal(no.keys[0], "k0");
	assert_string_equal(no.keys[1], "k1");
	assert_false(file_exists(1, "dat") || file_exists(1, "meta") || file_exists(2, "dat"));
	for (int i = 0; i < 6; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(get_pat(s, key, OBJ, i, 0),
				 i < 2 ? (int64_t)LUNAR_ERR_OBJECT_NOT_FOUND : (int64_t)OBJ);
	}
	dsk_stats(s, &stt);
	assert_int_equal(stt.evicted_buckets, 2);
	assert_true(stt.used <= stt.capacity);
	/* larger than the whole capacity: refused and counted, nothing stored */
	assert_int_equal(put_pat(s, "huge", 5 * OBJ, 9, 0), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(get_pat(s, "huge", 5 * OBJ, 9, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	dsk_stats(s, &stt);
	assert_int_equal(stt.full_failures, 1);
	dsk_store_close(s);
}

static void test_disk_notify_refusal_keeps_bucket(void **st)
{
	struct notes no = {.mu = PTHREAD_MUTEX_INITIALIZER, .refuse = "k0"};
	struct dsk_config cfg = cfg_evict(&no, 3, DSK_FIFO);
	struct dsk_store *s = open_ok(&cfg, NULL);
	struct dsk_stats stt;

	assert_int_equal(put_pat(s, "k0", OBJ, 0, 0), 0);
	assert_int_equal(put_pat(s, "k1", OBJ, 1, 0), 0);
	assert_int_equal(put_pat(s, "k2", OBJ, 2, 0), 0);
	assert_int_equal(put_pat(s, "k3", OBJ, 3, 0), 0); /* k0 refused: k1 goes */
	assert_int_equal(no.n, 1);
	assert_string_equal(no.keys[0], "k1");
	assert_int_equal(get_pat(s, "k0", OBJ, 0, 0), OBJ);
	assert_int_equal(get_pat(s, "k1", OBJ, 1, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_true(file_exists(1, "dat"));
	dsk_stats(s, &stt);
	assert_int_equal(stt.notify_failures, 1);

	no.refuse_all = 1; /* nothing may go: the put is refused, all stay */
	assert_int_equal(put_pat(s, "k4", OBJ, 4, 0), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	assert_int_equal(get_pat(s, "k0", OBJ, 0, 0), OBJ);
	assert_int_equal(get_pat(s, "k2", OBJ, 2, 0), OBJ);
	assert_int_equal(get_pat(s, "k3", OBJ, 3, 0), OBJ);
	dsk_stats(s, &stt);
	assert_int_equal(stt.full_failures, 1);
	assert_int_equal(stt.buckets, 3);
	dsk_store_close(s);
}

static void test_disk_lru_evicts_least_read(void **st)
{
	struct notes no = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct dsk_config cfg = cfg_evict(&no, 3, DSK_LRU);
	struct dsk_store *s = open_ok(&cfg, NULL);

	assert_int_equal(put_pat(s, "A", OBJ, 1, 0), 0);
	assert_int_equal(put_pat(s, "B", OBJ, 2, 0), 0);
	assert_int_equal(put_pat(s, "C", OBJ, 3, 0), 0);
	assert_int_equal(get_pat(s, "A", OBJ, 1, 0), OBJ);
	assert_int_equal(put_pat(s, "D", OBJ, 4, 0), 0); /* B: least recently used */
	assert_int_equal(no.n, 1);
	assert_string_equal(no.keys[0], "B");
	assert_int_equal(get_pat(s, "C", OBJ, 3, 0), OBJ);
	assert_int_equal(put_pat(s, "E", OBJ, 5, 0), 0); /* A now */
	assert_string_equal(no.keys[1], "A");
	assert_int_equal(get_pat(s, "A", OBJ, 1, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "B", OBJ, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(get_pat(s, "D", OBJ, 4, 0), OBJ);
	dsk_store_close(s);
}

static void test_disk_high_watermark(void **st)
{
	struct notes no = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct dsk_config cfg = cfg_evict(&no, 4, DSK_FIFO);
	struct dsk_store *s;
	struct dsk_stats stt;

	cfg.high_watermark = 0.5;
	s = open_ok(&cfg, NULL);
	assert_int_equal(put_pat(s, "k0", OBJ, 0, 0), 0);
	assert_int_equal(put_pat(s, "k1", OBJ, 1, 0), 0);
	assert_int_equal(no.calls, 0);
	assert_int_equal(put_pat(s, "k2", OBJ, 2, 0), 0); /* 3/4 > 0.5: k0 goes */
	assert_int_equal(no.n, 1);
	assert_string_equal(no.keys[0], "k0");
	dsk_stats(s, &stt);
	assert_true(stt.used <= stt.capacity / 2);
	assert_int_equal(get_pat(s, "k2", OBJ, 2, 0), OBJ);
	dsk_store_close(s);
}

static void enospc_case(int sync_writes, size_t misalign)
{
	struct dsk_config cfg = cfg_base(64 * MIB);
	struct dsk_scan_stats scan;
	struct dsk_store *s;
	struct dsk_stats stt;

	cfg.sync_writes = sync_writes;
	s = open_ok(&cfg, NULL);
	assert_int_equal(put_pat(s, "before", 10000, 1, misalign), 0);
	dsk_test_inject(s, DSK_IO_WRITE, ENOSPC);
	assert_int_equal(put_pat(s, "x", 300 * KIB + 7, 2, misalign), LUNAR_ERR_FILE_WRITE_FAIL);
	assert_int_equal(get_pat(s, "x", 300 * KIB + 7, 2, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	dsk_stats(s, &stt);
	assert_int_equal(stt.write_failures, 1);
	assert_int_equal(put_pat(s, "after", 20000, 3, misalign), 0);
	assert_int_equal(get_pat(s, "after", 20000, 3, 0), 20000);
	assert_int_equal(put_pat(s, "x", 1000, 4, misalign), 0); /* the key is free again */
	dsk_store_close(s);

	/* the failed put's metadata may be on disk; its bytes are not: dropped */
	s = open_ok(&cfg, &scan);
	assert_int_equal(scan.records_ok, 3);
	assert_int_equal(scan.records_dropped, sync_writes ? 0 : 1);
	assert_int_equal(get_pat(s, "before", 10000, 1, 0), 10000);
	assert_int_equal(get_pat(s, "x", 1000, 4, 0), 1000);
	dsk_store_close(s);
}

static void test_disk_enospc(void **st)
{
	enospc_case(0, 0);
	tmp_clean();
	setup_var(st);
	enospc_case(0, 1);
	tmp_clean();
	setup_var(st);
	enospc_case(1, 0); /* linked: data fails, so the metadata is never written */
}

/* A read paused inside dsk_get holds its bucket against eviction. */
struct inflight {
	struct dsk_store *s;
	sem_t entered, release;
	atomic_int armed;
	int64_t read_rc;
	int64_t evict_rc;
	atomic_int evict_done;
};

static void read_pause(void *arg)
{
	struct inflight *f = arg;

	if (atomic_exchange(&f->armed, 0)) {
		sem_post(&f->entered);
		sem_wait(&f->release);
	}
}

static void *reader(void *arg)
{
	struct inflight *f = arg;

	f->read_rc = get_pat(f->s, "k0", OBJ, 0, 0);
	return NULL;
}

static void *evictor(void *arg)
{
	struct inflight *f = arg;

	f->evict_rc = dsk_evict(f->s);
	atomic_store(&f->evict_done, 1);
	return NULL;
}

static void test_disk_read_inflight_delays_delete(void **st)
{
	struct notes no = {.mu = PTHREAD_MUTEX_INITIALIZER};
	struct dsk_config cfg = cfg_evict(&no, 8, DSK_FIFO);
	struct inflight f = {.armed = 1};
	pthread_t rt, et;

	f.s = open_ok(&cfg, NULL);
	sem_init(&f.entered, 0, 0);
	sem_init(&f.release, 0, 0);
	assert_int_equal(put_pat(f.s, "k0", OBJ, 0, 0), 0);
	assert_int_equal(put_pat(f.s, "k1", OBJ, 1, 0), 0);
	dsk_test_read_hook(f.s, read_pause, &f);
	pthread_create(&rt, NULL, reader, &f);
	sem_wait(&f.entered);
	pthread_create(&et, NULL, evictor, &f);
	for (int i = 0; i < 200 && !notes_n(&no); i++)
		usleep(1000);
	usleep(100 * 1000);
	assert_int_equal(notes_n(&no), 1);	  /* notified ... */
	assert_false(atomic_load(&f.evict_done)); /* ... but waiting */
	assert_true(file_exists(1, "dat"));
	assert_int_equal(get_pat(f.s, "k0", OBJ, 0, 0), LUNAR_ERR_OBJECT_NOT_FOUND);
	sem_post(&f.release);
	pthread_join(rt, NULL);
	pthread_join(et, NULL);
	assert_int_equal(f.read_rc, OBJ); /* the paused read finished with right bytes */
	assert_true(f.evict_rc > 0);
	assert_false(file_exists(1, "dat"));
	assert_int_equal(get_pat(f.s, "k1", OBJ, 1, 0), OBJ);
	dsk_test_read_hook(f.s, NULL, NULL);
	dsk_store_close(f.s);
	sem_destroy(&f.entered);
	sem_destroy(&f.release);
}

LUNAR_TEST_MAIN_EACH(setup_var, teardown, test_disk_fifo_evicts_oldest,
		     test_disk_notify_refusal_keeps_bucket, test_disk_lru_evicts_least_read,
		     test_disk_high_watermark, test_disk_enospc,
		     test_disk_read_inflight_delays_delete)
