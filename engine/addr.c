/*
 * addr.c - endpoints as text ("host:port", "[v6]:port") and as socket
 * addresses, plus the socket options every data connection gets.
 */
#include "eng_int.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "resolve.h"

/* Split "host:port" / "[host]:port" into host (copied into buf) and port. */
static int split_endpoint(const char *endpoint, char *host, size_t cap, const char **port)
{
	const char *colon = strrchr(endpoint, ':');
	const char *h = endpoint;
	size_t hlen;

	if (!colon || !colon[1])
		return -EINVAL;
	hlen = (size_t)(colon - endpoint);
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (!hlen || hlen >= cap)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*port = colon + 1;
	return 0;
}

int eng_addr_resolve(const char *endpoint, uint64_t deadline_ns, struct sockaddr_storage *sa,
		     socklen_t *len)
{
	const struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res;
	char host[ENG_ENDPOINT_MAX];
	const char *port;
	int rc;

	rc = split_endpoint(endpoint, host, sizeof(host), &port);
	if (rc)
		return rc;
	rc = lc_resolve(host, port, &hints,
			deadline_ns == ENG_NO_DEADLINE ? LC_NO_DEADLINE : deadline_ns / 1000000,
			&res);
	if (rc) {
		LC_DEBUG(ENG_LOG, "cannot resolve %s: %s", endpoint, strerror(-rc));
		return rc;
	}
	memcpy(sa, res->ai_addr, res->ai_addrlen);
	*len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int eng_addr_format(char *buf, size_t cap, const char *host, uint16_t port)
{
	const char *fmt = strchr(host, ':') ? "[%s]:%u" : "%s:%u";
	int n = snprintf(buf, cap, fmt, host, (unsigned)port);

	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int eng_sock_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		return -errno;
	return 0;
}

void eng_sock_bufs(int fd)
{
	int buf = ENG_SOCK_BUF;

	/* Best effort: the kernel caps them at net.core.[rw]mem_max. */
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}
