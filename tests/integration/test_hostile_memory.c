/*
 * test_hostile_memory.c - the proxy trusts nothing in shared memory (SPEC
 * §5.5), memory and descriptors: a raw client tries to resize its sealed
 * memfd and unmaps it, sends too many descriptors on the socket, or
 * registers memory the proxy could lose. Each violator must be cut off
 * (hostile_util.h) while client B sees no error, and the proxy must give back
 * every descriptor it took.
 */
#include "hostile_util.h"
#include "tests/cmocka_main.h"

/* The memfd is sealed: a client cannot resize it under the proxy (which
 * would SIGBUS it). Then the client unmaps everything and idles. */
static void test_hostile_sealed_then_unmapped(void **state)
{
	struct raw c;
	int seals;

	(void)state;
	raw_open(&c, sock);
	seals = fcntl(c.memfd, F_GET_SEALS);
	H_ASSERT_MSG(seals >= 0 && (seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) ==
				       (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
		     "seals 0x%x", seals);
	H_ASSERT_MSG(ftruncate(c.memfd, 0) < 0 && errno == EPERM, "shrinking the region worked");
	H_ASSERT_MSG(ftruncate(c.memfd, (off_t)c.size / 2) < 0 && errno == EPERM,
		     "shrinking the region worked");
	H_ASSERT_MSG(ftruncate(c.memfd, (off_t)c.size * 2) < 0 && errno == EPERM,
		     "growing the region worked");
	H_ASSERT_MSG(fcntl(c.memfd, F_ADD_SEALS, F_SEAL_WRITE) < 0, "adding a write seal worked");
	H_ASSERT_MSG(fallocate(c.memfd, 0, 0, (off_t)c.size * 2) < 0, "fallocate grew the region");
	munmap(c.base, c.size);
	c.base = NULL;
	close(c.memfd);
	c.memfd = -1;
	/* Socket and eventfd stay open; nothing is ever submitted. */
	H_ASSERT_MSG(!hung_up(c.sock, 500), "an idle client was disconnected");
	expect_new_client_served();
	expect_b_healthy("with an unmapped idle client");
	raw_close(&c);
}

/* One registration round trip: the reply's code, or -errno on hang-up. */
static int raw_register(struct raw *c, const struct lc_reg_req *q, int fd, uint32_t *region)
{
	struct lc_reg_rep rep;
	int n;

	n = lc_uds_send(c->sock, q, sizeof(*q), &fd, fd >= 0);
	if (n)
		return n;
	n = lc_uds_recv(c->sock, &rep, sizeof(rep), NULL, 0, HANGUP_MS);
	if (n < 0)
		return n;
	H_ASSERT_EQ(rep.magic, LC_REG_MAGIC);
	H_ASSERT_EQ(rep.cookie, q->cookie);
	*region = rep.region;
	return rep.code;
}

/* A memfd the proxy would map: sealed against shrinking unless told not. */
static int memfd_of(uint64_t size, int seal)
{
	int fd = memfd_create("hostile-reg", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	H_ASSERT(fd >= 0 && ftruncate(fd, (off_t)size) == 0);
	if (seal)
		H_ASSERT(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
	return fd;
}

/* A message carrying more descriptors than any message of the protocol
 * (the kernel drops those past the proxy's control buffer): cut off. */
static void test_hostile_too_many_descriptors(void **state)
{
	enum { N = LC_UDS_MAX_FDS + 2 };
	struct lc_reg_req q = {
	    .magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 1 << 16, .cookie = 8};
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * N)];
	} ctl;
	struct iovec iov = {&q, sizeof(q)};
	struct msghdr msg = {.msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	int fd = memfd_of(1 << 16, 1);
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * N);
	for (int i = 0; i < N; i++)
		memcpy(CMSG_DATA(cm) + i * sizeof(int), &fd, sizeof(int));
	H_ASSERT(sendmsg(c.sock, &msg, MSG_NOSIGNAL) == (ssize_t)sizeof(q));
	close(fd);
	expect_cut_off(&c, "too many descriptors");
	expect_b_healthy("after too many descriptors");
}

/* Submit a one-item request whose only segment is seg; expect the cut-off. */
static void submit_seg(struct raw *c, uint16_t op, const struct lc_seg *seg, const char *what)
{
	struct lc_item it = {.key_len = 1, .nseg = 1};
	struct lc_sqe q;

	it.key_off = raw_put(c, "k", 1);
	it.seg_off = raw_put(c, seg, sizeof(*seg));
	q = raw_item_sqe(c, op, &it);
	raw_submit(c, &q);
	expect_cut_off(c, what);
}

/*
 * Registered memory: a range the proxy could lose under it (an unsealed
 * memfd, one shorter than the range) is refused with a code and the session
 * goes on; segments naming a region never granted, one already deleted, or
 * running past a granted one are violations.
 */
static void test_hostile_registrations(void **state)
{
	struct lc_reg_req q = {.magic = LC_REG_MAGIC, .op = LC_REG_ADD, .cookie = 1};
	struct lc_seg seg = {.len = 8};
	uint32_t region = 0;
	struct raw c;
	int fd, rc;

	(void)state;
	raw_open(&c, sock);
	fd = memfd_of(1 << 20, 0);
	q.length = 1 << 20;
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "an unsealed memfd was registered (region %u)", region);
	close(fd);

	fd = memfd_of(1 << 20, 1);
	q.offset = 4096;
	q.length = 1 << 20; /* past the end by a page */
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "a range past the memfd's end was registered");
	q.offset = 1;
	q.length = 4096;
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "an unaligned offset was registered");
	q.offset = 0;
	q.length = UINT64_MAX;
	rc = raw_register(&c, &q, fd, &region);
	H_ASSERT_MSG(rc < 0, "a 2^64-1-byte range was registered");
	q.op = LC_REG_DEL;
	q.region = 77;
	q.length = 0;
	rc = raw_register(&c, &q, -1, &region);
	H_ASSERT_MSG(rc < 0, "deleting a region never granted worked");
	/* A good one at last: the refusals left the session in business. */
	q.op = LC_REG_ADD;
	q.region = 0;
	q.length = 1 << 20;
	H_ASSERT_EQ(raw_register(&c, &q, fd, &region), 0);
	H_ASSERT(region >= 1 && region <= LC_MAX_REGIONS);
	close(fd);
	H_ASSERT(!hung_up(c.sock, 50));
	seg.region = region;
	seg.off = (1 << 20) - 7;
	submit_seg(&c, LC_OP_GET, &seg, "value past a registered range");

	raw_open(&c, sock);
	seg.region = LC_MAX_REGIONS;
	seg.off = 0;
	submit_seg(&c, LC_OP_PUT, &seg, "value in a region never granted");

	raw_open(&c, sock);
	fd = memfd_of(1 << 16, 1);
	q = (struct lc_reg_req){.magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 1 << 16};
	H_ASSERT_EQ(raw_register(&c, &q, fd, &region), 0);
	close(fd);
	q = (struct lc_reg_req){.magic = LC_REG_MAGIC, .op = LC_REG_DEL, .region = region};
	H_ASSERT_EQ(raw_register(&c, &q, -1, &seg.region), 0);
	submit_seg(&c, LC_OP_GET, &seg, "value in a deleted region");

	raw_open(&c, sock);
	q = (struct lc_reg_req){.magic = LC_REG_MAGIC, .op = 9};
	H_ASSERT_EQ(lc_uds_send(c.sock, &q, sizeof(q), NULL, 0), 0);
	expect_cut_off(&c, "registration op 9");
	expect_b_healthy("after hostile registrations");
}

LUNAR_TEST_MAIN(setup, teardown, test_hostile_sealed_then_unmapped,
		test_hostile_too_many_descriptors, test_hostile_registrations,
		test_hostile_aftermath)
