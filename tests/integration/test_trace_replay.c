/*
 * test_trace_replay.c - the SSD tier as a KV cache: the first 2,000
 * requests of the Mooncake synthetic trace (16 KiB blocks) replayed by
 * lunar-bench --trace --check through one node whose DRAM holds 5 % of the
 * slice's blocks and whose SSD tier (--offload on_evict) holds them all.
 * Fails if the hit ratio falls below 90 % of an infinite cache's on the
 * same slice (offload fell behind: puts refused or objects dropped
 * uncopied, or disk reads failed), or if any read returns wrong bytes.
 * Skipped without the trace (beside the repo, or $LUNAR_TRACE).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "disk_util.h"

#define TRACE	    "../shared/traces/synthetic_trace.jsonl"
#define REQUESTS    "2000"
#define BLOCK	    16384ull
#define UNIQUE	    33310ull /* unique blocks of the first 2,000 requests */
#define DRAM_BLOCKS (UNIQUE * 5 / 100)
#define SSD_TIMES   20 /* SSD tier: this many times DRAM */
#define OUT_CAP	    16384

static const char *trace_path(void)
{
	const char *env = getenv("LUNAR_TRACE");

	if (env && !access(env, R_OK))
		return env;
	return access(TRACE, R_OK) ? NULL : TRACE;
}

/* Run cmd; its stdout into out (NUL-terminated, after a leading newline);
 * its exit status. */
static int run(const char *cmd, char *out, size_t cap)
{
	FILE *f = popen(cmd, "r");
	size_t n = 1;
	int st;

	if (!f)
		return -1;
	out[0] = '\n';
	while (n + 1 < cap && fgets(out + n, (int)(cap - n), f))
		n += strlen(out + n);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The text of key=... in out (up to the newline), or "?" */
static const char *figure(const char *out, const char *key, char *v, size_t cap)
{
	char pat[64];
	const char *p;
	size_t n = 0;

	snprintf(pat, sizeof(pat), "\n%s=", key);
	p = strstr(out, pat);
	if (!p)
		return "?";
	p += strlen(pat);
	while (p[n] && p[n] != '\n' && n + 1 < cap)
		n++;
	memcpy(v, p, n);
	v[n] = '\0';
	return v;
}

static void test_trace_replay_ssd_keeps_up(void **state)
{
	const char *trace = trace_path(), *sock,
		   *names[] = {"hit_ratio",	  "infinite_hit_ratio", "lru_hit_ratio",
			       "put_soft_errors", "get_soft_errors",	"blocks_per_s"};
	char seg[32], disk[32], cmd[PATH_MAX * 2], v[64];
	static char out[OUT_CAP];
	struct h_proc *p;
	int rc, http;

	(void)state;
	if (!trace) {
		printf("skipped: no %s beside the repo and no $LUNAR_TRACE\n", TRACE);
		skip();
	}
	H_ASSERT_EQ(h_init(), 0);
	sock = h_path("p.sock");
	snprintf(seg, sizeof(seg), "%llu", DRAM_BLOCKS * BLOCK);
	snprintf(disk, sizeof(disk), "%llu", DRAM_BLOCKS * BLOCK * SSD_TIMES);
	p = h_start_proxy("replay", sock, H_EMBEDDED, "--segment-size", seg, "--disk-dir",
			  h_path("disk"), "--disk-capacity", disk, "--offload", "on_evict",
			  "--kv-lease-ttl", "1s", NULL);
	H_ASSERT(p != NULL);
	http = d_proxy_http_port(p);
	snprintf(cmd, sizeof(cmd),
		 "timeout 120 %s --trace %s --requests " REQUESTS " --block-size %llu "
		 "--capacity-blocks %llu --socket %s --check 0.9",
		 h_bin("lunar-bench"), trace, BLOCK, DRAM_BLOCKS, sock);
	rc = run(cmd, out, sizeof(out));
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		print_message("%s=%s\n", names[i], figure(out, names[i], v, sizeof(v)));
	H_ASSERT_MSG(strstr(out, "\nverify_errors=0\n"), "wrong bytes read:\n%s", out);
	H_ASSERT_MSG(strstr(out, "\ncheck=ok\n"), "hit ratio below 90 %% of infinite:\n%s", out);
	H_ASSERT_EQ(rc, 0);
	/* the hits came through the SSD tier: DRAM alone holds 5 % */
	H_ASSERT(d_http_get(http, "/disk/status", out, sizeof(out)) > 0);
	H_ASSERT(d_json_num(out, "offloads") > (long long)DRAM_BLOCKS);
	H_ASSERT(h_alive(p));
	h_stop(p);
	h_cleanup();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_trace_replay_ssd_keeps_up),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
