/*
 * test_master_resv.c - put-ahead reservations granted while their client
 * is declared dead (as a master that was stopped and resumes finds it
 * silent, and drops its reservations while its queued Reserves are
 * served): every grant answers with a whole reservation or a code, and
 * none is read after the drop freed it (which ASan and TSan, run on this
 * test by make asan and make tsan, would report); and granted while their
 * segment is unmounted and mounted again, which retires and frees it and
 * makes a new one that may take its address: a reservation placed on the
 * old one never lands on the new one's allocator. With the grant held
 * between placement and insert (--debug-reserve-delay), a remount in that
 * window waits for the grant, which is refused: its segment went; and a
 * client declared dead in that window gets no reservation (none is left
 * behind for it).
 */
#include "test_master_util.h"

#include <sched.h>
#include <stdatomic.h>

#include "atomic.h"
#include "clock.h"
#include "master/mst_int.h"
#include "tests/cmocka_main.h"

#define ROUNDS	  3000
#define MIN_DROPS 200 /* and at least this many drops or remounts beside them */
#define MAX_MS	  10000
#define SIZE	  4096u

struct dropper {
	struct mst_master *m;
	atomic_int stop;
	atomic_uint drops;
	atomic_uint calls; /* Reserves answered so far */
	int remount;	   /* unmount and mount seg-a instead of dropping */
};

static void seg_remount(struct mst_master *m)
{
	Lunar__UnmountSegmentRequest rq = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;

	rq.client_id = CLIENT_A;
	rq.name = "seg-a";
	assert_int_equal(call_code(m, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq), 0);
	assert_int_equal(mount(m, CLIENT_A, "seg-a", 1024 * MIB), 0);
}

/* Declare A's reservations dead (or remount its segment), again and
 * again, until told to stop. After each, wait for two more Reserves to be
 * answered: the second began after the drop or mount, so it can be
 * granted (a scheduler that favours this thread, as under TSan on two
 * CPUs, otherwise keeps the segment unmounted through every Reserve). */
static void *drop_main(void *arg)
{
	struct dropper *d = arg;

	while (!atomic_load(&d->stop)) {
		unsigned calls;

		if (d->remount)
			seg_remount(d->m);
		else
			mst_resv_drop_client(d->m, CLIENT_A);
		atomic_fetch_add(&d->drops, 1u);
		calls = atomic_load(&d->calls);
		while (atomic_load(&d->calls) - calls < 2 && !atomic_load(&d->stop))
			sched_yield();
	}
	return NULL;
}

/* Give reservation id back now (not late). */
static void release(struct mst_master *m, uint64_t id)
{
	Lunar__ReserveReleaseRequest rq = LUNAR__RESERVE_RELEASE_REQUEST__INIT;

	rq.client_id = CLIENT_A;
	rq.ids = &id;
	rq.n_ids = 1;
	assert_int_equal(call_code(m, LUNAR__METHOD__RESERVE_RELEASE, &rq), 0);
}

/* ROUNDS grants for A beside a thread that drops them (or remounts A's
 * segment); those granted are released at once when remount. */
static void grants_beside(int remount)
{
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ReserveRequest rq = LUNAR__RESERVE_REQUEST__INIT;
	struct dropper d = {.m = m, .remount = remount};
	uint64_t end = lc_now_ms() + MAX_MS;
	unsigned granted = 0;
	pthread_t t;

	assert_int_equal(mount(m, CLIENT_A, "seg-a", 1024 * MIB), 0);
	rq.client_id = CLIENT_A;
	rq.size = SIZE;
	atomic_init(&d.stop, 0);
	atomic_init(&d.drops, 0);
	atomic_init(&d.calls, 0);
	assert_int_equal(pthread_create(&t, NULL, drop_main, &d), 0);
	for (int i = 0; (i < ROUNDS || atomic_load(&d.drops) < MIN_DROPS) && lc_now_ms() < end;
	     i++) {
		Lunar__ReserveReply *r =
		    (Lunar__ReserveReply *)call(m, LUNAR__METHOD__RESERVE, &rq);
		int code = r->status->code;

		if (!code) {
			assert_non_null(r->reservation);
			assert_int_not_equal(r->reservation->id, 0);
			assert_int_equal(r->reservation->extent->length, SIZE);
			assert_string_equal(r->reservation->extent->segment, "seg-a");
			granted++;
			if (remount) /* a no-op when it went with its segment */
				release(m, r->reservation->id);
		} else {
			assert_true(code == LUNAR_ERR_BUSY ||
				    code == LUNAR_ERR_NO_AVAILABLE_HANDLE ||
				    (remount && code == LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS));
		}
		protobuf_c_message_free_unpacked(&r->base, NULL);
		atomic_fetch_add(&d.calls, 1u);
	}
	atomic_store(&d.stop, 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	printf("  %u reservations granted, %u %s beside them\n", granted, atomic_load(&d.drops),
	       remount ? "remounts" : "drops");
	assert_true(atomic_load(&d.drops) >= MIN_DROPS);
	assert_true(granted > 0);
	mst_master_destroy(m);
}

struct held_grant {
	struct mst_master *m;
	int code;
	atomic_int done;
};

static void *grant_main(void *arg)
{
	struct held_grant *g = arg;

	g->code = reserve_code(g->m, CLIENT_A, SIZE, NULL);
	atomic_store(&g->done, 1);
	return NULL;
}

/* Until a grant is counted (then placed in microseconds, then held). */
static void wait_placed(const struct mst_resvtab *rt)
{
	for (int i = 0; i < 5000 && !LC_READ_ONCE(rt->placing[0]) && !LC_READ_ONCE(rt->placing[1]);
	     i++)
		usleep(1000);
}

static void test_master_resv_remount_waits_for_placed_grant(void **state)
{
	struct held_grant g = {.m = master_new("debug-reserve-delay", "1s")};
	pthread_t t;

	(void)state;
	atomic_init(&g.done, 0);
	assert_int_equal(mount(g.m, CLIENT_A, "seg-a", 1024 * MIB), 0);
	assert_int_equal(pthread_create(&t, NULL, grant_main, &g), 0);
	wait_placed(&g.m->resv);
	usleep(50 * 1000);
	assert_false(atomic_load(&g.done));
	seg_remount(g.m);		   /* a new seg-a, likely at the old one's address */
	assert_true(atomic_load(&g.done)); /* the unmount waited for the grant */
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(g.code, LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
	assert_int_equal(mst_resv_bytes(g.m), 0); /* nothing reserved on the new one */
	mst_master_destroy(g.m);
}

/* Client id alive now, as its Ping would make it. */
static void touch(struct mst_master *m, uint64_t id)
{
	assert_true(mst_client_touch(m, id) >= 0);
}

static void test_master_resv_grant_refused_for_client_dead_before_insert(void **state)
{
	static const char *const flags[][2] = {{"debug-reserve-delay", "1s"},
					       {"client-ttl", "300ms"}};
	struct held_grant g = {.m = master_with(flags, 2)};
	pthread_t t;

	(void)state;
	atomic_init(&g.done, 0);
	/* B's segment: A's death takes only A's grant, not the space under it. */
	assert_int_equal(mount(g.m, CLIENT_B, "seg-b", 1024 * MIB), 0);
	touch(g.m, CLIENT_A);
	assert_int_equal(pthread_create(&t, NULL, grant_main, &g), 0);
	wait_placed(&g.m->resv);
	for (int i = 0; i < 4; i++) { /* A silent past its TTL, B not; the grant held */
		usleep(100 * 1000);
		touch(g.m, CLIENT_B);
	}
	mst_clients_expire(g.m); /* A dead: nothing of its to drop yet */
	assert_false(atomic_load(&g.done));
	while (!atomic_load(&g.done)) { /* B kept alive (the master expires too) */
		usleep(50 * 1000);
		touch(g.m, CLIENT_B);
	}
	assert_int_equal(pthread_join(t, NULL), 0);
	/* Without the check at insert the grant answers 0 and its space stays
	 * reserved for a dead client until it expires. */
	assert_int_equal(g.code, LUNAR_ERR_ILLEGAL_CLIENT);
	assert_int_equal(mst_resv_bytes(g.m), 0);
	assert_int_equal(LC_READ_ONCE(g.m->used), 0); /* its range freed */
	mst_master_destroy(g.m);
}

static void test_master_resv_grant_while_client_dropped(void **state)
{
	(void)state;
	grants_beside(0);
}

static void test_master_resv_grant_while_segment_remounted(void **state)
{
	(void)state;
	grants_beside(1);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_resv_grant_while_client_dropped,
		test_master_resv_grant_while_segment_remounted,
		test_master_resv_remount_waits_for_placed_grant,
		test_master_resv_grant_refused_for_client_dead_before_insert)
