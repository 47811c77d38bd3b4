/*
 * test_key.c - key validation (SPEC §3: 1..4096 bytes of well-formed UTF-8
 * without NUL or control characters, else INVALID_KEY) and tenant names
 * (1..63 bytes of [A-Za-z0-9_.-], else INVALID_PARAMS), and the name hash.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "key.h"
#include "lunar.h"

/* Byte strings with explicit lengths: keys may be unterminated. */
#define KEY_OK(lit)  assert_int_equal(lc_key_check(lit, sizeof(lit) - 1), 0)
#define KEY_BAD(lit) assert_int_equal(lc_key_check(lit, sizeof(lit) - 1), LUNAR_ERR_INVALID_KEY)

static char big[LUNAR_KEY_MAX + 2];

static void test_key_ascii_lengths(void **state)
{
	memset(big, 'k', sizeof(big));
	assert_int_equal(lc_key_check("a", 1), 0);
	assert_int_equal(lc_key_check(big, 1), 0);
	assert_int_equal(lc_key_check(big, LUNAR_KEY_MAX), 0);
	assert_int_equal(lc_key_check(big, 4096), 0);
	KEY_OK("sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08/layer/17");
	KEY_OK(" !\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~");
}

static void test_key_length_bounds(void **state)
{
	memset(big, 'k', sizeof(big));
	assert_int_equal(lc_key_check(big, 0), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lc_key_check("", 0), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lc_key_check(big, 4097), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lc_key_check(big, LUNAR_KEY_MAX + 1), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lc_key_check(big, SIZE_MAX), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lc_key_check(NULL, 4), LUNAR_ERR_INVALID_KEY);
}

static void test_key_max_length_multibyte(void **state)
{
	/* 1024 four-byte characters: exactly 4096 bytes. */
	for (size_t i = 0; i < LUNAR_KEY_MAX; i += 4)
		memcpy(big + i, "\xf0\x9f\x98\x80", 4);
	assert_int_equal(lc_key_check(big, LUNAR_KEY_MAX), 0);
	/* The last character cut: truncated at the length bound. */
	assert_int_equal(lc_key_check(big, LUNAR_KEY_MAX - 1), LUNAR_ERR_INVALID_KEY);
}

static void test_key_nul_rejected(void **state)
{
	KEY_BAD("\0");
	KEY_BAD("ab\0cd");
	KEY_BAD("abcd\0");
	KEY_BAD("\0abcd");
}

static void test_key_control_rejected(void **state)
{
	char k[3] = {'a', 0, 'b'};

	for (int c = 0x01; c < 0x20; c++) {
		k[1] = (char)c;
		assert_int_equal(lc_key_check(k, 3), LUNAR_ERR_INVALID_KEY);
	}
	KEY_BAD("a\x01");
	KEY_BAD("a\x1f");
	KEY_BAD("a\tb");
	KEY_BAD("a\nb");
	KEY_BAD("a\x7f");
	KEY_BAD("\x7f");
	KEY_OK("a\x20~");
}

static void test_key_c1_rejected(void **state)
{
	char k[4] = {'a', (char)0xc2, 0, 'b'};

	/* U+0080..U+009F are C2 80..C2 9F. */
	for (int c = 0x80; c <= 0x9f; c++) {
		k[2] = (char)c;
		assert_int_equal(lc_key_check(k, 4), LUNAR_ERR_INVALID_KEY);
	}
	/* U+00A0 (NBSP) is the first code point after C1 and is fine. */
	KEY_OK("a\xc2\xa0"
	       "b");
	KEY_OK("\xc2\xbf");
}

static void test_key_utf8_valid(void **state)
{
	KEY_OK("caf\xc3\xa9");				      /* é, 2 bytes */
	KEY_OK("\xe4\xb8\xad\xe6\x96\x87");		      /* 中文, 3 bytes each */
	KEY_OK("\xf0\x9f\x98\x80");			      /* U+1F600, 4 bytes */
	KEY_OK("\xdf\xbf");				      /* U+07FF, largest 2-byte */
	KEY_OK("\xe0\xa0\x80");				      /* U+0800, smallest 3-byte */
	KEY_OK("\xed\x9f\xbf");				      /* U+D7FF, before surrogates */
	KEY_OK("\xee\x80\x80");				      /* U+E000, after surrogates */
	KEY_OK("\xef\xbf\xbf");				      /* U+FFFF */
	KEY_OK("\xf0\x90\x80\x80");			      /* U+10000, smallest 4-byte */
	KEY_OK("\xf4\x8f\xbf\xbf");			      /* U+10FFFF, the last */
	KEY_OK("k/\xc3\xa9/\xe2\x82\xac/\xf0\x9f\x98\x80/z"); /* mixed */
}

static void test_key_utf8_overlong_rejected(void **state)
{
	KEY_BAD("\xc0\x80");	     /* NUL, 2 bytes */
	KEY_BAD("\xc0\xaf");	     /* '/' */
	KEY_BAD("\xc1\xbf");	     /* U+007F */
	KEY_BAD("\xe0\x80\x80");     /* NUL, 3 bytes */
	KEY_BAD("\xe0\x9f\xbf");     /* U+07FF in 3 bytes */
	KEY_BAD("\xf0\x80\x80\x80"); /* NUL, 4 bytes */
	KEY_BAD("\xf0\x8f\xbf\xbf"); /* U+FFFF in 4 bytes */
	KEY_BAD("\xe0\x82\x80");     /* U+0080 in 3 bytes: overlong C1 */
}

static void test_key_utf8_surrogates_rejected(void **state)
{
	KEY_BAD("\xed\xa0\x80");	     /* U+D800 */
	KEY_BAD("\xed\xad\xbf");	     /* U+DB7F */
	KEY_BAD("\xed\xb0\x80");	     /* U+DC00 */
	KEY_BAD("\xed\xbf\xbf");	     /* U+DFFF */
	KEY_BAD("\xed\xa0\xbd\xed\xb8\x80"); /* CESU-8 pair for U+1F600 */
}

static void test_key_utf8_truncated_rejected(void **state)
{
	KEY_BAD("\xc3");
	KEY_BAD("ab\xc3");
	KEY_BAD("\xe4\xb8");
	KEY_BAD("\xf0\x9f\x98");
	KEY_BAD("\xf0\x9f");
	/* Cut by a non-continuation byte rather than by the end. */
	KEY_BAD("\xc3z");
	KEY_BAD("\xe4\xb8z");
	KEY_BAD("\xf0\x9f\x98z");
	KEY_BAD("\xe4\xb8\xc3\xa9");
	/* A valid character cut by the length, not by the bytes. */
	assert_int_equal(lc_key_check("a\xc3\xa9", 2), LUNAR_ERR_INVALID_KEY);
	assert_int_equal(lc_key_check("a\xc3\xa9", 3), 0);
}

static void test_key_utf8_stray_bytes_rejected(void **state)
{
	KEY_BAD("\x80"); /* lone continuation */
	KEY_BAD("a\xbf");
	KEY_BAD("\xc3\xa9\xa9");	 /* one continuation too many */
	KEY_BAD("\xf8\x88\x80\x80\x80"); /* 5-byte form */
	KEY_BAD("\xfc\x84\x80\x80\x80\x80");
	KEY_BAD("\xfe");
	KEY_BAD("\xff");
}

static void test_key_utf8_beyond_max_rejected(void **state)
{
	KEY_BAD("\xf4\x90\x80\x80"); /* U+110000 */
	KEY_BAD("\xf5\x80\x80\x80");
	KEY_BAD("\xf7\xbf\xbf\xbf"); /* U+1FFFFF */
}

static void test_key_tenant_valid(void **state)
{
	char t[64];

	assert_int_equal(lc_tenant_check("default", 7), 0);
	assert_int_equal(lc_tenant_check("a", 1), 0);
	assert_int_equal(lc_tenant_check("Team-A_1.prod", 13), 0);
	assert_int_equal(lc_tenant_check("0123456789", 10), 0);
	memset(t, 'z', sizeof(t));
	assert_int_equal(lc_tenant_check(t, 63), 0);
	/* Only len bytes are looked at. */
	assert_int_equal(lc_tenant_check("abc/def", 3), 0);
}

static void test_key_tenant_invalid(void **state)
{
	static const char *const bad[] = {"a b", "a/b", "a:b", "caf\xc3\xa9", "a\tb", "a+b",
					  "a*",	 "@",	"~x",  "a\x7f",	      "x\\y"};
	char t[65];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(lc_tenant_check(bad[i], strlen(bad[i])), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lc_tenant_check("", 0), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lc_tenant_check(NULL, 3), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lc_tenant_check("ab\0c", 4), LUNAR_ERR_INVALID_PARAMS);
	memset(t, 'z', sizeof(t));
	assert_int_equal(lc_tenant_check(t, 64), LUNAR_ERR_INVALID_PARAMS);
	assert_int_equal(lc_tenant_check(t, 65), LUNAR_ERR_INVALID_PARAMS);
}

/* Every byte lane of the 8-byte fast path: one bad byte anywhere in a
 * printable ASCII key is found, and a two-byte character across word
 * boundaries still passes. */
static void test_key_bad_byte_in_every_lane(void **state)
{
	static const unsigned char bad[] = {0x00, 0x01, 0x1f, 0x7f, 0x80, 0xbf, 0xc0, 0xff};
	static const unsigned char good[] = {0x20, 0x21, 0x7e, 'k'};
	char key[24];

	for (size_t p = 0; p < sizeof(key); p++) {
		for (size_t b = 0; b < sizeof(bad); b++) {
			memset(key, 'k', sizeof(key));
			key[p] = (char)bad[b];
			assert_int_equal(lc_key_check(key, sizeof(key)), LUNAR_ERR_INVALID_KEY);
		}
		for (size_t g = 0; g < sizeof(good); g++) {
			memset(key, 'k', sizeof(key));
			key[p] = (char)good[g];
			assert_int_equal(lc_key_check(key, sizeof(key)), 0);
		}
		if (p + 1 < sizeof(key)) {
			memset(key, 'k', sizeof(key));
			memcpy(key + p, "\xc2\xa9", 2);
			assert_int_equal(lc_key_check(key, sizeof(key)), 0);
			key[p + 1] = 'k'; /* the lead byte alone */
			assert_int_equal(lc_key_check(key, sizeof(key)), LUNAR_ERR_INVALID_KEY);
		}
	}
}

static void test_key_name_hash(void **state)
{
	uint64_t here = lc_name_hash("default", 7, "k-1", 3), there = here;
	int fds[2], status;
	pid_t pid;

	(void)state;
	/* Then: a name always hashes alike, and only the lengths given count */
	assert_true(lc_name_hash("default", 7, "k-1", 3) == here);
	assert_true(lc_name_hash("default!", 7, "k-12", 3) == here);
	/* And: tenant and key are told apart, where they split included */
	assert_true(lc_name_hash("default", 7, "k-2", 3) != here);
	assert_true(lc_name_hash("other", 5, "k-1", 3) != here);
	assert_true(lc_name_hash("ab", 2, "c", 1) != lc_name_hash("a", 1, "bc", 2));
	/* And: another process hashes it otherwise (its own random seed), so
	 * keys cannot be chosen to collide */
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char *argv[] = {"/proc/self/exe", "--hash", NULL};

		dup2(fds[1], STDOUT_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &there, sizeof(there)), sizeof(there));
	close(fds[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(there != here);
}

int main(int argc, char **argv)
{
	/* As the child of test_key_name_hash: a fresh process's hash of a name. */
	if (argc == 2 && !strcmp(argv[1], "--hash")) {
		uint64_t h = lc_name_hash("default", 7, "k-1", 3);

		return write(STDOUT_FILENO, &h, sizeof(h)) == sizeof(h) ? 0 : 1;
	}
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_key_ascii_lengths),
	    cmocka_unit_test(test_key_bad_byte_in_every_lane),
	    cmocka_unit_test(test_key_length_bounds),
	    cmocka_unit_test(test_key_max_length_multibyte),
	    cmocka_unit_test(test_key_nul_rejected),
	    cmocka_unit_test(test_key_control_rejected),
	    cmocka_unit_test(test_key_c1_rejected),
	    cmocka_unit_test(test_key_utf8_valid),
	    cmocka_unit_test(test_key_utf8_overlong_rejected),
	    cmocka_unit_test(test_key_utf8_surrogates_rejected),
	    cmocka_unit_test(test_key_utf8_truncated_rejected),
	    cmocka_unit_test(test_key_utf8_stray_bytes_rejected),
	    cmocka_unit_test(test_key_utf8_beyond_max_rejected),
	    cmocka_unit_test(test_key_tenant_valid),
	    cmocka_unit_test(test_key_tenant_invalid),
	    cmocka_unit_test(test_key_name_hash),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
