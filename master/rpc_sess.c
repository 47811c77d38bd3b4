/*
 * rpc_sess.c - sessions of the keyed RPC server (rpc_sess.h). A session id
 * carries its slot in its low bits and random bits above, so a lookup is one
 * index and one compare. The table's rwlock guards slot states and the ids
 * a session acts for (read for calls, write to open, bind and reclaim); a
 * slot's mutex guards its receive window and last use.
 */
#include "rpc_sess.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "atomic.h"
#include "clock.h"
#include "lunar.h"

#define SLOT_MASK (MST_SESS_SLOTS - 1)
_Static_assert((MST_SESS_SLOTS & SLOT_MASK) == 0, "slots: a power of two");

enum sstate { S_FREE, S_HALF, S_OPEN };

struct sess {
	pthread_mutex_t lock; /* s's window, last_ms */
	uint64_t sid;
	enum sstate state;
	uint32_t role;
	uint64_t last_ms;
	struct auth_hs hs;     /* S_HALF */
	struct auth_session s; /* S_OPEN */
	uint64_t ids[MST_SESS_IDS];
	unsigned n_ids;
};

struct mst_sesstab {
	pthread_rwlock_t lock;
	struct sess v[MST_SESS_SLOTS];
};

int mst_sesstab_create(struct mst_sesstab **out)
{
	struct mst_sesstab *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	pthread_rwlock_init(&t->lock, NULL);
	for (unsigned i = 0; i < MST_SESS_SLOTS; i++)
		pthread_mutex_init(&t->v[i].lock, NULL);
	*out = t;
	return 0;
}

void mst_sesstab_destroy(struct mst_sesstab *t)
{
	if (!t)
		return;
	for (unsigned i = 0; i < MST_SESS_SLOTS; i++)
		pthread_mutex_destroy(&t->v[i].lock);
	pthread_rwlock_destroy(&t->lock);
	sodium_memzero(t, sizeof(*t));
	free(t);
}

/* Whether x is in use at now. Under the table's lock (either mode); last_ms
 * read racily under the read lock is fine: a session at the edge of expiry
 * may count either way. A caller reads the clock before it takes x, so
 * another call may have recorded a later use meanwhile: that is live. */
static int live(const struct sess *x, uint64_t now)
{
	uint64_t last = LC_READ_ONCE(x->last_ms);

	if (last >= now)
		return x->state != S_FREE;
	if (x->state == S_OPEN)
		return now - last < MST_SESS_IDLE_MS;
	return x->state == S_HALF && now - last < MST_SESS_HALF_MS;
}

static void slot_clear(struct sess *x)
{
	sodium_memzero(&x->hs, sizeof(x->hs));
	sodium_memzero(&x->s, sizeof(x->s));
	x->state = S_FREE;
	x->n_ids = 0;
	x->sid = 0;
}

/* A slot for a new session (write lock held): a free or expired one, else
 * the oldest half-open one; NULL when every slot holds a live session. */
static struct sess *slot_take(struct mst_sesstab *t, uint64_t now)
{
	struct sess *pick = NULL, *oldest_half = NULL;

	for (unsigned i = 0; i < MST_SESS_SLOTS; i++) {
		struct sess *x = &t->v[i];

		if (x->state != S_FREE && !live(x, now))
			slot_clear(x);
		if (x->state == S_FREE && !pick)
			pick = x;
		if (x->state == S_HALF && (!oldest_half || x->last_ms < oldest_half->last_ms))
			oldest_half = x;
	}
	if (!pick && oldest_half) {
		slot_clear(oldest_half);
		pick = oldest_half;
	}
	return pick;
}

/* The slot a session id names, when it is in state st with that id. */
static struct sess *slot_of(struct mst_sesstab *t, uint64_t sid, enum sstate st)
{
	struct sess *x = &t->v[sid & SLOT_MASK];

	return x->state == st && x->sid == sid ? x : NULL;
}

int mst_sess_hello(struct mst_sesstab *t, const struct auth_key *key, const struct lp_env *in,
		   struct lp_env *out, unsigned char hello[AUTH_HELLO_BYTES],
		   unsigned char proof[AUTH_PROOF_BYTES])
{
	uint64_t now = lc_now_ms(), r;
	struct sess *x;
	int rc = 0;

	pthread_rwlock_wrlock(&t->lock);
	x = slot_take(t, now);
	if (!x) {
		rc = -EBUSY;
		goto out;
	}
	auth_hs_start(&x->hs, 0, hello);
	if (auth_hs_peer(&x->hs, in->hello)) {
		slot_clear(x);
		rc = LUNAR_ERR_UNAUTHORIZED;
		goto out;
	}
	auth_hs_proof(&x->hs, key, AUTH_ROLE_SERVER, proof);
	auth_random(&r, sizeof(r));
	x->sid = (r & ~(uint64_t)SLOT_MASK) | (uint64_t)(x - t->v);
	x->role = in->role;
	x->last_ms = now;
	x->state = S_HALF;
	memset(out, 0, sizeof(*out));
	out->kind = LP_KIND_HELLO_REPLY;
	out->sid = x->sid;
	out->hello = hello;
	out->proof = proof;
out:
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int mst_sess_prove(struct mst_sesstab *t, const struct auth_key *key, const struct lp_env *in,
		   struct lp_env *out, unsigned char tag[AUTH_TAG_BYTES])
{
	struct sess *x;
	int rc = 0;

	pthread_rwlock_wrlock(&t->lock);
	x = slot_of(t, in->sid, S_HALF);
	if (!x || !live(x, lc_now_ms())) {
		rc = -ENOENT;
		goto out;
	}
	if (auth_hs_verify(&x->hs, key, x->role, in->proof) ||
	    auth_hs_finish(&x->hs, key, x->role, &x->s)) {
		slot_clear(x);
		rc = -EBADMSG;
		goto out;
	}
	x->state = S_OPEN;
	x->last_ms = lc_now_ms();
	memset(out, 0, sizeof(*out));
	out->kind = LP_KIND_PROOF_REPLY;
	out->sid = x->sid;
	lp_env_tag(x->s.tx_key, out, tag);
	out->tag = tag;
out:
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

int mst_sess_call(struct mst_sesstab *t, const struct lp_env *in, struct mst_sess_view *v)
{
	uint64_t now = lc_now_ms();
	struct sess *x;
	int rc = 0;

	pthread_rwlock_rdlock(&t->lock);
	x = slot_of(t, in->sid, S_OPEN);
	if (!x || !live(x, now)) {
		rc = -ENOENT;
		goto out;
	}
	/* rx_key is written only while opening, under the write lock. */
	if (lp_env_tag_check(x->s.rx_key, in)) {
		rc = -EBADMSG;
		goto out;
	}
	pthread_mutex_lock(&x->lock);
	rc = auth_replay_accept(&x->s, in->ctr);
	rc = rc == AUTH_REPLAY_STALE ? -ESTALE : rc ? -EALREADY : 0;
	if (rc != -EALREADY) {
		LC_WRITE_ONCE(x->last_ms, now);
		v->sid = x->sid;
		v->role = x->role;
		v->keys = x->s;
	}
	pthread_mutex_unlock(&x->lock);
out:
	pthread_rwlock_unlock(&t->lock);
	return rc;
}

/* Calls only an ADMIN session may make: cluster-wide removal and the
 * listings that name every key, segment and owner. */
static int needs_admin(uint32_t method, const ProtobufCMessage *req)
{
	switch (method) {
	case LUNAR__METHOD__REMOVE_ALL:
	case LUNAR__METHOD__LIST_KEYS:
	case LUNAR__METHOD__LIST_SEGMENTS:
	case LUNAR__METHOD__LIST_CLIENTS:
	case LUNAR__METHOD__STAT_KEY: return 1;
	case LUNAR__METHOD__REMOVE: return ((const Lunar__RemoveRequest *)req)->force;
	case LUNAR__METHOD__BATCH_REMOVE: return ((const Lunar__BatchRemoveRequest *)req)->force;
	case LUNAR__METHOD__REMOVE_BY_REGEX:
		return ((const Lunar__RemoveByRegexRequest *)req)->force;
	default: return 0;
	}
}

/* The client id a request acts for: its top-level uint64 client_id. */
static int client_of(const ProtobufCMessage *req, uint64_t *id)
{
	const ProtobufCFieldDescriptor *f =
	    protobuf_c_message_descriptor_get_field_by_name(req->descriptor, "client_id");

	if (!f || f->type != PROTOBUF_C_TYPE_UINT64 || f->label == PROTOBUF_C_LABEL_REPEATED)
		return 0;
	*id = *(const uint64_t *)((const char *)req + f->offset);
	return 1;
}

static int has_id(const struct sess *x, uint64_t id)
{
	for (unsigned i = 0; i < x->n_ids; i++)
		if (x->ids[i] == id)
			return 1;
	return 0;
}

/* Bind id to the session sid unless another live session holds it (write
 * lock held). 0, 1 when another holds it, -1 when it cannot be bound. */
static int bind_id(struct mst_sesstab *t, uint64_t sid, uint64_t id)
{
	struct sess *x = slot_of(t, sid, S_OPEN);
	uint64_t now = lc_now_ms();

	if (!x)
		return -1;
	if (has_id(x, id))
		return 0;
	for (unsigned i = 0; i < MST_SESS_SLOTS; i++)
		if (&t->v[i] != x && t->v[i].state == S_OPEN && live(&t->v[i], now) &&
		    has_id(&t->v[i], id))
			return 1;
	if (x->n_ids == MST_SESS_IDS)
		return -1;
	x->ids[x->n_ids++] = id;
	return 0;
}

int mst_sess_guard(struct mst_sesstab *t, const struct mst_sess_view *v, const struct lp_method *mt,
		   const ProtobufCMessage *req)
{
	int admin = v->role == AUTH_ROLE_ADMIN, may_bind, rc;
	const struct sess *x;
	uint64_t id;

	if (needs_admin(mt->id, req) && !admin)
		return LUNAR_ERR_UNAUTHORIZED;
	if (!client_of(req, &id))
		return 0;
	pthread_rwlock_rdlock(&t->lock);
	x = slot_of(t, v->sid, S_OPEN);
	rc = x && has_id(x, id) ? 0 : LUNAR_ERR_UNAUTHORIZED;
	pthread_rwlock_unlock(&t->lock);
	may_bind = mt->id == LUNAR__METHOD__MOUNT_SEGMENT ||
		   mt->id == LUNAR__METHOD__REMOUNT_SEGMENT || mt->id == LUNAR__METHOD__PING;
	if (!rc || !may_bind)
		return rc && admin ? 0 : rc;
	pthread_rwlock_wrlock(&t->lock);
	rc = bind_id(t, v->sid, id);
	pthread_rwlock_unlock(&t->lock);
	return rc && !admin ? LUNAR_ERR_UNAUTHORIZED : 0;
}
