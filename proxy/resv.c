/*
 * resv.c - put-ahead: the space the master reserved for this proxy's small
 * puts (docs/protocol.md, "Reservations"). A thread of its own keeps one
 * or two reservations granted (Reserve), off the put path; a put takes its
 * piece with a bump of a pointer (px_resv_take), writes there, and commits
 * with one master call. Reservations stop taking pieces half-way through
 * their life and are given back (ReserveRelease) once no put holds a piece
 * of them; a leader change, a master that forgot us or a commit that names
 * an unknown reservation drops them all without a word (the master ended
 * them itself).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"

#define RESV_TICK_MS	  100	/* the thread's look at the pool when nothing wakes it */
#define RESV_HELD_MAX	  2	/* reservations taking pieces at once, while puts come */
#define RESV_IDLE_MS	  10000 /* no put ahead for this long: keep only one */
#define RESV_BACKOFF_MS	  1000	/* after a refused Reserve */
#define RESV_SOON_MS	  100	/* after one for room, once a put finds some */
#define RESV_OLD_MS	  30000 /* after a master that does not know Reserve */
#define RESV_ENDPOINT_MAX 256

struct px_resv {
	struct px_resv *next;
	uint64_t id;
	char endpoint[RESV_ENDPOINT_MAX];
	uint64_t off, len, align; /* the extent */
	uint64_t used;		  /* bytes handed out from off */
	uint64_t until_ms;	  /* no new pieces from then (monotonic) */
	struct eng_cap cap;
	int has_cap;
	struct px_piece *first, *last; /* pieces handed out, not settled: by offset */
	int retired;		       /* takes no pieces */
	int late;		       /* bytes may still land: released late */
	int gone;		       /* the master forgot it: nothing to release */
	int beside;		       /* the master takes commits beside their writes */
	uint64_t told;		       /* the master knows every write below this is done */
	uint64_t asked_ns;	       /* when its Reserve was sent (monotonic) */
	uint64_t epoch;		       /* our segment's mount epoch then (eng_op.epoch) */
	int ours;		       /* the extent is in our own segment */
};

struct px_resv_pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	pthread_cond_t idle; /* calling went back to 0 */
	pthread_t thread;
	int started, stop, wake;
	int calling; /* the thread is in its master calls (unlocked), a grant not yet kept */
	struct px_resv *head;
	uint64_t view;	       /* the master view the reservations are of */
	uint64_t retry_ms;     /* no Reserve before then */
	uint64_t refused_ms;   /* when the last Reserve was refused */
	int hurried;	       /* a put's room moved a retry since the last grant */
	atomic_int may_hurry;  /* refused for room, not hurried: read unlocked */
	uint64_t size;	       /* --reserve-size */
	uint64_t value_max;    /* --reserve-value-max */
	uint64_t last_take_ms; /* the last put that wanted a piece */
};

/* Room below which a reservation takes no more pieces: what the largest
 * value ahead needs, but no more than a quarter of it (the rest goes back
 * when its last piece is settled, not late). */
static uint64_t short_of(const struct px_resv_pool *p, const struct px_resv *r)
{
	return p->value_max < r->len / 4 ? p->value_max : r->len / 4;
}

/*
 * Retire r when its life for pieces is over, it is nearly full, or it is in
 * our own segment and a fence (every mount does one) came since its Reserve
 * was sent: its pieces would copy nothing (eng_op.epoch), and the next
 * Reserve reads the new epoch. The Ping that led to the mount dropped the
 * reservations granted by then; this catches one granted after that drop.
 */
static int retire_if_done(const struct px_resv_pool *p, struct px_resv *r, uint64_t now,
			  uint64_t epoch)
{
	if (!r->retired && (now >= r->until_ms || r->len - r->used < short_of(p, r) ||
			    (r->ours && r->epoch != epoch)))
		r->retired = 1;
	return r->retired;
}

int px_resv_enabled(const struct px_proxy *px)
{
	return px->resv != NULL;
}

uint64_t px_resv_value_max(const struct px_proxy *px)
{
	return px->resv ? px->resv->value_max : 0;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

int px_resv_take(struct px_proxy *px, uint64_t len, struct px_piece *out)
{
	struct px_resv_pool *p = px->resv;
	uint64_t now = lc_now_ms(), epoch = eng_engine_epoch(px->engine);
	struct px_resv *r;
	int rc = -1, low = 1;

	if (!p)
		return -1;
	pthread_mutex_lock(&p->lock);
	/* A new leader knows none of them: none is used from the moment the
	 * view changed, not from the thread's next look. */
	if (px_mc_view(px->mc) != p->view) {
		p->wake = 1;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
		return -1;
	}
	p->last_take_ms = now;
	for (r = p->head; r; r = r->next) {
		uint64_t need;

		if (r->gone || retire_if_done(p, r, now, epoch))
			continue;
		need = round_up(len, r->align);
		if (rc && need <= r->len - r->used) {
			/* at the bump pointer: after every piece handed out */
			*out = (struct px_piece){
			    .r = r, .off = r->off + r->used, .len = need, .prev = r->last};
			*(r->last ? &r->last->next : &r->first) = out;
			r->last = out;
			r->used += need;
			rc = 0;
		}
		if (r->len - r->used >= r->len / 2)
			low = 0;
	}
	if (low) { /* running short: the thread asks for more now */
		p->wake = 1;
		pthread_cond_signal(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void px_resv_room_seen(struct px_proxy *px)
{
	struct px_resv_pool *p = px->resv;

	/* The usual case, every put that took the two calls: no lock. */
	if (!p || !atomic_load_explicit(&p->may_hurry, memory_order_relaxed))
		return;
	pthread_mutex_lock(&p->lock);
	/* Once between grants: a cluster that stays full is not asked ten
	 * times a second. */
	if (atomic_load_explicit(&p->may_hurry, memory_order_relaxed)) {
		atomic_store_explicit(&p->may_hurry, 0, memory_order_relaxed);
		p->hurried = 1;
		if (p->retry_ms > p->refused_ms + RESV_SOON_MS)
			p->retry_ms = p->refused_ms + RESV_SOON_MS;
		p->wake = 1;
		pthread_cond_signal(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
}

const char *px_piece_endpoint(const struct px_piece *pc)
{
	return pc->r->endpoint;
}

const struct eng_cap *px_piece_cap(const struct px_piece *pc)
{
	return pc->r->has_cap ? &pc->r->cap : NULL;
}

uint64_t px_piece_epoch(const struct px_piece *pc)
{
	return pc->r->epoch;
}

uint64_t px_piece_resv(const struct px_piece *pc)
{
	return pc->r->id;
}

int px_piece_beside(const struct px_piece *pc)
{
	return pc->r->beside;
}

void px_resv_settle(struct px_proxy *px, struct px_piece *pc, enum px_piece_end how)
{
	struct px_resv_pool *p = px->resv;
	struct px_resv *r = pc->r;

	pthread_mutex_lock(&p->lock);
	*(pc->prev ? &pc->prev->next : &r->first) = pc->next;
	*(pc->next ? &pc->next->prev : &r->last) = pc->prev;
	switch (how) {
	case PX_PIECE_COMMITTED: break;
	case PX_PIECE_UNUSED:
		/* the last piece handed out comes back for the next put */
		if (r->off + r->used == pc->off + pc->len)
			r->used -= pc->len;
		break;
	case PX_PIECE_TAINTED: /* bytes may land, or it may be committed */
		r->retired = r->late = 1;
		break;
	case PX_PIECE_GONE: r->retired = 1; break; /* released anyway: harmless */
	}
	if (!r->first && r->retired) {
		p->wake = 1;
		pthread_cond_signal(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
	pc->r = NULL;
}

#define RESV_LANDED_MAX 4 /* the master looks at as many as a client may hold */

/* A Landed for each reservation with news, into out[0..max); how many. */
static size_t landed_news(struct px_proxy *px, Lunar__Landed *out, size_t max)
{
	struct px_resv_pool *p = px->resv;
	size_t n = 0;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (struct px_resv *r = p->head; r && n < max; r = r->next) {
		/* every piece below settled, and no byte of a failed write
		 * on its way anywhere in it (late) */
		uint64_t below = r->first ? r->first->off : r->off + r->used;

		if (!r->beside || r->gone || r->late || below <= r->told)
			continue;
		lunar__landed__init(&out[n]);
		out[n].reservation = r->id;
		out[n++].below = below;
		r->told = below;
	}
	pthread_mutex_unlock(&p->lock);
	return n;
}

void px_resv_tell_landed(struct px_proxy *px)
{
	Lunar__LandedRequest rq = LUNAR__LANDED_REQUEST__INIT;
	Lunar__Landed landed[RESV_LANDED_MAX], *lp[RESV_LANDED_MAX];
	ProtobufCMessage *rep;

	rq.n_landed = landed_news(px, landed, RESV_LANDED_MAX);
	if (!rq.n_landed)
		return;
	for (size_t i = 0; i < rq.n_landed; i++)
		lp[i] = &landed[i];
	rq.client_id = px->client_id;
	rq.landed = lp;
	/* Lost, the ranges go back when the reservation does. */
	if (!px_mc_call(px->mc, LUNAR__METHOD__LANDED, &rq.base, &rep))
		protobuf_c_message_free_unpacked(rep, NULL);
}

void px_resv_drop_before(struct px_proxy *px, uint64_t asked_ns)
{
	struct px_resv_pool *p = px->resv;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	for (struct px_resv *r = p->head; r; r = r->next)
		if (r->asked_ns < asked_ns)
			r->retired = r->gone = 1;
	p->wake = 1;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void px_resv_drop_all(struct px_proxy *px)
{
	px_resv_drop_before(px, UINT64_MAX);
}

/* ReserveRelease of ids; best effort (the master ends them anyway). */
static void release_call(struct px_proxy *px, uint64_t *ids, size_t n, int late,
			 uint64_t timeout_ms)
{
	Lunar__ReserveReleaseRequest rq = LUNAR__RESERVE_RELEASE_REQUEST__INIT;
	ProtobufCMessage *rep;

	if (!n)
		return;
	rq.client_id = px->client_id;
	rq.n_ids = n;
	rq.ids = ids;
	rq.late = late;
	if (!px_mc_call_timed(px->mc, LUNAR__METHOD__RESERVE_RELEASE, &rq.base, &rep, timeout_ms))
		protobuf_c_message_free_unpacked(rep, NULL);
}

/* Ask for one reservation; 0 with *out (heap), else a code. No lock held. */
static int reserve_call(struct px_proxy *px, uint64_t size, struct px_resv **out)
{
	Lunar__ReserveRequest rq = LUNAR__RESERVE_REQUEST__INIT;
	const Lunar__Reservation *g;
	const Lunar__Replica *e;
	ProtobufCMessage *rep;
	struct px_resv *r;
	uint64_t t0 = lc_now_ms(), asked_ns = lc_now_ns();
	uint64_t epoch = eng_engine_epoch(px->engine);
	int rc;

	if (LC_FAILPOINT("proxy-reserve")) /* sleep: a Reserve slow to leave */
		return LUNAR_ERR_RPC_FAIL;
	rq.client_id = px->client_id;
	rq.size = size;
	rc = px_mc_call(px->mc, LUNAR__METHOD__RESERVE, &rq.base, &rep);
	if (rc)
		return rc;
	rc = px_mc_code(rep);
	g = ((const Lunar__ReserveReply *)rep)->reservation;
	e = g ? g->extent : NULL;
	/* untrusted: an extent we can use, or nothing (a grant given back) */
	if (!rc && (!e || !e->endpoint || strlen(e->endpoint) >= RESV_ENDPOINT_MAX || !e->length ||
		    e->length > size || !g->align || (g->align & (g->align - 1)) ||
		    e->offset % g->align || e->offset + e->length < e->offset || !g->ttl_ms ||
		    LC_FAILPOINT("proxy-reserve-bad"))) {
		uint64_t id = g ? g->id : 0;

		rc = LUNAR_ERR_PROTOCOL;
		release_call(px, &id, g ? 1 : 0, 0, px->cfg.rpc_timeout_ms);
	}
	if (!rc && !(r = calloc(1, sizeof(*r))))
		rc = LUNAR_ERR_INTERNAL;
	if (!rc) {
		r->id = g->id;
		strcpy(r->endpoint, e->endpoint);
		r->off = e->offset;
		r->len = e->length;
		r->align = g->align;
		/* half its life for pieces; the rest for their writes and commits */
		r->until_ms = t0 + g->ttl_ms / 2;
		r->has_cap = px_replica_cap(e, &r->cap);
		r->asked_ns = asked_ns;
		r->epoch = epoch;
		r->ours = !strcmp(r->endpoint, px->endpoint);
		r->beside = g->beside;
		r->told = r->off;
		*out = r;
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* Unlink the retired reservations nobody holds a piece of; their ids to
 * release now (ids[0..*n) of room max) and late (late[0..*nlate)). Lock held. */
static void reap(struct px_resv_pool *p, uint64_t now, uint64_t epoch, uint64_t *ids, size_t *n,
		 uint64_t *late, size_t *nlate, size_t max)
{
	struct px_resv **pp = &p->head, *r;

	while ((r = *pp)) {
		retire_if_done(p, r, now, epoch);
		if (!r->retired || r->first || *n == max || *nlate == max) {
			pp = &r->next;
			continue;
		}
		*pp = r->next;
		if (!r->gone && r->late)
			late[(*nlate)++] = r->id;
		else if (!r->gone)
			ids[(*n)++] = r->id;
		free(r);
	}
}

/* Reservations taking pieces, and how much room they have left. */
static unsigned held(const struct px_resv_pool *p, uint64_t *room)
{
	unsigned n = 0;

	*room = 0;
	for (const struct px_resv *r = p->head; r; r = r->next)
		if (!r->retired) {
			n++;
			*room += r->len - r->used;
		}
	return n;
}

uint64_t px_resv_room(struct px_proxy *px)
{
	struct px_resv_pool *p = px->resv;
	uint64_t room = 0, now = lc_now_ms(), epoch = eng_engine_epoch(px->engine);

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	/* What px_resv_take would take from: none after a view change. */
	for (struct px_resv *r = p->head; r && px_mc_view(px->mc) == p->view; r = r->next)
		if (!r->gone && !retire_if_done(p, r, now, epoch))
			room += r->len - r->used;
	pthread_mutex_unlock(&p->lock);
	return room;
}

/* One look at the pool: drop what an older view granted, give back what
 * is done, ask for more when short. Lock held; dropped for the calls.
 * 1 when it was granted one (look again at once: it may still be short). */
static int tend(struct px_proxy *px, struct px_resv_pool *p)
{
	uint64_t ids[16], late[16], room, now = lc_now_ms(), view = px_mc_view(px->mc);
	size_t n = 0, nlate = 0;
	struct px_resv *r = NULL;
	unsigned want;
	int ask, rc;

	if (view != p->view) { /* a new leader knows none of them */
		for (struct px_resv *q = p->head; q; q = q->next)
			q->retired = q->gone = 1;
		p->view = view;
	}
	reap(p, now, eng_engine_epoch(px->engine), ids, &n, late, &nlate, 16);
	want = now - p->last_take_ms < RESV_IDLE_MS ? RESV_HELD_MAX : 1;
	ask = !p->stop && held(p, &room) < want && room < p->size / 2 && now >= p->retry_ms &&
	      atomic_load(&px->master_ok);
	if (!ask && !n && !nlate)
		return 0;
	p->calling = 1; /* a shutdown's release waits for these calls */
	pthread_mutex_unlock(&p->lock);
	release_call(px, ids, n, 0, px->cfg.rpc_timeout_ms);
	release_call(px, late, nlate, 1, px->cfg.rpc_timeout_ms);
	rc = ask ? reserve_call(px, p->size, &r) : 0;
	pthread_mutex_lock(&p->lock);
	p->calling = 0;
	pthread_cond_broadcast(&p->idle);
	if (!ask)
		return 0;
	if (!rc && px_mc_view(px->mc) == p->view) {
		struct px_resv **pp = &p->head;

		while (*pp) /* oldest first: pieces come from it before it ages out */
			pp = &(*pp)->next;
		*pp = r;
		p->hurried = 0;
		return 1;
	} else if (!rc) {
		free(r); /* granted by a leader gone since: the master ends it */
	} else {
		/* a master without the call says so for good: ask rarely */
		p->refused_ms = lc_now_ms();
		atomic_store_explicit(&p->may_hurry,
				      rc == LUNAR_ERR_NO_AVAILABLE_HANDLE && !p->hurried,
				      memory_order_relaxed);
		p->retry_ms =
		    p->refused_ms + (rc == LUNAR_ERR_PROTOCOL ? RESV_OLD_MS : RESV_BACKOFF_MS);
		LC_DEBUG("proxy", "put-ahead: Reserve refused (%s)", lunar_strerror(rc));
	}
	return 0;
}

static void *resv_main(void *arg)
{
	struct px_proxy *px = arg;
	struct px_resv_pool *p = px->resv;
	struct timespec ts;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		if (tend(px, p))
			continue; /* granted one: still short? */
		if (p->stop)
			break;
		if (!p->wake) {
			lc_monotonic_after(&ts, RESV_TICK_MS);
			pthread_cond_timedwait(&p->cond, &p->lock, &ts);
		}
		p->wake = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int px_resv_start(struct px_proxy *px)
{
	struct px_resv_pool *p;

	/* An embedded master answers without a round trip; the debug hook
	 * holds a PutStart'ed put open, which put-ahead has none of. */
	if (px->master || !px->cfg.reserve_size || !px->cfg.reserve_value_max ||
	    px->cfg.debug_put_delay_ms)
		return 0;
	if (!(p = calloc(1, sizeof(*p))))
		return LUNAR_ERR_INTERNAL;
	p->size = px->cfg.reserve_size;
	p->value_max = px->cfg.reserve_value_max;
	p->view = px_mc_view(px->mc);
	pthread_mutex_init(&p->lock, NULL);
	lc_cond_init(&p->cond);
	lc_cond_init(&p->idle);
	px->resv = p;
	if (pthread_create(&p->thread, NULL, resv_main, px)) {
		px->resv = NULL;
		pthread_cond_destroy(&p->idle);
		pthread_cond_destroy(&p->cond);
		pthread_mutex_destroy(&p->lock);
		free(p);
		return LUNAR_ERR_INTERNAL;
	}
	p->started = 1;
	return 0;
}

void px_resv_quit(struct px_proxy *px)
{
	struct px_resv_pool *p = px->resv;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

void px_resv_stop(struct px_proxy *px)
{
	px_resv_quit(px);
	if (px->resv)
		pthread_join(px->resv->thread, NULL);
}

void px_resv_release_all(struct px_proxy *px)
{
	struct px_resv_pool *p = px->resv;
	uint64_t ids[16], late[16];
	struct timespec ts;
	size_t n, nlate;

	if (!p)
		return;
	/* A call the thread has under way would otherwise end after ours (or
	 * be cut), its grant or release left to the master's --client-ttl. */
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	lc_monotonic_after(&ts, PX_GOODBYE_MS);
	while (p->calling && !pthread_cond_timedwait(&p->idle, &p->lock, &ts))
		;
	pthread_mutex_unlock(&p->lock);
	do {
		n = nlate = 0;
		pthread_mutex_lock(&p->lock);
		for (struct px_resv *r = p->head; r; r = r->next)
			r->retired = 1;
		reap(p, lc_now_ms(), eng_engine_epoch(px->engine), ids, &n, late, &nlate, 16);
		pthread_mutex_unlock(&p->lock);
		release_call(px, ids, n, 0, PX_GOODBYE_MS);
		release_call(px, late, nlate, 1, PX_GOODBYE_MS);
	} while (n == 16 || nlate == 16);
}

void px_resv_destroy(struct px_proxy *px)
{
	struct px_resv_pool *p = px->resv;
	struct px_resv *r, *next;

	if (!p)
		return;
	px->resv = NULL;
	for (r = p->head; r; r = next) {
		next = r->next;
		free(r);
	}
	pthread_cond_destroy(&p->idle);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p);
}
