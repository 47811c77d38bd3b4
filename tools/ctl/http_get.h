/*
 * http_get.h - lunarctl's tiny blocking HTTP/1.0 GET client for the admin
 * endpoints of lunar-master and lunar-proxy (SPEC §11): connect with a
 * deadline, send one request, read the status line, headers and a body of
 * bounded size, close. No TLS, redirects, keep-alive or chunked bodies.
 */
#ifndef LUNAR_TOOLS_CTL_HTTP_GET_H
#define LUNAR_TOOLS_CTL_HTTP_GET_H

#include <stddef.h>

#define CTL_HTTP_MAX_HEAD 65536	      /* status line + headers */
#define CTL_HTTP_MAX_BODY (64u << 20) /* larger replies fail with -EFBIG */

/*
 * A reply. body is malloc'd, NUL terminated after len bytes; content_type
 * is "" when the server sent none. connected says whether the failure (if
 * any) came after the TCP connection was up: 0 means "cannot connect";
 * answered whether the daemon sent any byte back (a stopped one accepts in
 * the kernel and never answers).
 * peer names the address with its port; err holds human words for a
 * failure.
 */
struct ctl_http_resp {
	int status;
	char content_type[128];
	char *body;
	size_t len;
	int connected;
	int answered;	/* some byte of a reply came back */
	char peer[280]; /* "host:port" as dialed, once addr parsed */
	char err[256];
};

/*
 * ctl_http_addr_ok - 0 when addr is "HOST:PORT", "[V6]:PORT", "HOST" or any
 * of those after "http://" (the port then defaults); -EINVAL otherwise, with
 * why in err (cap bytes). Pure.
 */
int ctl_http_addr_ok(const char *addr, char *err, size_t cap);

/*
 * ctl_http_get - GET target (a path with its query, already encoded) from
 * addr (as ctl_http_addr_ok; default_port when it names none), the whole
 * exchange within timeout_ms. bearer, when not NULL, is sent as
 * "Authorization: Bearer <bearer>" (it must hold no blank or control byte:
 * -EINVAL). Returns 0 with r filled (any HTTP status), or
 * a negative errno with r->connected and r->err set: -ECONNREFUSED,
 * -ETIMEDOUT, -EHOSTUNREACH... before the connection, -EPROTO for a
 * malformed reply, -EFBIG past CTL_HTTP_MAX_BODY after it. Free with
 * ctl_http_resp_fini either way. Blocks; any thread.
 */
int ctl_http_get(const char *addr, unsigned default_port, const char *target, const char *bearer,
		 unsigned timeout_ms, struct ctl_http_resp *r);
/* ctl_http_resp_fini - free r's body; r may be reused. */
void ctl_http_resp_fini(struct ctl_http_resp *r);

/*
 * ctl_url_encode - s percent-encoded for a query value (unreserved bytes
 * A-Z a-z 0-9 - . _ ~ kept, every other byte as %XX), in a fresh string the
 * caller frees; NULL when out of memory.
 */
char *ctl_url_encode(const char *s);

#endif /* LUNAR_TOOLS_CTL_HTTP_GET_H */
