/*
 * json.c - lunarctl's strict little JSON reader and string writer; see
 * json.h. Recursive descent over a byte range: every read checks the end,
 * depth is capped, and a half-built tree is always safe to free, so garbage
 * in means -EINVAL out.
 */
#include "json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct rd {
	const char *p;
	const char *end;
	int depth;
};

static int parse_value(struct rd *r, struct cj *v);

static void skip_ws(struct rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

/* Length of the JSON number at s (at most n bytes), or 0 if there is none. */
static size_t number_len(const char *s, size_t n)
{
	size_t i = 0, d;

	if (i < n && s[i] == '-')
		i++;
	if (i < n && s[i] == '0')
		i++;
	else if (i < n && is_digit(s[i]))
		while (i < n && is_digit(s[i]))
			i++;
	else
		return 0;
	if (i < n && s[i] == '.') {
		for (d = ++i; i < n && is_digit(s[i]); i++)
			;
		if (i == d)
			return 0;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		for (d = i; i < n && is_digit(s[i]); i++)
			;
		if (i == d)
			return 0;
	}
	return i;
}

int cj_is_number(const char *s, size_t n)
{
	return n > 0 && number_len(s, n) == n;
}

static int hex4(const char *s, unsigned *out)
{
	unsigned v = 0;

	for (int i = 0; i < 4; i++) {
		char c = s[i];

		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -EINVAL;
	}
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* A \uXXXX escape at s (s[0] == 'u', at least 5 bytes before end), joined
 * with a following low surrogate; a lone surrogate becomes U+FFFD. Returns
 * the input bytes used after the backslash, or 0 on a bad escape. */
static size_t unescape_u(const char *s, const char *end, unsigned *cp)
{
	unsigned hi, lo;

	if (end - s < 5 || hex4(s + 1, &hi))
		return 0;
	*cp = hi;
	if (hi >= 0xdc00 && hi <= 0xdfff)
		*cp = 0xfffd;
	if (hi < 0xd800 || hi > 0xdbff)
		return 5;
	if (end - s >= 11 && s[5] == '\\' && s[6] == 'u' && !hex4(s + 7, &lo) && lo >= 0xdc00 &&
	    lo <= 0xdfff) {
		*cp = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
		return 11;
	}
	*cp = 0xfffd;
	return 5;
}

static int escape_char(char c, char *out)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *at = memchr(from, c, sizeof(from) - 1);

	if (!at)
		return -EINVAL;
	*out = to[at - from];
	return 0;
}

/* Decode the string starting at r->p (on its opening quote) into a fresh
 * buffer. Decoded text is never longer than its encoding, which sizes it. */
static int parse_string(struct rd *r, char **out, size_t *len)
{
	const char *s = r->p + 1, *e = s;
	char *buf, *o;
	unsigned cp;
	size_t used;

	while (e < r->end && *e != '"') {
		if ((unsigned char)*e < 0x20)
			return -EINVAL;
		e += *e == '\\' ? 2 : 1;
	}
	if (e >= r->end)
		return -EINVAL;
	o = buf = malloc((size_t)(e - s) + 1);
	if (!buf)
		return -ENOMEM;
	while (s < e) {
		if (*s != '\\') {
			*o++ = *s++;
			continue;
		}
		s++;
		if (*s == 'u') {
			used = unescape_u(s, e, &cp);
			if (!used)
				goto err_free;
			o += put_utf8(o, cp);
			s += used;
		} else if (escape_char(*s++, o++)) {
			goto err_free;
		}
	}
	*o = '\0';
	*out = buf;
	*len = (size_t)(o - buf);
	r->p = e + 1;
	return 0;
err_free:
	free(buf);
	return -EINVAL;
}

/* Append a zeroed member to v's kid array (cap is the caller's capacity). */
static struct cj *add_kid(struct cj *v, size_t *cap)
{
	struct cj *k;

	if (v->n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 4;

		if (ncap > SIZE_MAX / sizeof(*k))
			return NULL;
		k = realloc(v->kid, ncap * sizeof(*k));
		if (!k)
			return NULL;
		v->kid = k;
		*cap = ncap;
	}
	k = &v->kid[v->n++];
	memset(k, 0, sizeof(*k));
	return k;
}

/* The members of an array (close ']') or object (close '}'), r->p past the
 * opening bracket. */
static int parse_members(struct rd *r, struct cj *v, char close)
{
	size_t cap = 0, nlen;
	struct cj *k;
	char *name;
	int rc;

	if (++r->depth > CJ_MAX_DEPTH)
		return -EINVAL;
	skip_ws(r);
	if (r->p < r->end && *r->p == close) {
		r->p++;
		r->depth--;
		return 0;
	}
	for (;;) {
		name = NULL;
		skip_ws(r);
		if (close == '}') {
			if (r->p >= r->end || *r->p != '"')
				return -EINVAL;
			if ((rc = parse_string(r, &name, &nlen)))
				return rc;
			skip_ws(r);
			if (r->p >= r->end || *r->p++ != ':') {
				free(name);
				return -EINVAL;
			}
		}
		if (!(k = add_kid(v, &cap))) {
			free(name);
			return -ENOMEM;
		}
		k->name = name;
		if ((rc = parse_value(r, k)))
			return rc;
		skip_ws(r);
		if (r->p >= r->end)
			return -EINVAL;
		if (*r->p == close)
			break;
		if (*r->p++ != ',')
			return -EINVAL;
	}
	r->p++;
	r->depth--;
	return 0;
}

static int parse_literal(struct rd *r, struct cj *v)
{
	static const struct {
		const char *word;
		enum cj_type type;
	} lits[] = {{"null", CJ_NULL}, {"false", CJ_FALSE}, {"true", CJ_TRUE}};

	for (size_t i = 0; i < sizeof(lits) / sizeof(lits[0]); i++) {
		size_t n = strlen(lits[i].word);

		if ((size_t)(r->end - r->p) >= n && !memcmp(r->p, lits[i].word, n)) {
			v->type = lits[i].type;
			r->p += n;
			return 0;
		}
	}
	return -EINVAL;
}

static int parse_value(struct rd *r, struct cj *v)
{
	size_t n;

	skip_ws(r);
	if (r->p >= r->end)
		return -EINVAL;
	switch (*r->p) {
	case '{':
	case '[':
		v->type = *r->p == '{' ? CJ_OBJECT : CJ_ARRAY;
		r->p++;
		return parse_members(r, v, v->type == CJ_OBJECT ? '}' : ']');
	case '"': v->type = CJ_STRING; return parse_string(r, &v->str, &v->len);
	case 't':
	case 'f':
	case 'n': return parse_literal(r, v);
	default:
		n = number_len(r->p, (size_t)(r->end - r->p));
		if (!n)
			return -EINVAL;
		v->type = CJ_NUMBER;
		v->str = strndup(r->p, n);
		if (!v->str)
			return -ENOMEM;
		v->len = n;
		r->p += n;
		return 0;
	}
}

static void free_members(struct cj *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free_members(&v->kid[i]);
		free(v->kid[i].name);
	}
	free(v->kid);
	free(v->str);
}

void cj_free(struct cj *v)
{
	if (!v)
		return;
	free_members(v);
	free(v->name);
	free(v);
}

int cj_parse(const char *text, size_t len, struct cj **out)
{
	struct rd r = {.p = text, .end = text + len};
	struct cj *v = calloc(1, sizeof(*v));
	int rc;

	if (!v)
		return -ENOMEM;
	rc = text ? parse_value(&r, v) : -EINVAL;
	skip_ws(&r);
	if (!rc && r.p != r.end)
		rc = -EINVAL;
	if (rc) {
		cj_free(v);
		return rc;
	}
	*out = v;
	return 0;
}

const struct cj *cj_get(const struct cj *v, const char *name)
{
	if (!v || v->type != CJ_OBJECT)
		return NULL;
	for (size_t i = 0; i < v->n; i++)
		if (!strcmp(v->kid[i].name, name))
			return &v->kid[i];
	return NULL;
}

const char *cj_str(const struct cj *v, const char *dflt)
{
	return v && v->type == CJ_STRING ? v->str : dflt;
}

int cj_u64(const struct cj *v, uint64_t *out)
{
	uint64_t x = 0;

	if (!v || v->type != CJ_NUMBER || !v->len || v->len > 20)
		return -EINVAL;
	for (size_t i = 0; i < v->len; i++) {
		unsigned d = (unsigned)(v->str[i] - '0');

		if (d > 9 || x > (UINT64_MAX - d) / 10)
			return -EINVAL;
		x = x * 10 + d;
	}
	*out = x;
	return 0;
}

int cj_i64(const struct cj *v, int64_t *out)
{
	struct cj mag;
	uint64_t x;

	if (!v || v->type != CJ_NUMBER)
		return -EINVAL;
	mag = *v;
	if (v->len && v->str[0] == '-') {
		mag.str++;
		mag.len--;
	}
	if (cj_u64(&mag, &x))
		return -EINVAL;
	if (mag.str != v->str) {
		if (x > (uint64_t)INT64_MAX + 1)
			return -EINVAL;
		*out = x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x;
	} else {
		if (x > INT64_MAX)
			return -EINVAL;
		*out = (int64_t)x;
	}
	return 0;
}

int cj_truth(const struct cj *v)
{
	return !v ? -1 : v->type == CJ_TRUE ? 1 : v->type == CJ_FALSE ? 0 : -1;
}

void cj_write_strn(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

void cj_write_str(FILE *f, const char *s)
{
	cj_write_strn(f, s, strlen(s));
}
