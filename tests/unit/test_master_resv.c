/*
 * test_master_resv.c - put-ahead reservations granted while their client
 * is declared dead (as a master that was stopped and resumes finds it
 * silent, and drops its reservations while its queued Reserves are
 * served): every grant answers with a whole reservation or a code, and
 * none is read after the drop freed it (which ASan and TSan, run on this
 * test by make asan and make tsan, would report).
 */
#include "test_master_util.h"

#include <sched.h>
#include <stdatomic.h>

#include "master/mst_int.h"
#include "tests/cmocka_main.h"

#define ROUNDS 3000
#define SIZE   4096u

struct dropper {
	struct mst_master *m;
	atomic_int stop;
	unsigned drops;
};

/* Declare A's reservations dead, again and again, until told to stop. */
static void *drop_main(void *arg)
{
	struct dropper *d = arg;

	while (!atomic_load(&d->stop)) {
		mst_resv_drop_client(d->m, CLIENT_A);
		d->drops++;
		sched_yield();
	}
	return NULL;
}

static void test_master_resv_grant_while_client_dropped(void **state)
{
	struct mst_master *m = master_new(NULL, NULL);
	Lunar__ReserveRequest rq = LUNAR__RESERVE_REQUEST__INIT;
	struct dropper d = {.m = m};
	unsigned granted = 0;
	pthread_t t;

	(void)state;
	assert_int_equal(mount(m, CLIENT_A, "seg-a", 1024 * MIB), 0);
	rq.client_id = CLIENT_A;
	rq.size = SIZE;
	atomic_init(&d.stop, 0);
	assert_int_equal(pthread_create(&t, NULL, drop_main, &d), 0);
	for (int i = 0; i < ROUNDS; i++) {
		Lunar__ReserveReply *r =
		    (Lunar__ReserveReply *)call(m, LUNAR__METHOD__RESERVE, &rq);
		int code = r->status->code;

		if (!code) {
			assert_non_null(r->reservation);
			assert_int_not_equal(r->reservation->id, 0);
			assert_int_equal(r->reservation->extent->length, SIZE);
			assert_string_equal(r->reservation->extent->segment, "seg-a");
			granted++;
		} else {
			assert_true(code == LUNAR_ERR_BUSY ||
				    code == LUNAR_ERR_NO_AVAILABLE_HANDLE);
		}
		protobuf_c_message_free_unpacked(&r->base, NULL);
	}
	atomic_store(&d.stop, 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	printf("  %u of %d reservations granted, %u drops beside them\n", granted, ROUNDS, d.drops);
	assert_true(granted > 0);
	mst_master_destroy(m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_resv_grant_while_client_dropped)
