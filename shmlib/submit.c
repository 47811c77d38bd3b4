/*
 * submit.c - one request's trip through the region: take a completion slot,
 * publish the descriptor on the multi-producer ring (waking the proxy only
 * when it asked for it), then wait for the slot to turn DONE: a spin (or
 * sched_yield loop) as long as the session's requests usually take
 * (spin.h), then futex sleeps in slices, checking between slices that
 * the proxy is alive and the deadline has not passed. shm_send and
 * shm_complete are the two halves, which an asynchronous call runs apart.
 */
#include "shm_int.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "cpus.h"
#include "copyout.h"
#include "futex.h"
#include "ring.h"
#include "spin.h"

#define SHM_SLICE_NS 50000000ull /* how soon a dead proxy is noticed */

int shm_wait_cond(struct shm_conn *cn, uint64_t deadline_ns)
{
	struct timespec ts = {(time_t)(deadline_ns / 1000000000ull),
			      (long)(deadline_ns % 1000000000ull)};

	return pthread_cond_timedwait(&cn->cond, &cn->lock, &ts) == ETIMEDOUT ? -ETIMEDOUT : 0;
}

void shm_waiter_enter(struct shm_conn *cn)
{
	lc_fetch_add(&cn->waiters, 1u);
	lc_smp_mb(); /* pairs with the fence in shm_wake_waiters */
}

void shm_waiter_leave(struct shm_conn *cn)
{
	lc_fetch_add(&cn->waiters, (uint32_t)-1);
}

void shm_wake_waiters(struct shm_conn *cn)
{
	lc_smp_mb(); /* pairs with the fence in shm_waiter_enter */
	if (LC_READ_ONCE(cn->waiters)) {
		pthread_mutex_lock(&cn->lock);
		pthread_cond_broadcast(&cn->cond);
		pthread_mutex_unlock(&cn->lock);
	}
}

/* A free slot, taken without a lock; waiting (on the session's condition)
 * only when all are taken. */
static int slot_take(struct shm_conn *cn, uint64_t deadline_ns, uint32_t *s)
{
	int rc = 0;

	if (!shm_bits_take(&cn->free_slots, s))
		return 0;
	pthread_mutex_lock(&cn->lock);
	shm_waiter_enter(cn);
	while (!rc && shm_bits_take(&cn->free_slots, s)) {
		if (shm_conn_is_broken(cn))
			rc = LUNAR_ERR_PROXY_UNAVAILABLE;
		else if (shm_wait_cond(cn, deadline_ns) == -ETIMEDOUT)
			rc = LUNAR_ERR_BUSY;
	}
	shm_waiter_leave(cn);
	pthread_mutex_unlock(&cn->lock);
	return rc;
}

static void slot_give(struct shm_conn *cn, uint32_t s)
{
	lc_store_release(&cn->slots[s].state, (uint32_t)LC_SLOT_IDLE);
	shm_bits_give(&cn->free_slots, s);
	shm_wake_waiters(cn);
}

/* Checks between waits: 0 to keep waiting, else the session is broken. */
static int still_alive(struct shm_conn *cn, uint64_t deadline_ns)
{
	if (shm_conn_is_broken(cn))
		return LUNAR_ERR_PROXY_UNAVAILABLE;
	if (shm_conn_hung_up(cn))
		shm_conn_break(cn, "proxy hung up");
	else if (lc_now_ns() >= deadline_ns)
		shm_conn_break(cn, "request timed out");
	else
		return 0;
	return LUNAR_ERR_PROXY_UNAVAILABLE;
}

static int ring_push(struct shm_conn *cn, const struct lc_sqe *sqe, uint64_t deadline_ns)
{
	uint32_t head;
	int rc;

	/* Only when the ring has fewer entries than slots can it be full. */
	while ((rc = lc_ring_reserve(&cn->prod, cn->entries, 1, &head))) {
		if (rc == -EPROTO) {
			shm_conn_break(cn, "proxy corrupted the ring's consumer index");
			return LUNAR_ERR_PROTOCOL;
		}
		rc = still_alive(cn, deadline_ns);
		if (rc)
			return rc;
		sched_yield();
	}
	memcpy(&cn->sqes[head & (cn->entries - 1)], sqe, sizeof(*sqe));
	lc_ring_commit(&cn->prod, head, 1);
	return 0;
}

/* After a push: wake the proxy if it sleeps. */
static int ring_kick(struct shm_conn *cn)
{
	uint64_t one = 1;

	if (lc_ring_need_wakeup(cn->ring) && write(cn->evfd, &one, sizeof(one)) < 0 &&
	    errno != EAGAIN) {
		shm_conn_break(cn, "eventfd write failed");
		return LUNAR_ERR_PROXY_UNAVAILABLE;
	}
	return 0;
}

/* The CPUs this process may use: its first waiter's affinity, read once
 * (a later change of affinity is not seen). */
static struct {
	pthread_once_t once;
	cpu_set_t set;
	uint32_t count;
} usable = {PTHREAD_ONCE_INIT};

static void usable_read(void)
{
	usable.count = lc_usable_set(&usable.set);
}

/* This process's CPUs beside the proxy's loop (shm_spare_cpus). */
static uint32_t spare_cpus(const struct shm_conn *cn)
{
	pthread_once(&usable.once, usable_read);
	return shm_spare_cpus(&usable.set, usable.count, LC_READ_ONCE(cn->ring->loop_cpu));
}

/* 1 when this thread runs on the CPU the proxy's loop last ran on (known on
 * both sides): a would-be spinner then sleeps, since a futex wakeup lets
 * the scheduler place it elsewhere, while spinning starves the loop and
 * yielding keeps the two sharing one CPU for good. */
static int beside_loop(const struct shm_conn *cn)
{
	uint32_t loop_cpu = LC_READ_ONCE(cn->ring->loop_cpu);

	return loop_cpu && loop_cpu == (uint32_t)sched_getcpu() + 1;
}

/*
 * Wait for DONE without sleeping for up to the budget of requests that
 * take lat: by spinning where shm_should_spin says so, else by yielding
 * the CPU between looks. With more waiters than CPUs and requests slower
 * than a switch they then hand the CPU to each other and to the proxy
 * instead of each paying a futex sleep and a wakeup (8 threads on 2 CPUs:
 * about 2x the throughput); spinning is kept to the process's CPUs other
 * than the loop's, or to short budgets, so that spinners do not starve the
 * loop that completes them. A would-be spinner on the loop's CPU sleeps at
 * once instead (the loop then pays a FUTEX_WAKE). Returns 1 when DONE was
 * seen; 0 when the caller should sleep.
 */
static int slot_spin(struct shm_conn *cn, struct lc_cslot *slot, uint64_t start, uint32_t lat)
{
	uint32_t budget = shm_spin_budget(lat);
	struct shm_waiters w = {.watching = lc_fetch_add(&cn->watching, 1u),
				.spare_cpus = spare_cpus(cn),
				.crowded = LC_READ_ONCE(cn->ring->crowded) != 0};
	int spin = shm_should_spin(w, lat);
	int done = 0;

	do {
		/* Pairs with the proxy's exchange to DONE after it wrote results. */
		if (lc_load_acquire(&slot->state) == LC_SLOT_DONE) {
			done = 1;
			break;
		}
		if (!spin)
			sched_yield();
		else if (beside_loop(cn))
			break;
		else
			lc_cpu_relax();
	} while (lc_now_ns() - start < budget);
	lc_fetch_add(&cn->watching, (uint32_t)-1);
	return done;
}

/* How often a copying waiter looks at the session's health (a system
 * call each time); how long it waits for the proxy's first attempt, and
 * how long an attempt may tell nothing new (a 256 KiB chunk takes 5 ms
 * at 50 MB/s), before it waits as usual instead. */
#define SHM_COPYOUT_CHECK_NS 1000000u
#define SHM_COPYOUT_START_NS 5000000u
#define SHM_COPYOUT_STALL_NS 50000000u

/*
 * Wait for DONE copying out what lands (copyout.h), yielding the CPU when
 * nothing new landed: the thread that receives the value may need it.
 * Only while the request is the session's one in flight (with others, the
 * CPUs have their work, and a copier would only take turns with it), the
 * proxy's attempt tells its bytes, an attempt began within
 * SHM_COPYOUT_START_NS, and the word moved (bytes landed, another attempt
 * began) within the last SHM_COPYOUT_STALL_NS. 1 when DONE was seen, 0
 * when the caller should wait as usual, or a code when the session broke.
 */
static int slot_copyout(struct shm_conn *cn, struct lc_cslot *slot, struct shm_copyout *d,
			uint64_t deadline_ns)
{
	uint64_t now = lc_now_ns(), seen = 0, seen_at = now, check_at = now + SHM_COPYOUT_CHECK_NS;
	int rc = 1;

	lc_fetch_add(&cn->watching, 1u);
	while (lc_load_acquire(&slot->state) != LC_SLOT_DONE) {
		uint64_t word = lc_load_acquire(&slot->landed);
		int moved;

		if (word != seen) {
			seen = word;
			seen_at = now;
		}
		if (cn->slot_count - shm_bits_free(&cn->free_slots) > 1 ||
		    (word && !lc_landed_tells(word)) ||
		    now - seen_at > (word ? SHM_COPYOUT_STALL_NS : SHM_COPYOUT_START_NS)) {
			rc = 0;
			break;
		}
		moved = shm_copyout_step(d, word);
		now = lc_now_ns();
		if (now >= check_at) {
			rc = still_alive(cn, deadline_ns);
			if (rc)
				break;
			rc = 1;
			check_at = now + SHM_COPYOUT_CHECK_NS;
		}
		if (!moved)
			sched_yield();
	}
	lc_fetch_add(&cn->watching, (uint32_t)-1);
	return rc;
}

static int slot_sleep(struct shm_conn *cn, struct lc_cslot *slot, uint64_t deadline_ns)
{
	uint32_t st = LC_SLOT_PENDING;
	int rc;

	/* The proxy wakes the futex only if it sees WAITING when it finishes. */
	if (lc_cas(&slot->state, &st, (uint32_t)LC_SLOT_WAITING))
		st = LC_SLOT_WAITING;
	while (st == LC_SLOT_WAITING) {
		uint64_t now = lc_now_ns();
		uint64_t left = deadline_ns > now ? deadline_ns - now : 0;

		rc = still_alive(cn, deadline_ns);
		if (rc)
			return rc;
		lc_futex_wait(&slot->state, LC_SLOT_WAITING,
			      left < SHM_SLICE_NS ? left : SHM_SLICE_NS);
		st = lc_load_acquire(&slot->state);
	}
	if (st == LC_SLOT_DONE)
		return 0;
	shm_conn_break(cn, "completion slot in a bad state");
	return LUNAR_ERR_PROTOCOL;
}

/* Wait for the slot of a request of kind op submitted at start: copy out
 * what lands when d is given and the proxy tells it, then (if not done)
 * spin or yield, then sleep. */
static int slot_wait(struct shm_conn *cn, struct lc_cslot *slot, uint16_t op, uint64_t start,
		     uint64_t deadline_ns, struct shm_copyout *d)
{
	uint32_t *lat = shm_lat_of(cn->lat_ns, op);
	int rc = d && cn->tells_landed ? slot_copyout(cn, slot, d, deadline_ns) : 0;

	if (rc < 0)
		return rc;
	if (rc)
		rc = 0;
	else if (!slot_spin(cn, slot, start, LC_READ_ONCE(*lat)))
		rc = slot_sleep(cn, slot, deadline_ns);
	/* Racing threads may lose each other's samples: it is only a hint. */
	if (!rc)
		LC_WRITE_ONCE(
		    *lat, shm_lat_update(LC_READ_ONCE(*lat), start, LC_READ_ONCE(slot->done_ns)));
	return rc;
}

int shm_send(struct shm_conn *cn, struct lc_sqe *sqe, uint64_t take_by_ns, uint64_t deadline_ns,
	     struct shm_ticket *t)
{
	int rc;

	if (shm_conn_is_broken(cn))
		return LUNAR_ERR_PROXY_UNAVAILABLE;
	rc = slot_take(cn, take_by_ns, &t->slot);
	if (rc)
		return rc;
	/* Nothing landed yet (copyout.h); both before the proxy's acquire
	 * of the descriptor via the ring tail. */
	LC_WRITE_ONCE(cn->slots[t->slot].landed, 0);
	lc_store_release(&cn->slots[t->slot].state, (uint32_t)LC_SLOT_PENDING);
	sqe->slot = t->slot;
	sqe->seq = t->seq = lc_fetch_add(&cn->seq, 1) + 1;
	t->op = sqe->op;
	/* Before the push: a waiter preempted after it still counts its wait. */
	t->start_ns = lc_now_ns();
	rc = ring_push(cn, sqe, deadline_ns);
	if (rc) {
		slot_give(cn, t->slot);
		return rc;
	}
	rc = ring_kick(cn);
	if (rc) {
		shm_conn_fence(cn); /* the request is in the proxy's hands */
		slot_give(cn, t->slot);
	}
	return rc;
}

int shm_ticket_ready(struct shm_conn *cn, const struct shm_ticket *t, uint64_t deadline_ns)
{
	return lc_load_acquire(&cn->slots[t->slot].state) == LC_SLOT_DONE ||
	       still_alive(cn, deadline_ns) != 0;
}

int shm_complete(struct shm_conn *cn, const struct shm_ticket *t, uint64_t deadline_ns,
		 int64_t *result, struct shm_copyout *d)
{
	struct lc_cslot *slot = &cn->slots[t->slot];
	int rc = slot_wait(cn, slot, t->op, t->start_ns, deadline_ns, d);

	if (!rc && LC_READ_ONCE(slot->seq) != t->seq) {
		shm_conn_break(cn, "completion for another request");
		rc = LUNAR_ERR_PROTOCOL;
	}
	if (rc) {
		shm_conn_fence(cn); /* the request is in the proxy's hands */
	} else {
		*result = LC_READ_ONCE(slot->result);
		if (d)
			d->kept = shm_copyout_kept(d, LC_READ_ONCE(slot->landed));
	}
	shm_detail_set(rc ? LC_REASON_NONE : LC_READ_ONCE(slot->reason),
		       rc ? 0 : LC_READ_ONCE(slot->reason_arg));
	slot_give(cn, t->slot);
	return rc;
}

int shm_submit(struct shm_conn *cn, struct lc_sqe *sqe, uint64_t deadline_ns, int64_t *result,
	       struct shm_copyout *d)
{
	struct shm_ticket t;
	int rc = shm_send(cn, sqe, deadline_ns, deadline_ns, &t);

	return rc ? rc : shm_complete(cn, &t, deadline_ns, result, d);
}
