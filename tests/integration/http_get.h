/*
 * http_get.h - what integration tests need to look inside a
 * running master or proxy: one blocking HTTP/1.1 GET on loopback (to read
 * /metrics and the /admin/ JSON) or POST (to etcd's JSON gateway), a
 * Prometheus sample lookup, a few
 * string-level JSON probes, and lines parsed out of a daemon's log file
 * (its HTTP port, its segment's address). Header-only, any thread.
 */
#ifndef LUNAR_TESTS_INTEGRATION_HTTP_GET_H
#define LUNAR_TESTS_INTEGRATION_HTTP_GET_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* hg_get's receive timeout: a daemon that stops answering fails the call. */
#define HG_TIMEOUT_S 5

/*
 * hg_post - POST json (NULL: GET, no body) to path (with its query) on
 * 127.0.0.1:port. The reply's body, NUL terminated, goes to buf (cap
 * bytes, truncated if longer). Returns the HTTP status (200, 404, ...) or
 * -1 on a connection or protocol failure. Blocks for at most about
 * HG_TIMEOUT_S per read. hg_get - the same, a GET.
 */
static inline int hg_post(int port, const char *path, const char *json, char *buf, size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct timeval tv = {.tv_sec = HG_TIMEOUT_S};
	char req[2048], *resp = NULL, *body;
	size_t len = 0, rcap = 1 << 16;
	int fd, n, status = -1;

	if (cap)
		buf[0] = '\0';
	n = json ? snprintf(req, sizeof(req),
			    "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
			    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
			    path, port, strlen(json), json)
		 : snprintf(req, sizeof(req),
			    "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n",
			    path, port);
	if (n < 0 || (size_t)n >= sizeof(req))
		return -1;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
	    send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
		goto out;
	resp = malloc(rcap);
	if (!resp)
		goto out;
	for (;;) {
		ssize_t r;

		if (len + 1 == rcap) {
			char *bigger = realloc(resp, rcap * 2);

			if (!bigger)
				goto out;
			resp = bigger;
			rcap *= 2;
		}
		r = recv(fd, resp + len, rcap - 1 - len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto out;
		if (r == 0)
			break;
		len += (size_t)r;
	}
	resp[len] = '\0';
	body = strstr(resp, "\r\n\r\n");
	if (strncmp(resp, "HTTP/1.", 7) != 0 || !body || len < 12)
		goto out;
	status = atoi(resp + 9);
	body += 4;
	if (cap) {
		size_t blen = strlen(body);

		if (blen >= cap)
			blen = cap - 1;
		memcpy(buf, body, blen);
		buf[blen] = '\0';
	}
out:
	free(resp);
	close(fd);
	return status;
}

static inline int hg_get(int port, const char *path, char *buf, size_t cap)
{
	return hg_post(port, path, NULL, buf, cap);
}

/*
 * hg_metric - the value of the Prometheus sample named exactly sample (with
 * its labels, e.g. "lunar_master_calls_total{method=\"Ping\"}") in text, or
 * -1 when there is no such line. Values are read as doubles and truncated.
 */
static inline int64_t hg_metric(const char *text, const char *sample)
{
	size_t n = strlen(sample);

	for (const char *line = text; line && *line;) {
		if (!strncmp(line, sample, n) && line[n] == ' ')
			return (int64_t)strtod(line + n + 1, NULL);
		line = strchr(line, '\n');
		if (line)
			line++;
	}
	return -1;
}

/* hg_count - how many times needle occurs in hay (non-overlapping). */
static inline int hg_count(const char *hay, const char *needle)
{
	size_t n = strlen(needle);
	int k = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + n, needle))
		k++;
	return k;
}

/*
 * hg_json_nth - just past the idx-th (0-based) occurrence of pat in json, or
 * NULL when pat occurs idx times or fewer. The scan under hg_json_str and
 * hg_json_u64.
 */
static inline const char *hg_json_nth(const char *json, const char *pat, int idx)
{
	const char *p = json;

	for (int i = 0;; i++) {
		p = strstr(p, pat);
		if (!p)
			return NULL;
		p += strlen(pat);
		if (i == idx)
			return p;
	}
}

/*
 * hg_json_str - the idx-th (0-based) string value of "name" in json, copied
 * to out (cap bytes). 0, or -1 when absent or too long. A string-level probe
 * for the flat objects /admin/ renders, not a JSON parser.
 */
static inline int hg_json_str(const char *json, const char *name, int idx, char *out, size_t cap)
{
	char pat[80];
	const char *p, *end;

	snprintf(pat, sizeof(pat), "\"%s\":\"", name);
	p = hg_json_nth(json, pat, idx);
	if (!p)
		return -1;
	end = strchr(p, '"');
	if (!end || (size_t)(end - p) >= cap)
		return -1;
	memcpy(out, p, (size_t)(end - p));
	out[end - p] = '\0';
	return 0;
}

/* hg_json_u64 - the idx-th numeric value of "name" in json, or -1. */
static inline int64_t hg_json_u64(const char *json, const char *name, int idx)
{
	char pat[80];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", name);
	p = hg_json_nth(json, pat, idx);
	if (!p || *p < '0' || *p > '9')
		return -1;
	return (int64_t)strtoull(p, NULL, 10);
}

/*
 * hg_log_find - the text following the first occurrence of marker in the
 * file at path, up to the end of its line, copied to out (cap bytes).
 * 0, or -1 when the file cannot be read or has no such marker.
 */
static inline int hg_log_find(const char *path, const char *marker, char *out, size_t cap)
{
	char *text = NULL, *p, *eol;
	size_t len = 0;
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC), rc = -1;

	if (fd < 0)
		return -1;
	text = malloc(1 << 20);
	if (!text)
		goto out;
	while (len < (1u << 20) - 1 && (r = read(fd, text + len, (1u << 20) - 1 - len)) > 0)
		len += (size_t)r;
	text[len] = '\0';
	p = strstr(text, marker);
	if (!p)
		goto out;
	p += strlen(marker);
	eol = strchr(p, '\n');
	if (!eol)
		eol = p + strlen(p);
	if ((size_t)(eol - p) >= cap)
		goto out;
	memcpy(out, p, (size_t)(eol - p));
	out[eol - p] = '\0';
	rc = 0;
out:
	free(text);
	close(fd);
	return rc;
}

/*
 * hg_log_http_port - the HTTP port a lunar-proxy or lunar-master started
 * with --http-port 0 logged ("HTTP on http://HOST:PORT"), or -1.
 */
static inline int hg_log_http_port(const char *logpath)
{
	char rest[256], *colon;

	if (hg_log_find(logpath, "HTTP on http://", rest, sizeof(rest)))
		return -1;
	colon = strchr(rest, ':');
	return colon ? atoi(colon + 1) : -1;
}

/*
 * hg_log_data_port - the data port a lunar-proxy logged it serves
 * ("...; data port HOST:PORT; ..."), or -1.
 */
static inline int hg_log_data_port(const char *logpath)
{
	char rest[256], *end, *colon;

	if (hg_log_find(logpath, "; data port ", rest, sizeof(rest)))
		return -1;
	if ((end = strchr(rest, ';')))
		*end = 0;
	colon = strrchr(rest, ':');
	return colon ? atoi(colon + 1) : -1;
}

#endif /* LUNAR_TESTS_INTEGRATION_HTTP_GET_H */
