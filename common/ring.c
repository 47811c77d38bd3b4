/*
 * ring.c - the submission ring's index protocol; see ring.h.
 */
#include "ring.h"

#include <errno.h>
#include <sched.h>
#include <string.h>

#include "atomic.h"

void lc_ring_init(struct lc_ring_ctl *r)
{
	memset(r, 0, sizeof(*r));
}

/* Looks at an inconsistent pair of indexes before the ring is called
 * corrupt: the consumer may be moving cons_head on purpose to keep us here. */
#define RESERVE_TRIES 1000

int lc_ring_reserve(struct lc_ring_prod *p, uint32_t entries, uint32_t n, uint32_t *head)
{
	uint32_t cons, h, used;

	for (unsigned tries = 1;; tries++) {
		/* cons_head first: a consumer that keeps to the protocol never
		 * passes a tail we published, so the head read after it is at
		 * least cons. Acquire pairs with lc_ring_release. */
		cons = lc_load_acquire(&p->ctl->cons_head);
		h = LC_READ_ONCE(p->head);
		used = h - cons;
		if (used > entries) {
			/* Producers may have reserved on a newer cons_head than
			 * ours: only a pair that holds still is corrupt. */
			if (tries == RESERVE_TRIES ||
			    (lc_load_acquire(&p->ctl->cons_head) == cons &&
			     LC_READ_ONCE(p->head) == h))
				return -EPROTO;
			continue;
		}
		if (n > entries || entries - used < n)
			return -EAGAIN;
		if (lc_cas(&p->head, &h, h + n))
			break;
	}
	*head = h;
	return 0;
}

void lc_ring_commit(struct lc_ring_prod *p, uint32_t head, uint32_t n)
{
	unsigned spins = 0;

	/* Earlier reservations publish first, so the tail only moves forward.
	 * Acquire pairs with the earlier committer's release store of our own
	 * tail, made after its store of the shared one: ours lands after that,
	 * and the consumer's acquire of ours orders the earlier slots too. */
	while (lc_load_acquire(&p->tail) != head) {
		if (++spins < 128)
			lc_cpu_relax();
		else
			sched_yield();
	}
	/* Pairs with the acquire load in lc_ring_consumable: slots before tail. */
	lc_store_release(&p->ctl->prod_tail, head + n);
	lc_store_release(&p->tail, head + n);
}

int64_t lc_ring_consumable(const struct lc_ring_ctl *r, uint32_t entries, uint32_t cons)
{
	uint32_t tail = lc_load_acquire(&r->prod_tail);
	uint32_t n = tail - cons;

	if (n > entries)
		return -EPROTO;
	return n;
}

void lc_ring_release(struct lc_ring_ctl *r, uint32_t cons)
{
	/* Pairs with the acquire load in lc_ring_reserve: slots read before reuse. */
	lc_store_release(&r->cons_head, cons);
}

int lc_ring_need_wakeup(struct lc_ring_ctl *r)
{
	/* Pairs with the fence in lc_ring_set_sleeping (store tail / load flag
	 * against store flag / load tail): one side always sees the other. */
	lc_smp_mb();
	return (LC_READ_ONCE(r->flags) & LC_RING_NEED_WAKEUP) != 0;
}

void lc_ring_set_sleeping(struct lc_ring_ctl *r, int sleeping)
{
	LC_WRITE_ONCE(r->flags, sleeping ? LC_RING_NEED_WAKEUP : 0u);
	/* Pairs with the fence in lc_ring_need_wakeup. */
	lc_smp_mb();
}
