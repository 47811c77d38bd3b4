/*
 * test_put_ahead_shutdown.c - a writer proxy that stops while its
 * put-ahead thread waits on a Reserve gives that grant back too: once the
 * proxy has exited, the master holds no reserved byte for it (it would
 * otherwise hold the space until it declared the proxy dead). The master
 * is the `make failpoints` build, its Reserve slowed by the failpoint
 * master-reserve (skipped, saying so, when that build is missing).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

#include "case_util.h"
#include "lunar.h"

#define RESERVED "lunar_master_reserved_bytes"
#define ROOM	 "lunar_proxy_reserved_room_bytes"
#define RESERVES "lunar_master_calls_total{method=\"Reserve\"}"
#define SLOW_MS	 "200" /* ms, well under the proxy's 500 ms wait for it at shutdown */

static char fpfile[PATH_MAX];

static void arm(const char *spec)
{
	case_arm(fpfile, spec, 0);
}

static int setup(void **state)
{
	if (case_setup(state))
		return -1;
	case_failpoints(fpfile, "fp-master");
	return 0;
}

/* W holds one grant (a sixteenth of O's segment, under its --reserve-size)
 * while idle; a put makes it want a second, which the master sleeps on,
 * and W is stopped meanwhile. */
static void test_put_ahead_shutdown_returns_grant_under_way(void **state)
{
	char sock_w[PATH_MAX], sock_o[PATH_MAX], seg_o[H_SEG_NAME];
	int mport = h_free_port(), mhttp;
	struct lunar_client *c;
	struct h_proc *m, *w;
	uint8_t buf[4096];
	uint64_t end;
	int64_t asked;

	(void)state;
	m = track(h_start_master("master", mport, "--reserve-ttl", "60s", NULL));
	H_ASSERT(m != NULL);
	mhttp = http_port_of(m);
	h_named_sock(sock_o, "o");
	h_named_sock(sock_w, "w");
	H_ASSERT(track(h_start_peer("proxyO", sock_o, mport, seg_o, "--segment-size", "64MiB",
				    "--reserve-size", "0", NULL)) != NULL);
	w = h_start_proxy("proxyW", sock_w, mport, "--segment-size", "0", "--reserve-size", "16MiB",
			  NULL);
	H_ASSERT(w != NULL);
	end = h_now_ms() + H_BOUND_MS(10000); /* W holds it: the master counts it first */
	while (metric(http_port_of(w), ROOM) == 0 && h_now_ms() < end)
		h_sleep_ms(10);
	H_ASSERT_MSG(metric(http_port_of(w), ROOM) > 0, "W holds no reservation");
	asked = metric(mhttp, RESERVES);
	arm("master-reserve=sleep(" SLOW_MS ")");
	c = h_client(sock_w);
	put_seeded(c, "shutdown/one", buf, sizeof(buf), h_seed("one"), NULL);
	lunar_close(c);
	H_ASSERT_EQ(h_wait_log(m, "master-reserve fired", H_BOUND_MS(5000)), 0);
	H_ASSERT_EQ(h_stop(w), 0);
	/* the master has answered the second Reserve: its grant was given back */
	end = h_now_ms() + H_BOUND_MS(10000);
	while (metric(mhttp, RESERVES) <= asked && h_now_ms() < end)
		h_sleep_ms(10);
	H_ASSERT_EQ(metric(mhttp, RESERVES), asked + 1);
	H_ASSERT_EQ(metric(mhttp, RESERVED), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_put_ahead_shutdown_returns_grant_under_way, setup,
					    case_teardown),
	};
	/* Every daemon the harness starts here is the failpoint build's. */
	int rc = h_failpoint_build("lunar-master");

	return rc ? rc : cmocka_run_group_tests(tests, NULL, NULL);
}
