/*
 * test_listen.h - a TCP socket listening on a free loopback port, for unit
 * tests that play a peer on the wire. Include after cmocka.h.
 */
#ifndef LUNAR_TESTS_UNIT_TEST_LISTEN_H
#define LUNAR_TESTS_UNIT_TEST_LISTEN_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

/* The listening socket (backlog connections queued); its port in *port. */
static inline int test_listen_loopback(int backlog, uint16_t *port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(lfd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, backlog), 0);
	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	*port = ntohs(sa.sin_port);
	return lfd;
}

#endif /* LUNAR_TESTS_UNIT_TEST_LISTEN_H */
