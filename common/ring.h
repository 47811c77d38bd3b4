/*
 * ring.h - index arithmetic of the multi-producer, single-consumer submission
 * ring in shared memory (DPDK rte_ring style). Indexes are free-running
 * uint32_t, masked by entries - 1; full when head - cons_head == entries.
 * Producers (threads of one process) reserve with a CAS on their own head,
 * fill their slots in place, then publish with lc_ring_commit (in
 * reservation order). Neither side trusts the other: producers keep their
 * indexes in their own memory and read only cons_head from the shared
 * block, which they check; the consumer keeps its own copy of cons_head and
 * never trusts prod_tail beyond the bound check. These functions move
 * indexes only; descriptors are copied by the caller.
 */
#ifndef LUNAR_COMMON_RING_H
#define LUNAR_COMMON_RING_H

#include <stdint.h>

#include "shm_abi.h"

/* lc_ring_init - zero the control block. Creator only, before sharing. */
void lc_ring_init(struct lc_ring_ctl *r);

/*
 * The producers' side of a ring: the shared block and the indexes they keep
 * in their own memory, where the consumer cannot move them. Zero the
 * indexes (the ring starts at zero) before the first reserve.
 */
struct lc_ring_prod {
	struct lc_ring_ctl *ctl;
	uint32_t head; /* reserved so far (CAS) */
	uint32_t tail; /* published so far */
};

/*
 * lc_ring_reserve - reserve n consecutive entries for a producer. On success
 * returns 0 and sets *head to the first index. Returns -EAGAIN when fewer than
 * n entries are free, -EPROTO when the shared cons_head is not within
 * [head - entries, head]: the consumer corrupted the ring. Lock-free; any
 * producer thread.
 */
int lc_ring_reserve(struct lc_ring_prod *p, uint32_t entries, uint32_t n, uint32_t *head);

/*
 * lc_ring_commit - publish the n entries reserved at head. Waits (spinning,
 * then yielding) for earlier reservations of these producers to be published
 * first, then makes the entries visible with one release store. The wait
 * reads only the producers' own index: the consumer cannot prolong it.
 */
void lc_ring_commit(struct lc_ring_prod *p, uint32_t head, uint32_t n);

/*
 * lc_ring_consumable - how many entries the consumer may take from its
 * private index cons (0 if none). Returns -EPROTO when the shared tail is not
 * within [cons, cons + entries]: the producer corrupted the ring.
 * Consumer thread only.
 */
int64_t lc_ring_consumable(const struct lc_ring_ctl *r, uint32_t entries, uint32_t cons);

/* lc_ring_release - make entries up to cons reusable by producers. */
void lc_ring_release(struct lc_ring_ctl *r, uint32_t cons);

/*
 * lc_ring_need_wakeup - producer side, after commit: 1 if the consumer sleeps
 * and must be woken (eventfd), else 0. Contains the full fence that pairs
 * with the one in lc_ring_set_sleeping.
 */
int lc_ring_need_wakeup(struct lc_ring_ctl *r);

/*
 * lc_ring_set_sleeping - consumer side, before sleeping: set or clear
 * NEED_WAKEUP. After setting it the consumer must check lc_ring_consumable
 * once more before it sleeps.
 */
void lc_ring_set_sleeping(struct lc_ring_ctl *r, int sleeping);

#endif /* LUNAR_COMMON_RING_H */
