/*
 * test_socket_descriptors.c - the proxy takes a descriptor from the session
 * socket only from a read that succeeded. A read that finds nothing (here:
 * after a byte of out-of-band data, which the kernel drops) leaves the
 * control buffer as it was; were the proxy to take a descriptor from it
 * then, it would close the one it holds for the message in progress, and
 * the number could come back as another client's session memfd before that
 * message ends. No other client runs here, so what the last read left on
 * the loop's stack is still there when the failed read comes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "harness_raw.h"
#include "uds.h"
#include "tests/cmocka_main.h"

static char sock[PATH_MAX];
static struct lunar_client *cl;

/* A 64 KiB memfd sealed against shrinking that starts with "MINE". */
static int own_memfd(void)
{
	int fd = memfd_create("lunar-test-own", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	H_ASSERT(fd >= 0 && ftruncate(fd, 1 << 16) == 0);
	H_ASSERT(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	H_ASSERT(pwrite(fd, "MINE", 4, 0) == 4);
	return fd;
}

/* Put the first page of region as key through raw client c; its result. */
static int64_t put_page(struct raw *c, uint32_t region, const char *key)
{
	struct lc_seg seg = {.region = region, .len = 4096};
	struct lc_item it = {.key_len = (uint32_t)strlen(key), .nseg = 1};
	struct lc_sqe q = {.op = LC_OP_PUT, .slot = 1, .count = 1, .seq = 3, .replica_num = 1};

	it.key_off = raw_put(c, key, it.key_len);
	it.seg_off = raw_put(c, &seg, sizeof(seg));
	q.arg_len = sizeof(it);
	q.arg_off = raw_put(c, &it, sizeof(it));
	return raw_call(c, &q, 5000);
}

/*
 * Given a client that sent half a registration with its own memfd, and
 * another that has connected but not said hello; when the first sends a
 * byte of out-of-band data, the second says hello (its session memfd takes
 * the lowest free number) and the first finishes its registration; then
 * the range granted to the first is its own memory.
 */
static void test_socket_descriptors_failed_read_takes_none(void **state)
{
	struct lc_reg_req q = {
	    .magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 1 << 16, .cookie = 7};
	struct lc_reg_rep rep;
	struct raw c, victim;
	char oob = 'x', got[4096];
	int fd = own_memfd();

	(void)state;
	H_ASSERT(h_embedded_node(sock, &cl, "--segment-size", "64MiB", NULL));
	raw_open(&c, sock);
	raw_connect(&victim, sock);
	h_sleep_ms(50);
	H_ASSERT_EQ(lc_uds_send(c.sock, &q, 20, &fd, 1), 0);
	close(fd);
	h_sleep_ms(50);
	if (send(c.sock, &oob, 1, MSG_OOB | MSG_NOSIGNAL) != 1) {
		H_ASSERT_MSG(errno == EOPNOTSUPP, "send MSG_OOB: %s", strerror(errno));
		raw_close(&victim);
		raw_close(&c);
		h_embedded_node_stop(&cl);
		printf("skipped: this kernel has no out-of-band data on UNIX sockets\n");
		skip();
	}
	h_sleep_ms(50);
	raw_hello(&victim);
	H_ASSERT_EQ(lc_uds_send(c.sock, (const char *)&q + 20, sizeof(q) - 20, NULL, 0), 0);
	H_ASSERT(lc_uds_recv(c.sock, &rep, sizeof(rep), NULL, 0, 3000) >= 0);
	H_ASSERT_EQ(rep.code, 0);
	H_ASSERT_EQ(put_page(&c, rep.region, "socket-fds/1"), 0);
	H_ASSERT_EQ(lunar_get_into(cl, "socket-fds/1", got, sizeof(got)), (int64_t)sizeof(got));
	H_ASSERT_MSG(!memcmp(got, "MINE", 4),
		     "the range granted is not the registrant's memfd (it starts %02x%02x%02x%02x)",
		     (uint8_t)got[0], (uint8_t)got[1], (uint8_t)got[2], (uint8_t)got[3]);
	raw_close(&victim);
	raw_close(&c);
	h_embedded_node_stop(&cl);
}

LUNAR_TEST_MAIN(NULL, h_teardown, test_socket_descriptors_failed_read_takes_none)
