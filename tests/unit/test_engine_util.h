/*
 * test_engine_util.h - what the test_engine*.c binaries share: a node, one
 * engine on loopback over a zeroed segment of its own. Include after cmocka.h
 * and engine/engine.h.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_ENGINE_UTIL_H
#define LUNAR_TESTS_UNIT_TEST_ENGINE_UTIL_H

#include <stdlib.h>

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

#endif /* LUNAR_TESTS_UNIT_TEST_ENGINE_UTIL_H */
