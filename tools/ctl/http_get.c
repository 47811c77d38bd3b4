/*
 * http_get.c - one blocking HTTP/1.0 GET with a deadline; see http_get.h.
 * Non-blocking socket plus poll() so that connect, send and every read
 * share one deadline; the reply is read until the server closes or its
 * Content-Length is met, within fixed bounds on head and body.
 */
#include "http_get.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"

#define HOST_MAX 256

struct addr {
	char host[HOST_MAX];
	char port[12];
};

/* Split addr into host and port; the port defaults to default_port. */
static int addr_split(const char *addr, unsigned default_port, struct addr *a, char *err,
		      size_t cap)
{
	const char *h = addr, *colon, *end;
	size_t hl;
	char *stop;
	unsigned long port = default_port;

	if (!strncmp(h, "http://", 7))
		h += 7;
	else if (strstr(h, "://"))
		return snprintf(err, cap, "'%s': only http:// addresses", addr), -EINVAL;
	end = h + strlen(h);
	if (end > h && end[-1] == '/')
		end--;
	if (*h == '[') {
		colon = memchr(h, ']', (size_t)(end - h));
		if (!colon || (colon + 1 < end && colon[1] != ':'))
			return snprintf(err, cap, "'%s': bad [address]:port", addr), -EINVAL;
		h++;
		hl = (size_t)(colon - h);
		colon = colon + 1 < end ? colon + 1 : NULL;
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		/* Two colons or more without brackets: a bare IPv6 address. */
		if (colon && memchr(colon + 1, ':', (size_t)(end - colon - 1)))
			colon = NULL;
		hl = colon ? (size_t)(colon - h) : (size_t)(end - h);
	}
	if (hl == 0 || hl >= HOST_MAX)
		return snprintf(err, cap, "'%s': no host (want HOST:PORT)", addr), -EINVAL;
	if (colon) {
		errno = 0;
		port = strtoul(colon + 1, &stop, 10);
		if (colon + 1 == stop || stop != end || errno || port == 0 || port > 65535)
			return snprintf(err, cap, "'%s': bad port (want HOST:PORT)", addr), -EINVAL;
	}
	memcpy(a->host, h, hl);
	a->host[hl] = '\0';
	snprintf(a->port, sizeof(a->port), "%lu", port);
	return 0;
}

int ctl_http_addr_ok(const char *addr, char *err, size_t cap)
{
	struct addr a;

	return addr_split(addr, 1, &a, err, cap);
}

static int remaining_ms(uint64_t deadline)
{
	uint64_t now = lc_now_ms();

	return now >= deadline ? 0 : (int)(deadline - now < INT32_MAX ? deadline - now : INT32_MAX);
}

/* Wait for events on fd until the deadline: 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
	struct pollfd pfd = {.fd = fd, .events = events};
	int rc, ms;

	for (;;) {
		ms = remaining_ms(deadline);
		if (ms == 0)
			return -ETIMEDOUT;
		rc = poll(&pfd, 1, ms);
		if (rc > 0)
			return 0;
		if (rc < 0 && errno != EINTR)
			return -errno;
	}
}

static int connect_one(const struct addrinfo *ai, uint64_t deadline)
{
	int fd =
	    socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	int rc = 0;
	socklen_t sl = sizeof(rc);

	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		rc = -errno;
		goto err_close;
	}
	rc = wait_fd(fd, POLLOUT, deadline);
	if (rc)
		goto err_close;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &rc, &sl) < 0)
		rc = errno;
	if (rc == 0)
		return fd;
	rc = -rc;
err_close:
	close(fd);
	return rc;
}

/* A connected socket to a, or a negative errno with r->err set. */
static int dial(const struct addr *a, uint64_t deadline, struct ctl_http_resp *r)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res, *ai;
	int fd = -EHOSTUNREACH, gai;

	gai = getaddrinfo(a->host, a->port, &hints, &res);
	if (gai) {
		snprintf(r->err, sizeof(r->err), "cannot resolve '%.100s': %s", a->host,
			 gai_strerror(gai));
		return -EHOSTUNREACH;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = connect_one(ai, deadline);
		if (fd >= 0)
			break;
	}
	freeaddrinfo(res);
	if (fd < 0)
		snprintf(r->err, sizeof(r->err), "%s", strerror(-fd));
	return fd;
}

static int send_all(int fd, const char *p, size_t n, uint64_t deadline)
{
	ssize_t w;
	int rc;

	while (n) {
		w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			if ((rc = wait_fd(fd, POLLOUT, deadline)))
				return rc;
			continue;
		}
		if (w < 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Parse the NUL-terminated head: status line and the headers we use.
 * *clen is the Content-Length, or -1 when there is none. */
static int parse_head(char *head, struct ctl_http_resp *r, int64_t *clen)
{
	char *line, *save = NULL, *v, *stop;
	unsigned long long n;

	line = strtok_r(head, "\r\n", &save);
	if (!line || strncmp(line, "HTTP/1.", 7) || !(v = strchr(line, ' ')))
		return snprintf(r->err, sizeof(r->err), "not an HTTP reply"), -EPROTO;
	while (*v == ' ')
		v++;
	if (v[0] < '1' || v[0] > '5' || v[1] < '0' || v[1] > '9' || v[2] < '0' || v[2] > '9' ||
	    (v[3] && v[3] != ' '))
		return snprintf(r->err, sizeof(r->err), "bad HTTP status line"), -EPROTO;
	r->status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
	*clen = -1;
	while ((line = strtok_r(NULL, "\r\n", &save))) {
		if (!(v = strchr(line, ':')))
			continue;
		*v++ = '\0';
		v += strspn(v, " \t");
		if (!strcasecmp(line, "content-length")) {
			errno = 0;
			n = strtoull(v, &stop, 10);
			stop += strspn(stop, " \t");
			if (*v < '0' || *v > '9' || *stop || errno || n > INT64_MAX)
				return snprintf(r->err, sizeof(r->err), "bad Content-Length"),
				       -EPROTO;
			*clen = (int64_t)n;
		} else if (!strcasecmp(line, "content-type")) {
			snprintf(r->content_type, sizeof(r->content_type), "%s", v);
		} else if (!strcasecmp(line, "transfer-encoding") && strcasecmp(v, "identity")) {
			return snprintf(r->err, sizeof(r->err), "unsupported Transfer-Encoding"),
			       -EPROTO;
		}
	}
	return 0;
}

/* Where the head ends (just past its blank line) in buf[0..n), or 0. */
static size_t head_end(const char *buf, size_t n)
{
	const char *crlf = memmem(buf, n, "\r\n\r\n", 4), *lf = memmem(buf, n, "\n\n", 2);

	if (crlf && (!lf || crlf < lf))
		return (size_t)(crlf - buf) + 4;
	return lf ? (size_t)(lf - buf) + 2 : 0;
}

struct rbuf {
	char *p;
	size_t n, cap;
	size_t head; /* bytes of head once seen, else 0 */
	int64_t clen;
};

/* Read more of the reply into b; 1 at end of stream, 0, or -errno. */
static int read_some(int fd, struct rbuf *b, uint64_t deadline)
{
	size_t limit = CTL_HTTP_MAX_HEAD + (size_t)CTL_HTTP_MAX_BODY + 1;
	ssize_t got;
	char *np;
	int rc;

	if (b->n == b->cap) {
		size_t ncap = b->cap ? b->cap * 2 : 16384;

		ncap = ncap > limit ? limit : ncap;
		if (ncap <= b->n)
			return -EFBIG;
		if (!(np = realloc(b->p, ncap + 1)))
			return -ENOMEM;
		b->p = np;
		b->cap = ncap;
	}
	for (;;) {
		got = read(fd, b->p + b->n, b->cap - b->n);
		if (got >= 0)
			break;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		if ((rc = wait_fd(fd, POLLIN, deadline)))
			return rc;
	}
	b->n += (size_t)got;
	return got == 0;
}

static int read_reply(int fd, uint64_t deadline, struct ctl_http_resp *r, struct rbuf *b)
{
	int rc = 0, eof = 0;
	char saved;

	while (!eof) {
		if (b->head && b->clen >= 0 && b->n - b->head >= (uint64_t)b->clen)
			break;
		if ((eof = read_some(fd, b, deadline)) < 0)
			return eof;
		if (b->head)
			continue;
		if (!(b->head = head_end(b->p, b->n)) && b->n > CTL_HTTP_MAX_HEAD)
			return snprintf(r->err, sizeof(r->err), "reply head too long"), -EPROTO;
		if (b->head) {
			saved = b->p[b->head];
			b->p[b->head] = '\0';
			rc = parse_head(b->p, r, &b->clen);
			b->p[b->head] = saved;
			if (rc)
				return rc;
			if (b->clen > (int64_t)CTL_HTTP_MAX_BODY)
				return -EFBIG;
		}
	}
	if (!b->head)
		return snprintf(r->err, sizeof(r->err), "reply ended inside its head"), -EPROTO;
	if (b->clen >= 0 && b->n - b->head < (uint64_t)b->clen)
		return snprintf(r->err, sizeof(r->err), "reply body cut short"), -EPROTO;
	if (b->n - b->head > CTL_HTTP_MAX_BODY)
		return -EFBIG;
	r->len = b->clen >= 0 ? (size_t)b->clen : b->n - b->head;
	memmove(b->p, b->p + b->head, r->len);
	b->p[r->len] = '\0';
	r->body = b->p;
	b->p = NULL;
	return 0;
}

static int exchange(int fd, const struct addr *a, const char *target, const char *bearer,
		    uint64_t deadline, unsigned timeout_ms, struct ctl_http_resp *r)
{
	struct rbuf b = {0};
	char *req = NULL;
	int n, rc;

	n = asprintf(&req,
		     "GET %s HTTP/1.0\r\nHost: %s%s%s:%s\r\nUser-Agent: lunarctl\r\n"
		     "Accept: */*\r\n%s%s%sConnection: close\r\n\r\n",
		     target, strchr(a->host, ':') ? "[" : "", a->host,
		     strchr(a->host, ':') ? "]" : "", a->port,
		     bearer ? "Authorization: Bearer " : "", bearer ? bearer : "",
		     bearer ? "\r\n" : "");
	if (n < 0)
		return -ENOMEM;
	rc = send_all(fd, req, (size_t)n, deadline);
	explicit_bzero(req, (size_t)n); /* it may hold the token */
	free(req);
	if (rc == 0)
		rc = read_reply(fd, deadline, r, &b);
	r->answered = b.n > 0;
	free(b.p);
	if (rc == -EFBIG)
		snprintf(r->err, sizeof(r->err), "reply larger than %u MiB",
			 CTL_HTTP_MAX_BODY >> 20);
	else if (rc == -ETIMEDOUT)
		snprintf(r->err, sizeof(r->err), "no whole reply within %u ms", timeout_ms);
	else if (rc && !r->err[0])
		snprintf(r->err, sizeof(r->err), "%s", strerror(-rc));
	return rc;
}

int ctl_http_get(const char *addr, unsigned default_port, const char *target, const char *bearer,
		 unsigned timeout_ms, struct ctl_http_resp *r)
{
	uint64_t deadline = lc_now_ms() + (timeout_ms ? timeout_ms : 1);
	struct addr a;
	int fd, rc;

	memset(r, 0, sizeof(*r));
	rc = addr_split(addr, default_port, &a, r->err, sizeof(r->err));
	if (rc)
		return rc;
	snprintf(r->peer, sizeof(r->peer), "%s%s%s:%s", strchr(a.host, ':') ? "[" : "", a.host,
		 strchr(a.host, ':') ? "]" : "", a.port);
	if (strpbrk(target, " \r\n") || target[0] != '/') {
		snprintf(r->err, sizeof(r->err), "bad request target");
		return -EINVAL;
	}
	for (const char *p = bearer; p && *p; p++) {
		if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
			snprintf(r->err, sizeof(r->err), "bad bearer token");
			return -EINVAL;
		}
	}
	fd = dial(&a, deadline, r);
	if (fd < 0)
		return fd;
	r->connected = 1;
	rc = exchange(fd, &a, target, bearer, deadline, timeout_ms, r);
	close(fd);
	return rc;
}

void ctl_http_resp_fini(struct ctl_http_resp *r)
{
	free(r->body);
	r->body = NULL;
	r->len = 0;
}

char *ctl_url_encode(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out, *o;

	if (n > (SIZE_MAX - 1) / 3)
		return NULL;
	o = out = malloc(n * 3 + 1);
	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
}
