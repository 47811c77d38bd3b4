/*
 * test_harness_ports.c - the harness's h_free_port: the ports it hands out
 * are free, and 1024 calls in a row hand out 1024 different ports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define CALLS 1024

static void test_harness_ports_distinct_and_free(void **state)
{
	static unsigned char seen[65536];
	struct sockaddr_in sa = {.sin_family = AF_INET};
	int port, fd;

	(void)state;
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < CALLS; i++) {
		port = h_free_port();
		H_ASSERT(port > 0 && port < 65536);
		H_ASSERT(!seen[port]);
		seen[port] = 1;
	}
	/* The last one is free: a listener can bind it. */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	H_ASSERT(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	H_ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
}

LUNAR_TEST_MAIN(NULL, h_teardown, test_harness_ports_distinct_and_free)
