/*
 * http.c - the embedded HTTP server: a listener thread that polls the
 * listening socket and a stop pipe, and a thread for each accepted
 * connection (at most HTTP_MAX_CONNS at once) that serves it to the end:
 * read head, parse, call the handler (one call at a time), write, close.
 * Every wait is a poll on the connection and the stop pipe with a deadline,
 * so a stalled client holds only its own thread, for at most
 * LC_HTTP_TIMEOUT_MS, and stop is prompt.
 */
#include "http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define HTTP_LINGER_MS	  250	      /* drain the peer after an early answer */
#define HTTP_LINGER_BYTES (64 * 1024) /* ... at most this much */
#define HTTP_BACKLOG	  64
#define HTTP_MAX_CONNS	  16 /* served at once; then the slowest sender gives way */
#define HTTP_CT_DEFAULT	  "text/plain; charset=utf-8"

struct lc_http {
	int lfd;
	int wake[2]; /* lc_http_stop writes one byte; it is never drained */
	uint16_t port;
	lc_http_handler_fn fn;
	void *arg;
	pthread_t thread;
	int64_t last_warn_ms;	 /* of accept failures, to rate-limit them */
	pthread_mutex_t lock;	 /* live, conns, stopping */
	pthread_cond_t done;	 /* a connection thread ended, or stopping */
	unsigned live;		 /* connection threads running */
	struct http_conn *conns; /* theirs */
	bool stopping;
	pthread_mutex_t fn_lock; /* one handler call at a time */
};

/* One accepted connection, owned by its thread. */
struct http_conn {
	struct lc_http *h;
	int fd;
	struct http_conn *next; /* in h->conns */
	/* Under h->lock: when it began to read its head (0 once read, and
	 * before fd may close), and whether the listener took its slot. */
	int64_t head_since_ms;
	bool evicted;
	struct sockaddr_storage peer; /* from accept */
	char head[LC_HTTP_MAX_HEAD + 1];
	char auth[LC_HTTP_MAX_AUTH + 1]; /* the Authorization value */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for ev on fd until deadline: 0, -ETIMEDOUT, -ECANCELED (stopping),
 * or -ECONNRESET when the socket reports an error or hang-up alone. */
static int http_wait(struct lc_http *h, int fd, short ev, int64_t deadline)
{
	for (;;) {
		struct pollfd pfd[2] = {{.fd = fd, .events = ev},
					{.fd = h->wake[0], .events = POLLIN}};
		int64_t left = deadline - now_ms();
		int n;

		if (left <= 0)
			return -ETIMEDOUT;
		n = poll(pfd, 2, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (pfd[1].revents)
			return -ECANCELED;
		if (pfd[0].revents & ev)
			return 0;
		if (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL))
			return -ECONNRESET;
	}
}

/* Where the head ends ("\r\n\r\n", or bare "\n\n" from sloppy clients), 0 if not yet. */
static size_t head_end(const char *buf, size_t len, size_t from)
{
	for (size_t i = from; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i >= 1 && buf[i - 1] == '\n')
			return i + 1;
		if (i >= 2 && buf[i - 1] == '\r' && buf[i - 2] == '\n')
			return i + 1;
	}
	return 0;
}

/* Read until the end of the head: its length, -E2BIG (too long), -ETIMEDOUT,
 * -ECANCELED, or another -errno (the peer went away). */
static ssize_t read_head(struct lc_http *h, int fd, char *head, int64_t deadline)
{
	size_t len = 0, end;

	for (;;) {
		ssize_t n;

		if (len == LC_HTTP_MAX_HEAD)
			return -E2BIG;
		n = recv(fd, head + len, LC_HTTP_MAX_HEAD - len, MSG_DONTWAIT);
		if (n > 0) {
			size_t from = len >= 3 ? len - 3 : 0;

			len += (size_t)n;
			end = head_end(head, len, from);
			if (end) {
				head[end] = '\0';
				return (ssize_t)end;
			}
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -errno;
		n = http_wait(h, fd, POLLIN, deadline);
		if (n < 0)
			return n;
	}
}

/* Send every byte of iov (modified) before deadline: 0 or -errno. */
static int send_all(struct lc_http *h, int fd, struct iovec *iov, int cnt, int64_t deadline)
{
	while (cnt > 0) {
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)cnt};
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return -errno;
			n = http_wait(h, fd, POLLOUT, deadline);
			if (n < 0)
				return (int)n;
			continue;
		}
		for (; cnt > 0 && (size_t)n >= iov->iov_len; cnt--, iov++)
			n -= (ssize_t)iov->iov_len;
		if (cnt > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 304: return "Not Modified";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 503: return "Service Unavailable";
	case 505: return "HTTP Version Not Supported";
	default: return status < 400 ? "OK" : "Error";
	}
}

/* One response; HEAD sends the headers for the body without the body. */
static int send_reply(struct lc_http *h, int fd, int status, const char *ctype, const char *extra,
		      const char *body, size_t len, int head_only)
{
	char hdr[512];
	struct iovec iov[2];
	int n;

	n = snprintf(hdr, sizeof(hdr),
		     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
		     "%sConnection: close\r\n\r\n",
		     status, reason(status), ctype, len, extra);
	if (n < 0 || (size_t)n >= sizeof(hdr))
		return -EOVERFLOW;
	iov[0] = (struct iovec){.iov_base = hdr, .iov_len = (size_t)n};
	iov[1] = (struct iovec){.iov_base = (void *)body, .iov_len = head_only ? 0 : len};
	return send_all(h, fd, iov, 2, now_ms() + LC_HTTP_TIMEOUT_MS);
}

static int send_error(struct lc_http *h, int fd, int status, const char *extra)
{
	char body[64];
	int n = snprintf(body, sizeof(body), "%d %s\n", status, reason(status));

	return send_reply(h, fd, status, HTTP_CT_DEFAULT, extra, body, (size_t)n, 0);
}

/*
 * Close gracefully: after an answer sent before the request was read in
 * full, closing at once would make the kernel reset the connection and the
 * client could lose the answer. Half-close, then drain for a moment.
 */
static void linger_close(struct lc_http *h, int fd)
{
	int64_t deadline = now_ms() + HTTP_LINGER_MS;
	size_t drained = 0;
	char sink[4096];

	shutdown(fd, SHUT_WR);
	while (drained < HTTP_LINGER_BYTES) {
		ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);

		if (n > 0) {
			drained += (size_t)n;
			continue;
		}
		if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
			break;
		if (http_wait(h, fd, POLLIN, deadline) < 0)
			break;
	}
	close(fd);
}

static int is_tchar(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/*
 * Split the request line "METHOD SP target SP HTTP/1.x" in place.
 * Returns 0, or the status to answer (400, 505).
 */
static int parse_line(char *head, size_t len, char **method, char **target)
{
	char *eol = memchr(head, '\n', len), *sp1, *sp2, *ver;

	if (memchr(head, '\0', len))
		return 400;
	if (eol > head && eol[-1] == '\r')
		eol--;
	*eol = '\0';
	sp1 = strchr(head, ' ');
	if (!sp1 || sp1 == head)
		return 400;
	*sp1 = '\0';
	for (char *p = head; *p; p++)
		if (!is_tchar((unsigned char)*p))
			return 400;
	*target = sp1 + 1;
	sp2 = strchr(*target, ' ');
	if (!sp2 || **target != '/')
		return 400;
	*sp2 = '\0';
	for (char *p = *target; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p == 0x7f)
			return 400;
	ver = sp2 + 1;
	if (strncmp(ver, "HTTP/", 5) || strlen(ver) != 8 || ver[6] != '.' || ver[5] < '0' ||
	    ver[5] > '9' || ver[7] < '0' || ver[7] > '9')
		return 400;
	if (ver[5] != '1')
		return 505;
	*method = head;
	return 0;
}

/* Whether ss is a loopback address, and its text into buf. */
static int peer_describe(const struct sockaddr_storage *ss, char *buf, size_t cap)
{
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

	snprintf(buf, cap, "?");
	if (ss->ss_family == AF_INET) {
		inet_ntop(AF_INET, &s4->sin_addr, buf, (socklen_t)cap);
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	}
	if (ss->ss_family != AF_INET6)
		return 0; /* nothing else is accepted on a TCP listener */
	inet_ntop(AF_INET6, &s6->sin6_addr, buf, (socklen_t)cap);
	if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
		return 1;
	return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127;
}

/* The handler's answer, checked; the body is freed here. */
static int dispatch(struct lc_http *h, int fd, struct lc_http_req *req, char *target)
{
	struct lc_http_reply rep = {.status = 200, .content_type = HTTP_CT_DEFAULT};
	char *query = strchr(target, '?');
	const char *ctype;
	int rc;

	if (query)
		*query++ = '\0';
	req->path = target;
	req->query = query ? query : "";
	pthread_mutex_lock(&h->fn_lock);
	rc = h->fn(h->arg, req, &rep);
	pthread_mutex_unlock(&h->fn_lock);
	if (rc > 0) {
		free(rep.body);
		return send_error(h, fd, 404, "");
	}
	if (rc < 0 || rep.status < 100 || rep.status > 599 || (rep.len && !rep.body)) {
		free(rep.body);
		return send_error(h, fd, 500, "");
	}
	ctype = rep.content_type;
	if (!ctype || strpbrk(ctype, "\r\n") || strlen(ctype) > 128)
		ctype = HTTP_CT_DEFAULT;
	rc = send_reply(h, fd, rep.status, ctype, "", rep.body, rep.len,
			!strcmp(req->method, "HEAD"));
	free(rep.body);
	return rc;
}

/* One connection, from accept to close. */
static void serve(struct http_conn *c)
{
	struct lc_http *h = c->h;
	int fd = c->fd;
	ssize_t len = read_head(h, fd, c->head, now_ms() + LC_HTTP_TIMEOUT_MS);
	struct lc_http_req req = {0};
	char *method = NULL, *target = NULL, *hdrs;
	bool evicted;
	int status, n;

	pthread_mutex_lock(&h->lock);
	c->head_since_ms = 0;
	evicted = c->evicted;
	pthread_mutex_unlock(&h->lock);
	if (evicted)
		goto out_close;
	if (len == -E2BIG) {
		send_error(h, fd, 431, "");
		goto out_linger;
	}
	if (len == -ETIMEDOUT) {
		send_error(h, fd, 408, "");
		goto out_linger;
	}
	if (len < 0) /* gone, or stopping */
		goto out_close;
	hdrs = memchr(c->head, '\n', (size_t)len) + 1; /* the head ends with one */
	status = parse_line(c->head, (size_t)len, &method, &target);
	if (status) {
		send_error(h, fd, status, "");
		goto out_linger;
	}
	if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
		send_error(h, fd, 405, "Allow: GET, HEAD\r\n");
		goto out_linger;
	}
	n = lc_http_header_get(hdrs, "Authorization", c->auth, sizeof(c->auth));
	if (n < 0 && n != -ENOENT) {
		send_error(h, fd, n == -E2BIG ? 431 : 400, "");
		goto out_linger;
	}
	req.method = method;
	req.authorization = n >= 0 ? c->auth : NULL;
	req.peer_loopback = peer_describe(&c->peer, req.peer, sizeof(req.peer));
	dispatch(h, fd, &req, target);
out_linger:
	linger_close(h, fd);
	return;
out_close:
	close(fd);
}

/* Out of descriptors, memory or threads, say: back off rather than spin,
 * log rarely. */
static void back_off(struct lc_http *h, const char *what, int err)
{
	struct pollfd pfd = {.fd = h->wake[0], .events = POLLIN};
	int64_t now = now_ms();

	if (now - h->last_warn_ms >= 10000) {
		LC_WARN("http", "%s on port %u: %s", what, (unsigned)h->port, strerror(err));
		h->last_warn_ms = now;
	}
	poll(&pfd, 1, 100);
}

static void *conn_main(void *p)
{
	struct http_conn *c = p;
	struct lc_http *h = c->h;

	serve(c);
	pthread_mutex_lock(&h->lock);
	for (struct http_conn **pp = &h->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	free(c);
	h->live--;
	pthread_cond_broadcast(&h->done);
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* Serve fd on a thread of its own (it inherits the listener's blocked
 * signals); on failure, close it unanswered. */
static void conn_start(struct lc_http *h, int fd, const struct sockaddr_storage *peer)
{
	struct http_conn *c = malloc(sizeof(*c));
	pthread_attr_t attr;
	pthread_t t;
	int rc = c ? pthread_attr_init(&attr) : ENOMEM;

	if (!rc) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		*c = (struct http_conn){.h = h, .fd = fd, .head_since_ms = now_ms()};
		c->peer = *peer;
		pthread_mutex_lock(&h->lock);
		h->live++;
		c->next = h->conns;
		h->conns = c;
		pthread_mutex_unlock(&h->lock);
		rc = pthread_create(&t, &attr, conn_main, c);
		pthread_attr_destroy(&attr);
		if (rc) {
			pthread_mutex_lock(&h->lock);
			h->live--;
			pthread_mutex_unlock(&h->lock);
		}
	}
	if (rc) {
		free(c);
		close(fd);
		back_off(h, "no thread for a connection", rc);
	}
}

/* Shut down the connection that has waited longest for the rest of its
 * head (unless one is already on its way out), so that sockets that send
 * nothing cannot keep a waiting client out. h->lock held. */
static void evict_slowest(struct lc_http *h)
{
	struct http_conn *slow = NULL;

	for (struct http_conn *c = h->conns; c; c = c->next) {
		if (c->evicted)
			return;
		if (c->head_since_ms && (!slow || c->head_since_ms < slow->head_since_ms))
			slow = c;
	}
	if (!slow)
		return; /* every one has its head: wait for one to finish */
	slow->evicted = true;
	shutdown(slow->fd, SHUT_RDWR); /* its thread sees the end of input */
}

/* A connection waits: make room for it, wait until fewer than
 * HTTP_MAX_CONNS connections are served. 0, or -1 when stopping. */
static int wait_for_room(struct lc_http *h)
{
	int stopping;

	pthread_mutex_lock(&h->lock);
	while (h->live >= HTTP_MAX_CONNS && !h->stopping) {
		evict_slowest(h);
		pthread_cond_wait(&h->done, &h->lock);
	}
	stopping = h->stopping;
	pthread_mutex_unlock(&h->lock);
	return stopping ? -1 : 0;
}

static void *http_main(void *p)
{
	struct lc_http *h = p;

	for (;;) {
		struct pollfd pfd[2] = {{.fd = h->lfd, .events = POLLIN},
					{.fd = h->wake[0], .events = POLLIN}};
		struct sockaddr_storage peer = {0};
		socklen_t plen = sizeof(peer);
		int fd;

		if (poll(pfd, 2, -1) < 0) {
			if (errno != EINTR)
				poll(&pfd[1], 1, 100);
			continue;
		}
		if (pfd[1].revents || wait_for_room(h))
			break;
		fd = accept4(h->lfd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
		    errno != ECONNABORTED)
			back_off(h, "accept", errno);
		if (fd < 0)
			continue;
		conn_start(h, fd, &peer);
	}
	return NULL;
}

/* A listening socket on host:port: the fd or -errno. */
static int http_listen(const char *host, uint16_t port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
				 .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	char serv[8];
	int rc, fd = -1, one = 1;

	snprintf(serv, sizeof(serv), "%u", (unsigned)port);
	rc = getaddrinfo(host && *host ? host : NULL, serv, &hints, &res);
	if (rc)
		return rc == EAI_SYSTEM ? -errno : rc == EAI_MEMORY ? -ENOMEM : -EADDRNOTAVAIL;
	rc = -EADDRNOTAVAIL;
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
			    ai->ai_protocol);
		if (fd < 0) {
			rc = -errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, HTTP_BACKLOG) == 0)
			break;
		rc = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd >= 0 ? fd : rc;
}

static int bound_port(int fd, uint16_t *port)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &sl))
		return -errno;
	if (ss.ss_family == AF_INET)
		*port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
	else
		*port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return 0;
}

static void http_free(struct lc_http *h)
{
	pthread_mutex_destroy(&h->fn_lock);
	pthread_cond_destroy(&h->done);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

int lc_http_start(const char *host, uint16_t port, lc_http_handler_fn fn, void *arg,
		  struct lc_http **out)
{
	struct lc_http *h;
	sigset_t all, old;
	int rc;

	if (!fn || !out)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->fn = fn;
	h->arg = arg;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->done, NULL);
	pthread_mutex_init(&h->fn_lock, NULL);
	h->lfd = http_listen(host, port);
	if (h->lfd < 0) {
		rc = h->lfd;
		goto err_free;
	}
	rc = bound_port(h->lfd, &h->port);
	if (rc)
		goto err_close;
	if (pipe2(h->wake, O_CLOEXEC | O_NONBLOCK)) {
		rc = -errno;
		goto err_close;
	}
	/* The thread starts with every signal blocked: they belong to the daemon. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = -pthread_create(&h->thread, NULL, http_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		goto err_pipe;
	pthread_setname_np(h->thread, "lc-http");
	*out = h;
	return 0;
err_pipe:
	close(h->wake[0]);
	close(h->wake[1]);
err_close:
	close(h->lfd);
err_free:
	http_free(h);
	return rc;
}

uint16_t lc_http_port(const struct lc_http *h)
{
	return h->port;
}

void lc_http_stop(struct lc_http *h)
{
	ssize_t n;

	if (!h)
		return;
	/* Every wait of every thread polls the pipe: they all end promptly. */
	do
		n = write(h->wake[1], "x", 1);
	while (n < 0 && errno == EINTR);
	pthread_mutex_lock(&h->lock);
	h->stopping = true;
	pthread_cond_broadcast(&h->done);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_mutex_lock(&h->lock);
	while (h->live)
		pthread_cond_wait(&h->done, &h->lock);
	pthread_mutex_unlock(&h->lock);
	close(h->wake[0]);
	close(h->wake[1]);
	close(h->lfd);
	http_free(h);
}

/* Room for extra more bytes and a NUL: 0 or -ENOMEM. */
static int reply_reserve(struct lc_http_reply *rep, size_t extra)
{
	size_t cap = rep->cap > 256 ? rep->cap : 256;
	char *b;

	if (rep->body && rep->len + extra < rep->cap)
		return 0;
	if (extra > SIZE_MAX / 4 - rep->len)
		return -ENOMEM;
	while (cap <= rep->len + extra)
		cap *= 2;
	b = realloc(rep->body, cap);
	if (!b)
		return -ENOMEM;
	rep->body = b;
	rep->cap = cap;
	return 0;
}

int lc_http_reply_append(struct lc_http_reply *rep, const void *data, size_t len)
{
	if (reply_reserve(rep, len))
		return -ENOMEM;
	if (len)
		memcpy(rep->body + rep->len, data, len);
	rep->len += len;
	rep->body[rep->len] = '\0';
	return 0;
}

int lc_http_reply_printf(struct lc_http_reply *rep, const char *fmt, ...)
{
	char small[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if ((size_t)n < sizeof(small))
		return lc_http_reply_append(rep, small, (size_t)n);
	/* Too long for the stack: make room, then format again in place. */
	if (reply_reserve(rep, (size_t)n))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(rep->body + rep->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	rep->len += (size_t)n;
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decode one character of a query component at *p (advanced): the byte, or
 * -1 for a bad escape or an escaped NUL. */
static int query_char(const char **p)
{
	const char *s = *p;
	int hi, lo;

	if (*s == '+') {
		*p = s + 1;
		return ' ';
	}
	if (*s != '%') {
		*p = s + 1;
		return (unsigned char)*s;
	}
	hi = hexval(s[1]);
	lo = hi < 0 ? -1 : hexval(s[2]);
	if (lo < 0 || (hi | lo) == 0)
		return -1;
	*p = s + 3;
	return hi << 4 | lo;
}

/* Whether the component [p, end) decodes to name. */
static int query_key_is(const char *p, const char *end, const char *name)
{
	while (p < end) {
		int c = query_char(&p);

		if (c < 0 || p > end || c != (unsigned char)*name++)
			return 0;
	}
	return *name == '\0';
}

int lc_http_query_get(const char *query, const char *name, char *buf, size_t cap)
{
	const char *seg = query;

	while (seg && *seg) {
		const char *end = seg + strcspn(seg, "&");
		const char *eq = memchr(seg, '=', (size_t)(end - seg));
		const char *p = eq ? eq + 1 : end;
		size_t n = 0;

		if (!query_key_is(seg, eq ? eq : end, name)) {
			seg = *end ? end + 1 : NULL;
			continue;
		}
		while (p < end) {
			int c = query_char(&p);

			if (c < 0 || p > end)
				return -EINVAL;
			if (n + 1 >= cap)
				return -ENOSPC;
			buf[n++] = (char)c;
		}
		if (cap == 0)
			return -ENOSPC;
		buf[n] = '\0';
		return (int)n;
	}
	return -ENOENT;
}

/* Whether the line [p, eol) is a header called name; *val then points past
 * the colon. -EINVAL when it is one with a blank before the colon. */
static int header_is(const char *p, const char *eol, const char *name, const char **val)
{
	size_t n = strlen(name);
	const char *q = p + n;

	if ((size_t)(eol - p) <= n || strncasecmp(p, name, n))
		return 0;
	if (*q == ':') {
		*val = q + 1;
		return 1;
	}
	while (q < eol && (*q == ' ' || *q == '\t'))
		q++;
	return q < eol && *q == ':' ? -EINVAL : 0; /* RFC 9112 5.1: refuse it */
}

int lc_http_header_get(const char *hdrs, const char *name, char *buf, size_t cap)
{
	const char *p = hdrs, *val = NULL, *vend = NULL;
	int prev_ours = 0;

	while (*p) {
		const char *eol = p + strcspn(p, "\n"), *end = eol, *v;
		int ours;

		if (end > p && end[-1] == '\r')
			end--;
		if (end == p)
			break; /* the blank line: end of the head */
		if (*p == ' ' || *p == '\t') {
			if (prev_ours) /* obs-fold: our value would go on here */
				return -EINVAL;
			p = *eol ? eol + 1 : eol;
			continue;
		}
		ours = header_is(p, end, name, &v);
		if (ours < 0)
			return ours;
		prev_ours = ours;
		if (ours) {
			if (val)
				return -EEXIST;
			val = v;
			vend = end;
		}
		p = *eol ? eol + 1 : eol;
	}
	if (!val)
		return -ENOENT;
	while (val < vend && (*val == ' ' || *val == '\t'))
		val++;
	while (vend > val && (vend[-1] == ' ' || vend[-1] == '\t'))
		vend--;
	for (const char *q = val; q < vend; q++)
		if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f)
			return -EINVAL;
	if ((size_t)(vend - val) >= cap)
		return -E2BIG;
	memcpy(buf, val, (size_t)(vend - val));
	buf[vend - val] = '\0';
	return (int)(vend - val);
}
