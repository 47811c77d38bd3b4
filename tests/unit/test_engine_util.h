/*
 * test_engine_util.h - what the engine tests share: a node, one engine on
 * loopback over a zeroed segment of its own, and a capability as the master
 * grants it. Include after cmocka.h and engine/engine.h.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_ENGINE_UTIL_H
#define LUNAR_TESTS_UNIT_TEST_ENGINE_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "clock.h"

struct node {
	struct eng_engine *e;
	unsigned char *seg;
};

/*
 * node_create - an engine made from cfg over a new zeroed segment of
 * cfg.seg_size bytes (cfg.seg_base is set to it here); fails the test when
 * either cannot be had. node_stop undoes it.
 */
static inline struct node node_create(struct eng_config cfg)
{
	struct node n;

	n.seg = calloc(1, cfg.seg_size);
	assert_non_null(n.seg);
	cfg.seg_base = n.seg;
	assert_int_equal(eng_engine_create(&cfg, &n.e), 0);
	return n;
}

/* node_stop - destroys n's engine, then frees its segment. */
static inline void node_stop(struct node *n)
{
	eng_engine_destroy(n->e);
	free(n->seg);
}

/* node_stop_under - stop n while op, submitted to cq, is under way: op
 * comes out of cq failed; how long the stop took, in ms. */
static inline uint64_t node_stop_under(struct node *n, struct eng_cq *cq, struct eng_op *op)
{
	uint64_t t0 = lc_now_ms();
	struct eng_op *done;

	node_stop(n);
	t0 = lc_now_ms() - t0;
	assert_int_equal(eng_cq_wait(cq, &done, 1, 0), 1);
	assert_ptr_equal(done, op);
	assert_int_not_equal(op->result, 0);
	return t0;
}

/* keys_make - auth ready, a random cluster key and segment secret. */
static inline void keys_make(struct auth_key *key, unsigned char *secret)
{
	assert_int_equal(auth_init(), 0);
	auth_random(key->k, sizeof(key->k));
	auth_random(secret, AUTH_KEY_BYTES);
}

/* grant - a capability as the master makes it, under the segment secret
 * sec, for op of [off, off + len) of the segment named seg. */
static inline struct eng_cap grant(const unsigned char *sec, const char *seg, uint32_t op,
				   uint64_t off, uint64_t len, uint64_t version, uint64_t expiry_ms)
{
	struct eng_cap cap = {
	    .offset = off, .length = len, .version = version, .expiry_ms = expiry_ms};
	struct auth_cap c = {.segment = seg,
			     .segment_len = strlen(seg),
			     .op = op,
			     .offset = off,
			     .length = len,
			     .version = version,
			     .expiry_ms = expiry_ms};

	auth_cap_make(sec, &c, cap.tag);
	return cap;
}

#endif /* LUNAR_TESTS_UNIT_TEST_ENGINE_UTIL_H */
