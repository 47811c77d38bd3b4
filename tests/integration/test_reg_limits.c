/*
 * test_reg_limits.c - registered memory is bounded per client: one client
 * cannot make the proxy map unbounded address space (a sparse sealed memfd
 * costs it nothing) and starve the others. Past 256 GiB its registrations
 * are refused with NO_AVAILABLE_HANDLE while other clients keep working.
 * Ranges are bounded for all clients together (--max-registrations, by
 * default what vm.max_map_count leaves), and the clients of one uid get at
 * most half: another user's still register.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "http_get.h"

#define GIB	 (1ull << 30)
#define NOBODY	 65534
#define MAX_REGS 8 /* --max-registrations: 4 a uid */

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

/* A page of sealed memfd memory, mapped shared. Its descriptor stays
 * open: without CAP_SYS_ADMIN liblunar finds the memfd only that way. */
static void *page_region(void)
{
	int fd = memfd_create("lunar-test-page", MFD_ALLOW_SEALING);
	void *p = MAP_FAILED;

	if (fd >= 0 && !ftruncate(fd, 4096) && !fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK))
		p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	H_ASSERT(p != MAP_FAILED);
	return p;
}

/* Register fresh pages until one is refused: how many were taken, and
 * that the refusal said NO_AVAILABLE_HANDLE (else -1). */
static int register_until_refused(struct lunar_client *c)
{
	for (int n = 0; n <= MAX_REGS; n++) {
		int rc = lunar_register(c, page_region(), 4096);

		if (rc && rc != LUNAR_ERR_NO_AVAILABLE_HANDLE)
			fprintf(stderr, "registration %d: %s\n", n, h_code(rc));
		if (rc)
			return rc == LUNAR_ERR_NO_AVAILABLE_HANDLE ? n : -1;
	}
	return -1;
}

/* As uid nobody in our group, so let in (h_run_as): 100 + how many ranges
 * it could register, or 1 on any other failure. */
static int nobody_registers(void *arg)
{
	struct lunar_opts o = {.socket_path = arg, .timeout_ms = 5000};
	struct lunar_client *c = NULL;

	if (lunar_connect(&o, &c))
		return 1;
	return 100 + register_until_refused(c);
}

static void test_reg_limits_ranges_half_a_uid(void **state)
{
	struct lunar_client *a, *b;
	char sk[PATH_MAX];
	void *first;
	int n;

	(void)state;
	H_ASSERT(h_init() == 0);
	H_ASSERT(chmod(h_tmpdir(), 0755) == 0); /* for the other user's client */
	snprintf(sk, sizeof(sk), "%s", h_path("ranges.sock"));
	H_ASSERT(h_start_proxy("ranges", sk, H_EMBEDDED, "--segment-size", "16MiB",
			       "--max-registrations", "8", NULL) != NULL);
	H_ASSERT(chmod(sk, 0666) == 0);
	a = h_client(sk);
	b = h_client(sk);
	/* Given: one client of ours registers what it can: half the ranges */
	first = page_region();
	H_ASSERT_EQ(lunar_register(a, first, 4096), 0);
	n = register_until_refused(a);
	H_ASSERT_EQ(n + 1, MAX_REGS / 2);
	/* Then: another client of our uid gets none, but is served */
	H_ASSERT_EQ(register_until_refused(b), 0);
	H_ASSERT_EQ(lunar_put(b, "reg-limits/ranges", "v", 1, NULL), 0);
	/* and another user's client gets the other half */
	if (geteuid() == 0) {
		n = h_run_as(NOBODY, getegid(), nobody_registers, sk) - 100;
		print_message("uid %d registered %d ranges\n", NOBODY, n);
		H_ASSERT_EQ(n, MAX_REGS / 2);
	} else {
		print_message("not root: the other user's half is not tried\n");
	}
	/* and a range given back can be taken again */
	H_ASSERT_EQ(lunar_unregister(a, first), 0);
	H_ASSERT_EQ(register_until_refused(b), 1);
	lunar_close(a);
	lunar_close(b);
	h_stop_all();
}

/* The clients of one uid map at most 4 TiB together (half of the proxy's
 * 8 TiB): sixteen of them at 256 GiB each, the seventeenth is refused. */
static void test_reg_limits_bytes_half_a_uid(void **state)
{
	enum { N = 16 };
	struct lunar_client *c[N + 1];
	void *big = sparse_region(256 * GIB);

	(void)state;
	if (!big) {
		printf("skipped: cannot map 256 GiB of address space here\n");
		skip();
	}
	for (int i = 0; i <= N; i++)
		c[i] = h_client(sock);
	for (int i = 0; i < N; i++) {
		int rc = lunar_register(c[i], big, 256 * GIB);

		/* The proxy's mmap failed: TSan, say, leaves no 4 TiB to map. */
		if (rc == LUNAR_ERR_INVALID_PARAMS) {
			printf("skipped: the proxy cannot map %d x 256 GiB here\n", i + 1);
			for (int j = 0; j <= N; j++)
				lunar_close(c[j]);
			munmap(big, 256 * GIB);
			skip();
		}
		H_ASSERT_EQ(rc, 0);
	}
	H_ASSERT_EQ(lunar_register(c[N], big, 256 * GIB), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	H_ASSERT_EQ(lunar_register(c[N], page_region(), 4096), LUNAR_ERR_NO_AVAILABLE_HANDLE);
	H_ASSERT_EQ(lunar_put(c[N], "reg-limits/bytes", "v", 1, NULL), 0);
	/* The proxy drops a closed client's ranges when it sees the hang-up. */
	lunar_close(c[0]);
	for (int t = 0; t < 40 && lunar_register(c[N], big, 256 * GIB); t++)
		h_sleep_ms(50);
	H_ASSERT_EQ(lunar_unregister(c[N], big), 0);
	for (int i = 1; i <= N; i++)
		lunar_close(c[i]);
	munmap(big, 256 * GIB);
}

/* Without the flag, the bound is what vm.max_map_count leaves. */
static void test_reg_limits_ranges_default(void **state)
{
	unsigned long long maps;
	long long want;
	char sk[PATH_MAX], line[256], expect[128];
	struct h_proc *p;
	FILE *f;

	(void)state;
	f = fopen("/proc/sys/vm/max_map_count", "r");
	H_ASSERT(f && fscanf(f, "%llu", &maps) == 1);
	fclose(f);
	want = (long long)maps - 8192 - 1024;
	want = want < 64 ? 64 : want > 65536 ? 65536 : want;
	H_ASSERT(h_init() == 0);
	snprintf(sk, sizeof(sk), "%s", h_path("default.sock"));
	p = h_start_proxy("default", sk, H_EMBEDDED, "--segment-size", "16MiB", NULL);
	H_ASSERT(p != NULL);
	snprintf(expect, sizeof(expect), "up to 1024 clients, %lld registered ranges", want);
	H_ASSERT_MSG(hg_log_find(p->log, expect, line, sizeof(line)) == 0,
		     "no '%s' in the proxy's log", expect);
	h_stop_all();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_reg_limits_per_client_address_space, setup,
					    h_teardown),
	    cmocka_unit_test_setup_teardown(test_reg_limits_bytes_half_a_uid, setup, h_teardown),
	    cmocka_unit_test(test_reg_limits_ranges_half_a_uid),
	    cmocka_unit_test(test_reg_limits_ranges_default),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
