/*
 * test_fds.h - how many descriptors this process has open, for unit tests
 * that check a close path gives every one back. Include after cmocka.h.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_FDS_H
#define LUNAR_TESTS_UNIT_TEST_FDS_H

#include <dirent.h>

/* Entries of /proc/self/fd, its own directory stream and "." ".." included:
 * only differences between two calls mean anything. */
static inline int test_open_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	assert_non_null(d);
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

#endif /* LUNAR_TESTS_UNIT_TEST_FDS_H */
