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

int lc_ring_reserve(struct lc_ring_ctl *r, uint32_t entries, uint32_t n, uint32_t *head)
{
	uint32_t h = LC_READ_ONCE(r->prod_head);

	for (;;) {
		/* Pairs with the release store in lc_ring_release. */
		uint32_t cons = lc_load_acquire(&r->cons_head);

		if (n > entries || entries - (h - cons) < n)
			return -EAGAIN;
		if (lc_cas(&r->prod_head, &h, h + n))
			break;
	}
	*head = h;
	return 0;
}

void lc_ring_commit(struct lc_ring_ctl *r, uint32_t head, uint32_t n)
{
	unsigned spins = 0;

	/* Earlier reservations publish first, so the tail only moves forward.
	 * Acquire pairs with the earlier committer's release store of the tail:
	 * a plain store does not extend its release sequence, so without it the
	 * consumer's acquire of our tail would not order the earlier slots. */
	while (lc_load_acquire(&r->prod_tail) != head) {
		if (++spins < 128)
			lc_cpu_relax();
		else
			sched_yield();
	}
	/* Pairs with the acquire load in lc_ring_consumable: slots before tail. */
	lc_store_release(&r->prod_tail, head + n);
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
