/*
 * test_http.c - the embedded HTTP server on 127.0.0.1 with a free port: GET
 * and HEAD, 404 and 500 from the handler, 405 for other methods, query
 * decoding, oversize and garbage requests, a slow client timed out while the
 * next one is still served, and a stop that returns promptly. Also the
 * Authorization header as handlers see it (lc_http_header_get) and the
 * /admin gate's decision (auth/http_gate.h) as a pure function.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"
#include "http.h"
#include "http_gate.h"

#define BIG_BODY (1048 * 1000 + 7) /* 1048 lines of 1000 bytes, then "tail123" */

struct http_fixture {
	struct lc_http *srv;
	uint16_t port;
	int calls;
	char last_method[8];
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int handler(void *arg, const struct lc_http_req *req, struct lc_http_reply *rep)
{
	struct http_fixture *f = arg;
	const char *path = req->path, *query = req->query;
	char name[64];

	f->calls++;
	snprintf(f->last_method, sizeof(f->last_method), "%s", req->method);
	if (!strcmp(path, "/health"))
		return lc_http_reply_printf(rep, "ok\n");
	if (!strcmp(path, "/echo")) {
		int n = lc_http_query_get(query, "name", name, sizeof(name));

		rep->content_type = "application/json";
		return lc_http_reply_printf(rep, "{\"name\":\"%s\",\"rc\":%d}", n >= 0 ? name : "",
					    n);
	}
	if (!strcmp(path, "/big")) {
		for (int i = 0; i < BIG_BODY / 1000; i++)
			if (lc_http_reply_printf(rep, "%0999d\n", i))
				return -1;
		return lc_http_reply_append(rep, "tail123", BIG_BODY % 1000);
	}
	if (!strcmp(path, "/fail")) {
		lc_http_reply_printf(rep, "partial");
		return -5;
	}
	if (!strcmp(path, "/busy")) {
		rep->status = 503;
		rep->content_type = "text/plain\r\nX-Injected: 1";
		return lc_http_reply_printf(rep, "not ready\n");
	}
	if (!strcmp(path, "/whoami"))
		return lc_http_reply_printf(rep, "auth=%s loopback=%d peer=%s\n",
					    req->authorization ? req->authorization : "(none)",
					    req->peer_loopback, req->peer);
	if (!strcmp(path, "/unknown")) {
		lc_http_reply_printf(rep, "discarded");
		return 1;
	}
	rep->status = 404;
	return lc_http_reply_printf(rep, "no such page: %s\n", path);
}

static int setup(void **state)
{
	struct http_fixture *f = calloc(1, sizeof(*f));

	if (!f || lc_http_start("127.0.0.1", 0, handler, f, &f->srv)) {
		free(f);
		return -1;
	}
	f->port = lc_http_port(f->srv);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct http_fixture *f = *state;

	lc_http_stop(f->srv);
	free(f);
	return 0;
}

static int connect_port(uint16_t port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	struct timeval tv = {.tv_sec = 6};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -errno;
	}
	return fd;
}

static void send_str(int fd, const char *s, size_t len)
{
	while (len) {
		ssize_t n = send(fd, s, len, MSG_NOSIGNAL);

		assert_true(n > 0);
		s += n;
		len -= (size_t)n;
	}
}

/* Read until EOF; the response, NUL terminated, and its length. */
static size_t read_all(int fd, char *buf, size_t cap)
{
	size_t len = 0;

	for (;;) {
		ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);

		if (n <= 0)
			break;
		len += (size_t)n;
		if (len == cap - 1)
			break;
	}
	buf[len] = '\0';
	return len;
}

/* One request, the whole response in a malloc'd buffer. */
static char *roundtrip(uint16_t port, const char *req, size_t len, size_t *rlen)
{
	size_t cap = 2 * 1024 * 1024;
	char *buf = malloc(cap);
	int fd = connect_port(port);

	assert_non_null(buf);
	assert_true(fd >= 0);
	send_str(fd, req, len);
	*rlen = read_all(fd, buf, cap);
	close(fd);
	return buf;
}

static char *get(uint16_t port, const char *req)
{
	size_t len;

	return roundtrip(port, req, strlen(req), &len);
}

static int status_of(const char *resp)
{
	int st = -1;

	if (sscanf(resp, "HTTP/1.1 %d ", &st) != 1)
		return -1;
	return st;
}

static const char *body_of(const char *resp)
{
	const char *p = strstr(resp, "\r\n\r\n");

	return p ? p + 4 : NULL;
}

static void test_http_get_text(void **state)
{
	struct http_fixture *f = *state;
	char *r = get(f->port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");

	assert_int_equal(status_of(r), 200);
	assert_non_null(strstr(r, "\r\nContent-Length: 3\r\n"));
	assert_non_null(strstr(r, "\r\nConnection: close\r\n"));
	assert_non_null(strstr(r, "\r\nContent-Type: text/plain; charset=utf-8\r\n"));
	assert_string_equal(body_of(r), "ok\n");
	assert_string_equal(f->last_method, "GET");
	free(r);
	/* HTTP/1.0 and bare LF line ends work too. */
	r = get(f->port, "GET /health HTTP/1.0\n\n");
	assert_int_equal(status_of(r), 200);
	free(r);
}

static void test_http_not_found(void **state)
{
	struct http_fixture *f = *state;
	char *r = get(f->port, "GET /nope HTTP/1.1\r\n\r\n");

	assert_int_equal(status_of(r), 404);
	assert_string_equal(body_of(r), "no such page: /nope\n");
	free(r);
	/* A handler may also decline the path: a positive return. */
	r = get(f->port, "GET /unknown HTTP/1.1\r\n\r\n");
	assert_int_equal(status_of(r), 404);
	assert_null(strstr(r, "discarded"));
	free(r);
}

static void test_http_head_has_no_body(void **state)
{
	struct http_fixture *f = *state;
	char *r = get(f->port, "HEAD /health HTTP/1.1\r\n\r\n");

	assert_int_equal(status_of(r), 200);
	assert_string_equal(f->last_method, "HEAD");
	assert_non_null(strstr(r, "\r\nContent-Length: 3\r\n"));
	assert_string_equal(body_of(r), "");
	free(r);
}

static void test_http_query_parsed(void **state)
{
	struct http_fixture *f = *state;
	char *r = get(f->port, "GET /echo?x=1&name=a%20b+c%2Fd&name=z HTTP/1.1\r\n\r\n");

	assert_int_equal(status_of(r), 200);
	assert_non_null(strstr(r, "\r\nContent-Type: application/json\r\n"));
	assert_string_equal(body_of(r), "{\"name\":\"a b c/d\",\"rc\":7}");
	free(r);
	r = get(f->port, "GET /echo HTTP/1.1\r\n\r\n");
	assert_string_equal(body_of(r), "{\"name\":\"\",\"rc\":-2}");
	free(r);
}

static void test_http_query_get_decodes(void **state)
{
	char buf[8];

	(void)state;
	assert_int_equal(lc_http_query_get("a=1&b=2", "b", buf, sizeof(buf)), 1);
	assert_string_equal(buf, "2");
	assert_int_equal(lc_http_query_get("a=1&b=2", "c", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(lc_http_query_get("", "a", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(lc_http_query_get("flag&a=1", "flag", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	assert_int_equal(lc_http_query_get("k%65y=v%41", "key", buf, sizeof(buf)), 2);
	assert_string_equal(buf, "vA");
	assert_int_equal(lc_http_query_get("a=x%4", "a", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(lc_http_query_get("a=%zz", "a", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(lc_http_query_get("a=%00", "a", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(lc_http_query_get("a=1234567", "a", buf, sizeof(buf)), 7);
	assert_int_equal(lc_http_query_get("a=12345678", "a", buf, sizeof(buf)), -ENOSPC);
	assert_int_equal(lc_http_query_get("a=1", "a", buf, 0), -ENOSPC);
	assert_int_equal(lc_http_query_get("ab=1&a=2", "a", buf, sizeof(buf)), 1);
	assert_string_equal(buf, "2");
	assert_int_equal(lc_http_query_get("a=1=2", "a", buf, sizeof(buf)), 3);
	assert_string_equal(buf, "1=2");
}

static void test_http_method_not_allowed(void **state)
{
	struct http_fixture *f = *state;
	char *r = get(f->port, "POST /health HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi");

	assert_int_equal(status_of(r), 405);
	assert_non_null(strstr(r, "\r\nAllow: GET, HEAD\r\n"));
	assert_int_equal(f->calls, 0);
	free(r);
}

static void test_http_handler_status_and_errors(void **state)
{
	struct http_fixture *f = *state;
	char *r = get(f->port, "GET /fail HTTP/1.1\r\n\r\n");

	assert_int_equal(status_of(r), 500);
	assert_null(strstr(r, "partial"));
	free(r);
	r = get(f->port, "GET /busy HTTP/1.1\r\n\r\n");
	assert_int_equal(status_of(r), 503);
	assert_null(strstr(r, "X-Injected")); /* a content type with CRLF is refused */
	assert_string_equal(body_of(r), "not ready\n");
	free(r);
}

static void test_http_big_body(void **state)
{
	struct http_fixture *f = *state;
	const char *req = "GET /big HTTP/1.1\r\n\r\n";
	size_t len;
	char *r = roundtrip(f->port, req, strlen(req), &len);
	char want[64];

	snprintf(want, sizeof(want), "\r\nContent-Length: %d\r\n", BIG_BODY);
	assert_int_equal(status_of(r), 200);
	assert_non_null(strstr(r, want));
	assert_int_equal(len - (size_t)(body_of(r) - r), BIG_BODY);
	assert_memory_equal(r + len - 7, "tail123", 7);
	free(r);
}

static void test_http_oversize_head_rejected(void **state)
{
	struct http_fixture *f = *state;
	size_t len = 3 * LC_HTTP_MAX_HEAD / 2, rlen;
	char *req = malloc(len + 1);
	char *r;

	assert_non_null(req);
	memset(req, 'a', len);
	memcpy(req, "GET / HTTP/1.1\r\nX-Long: ", 24);
	memcpy(req + len - 4, "\r\n\r\n", 4);
	r = roundtrip(f->port, req, len, &rlen);
	assert_int_equal(status_of(r), 431);
	assert_int_equal(f->calls, 0);
	free(r);
	/* A request line alone that never ends is rejected the same way. */
	memset(req, '/', len);
	memcpy(req, "GET ", 4);
	r = roundtrip(f->port, req, len, &rlen);
	assert_int_equal(status_of(r), 431);
	free(r);
	free(req);
}

static void test_http_garbage_rejected(void **state)
{
	static const char *bad[] = {
	    "\r\n\r\n",
	    "GET\r\n\r\n",
	    "GET /\r\n\r\n",
	    "GET / HTTP/1.1 extra\r\n\r\n",
	    "GET health HTTP/1.1\r\n\r\n",
	    "GET /a b HTTP/1.1\r\n\r\n",
	    "G(T / HTTP/1.1\r\n\r\n",
	    "GET / FTP/1.1\r\n\r\n",
	    " GET / HTTP/1.1\r\n\r\n",
	};
	struct http_fixture *f = *state;
	unsigned char noise[600];
	size_t rlen;
	char *r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		r = get(f->port, bad[i]);
		assert_int_equal(status_of(r), 400);
		free(r);
	}
	r = get(f->port, "GET / HTTP/2.0\r\n\r\n");
	assert_int_equal(status_of(r), 505);
	free(r);
	r = roundtrip(f->port, "GET /\0x HTTP/1.1\r\n\r\n", 21, &rlen);
	assert_int_equal(status_of(r), 400);
	free(r);
	srand(7);
	for (int round = 0; round < 20; round++) {
		for (size_t i = 0; i < sizeof(noise); i++)
			noise[i] = (unsigned char)rand();
		memcpy(noise + sizeof(noise) - 4, "\r\n\r\n", 4);
		r = roundtrip(f->port, (char *)noise, sizeof(noise), &rlen);
		assert_true(rlen == 0 || status_of(r) >= 400);
		free(r);
	}
	/* A client that hangs up mid-request. */
	int fd = connect_port(f->port);

	assert_true(fd >= 0);
	send_str(fd, "GET /hea", 8);
	close(fd);
	assert_int_equal(f->calls, 0);
	r = get(f->port, "GET /health HTTP/1.1\r\n\r\n");
	assert_int_equal(status_of(r), 200);
	free(r);
}

/* Clients that stall mid-request hold only their own connections: a probe
 * is answered meanwhile (serially it would wait 10 x 2 s), and each staller
 * gets 408 after the timeout. */
/* How long a /health request took to be answered (200), in ms. */
static int64_t health_ms(uint16_t port)
{
	int64_t t0 = now_ms();
	char *r = get(port, "GET /health HTTP/1.1\r\n\r\n");
	int64_t waited = now_ms() - t0;

	assert_int_equal(status_of(r), 200);
	free(r);
	return waited;
}

static void test_http_slow_clients_do_not_delay_others(void **state)
{
	enum { SLOW = 10 };
	struct http_fixture *f = *state;
	int slow[SLOW];
	char buf[512];

	for (int i = 0; i < SLOW; i++) {
		slow[i] = connect_port(f->port);
		assert_true(slow[i] >= 0);
		send_str(slow[i], "GET /health HTTP/1.1\r\nHost: x\r\n", 31);
	}
	usleep(100 * 1000); /* the server is now reading the slow ones */
	assert_true(health_ms(f->port) < LC_HTTP_TIMEOUT_MS / 2);
	for (int i = 0; i < SLOW; i++) {
		read_all(slow[i], buf, sizeof(buf));
		assert_int_equal(status_of(buf), 408);
		close(slow[i]);
	}
	assert_int_equal(f->calls, 1);
}

/* More silent sockets than the server serves at once: a new request takes
 * the slot of the one silent longest (it waited out their 2 s timeout). */
static void test_http_silent_sockets_give_way(void **state)
{
	enum { SILENT = 20 };
	struct http_fixture *f = *state;
	int silent[SILENT];

	for (int i = 0; i < SILENT; i++) {
		silent[i] = connect_port(f->port);
		assert_true(silent[i] >= 0);
	}
	usleep(100 * 1000); /* the server holds as many as it serves */
	assert_true(health_ms(f->port) < LC_HTTP_TIMEOUT_MS / 2);
	for (int i = 0; i < SILENT; i++)
		close(silent[i]);
	assert_int_equal(f->calls, 1);
}

static void test_http_stop_joins(void **state)
{
	struct http_fixture *f = *state;
	int idle = connect_port(f->port);
	uint16_t port = f->port;
	int64_t t0;

	assert_true(idle >= 0);
	send_str(idle, "GET / HTT", 9);
	usleep(100 * 1000);
	t0 = now_ms();
	lc_http_stop(f->srv);
	f->srv = NULL;
	assert_true(now_ms() - t0 < 1000);
	close(idle);
	assert_int_equal(connect_port(port), -ECONNREFUSED);
	lc_http_stop(NULL);
}

static void test_http_start_errors(void **state)
{
	struct http_fixture *f = *state;
	struct lc_http *h = NULL;

	assert_int_equal(lc_http_start("127.0.0.1", 0, NULL, NULL, &h), -EINVAL);
	assert_int_equal(lc_http_start("127.0.0.1", 0, handler, f, NULL), -EINVAL);
	assert_int_equal(lc_http_start("127.0.0.1", f->port, handler, f, &h), -EADDRINUSE);
	assert_null(h);
}

static void test_http_reply_printf_grows(void **state)
{
	struct lc_http_reply rep = {0};
	char big[1000];

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(lc_http_reply_printf(&rep, "a%d", 1), 0);
	assert_int_equal(lc_http_reply_printf(&rep, "%s", big), 0);
	assert_int_equal(lc_http_reply_printf(&rep, "z"), 0);
	assert_int_equal(rep.len, 2 + 999 + 1);
	assert_true(rep.cap > rep.len);
	assert_memory_equal(rep.body, "a1xx", 4);
	assert_string_equal(rep.body + rep.len - 2, "xz");
	free(rep.body);
}

static void test_http_header_get_parses(void **state)
{
	char buf[16];

	(void)state;
	/* present, in any case, blanks around the value dropped */
	assert_int_equal(lc_http_header_get("Host: x\r\nAuthorization: Bearer ab\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 9);
	assert_string_equal(buf, "Bearer ab");
	assert_int_equal(lc_http_header_get("aUTHORIZATION:\t  tok \t\r\n\r\n", "Authorization",
					    buf, sizeof(buf)),
			 3);
	assert_string_equal(buf, "tok");
	assert_int_equal(
	    lc_http_header_get("authorization:x\n\n", "Authorization", buf, sizeof(buf)), 1);
	assert_int_equal(
	    lc_http_header_get("Authorization:\r\n\r\n", "Authorization", buf, sizeof(buf)), 0);
	/* absent: no headers, a longer or shorter name, one after the blank line */
	assert_int_equal(lc_http_header_get("\r\n", "Authorization", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(lc_http_header_get("", "Authorization", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(lc_http_header_get("Authorizations: a\r\nAuthorizatio: b\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 -ENOENT);
	assert_int_equal(lc_http_header_get("Host: x\r\n\r\nAuthorization: a\r\n", "Authorization",
					    buf, sizeof(buf)),
			 -ENOENT);
	assert_int_equal(lc_http_header_get("X-Authorization: a\r\nNoColon\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 -ENOENT);
	/* duplicated, even with another case or an equal value */
	assert_int_equal(lc_http_header_get("Authorization: a\r\nauthorization: a\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 -EEXIST);
	/* oversized: 15 bytes fit in 16, 16 do not */
	assert_int_equal(lc_http_header_get("Authorization: 123456789012345\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 15);
	assert_int_equal(lc_http_header_get("Authorization: 1234567890123456\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 -E2BIG);
	/* malformed: blank before the colon, folded, control bytes */
	assert_int_equal(
	    lc_http_header_get("Authorization : a\r\n\r\n", "Authorization", buf, sizeof(buf)),
	    -EINVAL);
	assert_int_equal(
	    lc_http_header_get("Authorization: a\r\n b\r\n\r\n", "Authorization", buf, sizeof(buf)),
	    -EINVAL);
	assert_int_equal(
	    lc_http_header_get("Authorization: a\rb\r\n\r\n", "Authorization", buf, sizeof(buf)),
	    -EINVAL);
	assert_int_equal(
	    lc_http_header_get("Authorization: a\x7f\r\n\r\n", "Authorization", buf, sizeof(buf)),
	    -EINVAL);
	/* a folded line under another header is not ours */
	assert_int_equal(lc_http_header_get("X: a\r\n b\r\nAuthorization: c\r\n\r\n",
					    "Authorization", buf, sizeof(buf)),
			 1);
}

static void test_http_handler_sees_authorization(void **state)
{
	struct http_fixture *f = *state;
	size_t len = LC_HTTP_MAX_AUTH + 200, rlen;
	char *req = malloc(len + 1), *r;

	r = get(f->port, "GET /whoami HTTP/1.1\r\nauthorization:  Bearer xyz \r\n\r\n");
	assert_int_equal(status_of(r), 200);
	assert_string_equal(body_of(r), "auth=Bearer xyz loopback=1 peer=127.0.0.1\n");
	free(r);
	r = get(f->port, "GET /whoami HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_string_equal(body_of(r), "auth=(none) loopback=1 peer=127.0.0.1\n");
	free(r);
	/* two of them, or a malformed one: refused before the handler */
	f->calls = 0;
	r = get(f->port, "GET /whoami HTTP/1.1\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n");
	assert_int_equal(status_of(r), 400);
	free(r);
	r = get(f->port, "GET /whoami HTTP/1.1\r\nAuthorization : a\r\n\r\n");
	assert_int_equal(status_of(r), 400);
	free(r);
	/* longer than LC_HTTP_MAX_AUTH, within the head's bound */
	assert_non_null(req);
	memset(req, 'a', len);
	memcpy(req, "GET /whoami HTTP/1.1\r\nAuthorization: ", 37);
	memcpy(req + len - 4, "\r\n\r\n", 4);
	r = roundtrip(f->port, req, len, &rlen);
	assert_int_equal(status_of(r), 431);
	free(r);
	free(req);
	assert_int_equal(f->calls, 0);
}

static void test_http_gate_verdicts(void **state)
{
	struct auth_key key, other;
	char tok[AUTH_TOKEN_CHARS + 1], wrong[AUTH_TOKEN_CHARS + 1], hdr[AUTH_TOKEN_CHARS + 32];

	(void)state;
	assert_int_equal(auth_init(), 0);
	auth_random(key.k, sizeof(key.k));
	auth_random(other.k, sizeof(other.k));
	auth_http_token(&key, tok);
	auth_http_token(&other, wrong);
	snprintf(hdr, sizeof(hdr), "Bearer %s", tok);

	/* loopback: always, whatever the token and the key */
	assert_int_equal(auth_http_admin_verdict(1, NULL, NULL), AUTH_HTTP_ALLOW);
	assert_int_equal(auth_http_admin_verdict(1, NULL, "Bearer nonsense"), AUTH_HTTP_ALLOW);
	assert_int_equal(auth_http_admin_verdict(1, &key, NULL), AUTH_HTTP_ALLOW);
	assert_int_equal(auth_http_admin_verdict(1, &key, "Bearer nonsense"), AUTH_HTTP_ALLOW);
	assert_int_equal(auth_http_admin_verdict(1, &key, hdr), AUTH_HTTP_ALLOW);
	/* keyless, not loopback: never, not even with some daemon's token */
	assert_int_equal(auth_http_admin_verdict(0, NULL, NULL), AUTH_HTTP_KEYLESS);
	assert_int_equal(auth_http_admin_verdict(0, NULL, hdr), AUTH_HTTP_KEYLESS);
	/* keyed, not loopback: the right token only */
	assert_int_equal(auth_http_admin_verdict(0, &key, NULL), AUTH_HTTP_NO_TOKEN);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_ALLOW);
	snprintf(hdr, sizeof(hdr), "bEARER \t %s", tok);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_ALLOW);
	snprintf(hdr, sizeof(hdr), "Bearer %s", wrong);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_BAD_TOKEN);
	snprintf(hdr, sizeof(hdr), "Bearer %.63s", tok);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_BAD_TOKEN);
	snprintf(hdr, sizeof(hdr), "Bearer %sa", tok);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_BAD_TOKEN);
	assert_int_equal(auth_http_admin_verdict(0, &key, "Bearer "), AUTH_HTTP_BAD_TOKEN);
	assert_int_equal(auth_http_admin_verdict(0, &key, tok), AUTH_HTTP_NO_TOKEN);
	snprintf(hdr, sizeof(hdr), "Basic %s", tok);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_NO_TOKEN);
	snprintf(hdr, sizeof(hdr), "Bearer%s", tok);
	assert_int_equal(auth_http_admin_verdict(0, &key, hdr), AUTH_HTTP_NO_TOKEN);
	assert_int_equal(auth_http_admin_verdict(0, &key, ""), AUTH_HTTP_NO_TOKEN);
	auth_key_wipe(&key);
	auth_key_wipe(&other);
}

static void test_http_gate_admits_and_counts(void **state)
{
	struct auth_http_gate gate;
	struct auth_key key;
	struct lc_http_reply rep = {.status = 200};
	struct lc_http_req req = {
	    .method = "GET", .path = "/admin/keys", .query = "", .peer = "169.254.77.2"};

	(void)state;
	assert_int_equal(auth_init(), 0);
	auth_random(key.k, sizeof(key.k));
	auth_http_gate_init(&gate, &key, "test");
	assert_true(auth_http_is_admin("/admin"));
	assert_true(auth_http_is_admin("/admin/stat"));
	assert_false(auth_http_is_admin("/administer"));
	assert_false(auth_http_is_admin("/metrics"));
	/* refused twice in a row: 403, no details, both counted */
	assert_int_equal(auth_http_gate_admit(&gate, &req, &rep), 0);
	assert_int_equal(rep.status, 403);
	assert_string_equal(rep.body, "forbidden\n");
	req.authorization = "Bearer 00";
	assert_int_equal(auth_http_gate_admit(&gate, &req, &rep), 0);
	req.peer_loopback = 1;
	assert_int_equal(auth_http_gate_admit(&gate, &req, &rep), 1);
	rep.len = 0;
	assert_int_equal(auth_http_gate_metrics(&gate, &rep), 0);
#define REJECTED "lunar_http_admin_rejected_total"
	assert_non_null(strstr(rep.body, REJECTED "{reason=\"no_token\"} 1\n"));
	assert_non_null(strstr(rep.body, REJECTED "{reason=\"bad_token\"} 1\n"));
	assert_non_null(strstr(rep.body, REJECTED "{reason=\"keyless\"} 0\n"));
#undef REJECTED
	free(rep.body);
	auth_key_wipe(&key);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_http_get_text, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_not_found, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_head_has_no_body, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_query_parsed, setup, teardown),
	    cmocka_unit_test(test_http_query_get_decodes),
	    cmocka_unit_test_setup_teardown(test_http_method_not_allowed, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_handler_status_and_errors, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_big_body, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_oversize_head_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_garbage_rejected, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_slow_clients_do_not_delay_others, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_http_silent_sockets_give_way, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_stop_joins, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_http_start_errors, setup, teardown),
	    cmocka_unit_test(test_http_reply_printf_grows),
	    cmocka_unit_test(test_http_header_get_parses),
	    cmocka_unit_test_setup_teardown(test_http_handler_sees_authorization, setup, teardown),
	    cmocka_unit_test(test_http_gate_verdicts),
	    cmocka_unit_test(test_http_gate_admits_and_counts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
