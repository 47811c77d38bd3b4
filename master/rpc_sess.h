/*
 * rpc_sess.h - the keyed RPC server's sessions (SPEC §13), private to
 * master/: a bounded table of handshakes in progress and open sessions, each
 * with its receive window and the client ids it acts for, and the identity
 * check every authenticated request passes before mst_dispatch.
 */
#ifndef LUNAR_MASTER_RPC_SESS_H
#define LUNAR_MASTER_RPC_SESS_H

#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "auth.h"
#include "rpc.h"
#include "rpc_auth.h"

#define MST_SESS_SLOTS	 4096u	 /* sessions at once, open or half-open */
#define MST_SESS_IDS	 16u	 /* client ids one session may act for */
#define MST_SESS_HALF_MS 10000u	 /* a HELLO not followed by its PROOF */
#define MST_SESS_IDLE_MS 600000u /* an open session without a call */

struct mst_sesstab;

/* What a request's reply needs from its session, copied out of the table. */
struct mst_sess_view {
	uint64_t sid;
	uint32_t role;
	struct auth_session keys; /* wipe after use */
};

/* mst_sesstab_create - an empty table; 0 or -ENOMEM. */
int mst_sesstab_create(struct mst_sesstab **out);
/* mst_sesstab_destroy - wipe and free. NULL is a no-op. No call may run. */
void mst_sesstab_destroy(struct mst_sesstab *t);

/*
 * mst_sess_hello - answer a decoded HELLO: a new half-open session, the
 * server's hello and proof under key. On 0, *out is the HELLO_REPLY, its
 * pointers into hello and proof. -EBUSY when every slot holds a live
 * session; LUNAR_ERR_UNAUTHORIZED for a reflected hello. Expired sessions
 * are reclaimed here. Any thread.
 */
int mst_sess_hello(struct mst_sesstab *t, const struct auth_key *key, const struct lp_env *in,
		   struct lp_env *out, unsigned char hello[AUTH_HELLO_BYTES],
		   unsigned char proof[AUTH_PROOF_BYTES]);
/*
 * mst_sess_prove - check a decoded PROOF for its half-open session and
 * open it. On 0, *out is the PROOF_REPLY, tagged into tag. -ENOENT: no
 * such half-open session; -EBADMSG: a wrong proof (the session is gone).
 */
int mst_sess_prove(struct mst_sesstab *t, const struct auth_key *key, const struct lp_env *in,
		   struct lp_env *out, unsigned char tag[AUTH_TAG_BYTES]);
/*
 * mst_sess_call - authenticate a decoded CALL: its session open and live,
 * its tag right, its counter never accepted before. On 0, *v is the
 * session's view. -ENOENT: unknown (or expired) session; -EBADMSG: bad
 * tag; -EALREADY: a replayed counter; -ESTALE: an authentic CALL whose
 * counter is below the window (auth_replay_accept), not to be run: *v is
 * the session's view, to tag the STALE answer with.
 */
int mst_sess_call(struct mst_sesstab *t, const struct lp_env *in, struct mst_sess_view *v);
/*
 * mst_sess_guard - may the session of v make call mt with req (SPEC §13)?
 * ADMIN-only methods need an ADMIN session; a request naming a client id
 * must name one the session acts for. MountSegment, ReMountSegment and Ping
 * bind a client id no live session holds to this one (Ping because a node
 * without a segment never mounts). An ADMIN session may name any id.
 * 0 or LUNAR_ERR_UNAUTHORIZED. Any thread; takes the table's lock.
 */
int mst_sess_guard(struct mst_sesstab *t, const struct mst_sess_view *v, const struct lp_method *mt,
		   const ProtobufCMessage *req);

#endif /* LUNAR_MASTER_RPC_SESS_H */
