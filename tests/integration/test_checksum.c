/*
 * test_checksum.c - end to end on real processes: a byte flipped in a proxy's
 * segment is reported as CHECKSUM_MISMATCH, never as the value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "case_util.h"
#include "tests/cmocka_main.h"

#define KIB	    1024u
#define MIB	    (1024u * 1024u)
#define CORRUPT_LEN (256 * KIB)

static void test_checksum_flipped_byte_is_mismatch(void **state)
{
	const char *sock = h_path("p.sock");
	char rest[128], *at;
	struct lunar_client *c;
	struct h_proc *px;
	uint8_t *buf = malloc(CORRUPT_LEN), byte;
	unsigned long long base;
	int64_t off, got;
	char mem[64];
	int port, fd;
	off_t where;

	(void)state;
	H_ASSERT(buf != NULL);
	/* Given an embedded node holding K and another key, K read once (so
	 * its replica list is cached too) */
	px = h_start_proxy("proxy", sock, H_EMBEDDED, NULL);
	H_ASSERT(px != NULL);
	port = http_port_of(px);
	c = h_client(sock);
	put_seeded(c, "crc/other", buf, CORRUPT_LEN, h_seed("crc/other"), NULL);
	put_seeded(c, "crc/K", buf, CORRUPT_LEN, h_seed("crc/K"), NULL);
	check_seeded(c, "crc/K", buf, CORRUPT_LEN, h_seed("crc/K"));

	/* When one byte of K's replica is flipped in the proxy's memory */
	H_ASSERT_MSG(hg_log_find(px->log, "segment of ", rest, sizeof(rest)) == 0,
		     "the proxy logged no \"segment of N bytes at 0x...\" line");
	at = strstr(rest, " at 0x");
	H_ASSERT_MSG(at != NULL, "no address in \"segment of %s\"", rest);
	base = strtoull(at + 4, NULL, 16);
	stat_key(port, "default", "crc/K");
	H_ASSERT_MSG(hg_count(text, "\"segment\":\"") == 1, "K: expected one replica: %s", text);
	off = hg_json_u64(text, "offset", 0);
	H_ASSERT_MSG(off >= 0, "no offset in %s", text);
	where = (off_t)(base + (unsigned long long)off + CORRUPT_LEN / 3);
	snprintf(mem, sizeof(mem), "/proc/%d/mem", (int)px->pid);
	fd = open(mem, O_RDWR | O_CLOEXEC);
	if (fd < 0 && (errno == EPERM || errno == EACCES)) {
		print_message("skipped: open %s: %s (no ptrace permission)\n", mem,
			      strerror(errno));
		lunar_close(c);
		free(buf);
		skip();
	}
	H_ASSERT_MSG(fd >= 0, "open %s: %s", mem, strerror(errno));
	H_ASSERT_MSG(pread(fd, &byte, 1, where) == 1, "pread %s: %s", mem, strerror(errno));
	byte ^= 0x5a;
	if (pwrite(fd, &byte, 1, where) != 1) {
		int e = errno;

		close(fd);
		if (e == EPERM || e == EACCES || e == EIO) {
			print_message("skipped: pwrite %s: %s\n", mem, strerror(e));
			lunar_close(c);
			free(buf);
			skip();
		}
		H_ASSERT_MSG(0, "pwrite %s: %s", mem, strerror(e));
	}
	close(fd);
	print_message("flipped the byte at segment %#llx + %lld\n", base,
		      (long long)(off + CORRUPT_LEN / 3));

	/* Then get K says CHECKSUM_MISMATCH, through the cache and again */
	got = lunar_get_into(c, "crc/K", buf, CORRUPT_LEN);
	H_ASSERT_EQ(got, LUNAR_ERR_CHECKSUM_MISMATCH);
	got = lunar_get_into(c, "crc/K", buf, CORRUPT_LEN);
	H_ASSERT_EQ(got, LUNAR_ERR_CHECKSUM_MISMATCH);
	/* and a fresh client is told the same */
	{
		struct lunar_client *c2 = h_client(sock);

		got = lunar_get_into(c2, "crc/K", buf, CORRUPT_LEN);
		lunar_close(c2);
		H_ASSERT_EQ(got, LUNAR_ERR_CHECKSUM_MISMATCH);
	}
	/* and the other key reads intact */
	check_seeded(c, "crc/other", buf, CORRUPT_LEN, h_seed("crc/other"));
	lunar_close(c);
	free(buf);
}

LUNAR_TEST_MAIN_EACH(case_setup, case_teardown, test_checksum_flipped_byte_is_mismatch)
