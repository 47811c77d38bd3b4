/*
 * test_hostile_floods.c - the proxy trusts nothing in shared memory (SPEC
 * §5.5), floods: raw clients flood the eventfd or the request queue, or make
 * the shared eventfd blocking and drain it. None of it is a violation, and
 * none of it may stall the proxy or its well-behaved client B
 * (hostile_util.h), which must see no error and no call longer than 1 s.
 */
#include "hostile_util.h"
#include "tests/cmocka_main.h"

/* The ABI lets a client write the eventfd whenever it likes, so a flood is
 * not a violation; it must simply not stall the proxy or its other clients. */
static void test_hostile_eventfd_flood(void **state)
{
	uint64_t ops = atomic_load(&b.ops), end, v, writes = 0, stall;
	struct lc_sqe q = {.op = LC_OP_HEALTH, .slot = 5, .seq = 55};
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	b_reset_max();
	end = h_now_ms() + 1500;
	while (h_now_ms() < end) {
		v = writes % 1000 == 0 ? UINT64_MAX - 1 : 1; /* the counter's maximum, too */
		if (write(c.efd, &v, sizeof(v)) == sizeof(v))
			writes++;
		else
			H_ASSERT_MSG(errno == EAGAIN, "eventfd write: %s", strerror(errno));
	}
	stall = b_reset_max();
	printf("  %llu eventfd writes in 1.5 s; B: %llu rounds, longest call %llu ms\n",
	       (unsigned long long)writes, (unsigned long long)(atomic_load(&b.ops) - ops),
	       (unsigned long long)stall);
	H_ASSERT_MSG(stall < B_STALL_MS, "B stalled %llu ms during the flood",
		     (unsigned long long)stall);
	/* Still a working session afterwards. */
	c.slots[5].state = LC_SLOT_PENDING;
	raw_submit(&c, &q);
	H_ASSERT_MSG(raw_wait_done(&c, 5, 5000), "flooder's own request never completed");
	H_ASSERT_EQ(c.slots[5].result, 0);
	H_ASSERT_EQ(c.slots[5].seq, 55);
	H_ASSERT(!hung_up(c.sock, 100));
	raw_close(&c);
	expect_b_healthy("after the eventfd flood");
}

/* 1 while the proxy's loop (its main thread) sits in read(2). */
static int loop_in_read(void)
{
	char path[64], line[128] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)proxy->pid);
	f = fopen(path, "r");
	if (f) {
		if (!fgets(line, sizeof(line), f))
			line[0] = '\0';
		fclose(f);
	}
	/* "running", or the number of the system call it is blocked in */
	return line[0] >= '0' && line[0] <= '9' && strtol(line, NULL, 10) == SYS_read;
}

static atomic_bool drain_stop;

/* Reads the eventfd the client made blocking, racing the proxy for it. */
static void *drain_main(void *arg)
{
	int fd = *(int *)arg;
	uint64_t v;

	while (!atomic_load(&drain_stop))
		if (read(fd, &v, sizeof(v)) < 0 && errno != EINTR)
			break;
	return NULL;
}

/*
 * The eventfd is one open file shared with the client, which may clear its
 * O_NONBLOCK and drain it between the proxy's wakeup and any read of the
 * proxy's: the loop must never block on it. Writes with pauses, stopping
 * at once if the loop is found in read(2), where it would stay until the
 * next write.
 */
static void test_hostile_blocking_eventfd(void **state)
{
	uint64_t end, v = 1, writes = 0, stall;
	int stuck = 0;
	pthread_t th;
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	H_ASSERT(fcntl(c.efd, F_SETFL, fcntl(c.efd, F_GETFL) & ~O_NONBLOCK) == 0);
	atomic_store(&drain_stop, false);
	H_ASSERT(pthread_create(&th, NULL, drain_main, &c.efd) == 0);
	b_reset_max();
	end = h_now_ms() + 1500;
	while (!stuck && h_now_ms() < end) {
		H_ASSERT(write(c.efd, &v, sizeof(v)) == sizeof(v));
		writes++;
		for (int i = 0; i < 10 && !stuck; i++) {
			usleep(50);
			stuck = loop_in_read();
		}
	}
	if (stuck)
		h_sleep_ms(B_STALL_MS + 200); /* what B suffers until someone writes */
	stall = b_reset_max();
	atomic_store(&drain_stop, true);
	for (int i = 0; i < 4; i++) /* wake the drainer (and a stuck loop) */
		H_ASSERT(write(c.efd, &v, sizeof(v)) == sizeof(v));
	pthread_join(th, NULL);
	printf("  %llu eventfd writes; loop blocked in read: %s; B's longest call %llu ms\n",
	       (unsigned long long)writes, stuck ? "yes" : "no", (unsigned long long)stall);
	H_ASSERT_MSG(!stuck, "the proxy's loop blocked reading a client's eventfd");
	H_ASSERT_MSG(stall < B_STALL_MS, "B stalled %llu ms", (unsigned long long)stall);
	H_ASSERT(!hung_up(c.sock, 10));
	raw_close(&c);
	expect_b_healthy("after a blocking, drained eventfd");
}

/* A client that submits as fast as the ring takes requests and never waits
 * for one (all on one slot): the proxy bounds what it queues for it (BUSY)
 * and B's calls do not stall behind the flood. */
static void test_hostile_request_flood(void **state)
{
	struct lc_item it = {.key_len = 9};
	uint64_t end, sent = 0, busy = 0;
	struct lc_sqe q;
	struct raw c;

	(void)state;
	raw_open(&c, sock);
	it.key_off = raw_put(&c, "flood/key", 9);
	q = raw_item_sqe(&c, LC_OP_EXISTS, &it);
	b_reset_max();
	end = h_now_ms() + 2000;
	while (h_now_ms() < end) {
		uint32_t head;

		if (lc_ring_reserve(&c.prod, c.h.ring_entries, 1, &head)) {
			lc_cpu_relax();
			continue;
		}
		q.seq = ++sent;
		c.sqes[head & (c.h.ring_entries - 1)] = q;
		lc_ring_commit(&c.prod, head, 1);
		if (lc_ring_need_wakeup(c.ring))
			raw_kick(&c);
		if (LC_READ_ONCE(c.slots[1].result) == LUNAR_ERR_BUSY)
			busy++;
	}
	H_ASSERT(!hung_up(c.sock, 10));
	raw_close(&c);
	printf("  %llu requests in 2 s (BUSY seen %llu times)\n", (unsigned long long)sent,
	       (unsigned long long)busy);
	expect_b_unstalled("after a request flood", "behind another client's flood");
}

LUNAR_TEST_MAIN(setup, teardown, test_hostile_eventfd_flood, test_hostile_blocking_eventfd,
		test_hostile_request_flood, test_hostile_aftermath)
