/*
 * slow_link.h - a TCP forwarder on a loopback port that holds every answer
 * for a fixed time: a slow server (an etcd whose disk or network lags)
 * played in front of a real one. Connections are forwarded as they come,
 * each on a thread of its own; the client's bytes go on at once, and the
 * first of the server's bytes after them wait delay_ms (the rest of an
 * answer follows as it comes); up to SL_CONNS_MAX connections, later ones
 * wait unanswered. sl_stop ends and reaps every thread. Static, for one
 * test at a time.
 */
#ifndef LUNAR_TESTS_INTEGRATION_SLOW_LINK_H
#define LUNAR_TESTS_INTEGRATION_SLOW_LINK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define SL_CONNS_MAX 32

struct slow_link {
	int lfd;
	int port;	   /* where to connect: 127.0.0.1:port */
	int to;		   /* the server's loopback port */
	unsigned delay_ms; /* each server chunk is held this long */
	atomic_int stop;
	pthread_t acceptor;
	pthread_t conn[SL_CONNS_MAX];
	int fds[SL_CONNS_MAX][2]; /* client, server */
	int nconn;
	int up; /* started, not yet stopped */
};

/* Copy what is waiting on from to dest (after delay_ms if held); 0, or -1
 * when from ended or either side failed. */
static inline int sl_pass(int from, int dest, unsigned delay_ms)
{
	char buf[65536];
	ssize_t n = read(from, buf, sizeof(buf)), off = 0;

	if (n <= 0)
		return -1;
	if (delay_ms)
		h_sleep_ms(delay_ms);
	while (off < n) {
		ssize_t w = write(dest, buf + off, (size_t)(n - off));

		if (w <= 0)
			return -1;
		off += w;
	}
	return 0;
}

struct sl_conn_arg {
	struct slow_link *l;
	int i;
};

static inline void *sl_conn_main(void *arg)
{
	struct sl_conn_arg a = *(struct sl_conn_arg *)arg;
	int *fds = a.l->fds[a.i], asked = 0;

	free(arg);
	while (!atomic_load(&a.l->stop)) {
		struct pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};

		if (poll(p, 2, 100) < 0)
			break;
		if (p[0].revents && sl_pass(fds[0], fds[1], 0))
			break;
		asked |= p[0].revents != 0;
		if (p[1].revents && sl_pass(fds[1], fds[0], asked ? a.l->delay_ms : 0))
			break;
		if (p[1].revents)
			asked = 0;
	}
	close(fds[0]);
	close(fds[1]);
	return NULL;
}

static inline int sl_dial(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static inline void *sl_accept_main(void *arg)
{
	struct slow_link *l = arg;

	while (!atomic_load(&l->stop) && l->nconn < SL_CONNS_MAX) {
		struct pollfd p = {l->lfd, POLLIN, 0};
		struct sl_conn_arg *a;
		int c, s;

		if (poll(&p, 1, 100) <= 0)
			continue;
		if ((c = accept4(l->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		s = sl_dial(l->to);
		a = malloc(sizeof(*a));
		if (s < 0 || !a) {
			close(c);
			if (s >= 0)
				close(s);
			free(a);
			continue;
		}
		*a = (struct sl_conn_arg){l, l->nconn};
		l->fds[l->nconn][0] = c;
		l->fds[l->nconn][1] = s;
		if (pthread_create(&l->conn[l->nconn], NULL, sl_conn_main, a)) {
			close(c);
			close(s);
			free(a);
			continue;
		}
		l->nconn++;
	}
	return NULL;
}

/* sl_start - forward a new loopback port to 127.0.0.1:to, every answer
 * held delay_ms. 0 (l->port set) or -1. */
static inline int sl_start(struct slow_link *l, int to, unsigned delay_ms)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t len = sizeof(sa);

	*l = (struct slow_link){.to = to, .delay_ms = delay_ms};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->lfd < 0 || bind(l->lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(l->lfd, 16) ||
	    getsockname(l->lfd, (struct sockaddr *)&sa, &len) ||
	    pthread_create(&l->acceptor, NULL, sl_accept_main, l)) {
		if (l->lfd >= 0)
			close(l->lfd);
		return -1;
	}
	l->port = ntohs(sa.sin_port);
	l->up = 1;
	return 0;
}

/* sl_stop - stop forwarding: every connection closed, every thread joined
 * (within about delay_ms + 100 ms). A link not up: nothing to do. */
static inline void sl_stop(struct slow_link *l)
{
	if (!l->up)
		return;
	l->up = 0;
	atomic_store(&l->stop, 1);
	pthread_join(l->acceptor, NULL);
	for (int i = 0; i < l->nconn; i++)
		pthread_join(l->conn[i], NULL);
	close(l->lfd);
}

#endif /* LUNAR_TESTS_INTEGRATION_SLOW_LINK_H */
