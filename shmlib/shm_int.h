/*
 * shm_int.h - liblunar internals: the client handle, one proxy session
 * (struct shm_conn: socket, mapped region, slots, arena), the table of
 * registered memory, and the request path shared by the single-key and batch
 * calls. Never included from outside shmlib/.
 *
 * Locks, in the order they nest: lunar_client.alloc_lock (lunar_alloc
 * chunks) -> lunar_client.lock (the session pointer; reconnecting) ->
 * lunar_client.regs_lock (the registration table, a rwlock: synchronous
 * requests read it for their whole run, asynchronous ones while they are
 * built, register traffic on the socket writes it) -> shm_conn.lock (slot
 * free list and arena).
 */
#ifndef LUNAR_SHMLIB_SHM_INT_H
#define LUNAR_SHMLIB_SHM_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "lunar.h"
#include "ring.h"
#include "shm_abi.h"

#define SHM_LOG "shmlib"

/* One proxy session. Refcounted: the handle holds one reference while the
 * session is current, every call in flight and every registration bound to
 * it one more. The region is unmapped when the last reference goes. */
/* A set of free things (slots, arena cells): bit i set means i is free. */
struct shm_bits {
	uint64_t *w; /* atomic */
	uint32_t words;
};

/*
 * One session with the proxy. Its resources (region, descriptors, arena)
 * live while refs > 0. The struct stays on its handle's list after it is
 * replaced, since a thread that read the handle's current session just
 * before a reconnect may still look at refs (shm_client_acquire takes a
 * reference only while refs > 0); a later reconnect frees it once it is
 * released and no such thread is counted in the handle's readers.
 */
struct shm_conn {
	int refs;		/* atomic */
	int broken;		/* atomic; once set, never cleared: the region is dropped */
	int released;		/* atomic; set once the last reference released the resources */
	struct shm_conn *older; /* the handle's earlier session, or NULL */
	int sock;		/* liveness: hang-up means the proxy died, or is done with us */
	unsigned timeout_ms;	/* the handle's, for shm_conn_fence */
	int fence_failed;	/* atomic; a fence timed out: later ones do not wait */
	int evfd;		/* written to wake the proxy when it sleeps */
	uint8_t *base;
	uint64_t size;
	struct lc_ring_ctl *ring;
	struct lc_ring_prod prod; /* our ring indexes, out of the proxy's reach */
	struct lc_sqe *sqes;
	struct lc_cslot *slots;
	uint32_t entries;
	uint32_t slot_count;
	uint32_t max_batch;
	uint32_t max_segs;
	uint64_t arena_off;
	uint64_t arena_size;
	int seg_crc;	  /* LC_WELCOME_SEG_CRC: stage puts with their pieces' CRC32C */
	int tells_landed; /* LC_WELCOME_LANDED: large gets are copied out as they land */
	char http_addr[LC_HTTP_ADDR_MAX]; /* the header's, checked; "" when not told */
	uint64_t seq;		    /* atomic; the handle's request counter for this session */
	uint32_t lat_ns[LC_OP_MAX]; /* relaxed; average completion time by op (spin.h) */
	uint32_t watching;	    /* threads watching a completion without sleeping (atomic) */

	struct shm_bits free_slots;
	/* The arena: SHM_CELL-sized cells at its start, taken without a lock
	 * by requests that fit one; the rest is cut by a range allocator. */
	struct shm_bits free_cells;
	uint64_t cells_end; /* region offset where the cells end */
	uint64_t arena_max; /* the largest range a request can get */

	pthread_mutex_t lock;
	pthread_cond_t cond;	 /* a slot or arena range was freed, or broken */
	struct lc_ralloc *arena; /* [cells_end, arena_off + arena_size) */
	uint32_t waiters;	 /* atomic; threads waiting on cond for a slot or range */

	/* On fork.c's list while its descriptors are open (under its lock). */
	struct shm_conn *open_next, *open_prev;
	uint32_t open_gen; /* the fork generation it was listed in, + 1; 0 off the list */
};

/*
 * Registered memory: the caller's range [base, base + len), which lies in
 * one memfd mapping; [span, span + span_len) is the page-aligned part of
 * that mapping the proxy maps, at file_off in the memfd. The table keeps its
 * own descriptor of the memfd so the range can be registered again with a
 * restarted proxy. id is the proxy's region number in session conn (a
 * reference); conn NULL means the range is not shared now and is staged.
 */
struct shm_region {
	uint8_t *base;
	size_t len;
	uint8_t *span;
	uint64_t span_len;
	uint64_t file_off;
	uint64_t dev, ino; /* the memfd's identity */
	int fd;
	int chunk; /* a lunar_alloc chunk, not the caller's memory */
	struct shm_conn *conn;
	uint32_t id;
	/* Asynchronous calls pending that reference the range in place
	 * (atomic; on the heap, as rows move when one is deleted):
	 * lunar_unregister waits for none. */
	uint32_t *pending;
};

/* A lunar_alloc chunk: a sealed memfd mapped here and registered; blocks are
 * carved out of it with a range allocator. */
struct shm_chunk {
	struct shm_chunk *next;
	uint8_t *base;
	uint64_t size;
	struct lc_ralloc *ra;
};

struct lunar_client {
	pthread_mutex_t lock;	/* taken to replace conn, until the caller's deadline */
	struct shm_conn *conn;	/* atomic; current session, NULL after a failed reconnect */
	struct shm_conn *conns; /* every session not yet freed, newest first (under lock) */
	uint32_t readers;	/* atomic; threads between loading conn and taking a reference */
	/* Reconnect attempts finished, written under lock: a thread reads it
	 * before waiting for lock, and one that then finds conn NULL and the
	 * count moved returns attempt_rc (under lock) instead of trying again,
	 * so threads queued behind a hung proxy do not each wait a timeout. */
	uint32_t attempts;
	int attempt_rc;
	pthread_rwlock_t regs_lock;
	struct shm_region regs[LC_MAX_REGIONS];
	uint32_t nregs;
	uint64_t reg_cookie; /* under regs_lock (write) */
	pthread_mutex_t alloc_lock;
	struct shm_chunk *chunks;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char tenant[LC_TENANT_MAX];
	uint64_t arena_bytes;
	unsigned timeout_ms;
	uint32_t fork_gen; /* shm_fork_generation() at connect */
};

/*
 * One key of a request; result is written back. key is the caller's, read
 * only for its key_len bytes (measured once, when checked). iov is a private
 * copy of the caller's scatter list, never the caller's array: the request
 * reads the lengths several times (layout, staging, copy-back), and another
 * thread of the application may change its iovecs meanwhile.
 */
struct shm_item {
	const char *key;
	size_t key_len;
	const struct iovec *iov;
	int iovcnt;
	int64_t result;
};

/* What goes into the descriptor besides the arguments. */
struct shm_op {
	uint16_t op;
	uint16_t flags;
	uint32_t replica_num;
	uint32_t soft_pin_ttl_ms;
	/* Preferred segments (put, upsert): the caller's, copied once per
	 * request when it is laid out. */
	const char *const *pref;
	unsigned npref;
};

/* --- conn.c: sessions --- */

/*
 * shm_conn_open - connect to c's proxy, handshake, map and validate the
 * region, and keep the session on c's list. On success *out holds one
 * reference (the caller's). Blocks up to c->timeout_ms. Caller holds
 * c->lock, or is lunar_connect. Returns 0 or a LUNAR_ERR_* code
 * (PROXY_UNAVAILABLE when nobody listens, the proxy's refusal code,
 * PROTOCOL for a bad region).
 */
int shm_conn_open(struct lunar_client *c, struct shm_conn **out);
/* shm_conn_get/shm_conn_put - take/drop a reference; the last put unmaps
 * the region and closes the session's descriptors. shm_conn_put accepts
 * NULL. Any thread, no lock needed. */
void shm_conn_get(struct shm_conn *cn);
void shm_conn_put(struct shm_conn *cn);
/* shm_conns_free - free every session struct of c (lunar_close, after the
 * last reference is dropped; replaced ones go earlier, at reconnects). */
void shm_conns_free(struct lunar_client *c);
/* shm_conns_forget - the same in a forked child, where the parent's locks
 * are untouchable: unmap the sessions still listed at the fork (the rest
 * were being released, maybe half unmapped: this process's copies are
 * left) and free, nothing else (fork.c closed the descriptors). */
void shm_conns_forget(struct lunar_client *c);
/* shm_conn_break - mark the session dead (once; why is logged) and wake
 * every thread waiting on it. Any thread, cn->lock not held. */
void shm_conn_break(struct shm_conn *cn, const char *why);
/*
 * shm_conn_fence - for a thread giving up on a request that reached the
 * proxy, before the request's memory goes back to the application: the
 * proxy may still be reading or writing it (registered memory, which the
 * application keeps using). Closes our half of the socket, so that the
 * proxy drops the session, and waits up to the handle's timeout for the
 * proxy to close its end, which it does once no request of the session
 * runs any more (or when it dies). A proxy that does not (stopped, hung)
 * is logged once; the session's later fences do not wait again.
 */
void shm_conn_fence(struct shm_conn *cn);
/* shm_conn_is_broken - 1 once broken. */
int shm_conn_is_broken(struct shm_conn *cn);
/* shm_conn_hung_up - 1 if the proxy closed its end of the socket. Never
 * blocks. */
int shm_conn_hung_up(struct shm_conn *cn);
/*
 * shm_client_acquire - the handle's current session with a reference for
 * the caller, without a lock while it is up. When there is none or it
 * broke, reconnects under c->lock (then c->regs_lock): a new session gets
 * every registered range registered again before it is used; this blocks
 * for the handshake and the registrations (up to the handle's timeout
 * each). Waits for c->lock, held by another thread's attempt, only until
 * deadline_ns (CLOCK_MONOTONIC), and makes no attempt of its own when one
 * failed while it waited: it returns that attempt's code. Any thread,
 * c->lock and c->regs_lock not held. Returns 0, PROXY_UNAVAILABLE at the
 * deadline, or the attempt's code.
 */
int shm_client_acquire(struct lunar_client *c, uint64_t deadline_ns, struct shm_conn **out);

/* --- fork.c: a handle belongs to the process that opened it --- */

/* shm_fork_generation - how many forks this process descends from (since
 * liblunar was first used); installs the fork handler on first use. */
uint32_t shm_fork_generation(void);
/* shm_forked - 1 in a child forked after c was opened: c must not be used. */
int shm_forked(const struct lunar_client *c);
/* shm_fork_socket - create the session's socket (cn->sock) and list the
 * session in the same step against fork, so a forked child closes its
 * copies of the socket and the eventfd. 0 or -errno.
 * shm_fork_close - unlist it and close both, again as one step. */
int shm_fork_socket(struct shm_conn *cn);
void shm_fork_close(struct shm_conn *cn);

/*
 * shm_call_begin - every public call on c starts here: ILLEGAL_CLIENT in a
 * forked child (nothing shared is touched), else 0 with the thread's
 * cancellation held off until shm_call_end. A call is no cancellation point:
 * a thread cancelled inside one would leave locks, slots and session
 * references held and hang the handle's other threads; the request pending
 * acts at the thread's next cancellation point after the call.
 */
static inline int shm_call_begin(const struct lunar_client *c, int *cancel_state)
{
	if (shm_forked(c))
		return LUNAR_ERR_ILLEGAL_CLIENT;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, cancel_state);
	return 0;
}

static inline void shm_call_end(int cancel_state)
{
	pthread_setcancelstate(cancel_state, NULL);
}

/* --- bits.c: free sets taken without a lock --- */

/* shm_bits_init - n things, all free (n == 0: an empty set). 0 or -ENOMEM. */
int shm_bits_init(struct shm_bits *b, uint32_t n);
/* shm_bits_fini - free b's words; b is then an empty set. No take or put may
 * be running. */
void shm_bits_fini(struct shm_bits *b);
/* shm_bits_take - take a free thing with a CAS, starting at a word of the
 * calling thread's own so that threads rarely meet. 0 and *i, or -1 when
 * none is free. */
int shm_bits_take(struct shm_bits *b, uint32_t *i);
/* shm_bits_give - free thing i (an atomic OR with acquire-release order). */
void shm_bits_give(struct shm_bits *b, uint32_t i);
/* shm_bits_free - how many things are free: a snapshot, a word at a time,
 * which takes and gives beside it may already have changed. */
uint32_t shm_bits_free(const struct shm_bits *b);

/* --- arena.c: the shared arena --- */

/* Arena blocks are cache-line aligned: staged values copy fast and two
 * requests never share a line the proxy writes results into. */
#define SHM_ARENA_ALIGN LC_CACHELINE
#define SHM_CELL	(8u * 1024) /* a request whose block fits takes no lock */

/* shm_arena_init - cut [arena_off, arena_off + arena_size) into at most
 * slot_count cells (an eighth of the arena at most) and the allocator's
 * space. 0 or a code. shm_arena_fini frees both; a second call does nothing. */
int shm_arena_init(struct shm_conn *cn);
void shm_arena_fini(struct shm_conn *cn);
/*
 * shm_arena_get - allocate len bytes of arena, waiting for space until
 * deadline_ns (CLOCK_MONOTONIC). *off is a region offset. Up to SHM_CELL
 * bytes come from a free cell without a lock while there is one; else,
 * and for larger blocks, under cn->lock. Returns 0, INVALID_PARAMS when len
 * can never fit, BUSY at the deadline, or PROXY_UNAVAILABLE when the
 * session breaks meanwhile.
 */
int shm_arena_get(struct shm_conn *cn, uint64_t len, uint64_t deadline_ns, uint64_t *off);
/* shm_arena_put - free the block at off and wake waiters (a cell without
 * a lock unless someone waits; a range under cn->lock). */
void shm_arena_put(struct shm_conn *cn, uint64_t off);

/* --- region.c: registered memory --- */

/* shm_regs_init/shm_regs_fini - the empty table; fini closes the table's
 * descriptors and drops its session references (no call in flight). */
int shm_regs_init(struct lunar_client *c);
void shm_regs_fini(struct lunar_client *c);
/*
 * shm_regs_add - register rg (base, len, span, span_len, file_off, dev,
 * ino, fd, chunk filled in) with the current session and keep it. On 0 the
 * table owns rg->fd; on error the caller still does. Returns 0, 1 when the
 * same range of the same memfd is registered already (the caller's fd is
 * not taken), INVALID_PARAMS when it overlaps another range,
 * NO_AVAILABLE_HANDLE when the table is full, or the session's or the
 * proxy's code. Takes c->lock then c->regs_lock; blocks for one round trip.
 */
int shm_regs_add(struct lunar_client *c, const struct shm_region *rg);
/*
 * shm_regs_rebind - move every registration to session cn (c->lock held):
 * each range is registered with cn, or left unshared (staged) when that
 * fails; cn NULL unshares them all. Takes c->regs_lock; blocks for the
 * round trips.
 */
void shm_regs_rebind(struct lunar_client *c, struct shm_conn *cn);
/* shm_regs_rdlock/shm_regs_unlock - hold the table steady for a request:
 * from building it until its results are copied out. */
void shm_regs_rdlock(struct lunar_client *c);
void shm_regs_unlock(struct lunar_client *c);
/* shm_regs_find - if p[0..len) lies inside a range shared with session cn,
 * its region id and its offset from that region's start, and when pending
 * is not NULL the range's count of asynchronous calls pending in it; else
 * 0. Read lock held. */
int shm_regs_find(const struct lunar_client *c, const struct shm_conn *cn, const void *p,
		  size_t len, uint32_t *region, uint64_t *off, uint32_t **pending);
/*
 * shm_memfd_span - describe the memfd mapping p[0..len) lies in, for
 * shm_regs_add: on 0 rg->fd is a new descriptor of the memfd (CLOEXEC, the
 * caller's). INVALID_PARAMS when the range is not inside one shared,
 * writable mapping of a memfd sealed against shrinking, or no descriptor of
 * it can be found. Reads /proc/self; any thread, no lock.
 */
int shm_memfd_span(void *p, size_t len, struct shm_region *rg);

/* --- alloc.c: lunar_alloc chunks --- */

/* shm_chunks_fini - unmap every chunk (lunar_close; their registrations
 * are dropped with the table). */
void shm_chunks_fini(struct lunar_client *c);

/* --- submit.c: slots, ring, waiting --- */

struct shm_copyout; /* copyout.h */

/*
 * shm_submit - send sqe (its slot and seq are filled here) and wait for the
 * completion until deadline_ns. On 0, *result is the completion result and
 * the argument block may be read. Returns PROXY_UNAVAILABLE (hang-up,
 * deadline: the session is broken), PROTOCOL, or BUSY (no slot in time).
 * Any thread; takes cn->lock only when every slot is taken, or to wake
 * threads that wait for one. d: NULL, or a one-value get's staging place
 * and buffer, to copy the value out while it lands (copyout.h); on 0,
 * d->kept is how many of the buffer's first bytes hold the value already
 * (when the result says the get succeeded).
 */
int shm_submit(struct shm_conn *cn, struct lc_sqe *sqe, uint64_t deadline_ns, int64_t *result,
	       struct shm_copyout *d);

/* A request sent and not yet completed: its slot, and what waiting needs. */
struct shm_ticket {
	uint32_t slot;
	uint16_t op;
	uint64_t seq;
	uint64_t start_ns;
};

/*
 * shm_submit in two halves, for a caller that does other work between.
 * shm_send - take a slot (waiting for one until take_by_ns when all are
 * taken: BUSY then; 0 does not wait), publish sqe and wake the proxy; on 0,
 * t names the request, which the caller must complete with shm_complete
 * before deadline_ns. On a code nothing is left to complete.
 * shm_complete - wait for t's completion until deadline_ns and give its
 * slot back; codes, *result and d as shm_submit's.
 * shm_ticket_ready - 1 when shm_complete would not wait: t is done, or the
 * session broke, hung up (which breaks it) or passed deadline_ns. Never
 * blocks; makes one system call (a poll) while t is not done.
 */
int shm_send(struct shm_conn *cn, struct lc_sqe *sqe, uint64_t take_by_ns, uint64_t deadline_ns,
	     struct shm_ticket *t);
int shm_complete(struct shm_conn *cn, const struct shm_ticket *t, uint64_t deadline_ns,
		 int64_t *result, struct shm_copyout *d);
int shm_ticket_ready(struct shm_conn *cn, const struct shm_ticket *t, uint64_t deadline_ns);
/* shm_detail_set - remember a completion's reason (enum lc_reason, as the
 * proxy wrote it) and its argument for lunar_error_detail in this thread. */
void shm_detail_set(uint32_t reason, uint64_t arg);
/* shm_wait_cond - wait on cn->cond (cn->lock held) until deadline_ns;
 * -ETIMEDOUT when it passed. */
int shm_wait_cond(struct shm_conn *cn, uint64_t deadline_ns);
/*
 * Waiting for a slot or an arena block, without losing a wakeup: a waiter
 * takes cn->lock, counts itself with shm_waiter_enter (which fences), then
 * looks for a free one before each shm_wait_cond, and leaves with
 * shm_waiter_leave. A thread that frees one without the lock calls
 * shm_wake_waiters after: it fences, then wakes them (under the lock) if
 * any are counted. One of the two always sees the other.
 */
void shm_waiter_enter(struct shm_conn *cn);
void shm_waiter_leave(struct shm_conn *cn);
void shm_wake_waiters(struct shm_conn *cn);

/* --- request.c: building and running requests --- */

/* One request in flight: its handle, session, deadline and arena range. */
struct shm_req {
	struct lunar_client *c;
	struct shm_conn *cn;
	uint64_t deadline_ns;
	uint64_t off;
	uint64_t len;
	int cancel; /* the thread's cancellation state before the call */
};

/*
 * An asynchronous single-key put or get (async.c), between its start and
 * lunar_wait: the request holds a session reference, its arena range and
 * its completion slot. Whether the value went through the arena, and
 * where, is decided once at the start, so a registration changed before the
 * wait cannot change the copy-back.
 */
struct lunar_pending {
	struct shm_req r;
	struct shm_ticket t;
	struct shm_item it; /* it.iov is &v */
	struct iovec v;	    /* the value, or the destination */
	int staged;	    /* v is staged at stage_off in the arena */
	uint32_t *in_place; /* else the count of v's range it is counted in */
	uint64_t stage_off;
	int done; /* it ran at the start (too large to stage): result is final */
	int64_t result;
};

/* shm_deadline - now + the handle's timeout, in CLOCK_MONOTONIC ns. */
uint64_t shm_deadline(const struct lunar_client *c);
/*
 * shm_run_items - one request of n >= 1 items (already validated, their
 * scatter lists private copies: see struct shm_item) for op: keys and
 * scatter lists into the arena, buffers inside registered memory referenced
 * in place and any other staged through the arena; wait, copy staged GET
 * bytes back. Items too large to stage together run as several requests,
 * and a value too large to stage alone goes through lunar_alloc memory.
 * Fills items[i].result. Returns the completion result (>= 0) or a code for
 * the whole request (items' results then hold the same code). Blocks up to
 * the handle's timeout for each request.
 */
int64_t shm_run_items(struct lunar_client *c, const struct shm_op *op, struct shm_item *items,
		      uint32_t n);
/*
 * shm_start_one - start p's request (p->it and p->v filled in and checked)
 * for op: laid out, filled and sent as shm_run_items would, then return
 * without waiting; a value too large to stage runs to its end here instead
 * (p->done). BUSY at once when no completion slot or arena space is free.
 * On 0, p must be finished with shm_finish_one; on a code nothing is
 * pending.
 * shm_pending_ready - 1 when shm_finish_one would not wait. Never blocks.
 * shm_finish_one - wait for p (until the handle's timeout from its start),
 * copy a staged get's bytes out, and release what p holds. Returns what the
 * synchronous call returns.
 */
int shm_start_one(struct lunar_client *c, const struct shm_op *op, struct lunar_pending *p);
int shm_pending_ready(struct lunar_pending *p);
int64_t shm_finish_one(struct lunar_pending *p);
/* shm_run_raw - a request whose argument is len raw bytes (len may be 0).
 * Returns the completion result or a code. */
int64_t shm_run_raw(struct lunar_client *c, const struct shm_op *op, const void *arg, size_t len);

/* --- batch.c: argument checks --- */

/*
 * shm_batch_run - the common path of every keyed call: copy each key's
 * count and scatter list once, then check the key and the copy (bad ones get
 * their code in results and are left out), run the rest as one request,
 * scatter results back index-aligned. iovs and iovcnts may be NULL for ops
 * without values. Returns the completion result or a code for the whole
 * call.
 */
int64_t shm_batch_run(struct lunar_client *c, const struct shm_op *op, size_t n,
		      const char *const *keys, const struct iovec *const *iovs, const int *iovcnts,
		      int64_t *results);
/* shm_key_check - 0 and the key's length, from the one bounded read the
 * check needs, or INVALID_KEY. */
int shm_key_check(const char *key, size_t *len);
/* shm_put_op - the descriptor fields of a put/upsert from cfg (NULL ok). */
struct shm_op shm_put_op(uint16_t op, const struct lunar_put_cfg *cfg);

#endif /* LUNAR_SHMLIB_SHM_INT_H */
