/*
 * json.h - lunarctl's JSON reader and writer: just enough of RFC 8259 to read
 * the master's admin replies (objects, arrays, strings with escapes, numbers,
 * true/false/null) into a small tree, and to write escaped strings. The
 * reader is strict and bounded: any byte sequence either parses or fails with
 * a code, never crashes, and nests at most CJ_MAX_DEPTH deep.
 */
#ifndef LUNAR_TOOLS_CTL_JSON_H
#define LUNAR_TOOLS_CTL_JSON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CJ_MAX_DEPTH 64

enum cj_type { CJ_NULL, CJ_FALSE, CJ_TRUE, CJ_NUMBER, CJ_STRING, CJ_ARRAY, CJ_OBJECT };

/*
 * One value. Inside an object, name is the member's name (decoded, NUL
 * terminated); elsewhere NULL. For a string, str is the decoded text (UTF-8,
 * NUL terminated, len bytes: a \u0000 escape makes len the safer measure);
 * for a number, str is its literal text as it appeared. Arrays and objects
 * hold their n members in kid[], in document order.
 */
struct cj {
	enum cj_type type;
	char *name;
	char *str;
	size_t len;
	struct cj *kid;
	size_t n;
};

/*
 * cj_parse - parse len bytes of text (need not be NUL terminated) as one
 * JSON value, optionally surrounded by whitespace. Returns 0 and *out, a tree
 * the caller frees with cj_free; -EINVAL for anything that is not exactly one
 * well-formed value (or nests deeper than CJ_MAX_DEPTH), -ENOMEM. Pure; any
 * thread.
 */
int cj_parse(const char *text, size_t len, struct cj **out);
/* cj_free - free a tree from cj_parse. NULL is a no-op. */
void cj_free(struct cj *v);

/* cj_get - the first member called name of object v; NULL when v is not an
 * object (or NULL) or has no such member. */
const struct cj *cj_get(const struct cj *v, const char *name);
/* cj_str - v's text when v is a string, else dflt. */
const char *cj_str(const struct cj *v, const char *dflt);
/* cj_u64 - v as an unsigned integer: 0 and *out when v is a number written
 * as digits only that fits 64 bits, else -EINVAL (*out untouched). */
int cj_u64(const struct cj *v, uint64_t *out);
/* cj_i64 - as cj_u64 for a signed integer. */
int cj_i64(const struct cj *v, int64_t *out);
/* cj_truth - 1 for true, 0 for false, -1 for anything else. */
int cj_truth(const struct cj *v);

/* cj_is_number - 1 when the n bytes at s are exactly one JSON number. */
int cj_is_number(const char *s, size_t n);

/* cj_write_str - write s to f as a JSON string: quotes, backslashes and
 * control bytes escaped; other bytes (UTF-8) as they are. */
void cj_write_str(FILE *f, const char *s);
/* cj_write_strn - as cj_write_str for n bytes that may hold NUL. */
void cj_write_strn(FILE *f, const char *s, size_t n);

#endif /* LUNAR_TOOLS_CTL_JSON_H */
