/*
 * test_ring.c - the submission ring's index protocol: empty and full, the
 * free-running indexes wrapping at 2^32, a corrupted tail or consumer index
 * refused with -EPROTO, producers the consumer cannot stall, commits
 * published in reservation order, the NEED_WAKEUP flag, and many producer
 * threads against one consumer.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "atomic.h"
#include "ring.h"
#include "tests/cmocka_main.h"

/* Place every index at start, as if the ring had already run that far. */
static void ring_at(struct lc_ring_prod *p, struct lc_ring_ctl *r, uint32_t start)
{
	lc_ring_init(r);
	r->prod_tail = start;
	r->cons_head = start;
	*p = (struct lc_ring_prod){.ctl = r, .head = start, .tail = start};
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static void test_ring_init_zeroes(void **state)
{
	struct lc_ring_ctl r;

	memset(&r, 0xa5, sizeof(r));
	lc_ring_init(&r);
	assert_int_equal(r.reserved0, 0);
	assert_int_equal(r.prod_tail, 0);
	assert_int_equal(r.cons_head, 0);
	assert_int_equal(r.flags, 0);
	/* Producer, consumer and flag words on separate cache lines. */
	assert_int_equal(offsetof(struct lc_ring_ctl, cons_head), LC_CACHELINE);
	assert_int_equal(offsetof(struct lc_ring_ctl, flags), 2 * LC_CACHELINE);
}

static void test_ring_empty_full(void **state)
{
	const uint32_t entries = 8;
	struct lc_ring_ctl r;
	struct lc_ring_prod p = {.ctl = &r};
	uint32_t head;

	lc_ring_init(&r);
	assert_int_equal(lc_ring_consumable(&r, entries, 0), 0);
	for (uint32_t i = 0; i < entries; i++) {
		assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), 0);
		assert_int_equal(head, i);
		/* Reserved is not yet published. */
		assert_int_equal(lc_ring_consumable(&r, entries, 0), 0);
	}
	/* Every entry is reserved: full, whatever the size asked. */
	head = 12345;
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EAGAIN);
	assert_int_equal(lc_ring_reserve(&p, entries, 8, &head), -EAGAIN);
	assert_int_equal(head, 12345);
	assert_int_equal(p.head, entries);

	for (uint32_t i = 0; i < entries; i++) {
		lc_ring_commit(&p, i, 1);
		assert_int_equal(lc_ring_consumable(&r, entries, 0), i + 1);
	}
	/* Consumed but not released: still full for producers. */
	assert_int_equal(lc_ring_consumable(&r, entries, 5), 3);
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EAGAIN);

	lc_ring_release(&r, 3);
	assert_int_equal(lc_ring_reserve(&p, entries, 4, &head), -EAGAIN);
	assert_int_equal(lc_ring_reserve(&p, entries, 3, &head), 0);
	assert_int_equal(head, 8);
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EAGAIN);
	lc_ring_commit(&p, 8, 3);
	assert_int_equal(lc_ring_consumable(&r, entries, 3), entries);
	assert_int_equal(lc_ring_consumable(&r, entries, 11), 0);

	/* Drained and released: empty again, the whole ring free. */
	lc_ring_release(&r, 11);
	assert_int_equal(lc_ring_reserve(&p, entries, entries, &head), 0);
	assert_int_equal(head, 11);
	lc_ring_commit(&p, 11, entries);
	assert_int_equal(lc_ring_consumable(&r, entries, 11), entries);
}

static void test_ring_reserve_more_than_entries(void **state)
{
	struct lc_ring_ctl r;
	struct lc_ring_prod p = {.ctl = &r};
	uint32_t head = 7;

	lc_ring_init(&r);
	assert_int_equal(lc_ring_reserve(&p, 8, 9, &head), -EAGAIN);
	assert_int_equal(lc_ring_reserve(&p, 8, UINT32_MAX, &head), -EAGAIN);
	assert_int_equal(head, 7);
	assert_int_equal(p.head, 0);
	assert_int_equal(lc_ring_reserve(&p, 8, 8, &head), 0);
	assert_int_equal(head, 0);
}

static void test_ring_wraparound(void **state)
{
	const uint32_t entries = 8, mask = entries - 1;
	const uint32_t start = UINT32_MAX - 3;
	struct lc_ring_ctl r;
	struct lc_ring_prod p;
	uint64_t desc[8];
	uint32_t cons = start, head;
	uint64_t next_put = 0, next_get = 0;

	ring_at(&p, &r, start);
	assert_int_equal(lc_ring_consumable(&r, entries, cons), 0);
	/* Batches of 3 through 5 full turns, crossing 2^32 in the first. */
	for (int round = 0; round < 40; round++) {
		int64_t avail;

		while (lc_ring_reserve(&p, entries, 3, &head) == 0) {
			for (uint32_t i = 0; i < 3; i++)
				desc[(head + i) & mask] = next_put++;
			lc_ring_commit(&p, head, 3);
		}
		avail = lc_ring_consumable(&r, entries, cons);
		assert_true(avail >= 6 && avail <= entries);
		for (int64_t i = 0; i < avail; i++)
			assert_true(desc[(cons + (uint32_t)i) & mask] == next_get++);
		cons += (uint32_t)avail;
		lc_ring_release(&r, cons);
		assert_int_equal(lc_ring_consumable(&r, entries, cons), 0);
	}
	assert_true(next_get == next_put);
	assert_true(next_get >= 240);
	/* The indexes really did wrap. */
	assert_true(cons < start);
	assert_int_equal(r.prod_tail, cons);
	assert_int_equal(p.head, cons);
}

static void test_ring_wraparound_full_across_zero(void **state)
{
	const uint32_t entries = 4;
	struct lc_ring_ctl r;
	struct lc_ring_prod p;
	uint32_t head;

	/* Full exactly when the head crosses zero: UINT32_MAX - 1 + 4 = 2. */
	ring_at(&p, &r, UINT32_MAX - 1);
	assert_int_equal(lc_ring_reserve(&p, entries, 4, &head), 0);
	assert_int_equal(head, UINT32_MAX - 1);
	assert_int_equal(p.head, 2);
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EAGAIN);
	lc_ring_commit(&p, UINT32_MAX - 1, 4);
	assert_int_equal(r.prod_tail, 2);
	assert_int_equal(lc_ring_consumable(&r, entries, UINT32_MAX - 1), 4);
	assert_int_equal(lc_ring_consumable(&r, entries, UINT32_MAX), 3);
	assert_int_equal(lc_ring_consumable(&r, entries, 0), 2);
	assert_int_equal(lc_ring_consumable(&r, entries, 2), 0);
	lc_ring_release(&r, 0);
	assert_int_equal(lc_ring_reserve(&p, entries, 2, &head), 0);
	assert_int_equal(head, 2);
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EAGAIN);
}

static void test_ring_corrupt_tail(void **state)
{
	const uint32_t entries = 64;
	static const uint32_t conses[] = {0, 1000, UINT32_MAX - 3, UINT32_MAX, 1u << 31};
	struct lc_ring_ctl r;
	struct lc_ring_prod p;

	for (size_t i = 0; i < sizeof(conses) / sizeof(conses[0]); i++) {
		uint32_t cons = conses[i];

		ring_at(&p, &r, cons);
		/* In bounds: [cons, cons + entries]. */
		r.prod_tail = cons + entries;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), entries);
		r.prod_tail = cons + 1;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), 1);
		/* Moved backwards behind the consumer. */
		r.prod_tail = cons - 1;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), -EPROTO);
		r.prod_tail = cons - entries;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), -EPROTO);
		/* Further ahead than the ring holds. */
		r.prod_tail = cons + entries + 1;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), -EPROTO);
		r.prod_tail = cons + (1u << 31);
		assert_int_equal(lc_ring_consumable(&r, entries, cons), -EPROTO);
		r.prod_tail = cons + (1u << 31) + 1;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), -EPROTO);
		r.prod_tail = cons ^ 0x80000000u;
		assert_int_equal(lc_ring_consumable(&r, entries, cons), -EPROTO);
	}
}

/* The consumer writes the shared block; whatever it writes there, a producer
 * neither waits on it nor takes it for its own indexes. */
static void test_ring_consumer_cannot_stall_producers(void **state)
{
	const uint32_t entries = 8;
	struct lc_ring_ctl r;
	struct lc_ring_prod p = {.ctl = &r};
	uint32_t head;

	lc_ring_init(&r);
	/* A consumer scribbles on the producers' words (prod_head was one). */
	r.reserved0 = 1;
	r.prod_tail = 5;
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), 0);
	assert_int_equal(head, 0);
	lc_ring_commit(&p, head, 1); /* used to wait for prod_tail == 0: forever */
	assert_int_equal(r.prod_tail, 1);
	assert_int_equal(lc_ring_consumable(&r, entries, 0), 1);
}

/* A cons_head ahead of what was produced, or further behind than the ring
 * holds, is corruption, not a full ring to wait on. */
static void test_ring_corrupt_cons_head(void **state)
{
	const uint32_t entries = 8;
	static const uint32_t bad[] = {11, 100, 1, UINT32_MAX - 1, 1u << 31};
	struct lc_ring_ctl r;
	struct lc_ring_prod p;
	uint32_t head;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* Given: 10 entries produced, the consumer at 10 */
		ring_at(&p, &r, 10);
		r.cons_head = bad[i];
		assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EPROTO);
		assert_int_equal(p.head, 10);
	}
	/* In bounds: [head - entries, head] */
	ring_at(&p, &r, 10);
	r.cons_head = 2;
	assert_int_equal(lc_ring_reserve(&p, entries, 1, &head), -EAGAIN);
	r.cons_head = 10;
	assert_int_equal(lc_ring_reserve(&p, entries, 8, &head), 0);
}

struct commit_arg {
	struct lc_ring_prod *p;
	uint32_t head, n;
	int done;
};

static void *commit_thread(void *p)
{
	struct commit_arg *a = p;

	lc_ring_commit(a->p, a->head, a->n);
	lc_store_release(&a->done, 1);
	return NULL;
}

static void test_ring_commit_order(void **state)
{
	const uint32_t entries = 16;
	struct lc_ring_ctl r;
	struct lc_ring_prod p;
	struct commit_arg later;
	uint32_t first, second;
	pthread_t t;

	ring_at(&p, &r, UINT32_MAX - 1);
	assert_int_equal(lc_ring_reserve(&p, entries, 2, &first), 0);
	assert_int_equal(lc_ring_reserve(&p, entries, 3, &second), 0);
	assert_int_equal(second, first + 2);

	/* The later reservation commits first: it must wait, unseen. */
	later = (struct commit_arg){&p, second, 3, 0};
	assert_int_equal(pthread_create(&t, NULL, commit_thread, &later), 0);
	for (int i = 0; i < 20; i++) {
		sleep_ms(5);
		assert_int_equal(lc_load_acquire(&later.done), 0);
		assert_int_equal(lc_ring_consumable(&r, entries, first), 0);
		assert_int_equal(lc_load_acquire(&r.prod_tail), first);
	}
	/* The earlier one publishes; then both are visible, in order. */
	lc_ring_commit(&p, first, 2);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(later.done, 1);
	assert_int_equal(lc_ring_consumable(&r, entries, first), 5);
	assert_int_equal(r.prod_tail, first + 5);
}

static void test_ring_commit_in_order_no_wait(void **state)
{
	struct lc_ring_ctl r;
	struct lc_ring_prod p = {.ctl = &r};
	uint32_t a, b;

	lc_ring_init(&r);
	assert_int_equal(lc_ring_reserve(&p, 8, 2, &a), 0);
	assert_int_equal(lc_ring_reserve(&p, 8, 2, &b), 0);
	lc_ring_commit(&p, a, 2);
	assert_int_equal(lc_ring_consumable(&r, 8, 0), 2);
	lc_ring_commit(&p, b, 2);
	assert_int_equal(lc_ring_consumable(&r, 8, 0), 4);
}

static void test_ring_need_wakeup_flag(void **state)
{
	struct lc_ring_ctl r;

	lc_ring_init(&r);
	assert_int_equal(lc_ring_need_wakeup(&r), 0);
	lc_ring_set_sleeping(&r, 1);
	assert_int_equal(r.flags, LC_RING_NEED_WAKEUP);
	assert_int_equal(lc_ring_need_wakeup(&r), 1);
	assert_int_equal(lc_ring_need_wakeup(&r), 1); /* reading does not clear it */
	lc_ring_set_sleeping(&r, 0);
	assert_int_equal(r.flags, 0);
	assert_int_equal(lc_ring_need_wakeup(&r), 0);
	lc_ring_set_sleeping(&r, 42); /* any non-zero: sleeping */
	assert_int_equal(lc_ring_need_wakeup(&r), 1);
	lc_ring_set_sleeping(&r, 0);
	assert_int_equal(lc_ring_need_wakeup(&r), 0);
	/* The flag word is separate from the indexes. */
	assert_int_equal(r.reserved0, 0);
	assert_int_equal(r.prod_tail, 0);
	assert_int_equal(r.cons_head, 0);
}

/* Many producers, one consumer. Values are (producer << 32) | sequence. */
#define MP_PRODUCERS	8
#define MP_PER_PRODUCER 100000u
#define MP_ENTRIES	64u

struct mp_ring {
	struct lc_ring_ctl ctl;
	struct lc_ring_prod prod;
	uint64_t desc[MP_ENTRIES];
	int efd; /* consumer wakeup, when use_wakeup */
	int use_wakeup;
	uint32_t per_producer;
	uint64_t wakeups;
};

struct mp_producer {
	struct mp_ring *ring;
	uint32_t id;
	uint64_t full;
};

static void *mp_produce(void *p)
{
	struct mp_producer *pr = p;
	struct mp_ring *m = pr->ring;
	uint32_t seq = 0;

	while (seq < m->per_producer) {
		/* Batches of 1..3 exercise multi-entry reservations. */
		uint32_t n = 1 + (seq + pr->id) % 3, head;

		if (n > m->per_producer - seq)
			n = m->per_producer - seq;
		int rc = lc_ring_reserve(&m->prod, MP_ENTRIES, n, &head);

		if (rc == -EPROTO)
			return (void *)2; /* a race taken for corruption */
		if (rc) {
			pr->full++;
			sched_yield();
			continue;
		}
		for (uint32_t i = 0; i < n; i++)
			m->desc[(head + i) & (MP_ENTRIES - 1)] = (uint64_t)pr->id << 32 | (seq + i);
		lc_ring_commit(&m->prod, head, n);
		seq += n;
		if (m->use_wakeup && lc_ring_need_wakeup(&m->ctl)) {
			uint64_t one = 1;

			if (write(m->efd, &one, sizeof(one)) != sizeof(one))
				return (void *)1;
		}
	}
	return NULL;
}

struct mp_result {
	uint64_t received;
	uint64_t bad_producer, out_of_order, proto_errors, lost_wakeups;
	uint32_t next[MP_PRODUCERS];
};

/* Sleep on the eventfd; after setting the flag, look once more (ring.h). */
static int mp_sleep(struct mp_ring *m, uint32_t cons)
{
	struct pollfd pfd = {m->efd, POLLIN, 0};
	uint64_t v;
	int rc;

	lc_ring_set_sleeping(&m->ctl, 1);
	if (lc_ring_consumable(&m->ctl, MP_ENTRIES, cons) != 0) {
		lc_ring_set_sleeping(&m->ctl, 0);
		return 0;
	}
	/* A lost wakeup would leave entries unseen: 5 s is far beyond any
	 * scheduling delay. */
	rc = poll(&pfd, 1, 5000);
	lc_ring_set_sleeping(&m->ctl, 0);
	if (rc == 0)
		return -1;
	if (read(m->efd, &v, sizeof(v)) == sizeof(v))
		m->wakeups++;
	return 0;
}

static void mp_consume(struct mp_ring *m, struct mp_result *res, uint64_t total)
{
	uint32_t cons = m->ctl.cons_head;

	while (res->received < total) {
		int64_t avail = lc_ring_consumable(&m->ctl, MP_ENTRIES, cons);

		if (avail < 0) {
			res->proto_errors++;
			return;
		}
		if (avail == 0) {
			if (m->use_wakeup) {
				if (mp_sleep(m, cons) < 0 &&
				    lc_ring_consumable(&m->ctl, MP_ENTRIES, cons) == 0)
					res->lost_wakeups++;
			} else {
				/* Few cores: let a preempted producer finish its commit. */
				sched_yield();
			}
			continue;
		}
		for (int64_t i = 0; i < avail; i++) {
			uint64_t v = m->desc[(cons + (uint32_t)i) & (MP_ENTRIES - 1)];
			uint32_t id = (uint32_t)(v >> 32), seq = (uint32_t)v;

			if (id >= MP_PRODUCERS) {
				res->bad_producer++;
				continue;
			}
			if (seq != res->next[id])
				res->out_of_order++;
			res->next[id] = seq + 1;
		}
		res->received += (uint64_t)avail;
		cons += (uint32_t)avail;
		lc_ring_release(&m->ctl, cons);
	}
}

struct mp_consumer_arg {
	struct mp_ring *ring;
	struct mp_result *res;
	uint64_t total;
};

static void *mp_consume_thread(void *p)
{
	struct mp_consumer_arg *a = p;

	mp_consume(a->ring, a->res, a->total);
	return NULL;
}

static void mp_run(struct mp_ring *m, uint32_t start)
{
	struct mp_producer prod[MP_PRODUCERS];
	pthread_t pt[MP_PRODUCERS], ct;
	static struct mp_result res;
	struct mp_consumer_arg ca = {m, &res, (uint64_t)MP_PRODUCERS * m->per_producer};
	uint64_t full = 0;
	struct timespec t0, t1;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	memset(&res, 0, sizeof(res));
	/* Start below 2^32 so the indexes wrap under contention. */
	ring_at(&m->prod, &m->ctl, start);
	assert_int_equal(pthread_create(&ct, NULL, mp_consume_thread, &ca), 0);
	for (uint32_t i = 0; i < MP_PRODUCERS; i++) {
		prod[i] = (struct mp_producer){m, i, 0};
		assert_int_equal(pthread_create(&pt[i], NULL, mp_produce, &prod[i]), 0);
	}
	for (uint32_t i = 0; i < MP_PRODUCERS; i++) {
		void *rv;

		assert_int_equal(pthread_join(pt[i], &rv), 0);
		assert_null(rv);
		full += prod[i].full;
	}
	assert_int_equal(pthread_join(ct, NULL), 0);

	assert_int_equal(res.proto_errors, 0);
	assert_int_equal(res.bad_producer, 0);
	assert_int_equal(res.out_of_order, 0);
	assert_int_equal(res.lost_wakeups, 0);
	assert_true(res.received == ca.total);
	/* Every value of every producer exactly once: in order and complete. */
	for (uint32_t i = 0; i < MP_PRODUCERS; i++)
		assert_int_equal(res.next[i], m->per_producer);
	assert_int_equal(lc_ring_consumable(&m->ctl, MP_ENTRIES, m->ctl.cons_head), 0);
	assert_int_equal(m->prod.head, m->ctl.prod_tail);
	assert_int_equal(m->prod.tail, m->ctl.prod_tail);
	assert_int_equal(m->ctl.prod_tail, start + (uint32_t)ca.total);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	print_message("  %llu values, %llu full-ring retries, %llu wakeups, %ld ms\n",
		      (unsigned long long)res.received, (unsigned long long)full,
		      (unsigned long long)m->wakeups,
		      (long)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000));
}

static void test_ring_many_producers(void **state)
{
	static struct mp_ring m;

	memset(&m, 0, sizeof(m));
	m.efd = -1;
	m.per_producer = MP_PER_PRODUCER;
	mp_run(&m, UINT32_MAX - 100000);
}

static void test_ring_many_producers_wakeup(void **state)
{
	static struct mp_ring m;

	memset(&m, 0, sizeof(m));
	m.efd = eventfd(0, EFD_CLOEXEC);
	assert_true(m.efd >= 0);
	m.use_wakeup = 1;
	m.per_producer = 20000;
	mp_run(&m, UINT32_MAX - 1000);
	close(m.efd);
}

LUNAR_TEST_MAIN(NULL, NULL, test_ring_init_zeroes, test_ring_empty_full,
		test_ring_reserve_more_than_entries, test_ring_wraparound,
		test_ring_wraparound_full_across_zero, test_ring_corrupt_tail,
		test_ring_consumer_cannot_stall_producers, test_ring_corrupt_cons_head,
		test_ring_commit_order, test_ring_commit_in_order_no_wait,
		test_ring_need_wakeup_flag, test_ring_many_producers,
		test_ring_many_producers_wakeup)
