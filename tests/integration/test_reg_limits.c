/*
 * test_reg_limits.c - registered memory is bounded per client: one client
 * cannot make the proxy map unbounded address space (a sparse sealed memfd
 * costs it nothing) and starve the others. Past 256 GiB its registrations
 * are refused with NO_AVAILABLE_HANDLE while other clients keep working.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define GIB (1ull << 30)

static char sock[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	if (h_init())
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("p.sock"));
	return h_start_proxy("proxy", sock, H_EMBEDDED, "--segment-size", "16MiB", NULL) ? 0 : -1;
}

/* A sealed, sparse memfd of len bytes mapped shared; NULL if the machine
 * will not map that much address space. */
static void *sparse_region(uint64_t len)
{
	int fd = memfd_create("lunar-test-sparse", MFD_ALLOW_SEALING);
	void *p = MAP_FAILED;

	if (fd >= 0 && !ftruncate(fd, (off_t)len) && !fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
		p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
	if (fd >= 0)
		close(fd);
	return p == MAP_FAILED ? NULL : p;
}

static void test_reg_limits_per_client_address_space(void **state)
{
	struct lunar_client *a = h_client(sock), *b = h_client(sock);
	void *big = sparse_region(200 * GIB), *more = sparse_region(100 * GIB);
	char v[64] = "still served";

	(void)state;
	H_ASSERT(a && b);
	if (!big || !more) {
		printf("skipped: cannot map 300 GiB of address space here\n");
		skip();
	}
	/* Given a client that registered 200 GiB */
	H_ASSERT_EQ(lunar_register(a, big, 200 * GIB), 0);
	/* When it asks for 100 GiB more, past its 256 GiB */
	H_ASSERT_EQ(lunar_register(a, more, 100 * GIB), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	/* Then another client is unaffected, and freeing makes room again */
	H_ASSERT_EQ(lunar_put(b, "reg-limits/b", v, sizeof(v), NULL), 0);
	H_ASSERT_EQ(lunar_unregister(a, big), 0);
	H_ASSERT_EQ(lunar_register(a, more, 100 * GIB), 0);
	munmap(big, 200 * GIB);
	munmap(more, 100 * GIB);
	lunar_close(a);
	lunar_close(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_reg_limits_per_client_address_space, setup,
					    h_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
