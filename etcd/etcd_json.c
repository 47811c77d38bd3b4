/*
 * etcd_json.c - the bounded JSON extractor and base64 codec the etcd client
 * reads the gateway's replies with; see etcd.h. No tree is built: a lookup
 * walks the text once, skipping what it does not need, checking every read
 * against the end and capping the depth, so any bytes either yield a value
 * or an error code.
 */
#include "etcd/etcd.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define DEPTH_MAX 32

struct rd {
	const char *p, *end;
};

static void ws(struct rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

/* Skip a string at r->p (on its opening quote). */
static int skip_str(struct rd *r)
{
	if (r->p >= r->end || *r->p != '"')
		return -EPROTO;
	for (r->p++; r->p < r->end; r->p++) {
		if (*r->p == '\\') {
			if (++r->p >= r->end)
				return -EPROTO;
		} else if (*r->p == '"') {
			r->p++;
			return 0;
		} else if ((unsigned char)*r->p < 0x20) {
			return -EPROTO;
		}
	}
	return -EPROTO;
}

/* Skip a number or a literal: the bytes a scalar may hold. */
static int skip_scalar(struct rd *r)
{
	const char *s = r->p;

	while (r->p < r->end && *r->p && strchr("0123456789+-.eEtruefalsn", *r->p))
		r->p++;
	return r->p > s ? 0 : -EPROTO;
}

static int skip_value(struct rd *r, int depth);

/* Skip the members of an object or the elements of an array (on '{'/'['). */
static int skip_container(struct rd *r, int depth)
{
	char close = *r->p == '{' ? '}' : ']';
	int rc;

	if (depth >= DEPTH_MAX)
		return -EPROTO;
	r->p++;
	ws(r);
	if (r->p < r->end && *r->p == close) {
		r->p++;
		return 0;
	}
	for (;;) {
		if (close == '}') {
			if ((rc = skip_str(r)))
				return rc;
			ws(r);
			if (r->p >= r->end || *r->p++ != ':')
				return -EPROTO;
		}
		if ((rc = skip_value(r, depth + 1)))
			return rc;
		ws(r);
		if (r->p >= r->end)
			return -EPROTO;
		if (*r->p == close) {
			r->p++;
			return 0;
		}
		if (*r->p++ != ',')
			return -EPROTO;
		ws(r);
	}
}

static int skip_value(struct rd *r, int depth)
{
	ws(r);
	if (r->p >= r->end)
		return -EPROTO;
	if (*r->p == '"')
		return skip_str(r);
	if (*r->p == '{' || *r->p == '[')
		return skip_container(r, depth);
	return skip_scalar(r);
}

/* After a member or an element: past its ',', or at close (0); else -EPROTO. */
static int next_item(struct rd *r, char close)
{
	ws(r);
	if (r->p < r->end && *r->p == ',') {
		r->p++;
		return 0;
	}
	return r->p < r->end && *r->p == close ? 0 : -EPROTO;
}

/* In the object at r->p, move r->p to the value of member name. */
static int member(struct rd *r, const char *name)
{
	size_t len = strlen(name);
	int rc;

	if (r->p >= r->end || *r->p != '{')
		return -ENOENT;
	r->p++;
	for (ws(r); r->p < r->end && *r->p != '}'; ws(r)) {
		const char *k = r->p + 1;
		int hit;

		if ((rc = skip_str(r)))
			return rc;
		hit = (size_t)(r->p - 1 - k) == len && !memcmp(k, name, len);
		ws(r);
		if (r->p >= r->end || *r->p++ != ':')
			return -EPROTO;
		ws(r);
		if (hit)
			return 0;
		if ((rc = skip_value(r, 1)) || (rc = next_item(r, '}')))
			return rc;
	}
	return r->p < r->end ? -ENOENT : -EPROTO;
}

/* In the array at r->p, move r->p to element i. */
static int element(struct rd *r, unsigned long i)
{
	int rc;

	if (r->p >= r->end || *r->p != '[')
		return -ENOENT;
	r->p++;
	for (ws(r); r->p < r->end && *r->p != ']'; ws(r)) {
		if (!i--)
			return 0;
		if ((rc = skip_value(r, 1)) || (rc = next_item(r, ']')))
			return rc;
	}
	return r->p < r->end ? -ENOENT : -EPROTO;
}

int etcd_json_find(const char *s, size_t n, const char *const *path, size_t depth, const char **v,
		   size_t *vlen)
{
	struct rd r = {s, s + n};
	const char *start;
	int rc;

	if (depth > DEPTH_MAX)
		return -EPROTO;
	/* The whole text must be one well-formed value: a truncated reply
	 * yields nothing, even a field before the cut. */
	if (skip_value(&r, 0))
		return -EPROTO;
	ws(&r);
	if (r.p != r.end)
		return -EPROTO;
	r.p = s;
	ws(&r);
	for (size_t i = 0; i < depth; i++) {
		if (path[i][0] == '#')
			rc = element(&r, strtoul(path[i] + 1, NULL, 10));
		else
			rc = member(&r, path[i]);
		if (rc)
			return rc;
	}
	start = r.p;
	if ((rc = skip_value(&r, (int)depth)))
		return rc;
	*v = start;
	*vlen = (size_t)(r.p - start);
	return 0;
}

int etcd_json_int(const char *s, size_t n, const char *const *path, size_t depth, int64_t *out)
{
	const char *v;
	size_t len;
	int64_t x = 0;
	int neg, rc = etcd_json_find(s, n, path, depth, &v, &len);

	if (rc)
		return rc;
	if (len >= 2 && v[0] == '"') { /* protobuf's JSON writes int64 as a string */
		v++;
		len -= 2;
	}
	neg = len && v[0] == '-';
	if (len == (size_t)neg || len - neg > 19)
		return -EPROTO;
	for (size_t i = neg; i < len; i++) {
		if (v[i] < '0' || v[i] > '9' || x > (INT64_MAX - (v[i] - '0')) / 10)
			return -EPROTO;
		x = x * 10 + (v[i] - '0');
	}
	*out = neg ? -x : x;
	return 0;
}

int etcd_json_bool(const char *s, size_t n, const char *const *path, size_t depth)
{
	const char *v;
	size_t len;
	int rc = etcd_json_find(s, n, path, depth, &v, &len);

	if (rc == -ENOENT)
		return 0; /* protobuf's JSON leaves false fields out */
	if (rc)
		return rc;
	if (len == 4 && !memcmp(v, "true", 4))
		return 1;
	return len == 5 && !memcmp(v, "false", 5) ? 0 : -EPROTO;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int etcd_b64_encode(const void *src, size_t n, char *dst, size_t cap)
{
	const unsigned char *s = src;
	size_t o = 0;

	if ((n + 2) / 3 * 4 + 1 > cap)
		return -ENOSPC;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t w = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? s[i + 2] : 0);

		dst[o++] = b64[w >> 18 & 63];
		dst[o++] = b64[w >> 12 & 63];
		dst[o++] = i + 1 < n ? b64[w >> 6 & 63] : '=';
		dst[o++] = i + 2 < n ? b64[w & 63] : '=';
	}
	dst[o] = '\0';
	return (int)o;
}

static int b64_val(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;

	return p ? (int)(p - b64) : -1;
}

int etcd_b64_decode(const char *src, size_t n, void *dst, size_t cap)
{
	unsigned char *d = dst;
	size_t o = 0;

	if (n % 4)
		return -EPROTO;
	for (size_t i = 0; i < n; i += 4) {
		int pad = (src[i + 3] == '=') + (src[i + 2] == '=');
		int a = b64_val(src[i]), b = b64_val(src[i + 1]);
		int c = pad >= 2 ? 0 : b64_val(src[i + 2]), e = pad ? 0 : b64_val(src[i + 3]);
		uint32_t w;

		if (a < 0 || b < 0 || c < 0 || e < 0 || (pad && i + 4 != n) ||
		    (pad == 1 && src[i + 2] == '='))
			return -EPROTO;
		if (o + 3 - pad > cap)
			return -ENOSPC;
		w = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)e;
		d[o++] = (unsigned char)(w >> 16);
		if (pad < 2)
			d[o++] = (unsigned char)(w >> 8);
		if (!pad)
			d[o++] = (unsigned char)w;
	}
	return (int)o;
}
