/*
 * test_prefault.c - lc_prefault (common/prefault.c): a range none of
 * whose pages are resident becomes resident, page by page, unaligned ends
 * included; bytes stored before it and by another thread while it runs
 * are all kept; a stop set before it starts or while it runs ends it
 * with -ECANCELED.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "prefault.h"
#include "tests/cmocka_main.h"

#define RANGE (64u << 20)

static size_t page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

/* A fresh private anonymous range, in 4 KiB pages (no huge page would
 * make one touch count for 512 pages). */
static char *map_range(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	madvise(p, len, MADV_NOHUGEPAGE);
	return p;
}

/* How many of the pages of [p, p + len) (p page-aligned) are resident. */
static size_t resident_pages(char *p, size_t len)
{
	size_t n = (len + page_size() - 1) / page_size(), in = 0;
	unsigned char *vec = malloc(n);

	assert_non_null(vec);
	assert_int_equal(mincore(p, len, vec), 0);
	for (size_t i = 0; i < n; i++)
		in += vec[i] & 1;
	free(vec);
	return in;
}

static void test_prefault_makes_every_page_resident(void **state)
{
	atomic_bool stop = false;
	char *p = map_range(RANGE);

	(void)state;
	assert_int_equal(resident_pages(p, RANGE), 0);
	assert_int_equal(lc_prefault(p, RANGE, &stop), 0);
	assert_int_equal(resident_pages(p, RANGE), RANGE / page_size());
	munmap(p, RANGE);
}

/* base and len off page boundaries: the pages holding the first and the
 * last byte are touched, and none outside the range. */
static void test_prefault_unaligned_range(void **state)
{
	size_t pg = page_size();
	atomic_bool stop = false;
	char *p = map_range(8 * pg);

	(void)state;
	assert_int_equal(lc_prefault(p + pg + 100, 4 * pg - 200, &stop), 0);
	assert_int_equal(resident_pages(p, pg), 0);
	assert_int_equal(resident_pages(p + pg, 4 * pg), 4);
	assert_int_equal(resident_pages(p + 5 * pg, 3 * pg), 0);
	assert_int_equal(lc_prefault(p, 0, &stop), 0);
	munmap(p, 8 * pg);
}

struct writer {
	char *p;
	size_t len;
	atomic_uint rounds; /* finished */
	atomic_bool done;
};

/* Stores a byte in every page, from the end of the range backwards (so
 * that it crosses the prefault's way), over and over until told to stop;
 * every round stores 0xa5 at the same places. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	size_t pg = page_size();

	while (!atomic_load(&w->done)) {
		for (size_t off = w->len; off >= pg; off -= pg)
			w->p[off - pg + (off / pg) % pg] = (char)0xa5;
		atomic_fetch_add(&w->rounds, 1);
	}
	return NULL;
}

static void test_prefault_keeps_every_byte(void **state)
{
	size_t pg = page_size();
	atomic_bool stop = false;
	struct writer w = {.p = map_range(RANGE), .len = RANGE};
	pthread_t t;

	(void)state;
	/* Before: a pattern across the first pages, faulted in already. */
	for (size_t i = 0; i < 16 * pg; i++)
		w.p[i] = (char)(i * 7 + 1);
	assert_int_equal(pthread_create(&t, NULL, writer_main, &w), 0);
	assert_int_equal(lc_prefault(w.p, RANGE, &stop), 0);
	/* Every store in place: one whole round after the prefault's end. */
	for (unsigned r = atomic_load(&w.rounds); atomic_load(&w.rounds) < r + 2;)
		sched_yield();
	atomic_store(&w.done, true);
	pthread_join(t, NULL);
	for (size_t i = 0; i < 16 * pg; i++) {
		char want = (i % pg == (i / pg + 1) % pg) ? (char)0xa5 : (char)(i * 7 + 1);

		if (w.p[i] != want)
			fail_msg("byte %zu is %#x, stored %#x", i, (unsigned char)w.p[i],
				 (unsigned char)want);
	}
	for (size_t off = RANGE; off > 16 * pg; off -= pg) {
		size_t at = off - pg + (off / pg) % pg;

		assert_int_equal((unsigned char)w.p[at], 0xa5);
	}
	munmap(w.p, RANGE);
}

struct stopper {
	char *p;
	atomic_bool stop;
};

/* Sets the stop once the prefault has reached the middle of the range. */
static void *stopper_main(void *arg)
{
	struct stopper *s = arg;
	unsigned char vec;

	do
		assert_int_equal(mincore(s->p + RANGE / 2, page_size(), &vec), 0);
	while (!(vec & 1));
	atomic_store(&s->stop, true);
	return NULL;
}

static void test_prefault_stops_when_told(void **state)
{
	struct stopper s = {.p = map_range(RANGE)};
	pthread_t t;

	(void)state;
	atomic_store(&s.stop, true);
	assert_int_equal(lc_prefault(s.p, RANGE, &s.stop), -ECANCELED);
	assert_int_equal(resident_pages(s.p, RANGE), 0);
	atomic_store(&s.stop, false);
	assert_int_equal(pthread_create(&t, NULL, stopper_main, &s), 0);
	assert_int_equal(lc_prefault(s.p, RANGE, &s.stop), -ECANCELED);
	pthread_join(t, NULL);
	assert_true(resident_pages(s.p, RANGE) < RANGE / page_size());
	munmap(s.p, RANGE);
}

LUNAR_TEST_MAIN(NULL, NULL, test_prefault_makes_every_page_resident, test_prefault_unaligned_range,
		test_prefault_keeps_every_byte, test_prefault_stops_when_told)
