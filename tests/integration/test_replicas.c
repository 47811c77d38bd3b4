/*
 * test_replicas.c - replica placement end to end, on real processes: two
 * replicas land on two segments, and preferred segments are honoured.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "case_util.h"
#include "tests/cmocka_main.h"

#define KIB	       1024u
#define MIB	       (1024u * 1024u)
#define PREFERRED_PUTS 6

static void test_replicas_distinct_and_preferred_honoured(void **state)
{
	const struct lunar_put_cfg two = {.replica_num = 2};
	char sock_a[PATH_MAX], sock_b[PATH_MAX], segs[2][128], r0[128], r1[128], key[64];
	char example[512] = "";
	int ignored = 0;
	struct lunar_client *ca, *cb;
	struct h_proc *master;
	uint8_t *buf = malloc(256 * KIB);
	int mport, mhttp;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given a master and two proxies with 64 MiB segments */
	mport = h_free_port();
	master = track(h_start_master("master", mport, NULL));
	H_ASSERT(master != NULL);
	mhttp = http_port_of(master);
	case_proxy_pair(mport, sock_a, sock_b, &ca, &cb);
	fetch(mhttp, "/admin/segments");
	H_ASSERT_MSG(hg_count(text, "\"name\":\"") == 2, "expected two segments: %s", text);
	H_ASSERT(hg_json_str(text, "name", 0, segs[0], sizeof(segs[0])) == 0);
	H_ASSERT(hg_json_str(text, "name", 1, segs[1], sizeof(segs[1])) == 0);
	H_ASSERT_MSG(strcmp(segs[0], segs[1]) != 0, "two segments named %s", segs[0]);

	/* When K is put with replica_num 2, Then it has two replicas on the
	 * two segments, and reads intact through both proxies */
	put_seeded(ca, "rep/K", buf, 256 * KIB, 7, &two);
	stat_key(mhttp, "default", "rep/K");
	H_ASSERT_MSG(hg_count(text, "\"segment\":\"") == 2, "expected two replicas: %s", text);
	H_ASSERT(hg_json_str(text, "segment", 0, r0, sizeof(r0)) == 0);
	H_ASSERT(hg_json_str(text, "segment", 1, r1, sizeof(r1)) == 0);
	H_ASSERT_MSG(strcmp(r0, r1) != 0, "both replicas on %s", r0);
	check_seeded(ca, "rep/K", buf, 256 * KIB, 7);
	check_seeded(cb, "rep/K", buf, 256 * KIB, 7);

	/* When keys are put through A preferring one segment, then the other,
	 * Then each replica is on the preferred segment (both are nearly empty,
	 * so the preference can always be met) */
	for (int s = 0; s < 2; s++) {
		const char *pref[1] = {segs[s]};
		const struct lunar_put_cfg cfg = {.preferred_segments = pref, .preferred_count = 1};

		for (int i = 0; i < PREFERRED_PUTS; i++) {
			snprintf(key, sizeof(key), "pref/%d/%d", s, i);
			put_seeded(ca, key, buf, 64 * KIB, h_seed(key), &cfg);
			stat_key(mhttp, "default", key);
			H_ASSERT(hg_json_str(text, "segment", 0, r0, sizeof(r0)) == 0);
			if (strcmp(r0, segs[s]) != 0) {
				ignored++;
				snprintf(example, sizeof(example), "%s preferred %s, placed on %s",
					 key, segs[s], r0);
			}
			check_seeded(cb, key, buf, 64 * KIB, h_seed(key));
		}
	}
	H_ASSERT_MSG(ignored == 0, "%d of %d puts ignored their preferred segment (e.g. %s)",
		     ignored, 2 * PREFERRED_PUTS, example);
	lunar_close(ca);
	lunar_close(cb);
	free(buf);
}

LUNAR_TEST_MAIN_EACH(case_setup, case_teardown, test_replicas_distinct_and_preferred_honoured)
