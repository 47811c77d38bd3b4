/*
 * test_engine_iovc.c - the window of a scatter list that one sendmsg or
 * recvmsg is handed (eng_iovc_window): the cursor's next bytes in order,
 * the frame header first, ENG_IOV_WINDOW entries at most, and an entry
 * longer than ENG_IOV_CHUNK cut there and ending the window, so that a
 * syscall moving the whole cut piece and more cannot land bytes of the
 * next entry where the cursor counts the rest of the long one. The
 * iovecs here point at nothing: a window only names memory.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <sys/uio.h>

#include "engine/eng_int.h"
#include "tests/cmocka_main.h"

#define BASE(n) ((void *)(uintptr_t)((n) << 40))

static void test_engine_iovc_long_entry_ends_window(void **state)
{
	const struct iovec iov[2] = {{BASE(1ull), ENG_IOV_CHUNK + 4096}, {BASE(2ull), 100}};
	struct iovec win[ENG_IOV_WINDOW];
	struct eng_iovc c;

	(void)state;
	eng_iovc_init(&c, iov, 2, 0, ENG_IOV_CHUNK + 4096 + 100);
	assert_int_equal(eng_iovc_window(&c, win), 1);
	assert_ptr_equal(win[0].iov_base, BASE(1ull));
	assert_int_equal(win[0].iov_len, ENG_IOV_CHUNK);
	/* Past the first chunk: the long entry's rest, then the next. */
	eng_iovc_init(&c, iov, 2, ENG_IOV_CHUNK, 4096 + 100);
	assert_int_equal(eng_iovc_window(&c, win), 2);
	assert_ptr_equal(win[0].iov_base, (char *)BASE(1ull) + ENG_IOV_CHUNK);
	assert_int_equal(win[0].iov_len, 4096);
	assert_ptr_equal(win[1].iov_base, BASE(2ull));
	assert_int_equal(win[1].iov_len, 100);
}

static void test_engine_iovc_header_and_limits(void **state)
{
	static struct iovec iov[ENG_IOV_WINDOW + 8];
	struct iovec win[ENG_IOV_WINDOW];
	static const char head[16];
	struct eng_iovc c;

	(void)state;
	for (int i = 0; i < ENG_IOV_WINDOW + 8; i++)
		iov[i] = (struct iovec){BASE((uint64_t)i + 1), 10};
	/* Skip 15 bytes, move 30: 5 of the second entry, 10, 10, 5. */
	eng_iovc_init(&c, iov, ENG_IOV_WINDOW + 8, 15, 30);
	eng_iovc_head(&c, head, sizeof(head));
	assert_int_equal(eng_iovc_window(&c, win), 5);
	assert_ptr_equal(win[0].iov_base, head);
	assert_int_equal(win[0].iov_len, sizeof(head));
	assert_ptr_equal(win[1].iov_base, (char *)BASE(2ull) + 5);
	assert_int_equal(win[1].iov_len, 5);
	assert_int_equal(win[2].iov_len, 10);
	assert_int_equal(win[3].iov_len, 10);
	assert_int_equal(win[4].iov_len, 5);
	/* The window holds ENG_IOV_WINDOW entries at most. */
	eng_iovc_init(&c, iov, ENG_IOV_WINDOW + 8, 0, 10ull * (ENG_IOV_WINDOW + 8));
	assert_int_equal(eng_iovc_window(&c, win), ENG_IOV_WINDOW);
	assert_ptr_equal(win[ENG_IOV_WINDOW - 1].iov_base, BASE((uint64_t)ENG_IOV_WINDOW));
}

LUNAR_TEST_MAIN(NULL, NULL, test_engine_iovc_long_entry_ends_window,
		test_engine_iovc_header_and_limits)
