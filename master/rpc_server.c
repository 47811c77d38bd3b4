/*
 * rpc_server.c - a master served over nng REP: nworkers contexts, each an
 * aio callback state machine (receive -> unpack -> mst_dispatch -> pack ->
 * send -> receive). Callbacks run on nng's threads and never block on
 * anything but the master's short locks.
 */
#include "rpc_server.h"

#include <errno.h>
#include <stdlib.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>

#include "auth.h"
#include "log.h"
#include "lunar.h"
#include "master.h"
#include "mst_ha.h"
#include "mst_int.h"
#include "rpc.h"

enum wstate { W_RECV, W_SEND };

struct worker {
	struct mst_server *s;
	nng_aio *aio;
	nng_ctx ctx;
	enum wstate state;
};

struct mst_server {
	struct mst_master *m;
	nng_socket sock;
	nng_listener l;
	uint16_t port;
	unsigned n;
	struct worker *w;
	int keyed;
	struct auth_key key; /* with keyed: what every caller must prove */
};

/* Turn the request in msg into its reply, in place. 0, or a negative code
 * when there is nothing to answer with. */
static int serve(struct mst_master *m, nng_msg *msg)
{
	const struct lp_method *mt;
	ProtobufCMessage *req, *rep;
	size_t n;
	int rc = lp_request_unpack(nng_msg_body(msg), nng_msg_len(msg), &mt, &req);

	/* A newer caller's method: told so at once, not left to time out. */
	if (rc == -ENOSYS) {
		rep = lp_reply_new(&lunar__status_reply__descriptor, LUNAR_ERR_PROTOCOL, mst_view(m));
		rc = rep ? 0 : -ENOMEM;
	} else if (!rc) {
		rc = mst_dispatch(m, mt->id, req, &rep);
		protobuf_c_message_free_unpacked(req, NULL);
	}
	if (rc)
		return rc;
	n = protobuf_c_message_get_packed_size(rep);
	nng_msg_clear(msg);
	rc = nng_msg_realloc(msg, n) ? -ENOMEM : 0;
	if (!rc)
		protobuf_c_message_pack(rep, nng_msg_body(msg));
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

static void worker_cb(void *arg)
{
	struct worker *w = arg;
	int rv = nng_aio_result(w->aio);
	nng_msg *msg;

	if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
		return; /* stopping */
	if (w->state == W_SEND) {
		if (rv)
			nng_msg_free(nng_aio_get_msg(w->aio));
	} else if (!rv) {
		msg = nng_aio_get_msg(w->aio);
		rv = serve(w->s->m, msg);
		if (!rv) {
			nng_aio_set_msg(w->aio, msg);
			w->state = W_SEND;
			nng_ctx_send(w->ctx, w->aio);
			return;
		}
		LC_DEBUG("master", "request dropped: %d", rv);
		nng_msg_free(msg);
	}
	w->state = W_RECV;
	nng_ctx_recv(w->ctx, w->aio);
}

static int code_of_nng(int rv)
{
	switch (rv) {
	case NNG_ENOMEM: return -ENOMEM;
	case NNG_EADDRINUSE: return -EADDRINUSE;
	case NNG_EADDRINVAL:
	case NNG_EINVAL:
	case NNG_ENOTSUP: return -EINVAL;
	default: return LUNAR_ERR_INTERNAL;
	}
}

static int workers_start(struct mst_server *s)
{
	int rv;

	for (unsigned i = 0; i < s->n; i++) {
		struct worker *w = &s->w[i];

		w->s = s;
		rv = nng_aio_alloc(&w->aio, worker_cb, w);
		if (rv)
			return rv;
		rv = nng_ctx_open(&w->ctx, s->sock);
		if (rv)
			return rv;
		w->state = W_RECV;
		nng_ctx_recv(w->ctx, w->aio);
	}
	return 0;
}

static int listen_on(struct mst_server *s, const char *url)
{
	int port = 0, rv;

	rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, LP_MAX_MSG);
	if (!rv)
		rv = nng_listener_create(&s->l, s->sock, url);
	if (!rv)
		rv = nng_listener_start(s->l, 0);
	if (rv)
		return rv;
	if (nng_listener_get_int(s->l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
		s->port = (uint16_t)port;
	return 0;
}

int mst_server_start(struct mst_master *m, const char *url, unsigned nworkers,
		     const struct auth_key *key, struct mst_server **out)
{
	struct mst_server *s = calloc(1, sizeof(*s));
	int rv;

	if (!s)
		return -ENOMEM;
	s->m = m;
	s->keyed = key != NULL;
	if (key)
		s->key = *key;
	s->n = nworkers ? nworkers : 1;
	s->w = calloc(s->n, sizeof(*s->w));
	if (!s->w) {
		free(s);
		return -ENOMEM;
	}
	rv = nng_rep0_open(&s->sock);
	if (rv) {
		free(s->w);
		free(s);
		LC_ERROR("master", "nng_rep0_open: %s", nng_strerror(rv));
		return code_of_nng(rv);
	}
	rv = listen_on(s, url);
	if (!rv)
		rv = workers_start(s);
	if (rv) {
		LC_ERROR("master", "listen on %s: %s", url, nng_strerror(rv));
		mst_server_stop(s);
		return code_of_nng(rv);
	}
	*out = s;
	return 0;
}

uint16_t mst_server_port(const struct mst_server *s)
{
	return s->port;
}

void mst_server_stop(struct mst_server *s)
{
	if (!s)
		return;
	/* Stop each worker's aio, then close its context, then the socket:
	 * closing the socket under open contexts can wait forever (nng 1.5). */
	for (unsigned i = 0; i < s->n; i++) {
		if (s->w[i].aio)
			nng_aio_stop(s->w[i].aio);
		if (nng_ctx_id(s->w[i].ctx) > 0)
			nng_ctx_close(s->w[i].ctx);
	}
	nng_close(s->sock);
	for (unsigned i = 0; i < s->n; i++)
		nng_aio_free(s->w[i].aio);
	free(s->w);
	auth_key_wipe(&s->key);
	free(s);
}
