/*
 * test_engine_v6_share.c - the data port's share of its connection slots
 * (a quarter a peer) counts an IPv6 /64 as one peer: a host is given a
 * whole /64 and may connect from any address in it, so sockets from 300
 * addresses of one /64, each beginning a request and stalling, hold 256
 * slots, not 300; a peer in another /64 is still taken. Runs in a network
 * namespace of its own (loopback, with the addresses added to it), so it
 * needs CAP_SYS_ADMIN and IPv6; without either it says why and skips (77).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/ipv6.h> /* struct in6_ifreq, after netinet/in.h */

#include "engine/engine.h"
#include "tests/unit/test_engine_util.h"

#define SEG_SIZE (1u << 20)
#define SHARE	 256 /* a quarter of the data port's 1024 slots */
#define FLOOD	 (SHARE + 44)
#define SERVER	 "fd00:1::1"
#define FLOODER	 "fd00:1::"  /* + 0x100 + i: FLOOD addresses of the server's /64 */
#define OTHER	 "fd00:2::1" /* another /64 */

/* Add addr/64 to lo; 0, or -errno. */
static int addr_add(int fd, const char *addr)
{
	struct in6_ifreq r = {.ifr6_prefixlen = 64, .ifr6_ifindex = (int)if_nametoindex("lo")};

	if (inet_pton(AF_INET6, addr, &r.ifr6_addr) != 1)
		return -EINVAL;
	return ioctl(fd, SIOCSIFADDR, &r) ? -errno : 0;
}

/* A network namespace of this process's own, lo up with the test's
 * addresses on it; NULL, or why it cannot be had. */
static const char *net_make(void)
{
	struct ifreq lo = {.ifr_name = "lo"};
	char a[INET6_ADDRSTRLEN + 8];
	int fd4, fd6, rc = 0;

	if (unshare(CLONE_NEWNET))
		return "cannot make a network namespace (needs CAP_SYS_ADMIN)";
	fd4 = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd4 < 0 || ioctl(fd4, SIOCGIFFLAGS, &lo))
		return "no loopback device in the new namespace";
	lo.ifr_flags |= IFF_UP;
	rc = ioctl(fd4, SIOCSIFFLAGS, &lo);
	close(fd4);
	if (rc)
		return "cannot bring loopback up";
	fd6 = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd6 < 0)
		return "no IPv6 here";
	rc = addr_add(fd6, SERVER) || addr_add(fd6, OTHER);
	for (int i = 0; !rc && i < FLOOD; i++) {
		snprintf(a, sizeof(a), FLOODER "%x", 0x100 + i);
		rc = addr_add(fd6, a);
	}
	close(fd6);
	return rc ? "cannot add IPv6 addresses to loopback (IPv6 disabled?)" : NULL;
}

/* A socket from address from to [SERVER]:port, one byte of a request sent
 * (the server then waits for the rest, to its I/O timeout). */
static int stalled_from(const char *from, uint16_t port)
{
	struct sockaddr_in6 me = {.sin6_family = AF_INET6};
	struct sockaddr_in6 to = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
	int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(inet_pton(AF_INET6, from, &me.sin6_addr), 1);
	assert_int_equal(inet_pton(AF_INET6, SERVER, &to.sin6_addr), 1);
	assert_int_equal(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	assert_int_equal(write(fd, "L", 1), 1);
	return fd;
}

/* How many of fds[0..n) the server holds: a refused one has EOF or a reset. */
static int held(const int *fds, int n)
{
	int h = 0;

	for (int i = 0; i < n; i++) {
		struct pollfd p = {fds[i], POLLIN, 0};

		h += poll(&p, 1, 0) == 0;
	}
	return h;
}

static void test_engine_v6_share_is_per_64(void **state)
{
	/* No stalled request times out while the test runs, even under TSan. */
	struct node b = node_create(
	    (struct eng_config){.host = SERVER, .seg_size = SEG_SIZE, .io_timeout_ms = 30000});
	const char *colon = strrchr(eng_engine_endpoint(b.e), ':');
	static int fds[FLOOD];
	uint16_t port;
	char from[INET6_ADDRSTRLEN + 8];
	int h = 0, other;

	(void)state;
	assert_non_null(colon);
	port = (uint16_t)atoi(colon + 1);
	for (int i = 0; i < FLOOD; i++) {
		snprintf(from, sizeof(from), FLOODER "%x", 0x100 + i);
		fds[i] = stalled_from(from, port);
	}
	/* Until the listener has taken them all: one not accepted yet looks held. */
	for (int t = 0; t < 100 && h != SHARE; t++) {
		usleep(100 * 1000);
		h = held(fds, FLOOD);
	}
	print_message("stalled connections from one /64 held: %d of %d\n", h, FLOOD);
	assert_int_equal(h, SHARE);
	other = stalled_from(OTHER, port);
	usleep(300 * 1000);
	assert_int_equal(held(&other, 1), 1);
	close(other);
	for (int i = 0; i < FLOOD; i++)
		close(fds[i]);
	node_stop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_engine_v6_share_is_per_64),
	};
	const char *why = net_make();

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (why) {
		printf("skipped: %s\n", why);
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
