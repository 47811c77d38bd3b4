/*
 * test_mreg.c - which descriptors a client may have the proxy map
 * (px_mreg_fd_check): only a memfd sealed against shrinking, and not one on
 * hugetlbfs, where a punched hole gives the huge pages back and the proxy's
 * next touch of the range could be a SIGBUS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lunar.h"
#include "proxy/px_int.h"
#include "tests/cmocka_main.h"

#define LEN (2u << 20) /* one huge page */

/* A memfd of LEN bytes made with flags, sealed with seals; -1 if the kernel
 * will not make it. */
static int memfd(unsigned flags, int seals)
{
	int fd = memfd_create("lunar-test-mreg", flags | MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd >= 0 && (ftruncate(fd, LEN) || (seals && fcntl(fd, F_ADD_SEALS, seals)))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void test_mreg_sealed_memfd_only(void **state)
{
	char path[] = "/tmp/lunar-test-mreg-XXXXXX";
	int sealed = memfd(0, F_SEAL_SHRINK), open_ = memfd(0, 0), file = mkstemp(path);
	uint64_t size = 0;

	(void)state;
	assert_true(sealed >= 0 && open_ >= 0 && file >= 0);
	unlink(path);
	/* A memfd sealed against shrinking is mapped, at its size */
	assert_int_equal(px_mreg_fd_check(sealed, &size), 0);
	assert_int_equal(size, LEN);
	/* One that can still shrink, a plain file and no descriptor are not */
	assert_int_equal(px_mreg_fd_check(open_, &size), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(px_mreg_fd_check(file, &size), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(px_mreg_fd_check(-1, &size), LUNAR_ERR_INVALID_PARAMS);
	close(sealed);
	close(open_);
	close(file);
}

static void test_mreg_hugetlb_refused(void **state)
{
	int fd = memfd(MFD_HUGETLB, F_SEAL_SHRINK);
	uint64_t size = 0;

	(void)state;
	if (fd < 0) {
		printf("skipped: this kernel makes no sealed hugetlb memfd\n");
		skip();
	}
	/* Given a hugetlb memfd sealed against shrinking, it is still refused */
	assert_int_equal(px_mreg_fd_check(fd, &size), LUNAR_ERR_INVALID_PARAMS);
	close(fd);
}

LUNAR_TEST_MAIN(NULL, NULL, test_mreg_sealed_memfd_only, test_mreg_hugetlb_refused)
