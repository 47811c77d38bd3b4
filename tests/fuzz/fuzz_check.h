/*
 * fuzz_check.h - FZ_CHECK, what the fuzz targets assert beyond memory
 * safety: a promise the code under test broke is printed (file, line, the
 * condition) and aborts, which libFuzzer keeps as a crash reproducer.
 */
#ifndef LUNAR_TESTS_FUZZ_FUZZ_CHECK_H
#define LUNAR_TESTS_FUZZ_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FZ_CHECK(cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond); \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif /* LUNAR_TESTS_FUZZ_FUZZ_CHECK_H */
