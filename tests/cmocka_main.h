/*
 * cmocka_main.h - LUNAR_TEST_MAIN, the main() of a test binary that runs its
 * plain test functions, in order, as one cmocka group "tests" between a group
 * setup and teardown: the same run and output as the usual
 *
 *	const struct CMUnitTest tests[] = {cmocka_unit_test(a), ...};
 *	return cmocka_run_group_tests(tests, setup, teardown);
 *
 * written as the list of names alone; LUNAR_TEST_MAIN_EACH when every test
 * has the same fixtures of its own. A binary whose tests differ in fixtures
 * or state, or whose main() does more, keeps that form.
 */
#ifndef LUNAR_TESTS_CMOCKA_MAIN_H
#define LUNAR_TESTS_CMOCKA_MAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * lunar_test_run - runs fns[0..n) in order as the cmocka group "tests" with
 * the group fixtures group_setup and group_teardown, and each test between
 * each_setup and each_teardown (any of the four may be NULL), each test named by its
 * entry in names, the comma-separated list of the functions' names. stdout
 * is made line-buffered first, so that a test's lines keep their place among
 * its daemons' output. What cmocka_run_group_tests returns: 0 when every test
 * passed.
 */
static inline int lunar_test_run(const char *names, const CMUnitTestFunction *fns, size_t n,
				 CMFixtureFunction group_setup, CMFixtureFunction group_teardown,
				 CMFixtureFunction each_setup, CMFixtureFunction each_teardown)
{
	struct CMUnitTest *tests = calloc(n, sizeof(*tests));
	char *list = strdup(names), *save = NULL, *name;
	int rc;

	if (!tests || !list) {
		fprintf(stderr, "lunar_test_run: out of memory\n");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	name = strtok_r(list, ", ", &save);
	for (size_t i = 0; i < n; i++) {
		tests[i].name = name ? name : "?";
		tests[i].test_func = fns[i];
		tests[i].setup_func = each_setup;
		tests[i].teardown_func = each_teardown;
		name = strtok_r(NULL, ", ", &save);
	}
	rc = _cmocka_run_group_tests("tests", tests, n, group_setup, group_teardown);
	free(tests);
	free(list);
	return rc;
}

/* LUNAR_TEST_MAIN - defines main(): the test functions listed after the group
 * fixtures setup and teardown (NULL for none) run in order (lunar_test_run). */
#define LUNAR_TEST_MAIN(setup, teardown, ...)                                                      \
	int main(void)                                                                             \
	{                                                                                          \
		const CMUnitTestFunction fns[] = {__VA_ARGS__};                                    \
                                                                                                   \
		return lunar_test_run(#__VA_ARGS__, fns, sizeof(fns) / sizeof(fns[0]), setup,      \
				      teardown, NULL, NULL);                                       \
	}

/* LUNAR_TEST_MAIN_EACH - the same, but setup and teardown run around each
 * test, as cmocka_unit_test_setup_teardown(test, setup, teardown) does. */
#define LUNAR_TEST_MAIN_EACH(setup, teardown, ...)                                                 \
	int main(void)                                                                             \
	{                                                                                          \
		const CMUnitTestFunction fns[] = {__VA_ARGS__};                                    \
                                                                                                   \
		return lunar_test_run(#__VA_ARGS__, fns, sizeof(fns) / sizeof(fns[0]), NULL, NULL, \
				      setup, teardown);                                            \
	}

#endif /* LUNAR_TESTS_CMOCKA_MAIN_H */
