/*
 * flipper.h - the descriptor flipper test_hostile_flipper.c (seconds, in
 * make test) and tests/chaos/test_chaos_flipper.c (minutes, in make chaos)
 * share: a raw client submits well-formed put, get, exists and remove
 * requests one after another on the main thread while a second thread keeps
 * flipping their shared-memory fields - the descriptor in the submission
 * ring, the item and segment descriptors and the key in the arena - through
 * a mapping of its own: a bit, a whole word, zero, all ones, or off by one,
 * before, during and after the proxy copies them (SPEC §5.5: the proxy copies
 * a descriptor out, then validates the copy). Each request is answered (a
 * result or a code) or its client is cut off, never left hanging; a client
 * cut off connects again. The flipping client is tenant "flip", whose quota
 * (--tenant-quota flip=8MiB) bounds what its junk puts, hard-pinned or not,
 * can hold. Throughout, client B of hostile_util.h (tenant default) runs
 * put/get/verify/remove in a thread; at the end the proxy is alive, B never
 * failed, a new client is served and the proxy holds the descriptors it
 * held before (hostile_aftermath). Under make asan and make tsan a report
 * in the proxy's log fails the test (the harness reads the logs).
 */
#ifndef LUNAR_TESTS_INTEGRATION_FLIPPER_H
#define LUNAR_TESTS_INTEGRATION_FLIPPER_H

#include <sched.h>
#include <time.h>

#include "hostile_util.h"

#define FLIP_TENANT    "flip"
#define FLIP_VALUE     4096u
#define FLIP_ANSWER_MS HANGUP_MS /* an answer or the hang-up, within this */
#define FLIP_BATCH     32	 /* flips per hold of the view's lock */

/* The flipper's view of the current raw client, under lock. */
struct flipper {
	pthread_t th;
	pthread_mutex_t lock;
	atomic_bool stop;
	uint8_t *view; /* a second mapping of the client's region; NULL: none */
	uint64_t size;
	uint64_t sqes_off, arena_off, hot_len; /* hot_len: the arena's descriptors */
	atomic_uint sqe;		       /* the ring entry in use */
	uint32_t ring_entries;
	uint64_t rnd;
	atomic_ullong flips;
};

static struct flipper flip = {.lock = PTHREAD_MUTEX_INITIALIZER, .rnd = 0x2545f4914f6cdd1dull};

static inline uint64_t flip_rnd(void)
{
	flip.rnd ^= flip.rnd << 13;
	flip.rnd ^= flip.rnd >> 7;
	flip.rnd ^= flip.rnd << 17;
	return flip.rnd;
}

/* One flip of an aligned word at off in the view (relaxed atomics: the
 * proxy reads it concurrently, by design). */
static inline void flip_word(uint64_t off)
{
	uint64_t *w = (uint64_t *)(flip.view + (off & ~7ull)), r = flip_rnd();

	switch (r % 6) {
	case 0: __atomic_fetch_xor(w, 1ull << (r >> 8 & 63), __ATOMIC_RELAXED); break;
	case 1: __atomic_store_n(w, flip_rnd(), __ATOMIC_RELAXED); break;
	case 2: __atomic_store_n(w, 0, __ATOMIC_RELAXED); break;
	case 3: __atomic_store_n(w, ~0ull, __ATOMIC_RELAXED); break;
	case 4: __atomic_fetch_add(w, 1, __ATOMIC_RELAXED); break;
	default: __atomic_fetch_sub(w, 1ull << (r >> 8 & 31), __ATOMIC_RELAXED); break;
	}
}

static inline void *flip_main(void *arg)
{
	struct timespec nap = {0, 20 * 1000};

	(void)arg;
	while (!atomic_load(&flip.stop)) {
		pthread_mutex_lock(&flip.lock);
		for (int i = 0; flip.view && i < FLIP_BATCH; i++) {
			uint64_t r = flip_rnd();

			if (r & 1) /* the ring entry in use, any of its 64 bytes */
				flip_word(
				    flip.sqes_off +
				    (uint64_t)(atomic_load(&flip.sqe) & (flip.ring_entries - 1)) *
					sizeof(struct lc_sqe) +
				    (r >> 1) % sizeof(struct lc_sqe));
			else /* the item, its segment, the key */
				flip_word(flip.arena_off + (r >> 1) % flip.hot_len);
			atomic_fetch_add(&flip.flips, 1);
		}
		pthread_mutex_unlock(&flip.lock);
		nanosleep(&nap, NULL); /* leave the submitter and the proxy some CPU */
	}
	return NULL;
}

/* Show the flipper c's region (c NULL: take it away; returns once the
 * flipper holds no pointer into it). */
static inline void flip_show(struct raw *c)
{
	pthread_mutex_lock(&flip.lock);
	if (flip.view)
		munmap(flip.view, flip.size);
	flip.view = NULL;
	if (c) {
		void *v = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);

		H_ASSERT(v != MAP_FAILED);
		flip.view = v;
		flip.size = c->size;
		flip.sqes_off = c->h.sqes_off;
		flip.ring_entries = c->h.ring_entries;
		flip.arena_off = c->h.arena_off;
		flip.hot_len = sizeof(struct lc_item) + sizeof(struct lc_seg) + 64;
	}
	pthread_mutex_unlock(&flip.lock);
}

struct flip_stats {
	uint64_t sent, answered, cut_off, connections;
};

/* Any completion slot DONE (a flipped slot number completes another). */
static inline int flip_any_done(struct raw *c)
{
	for (uint32_t i = 0; i < c->h.slot_count; i++)
		if (lc_load_acquire(&c->slots[i].state) == LC_SLOT_DONE)
			return 1;
	return 0;
}

/* 1 once the proxy closed c's socket (checked without waiting). */
static inline int flip_closed(struct raw *c)
{
	return hung_up(c->sock, 0);
}

/* One request n on c: 1 answered, 0 cut off (c is done for). */
static inline int flip_request(struct raw *c, uint64_t n, struct flip_stats *st)
{
	static const uint16_t ops[] = {LC_OP_PUT, LC_OP_GET, LC_OP_EXISTS, LC_OP_REMOVE};
	struct lc_item it = {0};
	struct lc_seg sg = {0};
	struct lc_sqe q = {0};
	char key[64] = {0};
	uint64_t end, value_off, item_off, seg_off, key_off;
	uint16_t op = ops[n % 4];

	/* The arena: item, segment, key (the flipped part), then the value. */
	c->used = 0;
	item_off = raw_put(c, &it, sizeof(it));
	seg_off = raw_put(c, &sg, sizeof(sg));
	snprintf(key, sizeof(key), "flip/%llu", (unsigned long long)(n / 4));
	key_off = raw_put(c, key, 64);
	value_off = c->h.arena_off + c->used;
	if (op == LC_OP_PUT)
		h_fill(c->base + value_off, FLIP_VALUE, n);
	sg = (struct lc_seg){.region = 0, .off = value_off, .len = FLIP_VALUE};
	it = (struct lc_item){.key_off = key_off,
			      .key_len = (uint32_t)strlen(key),
			      .nseg = op == LC_OP_PUT || op == LC_OP_GET ? 1 : 0};
	it.seg_off = it.nseg ? seg_off : 0;
	memcpy(c->base + seg_off, &sg, sizeof(sg));
	memcpy(c->base + item_off, &it, sizeof(it));
	for (uint32_t i = 0; i < c->h.slot_count; i++)
		lc_store_release(&c->slots[i].state, LC_SLOT_IDLE);
	q = (struct lc_sqe){.op = op,
			    .slot = (uint32_t)(n % c->h.slot_count),
			    .count = 1,
			    .replica_num = 1,
			    .arg_off = item_off,
			    .arg_len = sizeof(it),
			    .seq = n + 1};
	lc_store_release(&c->slots[q.slot].state, LC_SLOT_PENDING);
	atomic_store(&flip.sqe, c->prod.head); /* the entry raw_submit reserves next */
	raw_submit(c, &q);
	st->sent++;
	end = h_now_ms() + (uint64_t)H_BOUND_MS(FLIP_ANSWER_MS);
	while (h_now_ms() < end) {
		if (flip_any_done(c)) {
			st->answered++;
			return 1;
		}
		if (flip_closed(c)) {
			st->cut_off++;
			return 0;
		}
		h_sleep_ms(1);
	}
	H_ASSERT_MSG(0,
		     "request %llu (op %u) of client %llu: neither answered nor cut off within "
		     "%d ms",
		     (unsigned long long)n, op, (unsigned long long)c->client_id,
		     H_BOUND_MS(FLIP_ANSWER_MS));
	return 0;
}

/* flip_run - the flipper for seconds against the group's proxy, then the
 * hostile aftermath. Main thread. */
static inline void flip_run(unsigned seconds)
{
	struct flip_stats st = {0};
	uint64_t end = h_now_ms() + seconds * 1000ull, n = 0;
	struct raw c;

	H_ASSERT(pthread_create(&flip.th, NULL, flip_main, NULL) == 0);
	while (h_now_ms() < end) {
		raw_connect(&c, sock);
		raw_hello_tenant(&c, FLIP_TENANT);
		st.connections++;
		flip_show(&c);
		while (h_now_ms() < end && flip_request(&c, n++, &st))
			;
		flip_show(NULL);
		raw_close(&c);
		H_ASSERT_MSG(h_alive(proxy), "the proxy died under the flipper");
	}
	atomic_store(&flip.stop, true);
	pthread_join(flip.th, NULL);
	printf("  %u s: %llu requests, %llu answered, %llu cut off, %llu connections, %llu "
	       "flips; B: %llu rounds\n",
	       seconds, (unsigned long long)st.sent, (unsigned long long)st.answered,
	       (unsigned long long)st.cut_off, (unsigned long long)st.connections,
	       (unsigned long long)atomic_load(&flip.flips),
	       (unsigned long long)atomic_load(&b.ops));
	H_ASSERT(st.answered > 0 && st.cut_off > 0);
	H_ASSERT(h_alive(proxy));
	hostile_aftermath();
}

/* flip_setup - hostile_util.h's setup, the flipping tenant bounded by a
 * quota. */
static inline int flip_setup(void **state)
{
	(void)state;
	proxy = h_embedded_node(sock, &b.c, "--segment-size", "64MiB", "--tenant-quota",
				FLIP_TENANT "=8MiB", NULL);
	if (!proxy || pthread_create(&b.th, NULL, b_main, NULL) != 0)
		return -1;
	h_sleep_ms(200);
	fd_baseline = h_pid_fd_count(proxy->pid);
	printf("  proxy pid %d: %d descriptors with client B\n", (int)proxy->pid, fd_baseline);
	return fd_baseline > 0 ? 0 : -1;
}

/* flip_seconds - $FLIP_SECONDS, else dflt. */
static inline unsigned flip_seconds(unsigned dflt)
{
	const char *s = getenv("FLIP_SECONDS");

	return s && atoi(s) > 0 ? (unsigned)atoi(s) : dflt;
}

#endif /* LUNAR_TESTS_INTEGRATION_FLIPPER_H */
