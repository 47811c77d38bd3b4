/*
 * test_master_ha_gate.c - the view a master's replies carry (master/ha_gate.c,
 * without etcd: the test drives the gate as the election thread does). A
 * call admitted while the master leads in one view, and answered after it
 * learned of a newer leader, carries the view it was admitted in: a proxy
 * following the new leader drops it as stale. Before, it carried the new
 * leader's view, and a placement the new leader knows nothing of passed for
 * one of its own. The call is a Reserve held between placement and insert
 * (--debug-reserve-delay).
 */
#include "test_master_util.h"

#include <stdatomic.h>

#include "atomic.h"
#include "clock.h"
#include "master/mst_ha.h"
#include "master/mst_int.h"
#include "tests/cmocka_main.h"

#define VIEW_OURS  5
#define VIEW_NEWER 9

struct held {
	struct mst_master *m;
	uint64_t view;
	int code;
};

static void *reserve_main(void *arg)
{
	struct held *h = arg;

	h->code = reserve_code(h->m, CLIENT_A, 4096, &h->view);
	return NULL;
}

static void test_master_ha_gate_reply_carries_admitted_view(void **state)
{
	struct held h = {.m = master_new("debug-reserve-delay", "500ms")};
	struct mst_ha_gate *g = mst_ha_gate_alloc("tcp://127.0.0.1:1", "t");
	pthread_t t;

	(void)state;
	assert_non_null(g);
	h.m->ha = g;
	mst_ha_gate_lead(g, VIEW_OURS, lc_now_ms() + 60000);
	assert_int_equal(mount(h.m, CLIENT_A, "seg-a", 64 * MIB), 0);
	assert_int_equal(pthread_create(&t, NULL, reserve_main, &h), 0);
	/* admitted, and held: a grant counted as placing */
	for (int i = 0;
	     i < 5000 && !LC_READ_ONCE(h.m->resv.placing[0]) && !LC_READ_ONCE(h.m->resv.placing[1]);
	     i++)
		usleep(1000);
	mst_ha_gate_follow(g, "tcp://127.0.0.1:2", VIEW_NEWER);
	assert_int_equal(pthread_join(t, NULL), 0);
	printf("# a call admitted in view %d, answered after view %d led: code %d, view %llu\n",
	       VIEW_OURS, VIEW_NEWER, h.code, (unsigned long long)h.view);
	assert_int_equal(h.code, 0);
	assert_int_equal(h.view, VIEW_OURS);
	/* and a call now is refused, in the newer view */
	assert_int_equal(mount(h.m, CLIENT_B, "seg-b", 64 * MIB),
			 LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
	h.m->ha = NULL;
	mst_ha_gate_free(g);
	mst_master_destroy(h.m);
}

LUNAR_TEST_MAIN(NULL, NULL, test_master_ha_gate_reply_carries_admitted_view)
