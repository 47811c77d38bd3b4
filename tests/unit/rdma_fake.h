/*
 * rdma_fake.h - a fake RDMA device layer for tests on hosts without one.
 * Linked with -Wl,--wrap of eng_rdma_dev_open, _seg_register, _dev_put, _mem_keys,
 * _mem_mr, _qps_create, _qps_connect, _qps_destroy, _qps_post, _qps_wait,
 * _qps_fence, _qps_open and _qps_close (RDMA_FAKE_WRAPS, Makefile): with rdma_fake.on
 * set, engines see a device "fake0:1" whose handshakes carry real frames
 * over the real data port, and whose "NIC" moves a work request's bytes
 * with memcpy, which is right while both engines live in the test's
 * process, and whose waits fail once the set's watched lifeline is hung
 * up (after the bytes moved: a fence under a transfer is seen at its
 * end); with it clear, the real functions run. The device has memory
 * windows (unless no_windows): a request whose rkey is a window's moves
 * bytes only inside the window while it is bound, for the access it was
 * bound for, and fails otherwise, as a NIC's would. Knobs and counters
 * below; the test sets the knobs between transfers (the data port's
 * threads read them).
 */
#ifndef LUNAR_TESTS_RDMA_FAKE_H
#define LUNAR_TESTS_RDMA_FAKE_H

#include <stdatomic.h>
#include <stdint.h>

struct rdma_fake {
	int on;		      /* 0: the real functions */
	int nodev_at;	      /* the dev_open (1-based) that finds no device; 0 none */
	int connect_rc;	      /* what qps_connect returns */
	int unregistered;     /* mem_keys finds nothing */
	int post_rc;	      /* what qps_post returns instead of moving bytes (0: moves) */
	int close_rc;	      /* what qps_close returns instead of unbinding (0: unbinds) */
	int corrupt;	      /* flip the first byte each post moves */
	unsigned register_ms; /* how long registering a segment takes */
	int register_rc;      /* what it returns (0: registers) */
	unsigned post_ms;     /* how long the "NIC" takes a work request */
	int no_windows;	      /* devices opened now have no memory windows */
	int overreach;	      /* each request moves one byte more than asked */
	int opens;	      /* dev_open calls so far */
	atomic_int creates, connects, fences; /* qps_create, qps_connect, qps_fence calls */
	atomic_int posts;		      /* work requests the "NIC" ran */
	atomic_int running, most;	      /* work requests it runs now, and at most */
	atomic_int binds, bound;	      /* window binds so far; windows bound now */
	atomic_int mr_key_posts;	 /* requests that reached client memory by its MR's rkey */
	atomic_int denied;		 /* requests a window did not allow */
	atomic_int key_lookups;		 /* mem_keys calls */
	atomic_uint_fast64_t moved;	 /* bytes it moved */
	atomic_uint_fast64_t owner_addr; /* the segment address an owner's answer named */
	atomic_uint owner_rkey;		 /* and its key (the last connect that had them) */
};

extern struct rdma_fake rdma_fake;

/* rdma_fake_reset - knobs and counters to zero, on set to on. */
void rdma_fake_reset(int on);
/* rdma_fake_wait_segment - until e's segment is registered or failed to
 * (engines register it beside serving), 10 s at most; whether it is
 * registered. */
struct eng_engine;
int rdma_fake_wait_segment(const struct eng_engine *e);

#endif
