/*
 * http.h - a tiny embedded HTTP/1.0 and 1.1 server for /metrics, /health,
 * /ready and small admin JSON (SPEC §11). One thread polls the listener; each
 * connection (up to 16 at once; more wait in the backlog) is served on a
 * thread of its own: a request (GET or HEAD, line and headers at most
 * LC_HTTP_MAX_HEAD bytes, read within LC_HTTP_TIMEOUT_MS), one handler call
 * told the path, the query, the Authorization header and the peer,
 * one response with Content-Length and Connection: close. A client that
 * stalls holds only its own connection, so probes are answered meanwhile.
 * Request bodies are not read; keep-alive is not offered.
 */
#ifndef LUNAR_COMMON_HTTP_H
#define LUNAR_COMMON_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define LC_HTTP_MAX_HEAD   8192 /* request line + headers; longer: 431 */
#define LC_HTTP_TIMEOUT_MS 2000 /* to read a request, and again to write a reply */
#define LC_HTTP_MAX_AUTH   1024 /* an Authorization value; longer: 431 */
#define LC_HTTP_PEER_CHARS 48	/* an IPv6 address as text, and its NUL */

struct lc_http;

/*
 * What a handler answers. The server zeroes it, then sets status 200 and
 * content_type "text/plain; charset=utf-8" before the call. content_type must
 * point to storage that outlives the reply (a string literal); one holding CR
 * or LF is replaced by the default. body is malloc'd and owned by the server
 * once the handler returns; fill it with lc_http_reply_printf/_append, or set
 * body and len yourself (and cap, the allocated size, to append afterwards).
 */
struct lc_http_reply {
	int status;
	const char *content_type;
	char *body;
	size_t len;
	size_t cap;
};

/*
 * A request as a handler sees it; every pointer is valid for the call only.
 * method is "GET" or "HEAD" (for HEAD the server sends the headers of the
 * reply and no body); path is the raw request path, starting with '/';
 * query is what followed '?', still encoded, or "". authorization is the
 * value of the request's one Authorization header, without the
 * surrounding blanks (at most LC_HTTP_MAX_AUTH bytes, no control bytes),
 * or NULL when it sent none; a request with two, a longer one or a
 * malformed one is refused before any handler call (400, 431).
 * peer_loopback is 1 when the connection comes from a loopback address
 * (127.0.0.0/8, ::1, or ::ffff:127.0.0.0/104), else 0; peer is that
 * address as text, for logs.
 */
struct lc_http_req {
	const char *method;
	const char *path;
	const char *query;
	const char *authorization;
	int peer_loopback;
	char peer[LC_HTTP_PEER_CHARS];
};

/*
 * A handler, called on the server thread. Returns 0 when rep holds the
 * answer, a positive value when req->path is not its own (the server
 * answers 404), or a negative code on failure (500); in both cases the
 * reply is discarded. Calls are made one at a time (from any of the
 * server's threads); one should not block for long, as other requests'
 * calls wait for it.
 */
typedef int (*lc_http_handler_fn)(void *arg, const struct lc_http_req *req,
				  struct lc_http_reply *rep);

/*
 * lc_http_start - listen on host:port (host NULL or "" means every address;
 * a numeric address or a name) and serve requests with fn(arg, ...) on a new
 * thread. Port 0 picks a free port (see lc_http_port). Returns 0 and *out, or
 * -errno (-EINVAL for a NULL fn or out, -EADDRINUSE, ...). Blocks only to bind.
 */
int lc_http_start(const char *host, uint16_t port, lc_http_handler_fn fn, void *arg,
		  struct lc_http **out);
/* lc_http_port - the port the server listens on. */
uint16_t lc_http_port(const struct lc_http *h);
/*
 * lc_http_stop - close the listener, drop any connection in progress, join
 * the thread and free h. Returns once fn will not be called again; takes at
 * most the duration of a handler call. Not from the handler. NULL is a no-op.
 */
void lc_http_stop(struct lc_http *h);

/* lc_http_reply_printf - append formatted text to rep->body (kept NUL
 * terminated). Returns 0 or -ENOMEM (the body is then left as it was). */
int lc_http_reply_printf(struct lc_http_reply *rep, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* lc_http_reply_append - append len bytes. Returns 0 or -ENOMEM. */
int lc_http_reply_append(struct lc_http_reply *rep, const void *data, size_t len);

/*
 * lc_http_query_get - find the first parameter called name in query
 * ("a=1&b=x%20y", as a handler receives it), and write its value, decoded
 * (%XX escapes, '+' as space) and NUL terminated, into buf of cap bytes.
 * Names are compared after decoding; "flag" alone has the value "".
 * Returns the value's length, -ENOENT if absent, -EINVAL for a bad escape
 * or one that decodes to NUL, -ENOSPC if cap is too small. Pure.
 */
int lc_http_query_get(const char *query, const char *name, char *buf, size_t cap);

/*
 * lc_http_header_get - the value of the header called name (compared
 * without regard to case) in hdrs, the header lines of a request (after
 * its request line, up to the blank line; "\r\n" or "\n" ends a line; NUL
 * terminated; untrusted). The value, without the blanks around it, goes
 * NUL terminated into buf of cap bytes. Returns its length, -ENOENT when
 * no such header, -EEXIST when there are two or more, -E2BIG when it does
 * not fit in cap - 1 bytes, -EINVAL when a line of it is malformed (a
 * blank before the colon, a folded continuation line, a control byte in
 * the value). Pure.
 */
int lc_http_header_get(const char *hdrs, const char *name, char *buf, size_t cap);

#endif /* LUNAR_COMMON_HTTP_H */
