/*
 * resv.c - put-ahead reservations (docs/protocol.md, "Reservations"): space
 * a proxy is granted ahead of its small puts, one extent on one segment,
 * allocated in the segment's allocator (counted as used, never evicted, no
 * object). BatchPutCommit carves a committed value's piece out of it
 * (mst_resv_carve); the rest goes back when the proxy releases it, or
 * late (its writes may still land) when the proxy dies, the reservation
 * expires, or a new term begins. A value committed beside its write (its
 * bytes may land after the commit) keeps its range on the reservation when
 * it goes before the reservation ends (mst_resv_hold): the range is given
 * back once the proxy says the writes there are done (its Landed call:
 * mst_resv_landed), or with the reservation's: at once when the proxy
 * releases it (its writes are done), late when it ends late (then it stays
 * on the ended list until then, and a value that goes meanwhile gives its
 * range back late too).
 *
 * A reservation on the list keeps its segment alive: segment_retire drops
 * the reservations on a segment (mst_resv_drop_segment, under the list
 * lock) before it frees it, so every range here is freed under the lock.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "atomic.h"
#include "clock.h"
#include "log.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "mst_obj.h"
#include "ralloc.h"
#include "rpc.h"

struct mst_resv {
	struct mst_resv *next;
	uint64_t id, client;
	struct mst_segment *seg;
	uint64_t off, len;	    /* the extent granted (its capability's range) */
	uint64_t grant_ms, due_ms;  /* monotonic: granted, forgotten */
	struct mst_replica *pieces; /* heap: the parts not committed, by offset */
	unsigned n, cap;
	struct mst_replica *held; /* heap: ranges of values committed beside, gone since */
	unsigned nheld, heldcap;
	uint64_t held_until_ms; /* the latest read lease over them */
	uint64_t landed;	/* every write below this offset is done (Landed) */
	uint64_t late_ms;	/* ended late: bytes may land until then */
};

static uint64_t lengths(const struct mst_replica *reps, unsigned n)
{
	uint64_t b = 0;

	for (unsigned i = 0; i < n; i++)
		b += reps[i].len;
	return b;
}

static void resv_free(struct mst_resv *r)
{
	free(r->pieces);
	free(r->held);
	free(r);
}

int mst_resvtab_init(struct mst_resvtab *t)
{
	t->head = t->ended = NULL;
	t->bytes = t->held = 0;
	t->placing[0] = t->placing[1] = t->phase = 0;
	pthread_mutex_init(&t->grace_lock, NULL);
	return -pthread_mutex_init(&t->lock, NULL);
}

void mst_resvtab_fini(struct mst_resvtab *t)
{
	struct mst_resv *r, *n;

	for (r = t->head; r; r = n) {
		n = r->next;
		resv_free(r);
	}
	for (r = t->ended; r; r = n) {
		n = r->next;
		resv_free(r);
	}
	pthread_mutex_destroy(&t->grace_lock);
	pthread_mutex_destroy(&t->lock);
}

/* Bytes of r's pieces as the allocator holds them (lengths rounded). */
static uint64_t pieces_bytes(const struct mst_resv *r)
{
	uint64_t b = 0;

	for (unsigned i = 0; i < r->n; i++)
		b += lc_ralloc_round(r->seg->ra, r->pieces[i].len);
	return b;
}

/* Count d more bytes of s as reserved (the figures say them apart from
 * used; placement and eviction see them as used). */
static void seg_reserved_add(struct mst_segment *s, int64_t d)
{
	pthread_mutex_lock(&s->lock);
	LC_WRITE_ONCE(s->reserved, s->reserved + (uint64_t)d);
	pthread_mutex_unlock(&s->lock);
}

/* Unlink r and give its pieces and held ranges back: now, or late (its
 * writer may still be writing there) with the deferred list; held ranges
 * no sooner than the reads leased over them end. List lock held. */
static void resv_end(struct mst_master *m, struct mst_resv **pp, int late)
{
	struct mst_resv *r = *pp;
	/* the last write may start just before due_ms */
	uint64_t due = late ? r->due_ms + m->cfg.put_start_release_timeout_ms : 0;

	*pp = r->next;
	m->resv.bytes -= pieces_bytes(r);
	m->resv.held -= lengths(r->held, r->nheld);
	seg_reserved_add(r->seg, -(int64_t)pieces_bytes(r));
	if (late) {
		mst_deferred_add(m, r->pieces, r->n, due);
	} else {
		mst_replicas_free(m, r->pieces, r->n);
		free(r->pieces);
	}
	if (r->held_until_ms > due)
		due = r->held_until_ms;
	if (due > lc_now_ms()) {
		mst_deferred_add(m, r->held, r->nheld, due);
	} else {
		mst_replicas_free(m, r->held, r->nheld);
		free(r->held);
	}
	if (!late) {
		free(r);
		return;
	}
	*r = (struct mst_resv){.next = m->resv.ended,
			       .id = r->id,
			       .client = r->client,
			       .seg = r->seg,
			       .landed = r->landed,
			       .late_ms = due};
	m->resv.ended = r;
}

/* A new reservation's id: random, so that an id a proxy kept from a master
 * that restarted (or an older leader) names none of this master's; a
 * proxy's late release of it then ends nothing it still uses. */
static uint64_t resv_id(void)
{
	uint64_t id = 0;

	while (!id)
		if (getrandom(&id, sizeof(id), 0) != sizeof(id))
			id = lc_now_ns() * 0x9e3779b97f4a7c15ull; /* never expected */
	return id;
}

static unsigned count_of(const struct mst_resvtab *t, uint64_t client)
{
	unsigned n = 0;

	for (const struct mst_resv *r = t->head; r; r = r->next)
		n += r->client == client;
	return n;
}

/* How much to grant for a wish of size bytes: at most --reserve-max and a
 * sixteenth of the largest segment (0: no segment). */
static uint64_t grant_size(struct mst_master *m, uint64_t size)
{
	uint64_t len = size < m->cfg.reserve_max ? size : m->cfg.reserve_max;
	uint64_t most = mst_segments_largest(m) / 16;

	return len > most ? most : len;
}

/* Place len bytes for client into *r, from room under the eviction
 * watermark only; 0, NO_AVAILABLE_HANDLE or a code of mst_place. */
static int grant_place(struct mst_master *m, uint64_t client, uint64_t len, struct mst_replica *r)
{
	double room = m->cfg.eviction_high_watermark_ratio * (double)LC_READ_ONCE(m->capacity) -
		      (double)LC_READ_ONCE(m->used);

	if (room < (double)len)
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	return mst_place(m, client, len, 1, NULL, 0, r);
}

/* The reply's Reservation for r: the extent with a WRITE capability over
 * it until its due time. 0 or -ENOMEM. */
static int resv_pb(struct mst_master *m, const struct mst_resv *r, Lunar__Reservation **out)
{
	Lunar__Reservation *p = malloc(sizeof(*p));
	Lunar__Replica **v = NULL;
	size_t n;

	if (!p)
		return -ENOMEM;
	lunar__reservation__init(p);
	if (mst_replicas_pb(r->pieces, 1, LUNAR__REPLICA_STATE__PROCESSING, &v, &n)) {
		free(p);
		return -ENOMEM;
	}
	p->extent = v[0];
	free(v);
	p->extent->length = r->len;
	p->id = r->id;
	p->ttl_ms = r->due_ms - r->grant_ms;
	p->align = lc_ralloc_round(r->seg->ra, 1);
	p->beside = 1;
	if (m->cfg.keyed && mst_cap_one(p->extent, &r->seg->secret, MST_CAP_WRITE, NULL, 0, r->id,
					r->due_ms /* lc_now_ms: the capability clock */)) {
		protobuf_c_message_free_unpacked(&p->base, NULL);
		return -ENOMEM;
	}
	*out = p;
	return 0;
}

/*
 * Insert r unless its segment went meanwhile (then its range went with
 * it) or its client was declared dead (whose reservations were dropped
 * before this one came: it would stay till it expired), and make the
 * reply's Reservation for it (*out) before another thread can end it: a
 * dead client's, an expiry or a release would free r once the list lock is
 * let go. A client declared dead after the check finds r on the list: the
 * drop takes the list lock after its client left the table. 0, or
 * UNAVAILABLE_IN_CURRENT_STATUS, ILLEGAL_CLIENT, BUSY or -ENOMEM with r
 * ended and freed.
 */
static int resv_insert(struct mst_master *m, struct mst_resv *r, Lunar__Reservation **out)
{
	int rc = 0;

	pthread_rwlock_rdlock(&m->segs.lock);
	pthread_mutex_lock(&m->resv.lock);
	if (!mst_segment_live(m, r->seg))
		rc = LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
	else if (!mst_client_alive(m, r->client))
		rc = LUNAR_ERR_ILLEGAL_CLIENT;
	else if (count_of(&m->resv, r->client) >= MST_RESV_PER_CLIENT)
		rc = LUNAR_ERR_BUSY;
	if (!rc) {
		r->next = m->resv.head;
		m->resv.head = r;
		m->resv.bytes += pieces_bytes(r);
		seg_reserved_add(r->seg, (int64_t)pieces_bytes(r));
		rc = resv_pb(m, r, out);
		if (rc)
			resv_end(m, &m->resv.head, 0); /* r, just linked first */
	} else {
		if (rc != LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS)
			mst_replicas_free(m, r->pieces, r->n);
		resv_free(r);
	}
	pthread_mutex_unlock(&m->resv.lock);
	pthread_rwlock_unlock(&m->segs.lock);
	return rc;
}

/* A reservation of len bytes for client, placed and inserted: 0 and *out,
 * or a code. Counted in placing (mst_resv_drop_segment). */
static int grant_new(struct mst_master *m, uint64_t client, uint64_t len, Lunar__Reservation **out)
{
	struct mst_resv *r;
	struct mst_room room;
	int rc;

	if (!(r = calloc(1, sizeof(*r))) || !(r->pieces = calloc(1, sizeof(*r->pieces)))) {
		free(r);
		return -ENOMEM;
	}
	/* A full store makes room as for a put of len bytes (a full cache is
	 * the usual state). The space reserved is then filled by puts, which
	 * need not evict for it. */
	mst_room_begin(m, &room);
	rc = grant_place(m, client, len, r->pieces);
	while (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE && mst_room_make(m, &room, len))
		rc = grant_place(m, client, len, r->pieces);
	if (rc < 0) {
		free(r->pieces);
		free(r);
		return rc;
	}
	if (m->cfg.debug_reserve_delay_ms) { /* test hook: the window below, wide */
		uint64_t ms = m->cfg.debug_reserve_delay_ms;

		nanosleep(&(struct timespec){(time_t)(ms / 1000), (long)(ms % 1000) * 1000000},
			  NULL);
	}
	r->n = r->cap = 1;
	r->client = client;
	r->seg = r->pieces[0].seg;
	r->off = r->landed = r->pieces[0].off;
	r->len = len;
	r->id = resv_id();
	r->grant_ms = lc_now_ms();
	r->due_ms = r->grant_ms + m->cfg.reserve_ttl_ms;
	return resv_insert(m, r, out);
}

int mst_resv_grant(struct mst_master *m, uint64_t client, uint64_t size, Lunar__Reservation **out)
{
	uint64_t len;
	unsigned ph;
	int rc;

	if (!m->cfg.reserve_max)
		return LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS; /* put-ahead off */
	if (!size)
		return LUNAR_ERR_INVALID_PARAMS;
	if (!mst_client_alive(m, client))
		return LUNAR_ERR_ILLEGAL_CLIENT;
	if (!(len = grant_size(m, size)))
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	/*
	 * From placement to insert the reservation's segment is held by
	 * nothing: one retired meanwhile would be freed, and a segment mounted
	 * next could take its address and pass resv_insert's check. So a
	 * retiring segment waits for the grants counted before it flipped the
	 * phase. Ours is counted before mst_place takes the table lock, and
	 * the segment leaves the table before the flip: a grant it does not
	 * wait for cannot have placed on it.
	 */
	ph = lc_load_acquire(&m->resv.phase) & 1u;
	lc_fetch_add(&m->resv.placing[ph], 1u);
	rc = grant_new(m, client, len, out);
	lc_fetch_add(&m->resv.placing[ph], (unsigned)-1);
	return rc;
}

void mst_resv_release(struct mst_master *m, uint64_t client, const uint64_t *ids, size_t n,
		      int late, int32_t *codes)
{
	pthread_mutex_lock(&m->resv.lock);
	for (size_t i = 0; i < n; i++) {
		struct mst_resv **pp = &m->resv.head;

		while (*pp && ((*pp)->id != ids[i] || (*pp)->client != client))
			pp = &(*pp)->next;
		if (codes)
			codes[i] = *pp ? 0 : LUNAR_ERR_ILLEGAL_CLIENT;
		if (*pp)
			resv_end(m, pp, late);
	}
	pthread_mutex_unlock(&m->resv.lock);
}

/* End every reservation pick() chooses, late. */
static void end_if(struct mst_master *m, int (*pick)(const struct mst_resv *, const void *),
		   const void *arg)
{
	struct mst_resv **pp;

	pthread_mutex_lock(&m->resv.lock);
	for (pp = &m->resv.head; *pp;)
		if (pick(*pp, arg))
			resv_end(m, pp, 1);
		else
			pp = &(*pp)->next;
	pthread_mutex_unlock(&m->resv.lock);
}

static int is_due(const struct mst_resv *r, const void *now)
{
	return r->due_ms <= *(const uint64_t *)now;
}

static int of_client(const struct mst_resv *r, const void *client)
{
	return r->client == *(const uint64_t *)client;
}

static int any(const struct mst_resv *r, const void *arg)
{
	(void)r;
	(void)arg;
	return 1;
}

/* Forget the ended reservations pick() chooses. List lock held. */
static void forget_ended(struct mst_master *m, int (*pick)(const struct mst_resv *, const void *),
			 const void *arg)
{
	struct mst_resv **pp, *r;

	for (pp = &m->resv.ended; (r = *pp);) {
		if (pick(r, arg)) {
			*pp = r->next;
			resv_free(r);
		} else {
			pp = &r->next;
		}
	}
}

static int landed_for_good(const struct mst_resv *r, const void *now)
{
	return r->late_ms <= *(const uint64_t *)now;
}

static int on_segment(const struct mst_resv *r, const void *seg)
{
	return r->seg == seg;
}

void mst_resv_expire(struct mst_master *m, uint64_t now)
{
	end_if(m, is_due, &now);
	pthread_mutex_lock(&m->resv.lock);
	forget_ended(m, landed_for_good, &now);
	pthread_mutex_unlock(&m->resv.lock);
}

void mst_resv_drop_client(struct mst_master *m, uint64_t client)
{
	end_if(m, of_client, &client);
}

void mst_resv_drop_all(struct mst_master *m)
{
	end_if(m, any, NULL);
}

void mst_resv_drop_segment(struct mst_master *m, const struct mst_segment *seg)
{
	struct mst_resv **pp, *r;
	unsigned ph;

	pthread_mutex_lock(&m->resv.lock);
	for (pp = &m->resv.head; (r = *pp);) {
		if (r->seg != seg) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		/* its ranges go with the segment */
		m->resv.bytes -= pieces_bytes(r);
		m->resv.held -= lengths(r->held, r->nheld);
		resv_free(r);
	}
	forget_ended(m, on_segment, seg);
	pthread_mutex_unlock(&m->resv.lock);
	/* seg is out of the table: a grant still placing on it finds it gone
	 * at insert. New grants count in the other slot, so this ends. */
	pthread_mutex_lock(&m->resv.grace_lock);
	ph = LC_READ_ONCE(m->resv.phase) & 1u; /* only ever written here */
	lc_store_release(&m->resv.phase, ph ^ 1u);
	while (lc_load_acquire(&m->resv.placing[ph]))
		sched_yield();
	pthread_mutex_unlock(&m->resv.grace_lock);
}

/* Client's reservation id, if it is on the list; list lock held. */
static struct mst_resv *find_in(struct mst_resv *r, uint64_t client, uint64_t id)
{
	while (r && (r->id != id || r->client != client))
		r = r->next;
	return r;
}

static struct mst_resv *find(struct mst_master *m, uint64_t client, uint64_t id)
{
	return find_in(m->resv.head, client, id);
}

/* The piece of r that holds [off, off + len), or -1. */
static int piece_of(const struct mst_resv *r, uint64_t off, uint64_t len)
{
	for (unsigned i = 0; i < r->n; i++) {
		const struct mst_replica *p = &r->pieces[i];
		uint64_t plen = lc_ralloc_round(r->seg->ra, p->len);

		if (off >= p->off && off - p->off < plen && len <= plen - (off - p->off))
			return (int)i;
	}
	return -1;
}

/* Cut [off, off + len) out of piece i of r into *out; 0 or -ENOMEM /
 * -EINVAL (then nothing changed). List lock held. */
static int cut(struct mst_master *m, struct mst_resv *r, unsigned i, uint64_t off, uint64_t len,
	       struct mst_replica *out)
{
	struct mst_replica *p = &r->pieces[i];
	struct mst_segment *s = r->seg;
	struct lc_range *mid, *head, *tail;
	uint64_t pend = p->off + lc_ralloc_round(s->ra, p->len);
	int rc = 0;

	if (r->n == r->cap) { /* room for one more piece before anything is cut */
		struct mst_replica *v = realloc(r->pieces, (r->cap * 2) * sizeof(*v));

		if (!v)
			return -ENOMEM;
		r->pieces = v;
		r->cap *= 2;
		p = &r->pieces[i];
	}
	pthread_mutex_lock(&s->lock);
	mid = lc_ralloc_split(s->ra, p->range, off, len, &head, &tail, &rc);
	if (mid)
		LC_WRITE_ONCE(s->reserved, s->reserved - lc_ralloc_round(s->ra, len));
	pthread_mutex_unlock(&s->lock);
	if (!mid)
		return rc;
	*out = (struct mst_replica){.seg = s, .range = mid, .off = off, .len = len};
	m->resv.bytes -= lc_ralloc_round(s->ra, len);
	if (head)
		p->len = off - p->off;
	else
		memmove(p, p + 1, (--r->n - i) * sizeof(*p));
	if (tail) {
		unsigned at = head ? i + 1 : i;
		uint64_t toff = off + lc_ralloc_round(s->ra, len);

		memmove(&r->pieces[at + 1], &r->pieces[at], (r->n - at) * sizeof(*p));
		r->pieces[at] =
		    (struct mst_replica){.seg = s, .range = tail, .off = toff, .len = pend - toff};
		r->n++;
	}
	return 0;
}

int mst_resv_carve(struct mst_master *m, uint64_t client, uint64_t id, uint64_t off, uint64_t len,
		   struct mst_replica *out)
{
	uint64_t now = lc_now_ms();
	struct mst_resv *r;
	int rc = LUNAR_ERR_ILLEGAL_CLIENT, i;

	/* The table's read lock: a live segment is not being retired, so the
	 * object about to be made there is seen by its retirement's sweep. */
	pthread_rwlock_rdlock(&m->segs.lock);
	pthread_mutex_lock(&m->resv.lock);
	r = find(m, client, id);
	if (r && r->due_ms > now && !r->seg->drain_due_ms && mst_segment_live(m, r->seg) &&
	    (i = piece_of(r, off, len)) >= 0) {
		rc = cut(m, r, (unsigned)i, off, len, out);
		if (rc == -EINVAL)
			rc = LUNAR_ERR_ILLEGAL_CLIENT; /* unaligned: no piece of ours */
	}
	pthread_mutex_unlock(&m->resv.lock);
	pthread_rwlock_unlock(&m->segs.lock);
	return rc;
}

static int all_below(const struct mst_replica *reps, unsigned n, uint64_t off)
{
	for (unsigned i = 0; i < n; i++)
		if (reps[i].off >= off)
			return 0;
	return 1;
}

/* Room in r's held ranges for n more; 0 or -ENOMEM. List lock held. */
static int held_room(struct mst_resv *r, unsigned n)
{
	unsigned cap = r->heldcap ? r->heldcap : 4;
	struct mst_replica *v;

	if (r->nheld + n <= r->heldcap)
		return 0;
	while (cap < r->nheld + n)
		cap *= 2;
	if (!(v = realloc(r->held, cap * sizeof(*v))))
		return -ENOMEM;
	r->held = v;
	r->heldcap = cap;
	return 0;
}

int mst_resv_hold(struct mst_master *m, uint64_t client, uint64_t id,
		  const struct mst_replica *reps, unsigned n, uint64_t until_ms)
{
	struct mst_replica *late = NULL;
	struct mst_resv *r;
	int held = 1;

	pthread_mutex_lock(&m->resv.lock);
	if ((r = find(m, client, id)) && !all_below(reps, n, r->landed)) {
		if (held_room(r, n)) {
			/* given back now they could go to another value while
			 * the writer's bytes still land: kept out of use */
			LC_ERROR("master", "out of memory: %u ranges leaked", n);
		} else {
			memcpy(r->held + r->nheld, reps, n * sizeof(*reps));
			r->nheld += n;
			m->resv.held += lengths(reps, n);
		}
		if (until_ms > r->held_until_ms)
			r->held_until_ms = until_ms;
	} else if (!r && (r = find_in(m->resv.ended, client, id)) &&
		   !all_below(reps, n, r->landed)) {
		/* ended late: back when its other ranges are */
		if ((late = malloc(n * sizeof(*late))))
			memcpy(late, reps, n * sizeof(*late));
		else
			LC_ERROR("master", "out of memory: %u ranges leaked", n);
		mst_deferred_add(m, late, late ? n : 0,
				 until_ms > r->late_ms ? until_ms : r->late_ms);
	} else {
		held = 0; /* their writes are done */
	}
	pthread_mutex_unlock(&m->resv.lock);
	return held;
}

/* Give back r's held ranges below r->landed: now, or after the read leases
 * over them. List lock held. */
static void held_release(struct mst_master *m, struct mst_resv *r)
{
	struct mst_replica *go;
	unsigned n = 0, kept = 0;

	for (unsigned i = 0; i < r->nheld; i++)
		n += r->held[i].off < r->landed;
	if (!n || !(go = malloc(n * sizeof(*go))))
		return; /* none, or kept until the reservation ends */
	n = 0;
	for (unsigned i = 0; i < r->nheld; i++) {
		if (r->held[i].off < r->landed)
			go[n++] = r->held[i];
		else
			r->held[kept++] = r->held[i];
	}
	r->nheld = kept;
	m->resv.held -= lengths(go, n);
	if (r->held_until_ms > lc_now_ms()) {
		mst_deferred_add(m, go, n, r->held_until_ms);
	} else {
		mst_replicas_free(m, go, n);
		free(go);
	}
}

void mst_resv_landed(struct mst_master *m, uint64_t client, Lunar__Landed *const *v, size_t n)
{
	pthread_mutex_lock(&m->resv.lock);
	for (size_t i = 0; i < n && i < MST_RESV_PER_CLIENT; i++) {
		struct mst_resv *r = find(m, client, v[i]->reservation);
		uint64_t end;

		if (!r)
			continue;
		end = r->off + r->len;
		if (v[i]->below > r->landed) {
			r->landed = v[i]->below < end ? v[i]->below : end;
			held_release(m, r);
		}
	}
	pthread_mutex_unlock(&m->resv.lock);
}

int mst_resv_landing(struct mst_master *m, uint64_t client, uint64_t id,
		     const struct mst_replica *reps, unsigned n)
{
	struct mst_resv *r;
	int landing;

	pthread_mutex_lock(&m->resv.lock);
	if (!(r = find(m, client, id)))
		r = find_in(m->resv.ended, client, id);
	landing = r && !all_below(reps, n, r->landed);
	pthread_mutex_unlock(&m->resv.lock);
	return landing;
}

/* *v read under the list lock. */
static uint64_t read_locked(struct mst_master *m, const uint64_t *v)
{
	uint64_t b;

	pthread_mutex_lock(&m->resv.lock);
	b = *v;
	pthread_mutex_unlock(&m->resv.lock);
	return b;
}

uint64_t mst_resv_bytes(struct mst_master *m)
{
	return read_locked(m, &m->resv.bytes);
}

uint64_t mst_resv_held_bytes(struct mst_master *m)
{
	return read_locked(m, &m->resv.held);
}
