/*
 * test_rpc_sess.c - the master's RPC sessions (master/rpc_sess.c): an open
 * session stays open while threads call on it at once. A call reads the
 * clock before it takes the session, so another thread's call may have
 * recorded a later last use by the time it looks: that session is live,
 * not expired (it was once taken for expired and answered NO_SESSION; the
 * proxy then opened a new session, which could not act for the client id
 * the first one still held, and every call was refused UNAUTHORIZED).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <sodium.h>

#include "clock.h"
#include "master/rpc_sess.h"
#include "tests/cmocka_main.h"

#define CALLERS 4
#define RUN_MS	1500 /* 1500 millisecond boundaries, each a chance of the race */

static struct mst_sesstab *tab;
static struct auth_session cs; /* the client's side of the session */
static uint64_t sid;
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;

/* A NODE session opened through the handshake, both sides in process. */
static void open_session(void)
{
	unsigned char ch_hello[AUTH_HELLO_BYTES], sh_hello[AUTH_HELLO_BYTES];
	unsigned char sproof[AUTH_PROOF_BYTES], cproof[AUTH_PROOF_BYTES], tag[AUTH_TAG_BYTES];
	struct lp_env in = {.kind = LP_KIND_HELLO, .role = AUTH_ROLE_NODE, .hello = ch_hello};
	struct lp_env out;
	struct auth_key key;
	struct auth_hs ch;

	auth_random(&key, sizeof(key));
	auth_hs_start(&ch, 1, ch_hello);
	assert_int_equal(mst_sess_hello(tab, &key, &in, &out, sh_hello, sproof), 0);
	assert_int_equal(auth_hs_peer(&ch, out.hello), 0);
	assert_int_equal(auth_hs_verify(&ch, &key, AUTH_ROLE_SERVER, out.proof), 0);
	sid = out.sid;
	auth_hs_proof(&ch, &key, AUTH_ROLE_NODE, cproof);
	in = (struct lp_env){.kind = LP_KIND_PROOF, .sid = sid, .proof = cproof};
	assert_int_equal(mst_sess_prove(tab, &key, &in, &out, tag), 0);
	assert_int_equal(auth_hs_finish(&ch, &key, AUTH_ROLE_NODE, &cs), 0);
	sodium_memzero(&key, sizeof(key));
}

/* Calls on the session until RUN_MS passed; how many found it unknown. */
static void *caller(void *arg)
{
	static const char body[] = "call";
	uint64_t end = lc_now_ms() + RUN_MS;
	long *unknown = arg;

	while (lc_now_ms() < end) {
		struct lp_env e = {.kind = LP_KIND_CALL, .sid = sid, .body = body, .body_len = 4};
		unsigned char tag[AUTH_TAG_BYTES];
		struct mst_sess_view v;

		pthread_mutex_lock(&send_lock); /* counters out in order, as the client sends */
		e.ctr = auth_tx_next(&cs);
		lp_env_tag(cs.tx_key, &e, tag);
		pthread_mutex_unlock(&send_lock);
		e.tag = tag;
		*unknown += mst_sess_call(tab, &e, &v) == -ENOENT;
		sodium_memzero(&v, sizeof(v));
	}
	return NULL;
}

static void test_rpc_sess_busy_session_stays_open(void **state)
{
	pthread_t tid[CALLERS];
	long unknown[CALLERS] = {0}, total = 0;

	(void)state;
	assert_int_equal(mst_sesstab_create(&tab), 0);
	open_session();
	for (int i = 0; i < CALLERS; i++)
		assert_int_equal(pthread_create(&tid[i], NULL, caller, &unknown[i]), 0);
	for (int i = 0; i < CALLERS; i++) {
		pthread_join(tid[i], NULL);
		total += unknown[i];
	}
	assert_int_equal(total, 0);
	sodium_memzero(&cs, sizeof(cs));
	mst_sesstab_destroy(tab);
}

LUNAR_TEST_MAIN(NULL, NULL, test_rpc_sess_busy_session_stays_open)
