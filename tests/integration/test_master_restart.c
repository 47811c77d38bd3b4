/*
 * test_master_restart.c - a master that crashes and comes back (SPEC §3: a
 * proxy told NEED_REMOUNT re-mounts its segments). One lunar-master and one
 * lunar-proxy; the master is SIGKILLed and restarted on the same port with no
 * memory of the segment. Within 10 s, with nobody touching the proxy, new puts
 * succeed and read back: the proxy re-mounted by itself, with ReMountSegment
 * (Mooncake's call for that), where its first contact used MountSegment.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "http_get.h"
#include "tests/cmocka_main.h"

#define OBJ_LEN	   (128u * 1024u)
#define RECOVER_MS 10000
/* Each attempt is bounded, so a put stuck on the dead master cannot eat the
 * whole recovery window. */
#define CLIENT_TIMEOUT_MS 3000

static char sock[PATH_MAX];
static int port;
static struct h_proc *master;

static int setup(void **state)
{
	(void)state;
	master = h_cluster_master(&port, "--client-ttl", "2s", NULL);
	if (!master)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	if (!h_start_proxy("proxy", sock, port, "--segment-size", "64MiB", NULL))
		return -1;
	return 0;
}

/* Puts key's pattern and reads it back; 0, or the first failing code. */
static int64_t put_and_read(struct lunar_client *c, const char *key, uint8_t *buf)
{
	int64_t rc;

	h_fill(buf, OBJ_LEN, h_seed(key));
	rc = lunar_put(c, key, buf, OBJ_LEN, NULL);
	if (rc != 0)
		return rc;
	memset(buf, 0, OBJ_LEN);
	rc = lunar_get_into(c, key, buf, OBJ_LEN);
	if (rc < 0)
		return rc;
	H_ASSERT_EQ(rc, OBJ_LEN);
	H_ASSERT_MSG(h_verify(buf, OBJ_LEN, h_seed(key)) < 0, "%s read back wrong bytes", key);
	return 0;
}

/* How many calls of method the running master served. */
static int64_t calls(const char *method)
{
	static char text[1 << 16];
	char sample[128];

	H_ASSERT_EQ(hg_get(hg_log_http_port(master->log), "/metrics", text, sizeof(text)), 200);
	snprintf(sample, sizeof(sample), "lunar_master_calls_total{method=\"%s\"}", method);
	return hg_metric(text, sample);
}

static void test_master_restart_proxy_remounts(void **state)
{
	uint8_t *buf = malloc(OBJ_LEN);
	struct lunar_client *c;
	uint64_t restarted, deadline;
	int64_t rc = -1;
	int attempts = 0;
	char key[64];

	(void)state;
	H_ASSERT(buf != NULL);
	c = h_client_try(sock, CLIENT_TIMEOUT_MS, NULL);
	H_ASSERT(c != NULL);
	H_ASSERT_EQ(put_and_read(c, "master-restart/before", buf), 0);
	H_ASSERT(calls("MountSegment") >= 1);

	h_kill(master);
	master = h_start_master("master-2", port, "--client-ttl", "2s", NULL);
	H_ASSERT_MSG(master != NULL, "the master did not restart on port %d", port);
	restarted = h_now_ms();

	deadline = restarted + RECOVER_MS;
	do {
		snprintf(key, sizeof(key), "master-restart/after-%d", attempts++);
		rc = put_and_read(c, key, buf);
		if (rc == 0)
			break;
		h_sleep_ms(200);
	} while (h_now_ms() < deadline);
	H_ASSERT_MSG(rc == 0,
		     "no put succeeded within %d ms of the restart (%d tries, last %lld %s)",
		     RECOVER_MS, attempts, (long long)rc, h_code(rc));
	print_message("puts work again %llu ms after the master restarted (%d tries)\n",
		      (unsigned long long)(h_now_ms() - restarted), attempts);

	/* Not a fluke: more puts of fresh keys keep working. */
	for (int i = 0; i < 10; i++) {
		snprintf(key, sizeof(key), "master-restart/steady-%d", i);
		H_ASSERT_EQ(put_and_read(c, key, buf), 0);
	}
	H_ASSERT_EQ(lunar_health(c), 0);
	H_ASSERT(calls("ReMountSegment") >= 1);
	lunar_close(c);
	free(buf);
}

/*
 * A mount the master refuses is tried again. A proxy killed and started
 * again at once on the same data port finds its segment's name still held
 * by its dead self, which the master declares dead only after --client-ttl:
 * its first MountSegment is refused. Once the master has dropped the old
 * segment, a later ping's mount succeeds, and the proxy serves (its health
 * needs the segment mounted). It used to mount only when the master asked,
 * which it does once.
 */
static void test_master_restart_refused_mount_tried_again(void **state)
{
	char seg[H_SEG_NAME], sock_old[PATH_MAX], sock_new[PATH_MAX], line[256];
	struct h_proc *old, *again;
	const char *data_port;
	uint64_t t0;

	(void)state;
	snprintf(sock_old, sizeof(sock_old), "%s", h_path("old.sock"));
	snprintf(sock_new, sizeof(sock_new), "%s", h_path("new.sock"));
	old = h_start_peer("old", sock_old, port, seg, "--segment-size", "16MiB", NULL);
	H_ASSERT(old != NULL);
	data_port = strrchr(seg, ':') + 1;
	h_kill(old);
	t0 = h_now_ms();
	again = h_start_proxy("again", sock_new, port, "--segment-size", "16MiB", "--data-port",
			      data_port, NULL);
	H_ASSERT_MSG(again != NULL, "the proxy never mounted its segment");
	print_message("segment %s mounted again %llu ms after the old proxy died\n", seg,
		      (unsigned long long)(h_now_ms() - t0));
	H_ASSERT_MSG(hg_log_find(again->log, "SEGMENT_ALREADY_EXISTS", line, sizeof(line)) == 0,
		     "the first mount was not refused: no test");
	h_stop(again);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_master_restart_proxy_remounts,
		test_master_restart_refused_mount_tried_again)
