/*
 * etcd.h - a small etcd v3 client for the master's leader election (SPEC
 * §14): leases, a create-if-absent transaction and reads of one key, over
 * libcurl and etcd's JSON gateway (/v3/..., etcd 3.4 and later). Several
 * endpoints: a call that gets no usable answer from one tries the next.
 * Replies are untrusted: bounded in size, parsed by a bounded extractor.
 */
#ifndef LUNAR_MASTER_ETCD_H
#define LUNAR_MASTER_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define MST_ETCD_ENDPOINTS_MAX 16    /* URLs in one --etcd list */
#define MST_ETCD_VALUE_MAX     256   /* bytes of a value this client reads back */
#define MST_ETCD_REPLY_MAX     65536 /* bytes of one gateway reply; more is an error */

struct mst_etcd;

/* One key as read back: its value (NUL terminated), its create revision (the
 * view, when the key is the leader key) and the lease it is attached to. */
struct mst_etcd_kv {
	char value[MST_ETCD_VALUE_MAX + 1];
	size_t value_len;
	int64_t create_rev;
	int64_t mod_rev;
	int64_t lease;
};

/*
 * mst_etcd_alloc - a client of the comma-separated http:// URLs in urls.
 * Every request is bounded by timeout_ms (connect included); when cancel is
 * not NULL, a request in flight is abandoned soon after *cancel becomes
 * non-zero (read atomically; the caller owns it and keeps it alive). Returns
 * 0 and *out, -EINVAL for an empty or malformed list (or more than
 * MST_ETCD_ENDPOINTS_MAX URLs), -ENOMEM. Free with mst_etcd_free.
 * A client is not thread-safe: one thread at a time.
 */
int mst_etcd_alloc(const char *urls, unsigned timeout_ms, const int *cancel, struct mst_etcd **out);
/* mst_etcd_free - close connections and free. NULL is a no-op. */
void mst_etcd_free(struct mst_etcd *e);
/* mst_etcd_endpoint - the URL the last answer came from (or the next one to
 * try). Valid until mst_etcd_free. */
const char *mst_etcd_endpoint(const struct mst_etcd *e);

/*
 * The calls below block for at most about timeout_ms per endpoint tried. They
 * return 0 on success, or: -ENOENT (etcd answered: no such key or lease),
 * -EEXIST (mst_etcd_create: the key exists), -EIO (no endpoint gave a usable
 * answer: down, no quorum, timed out, an error status), -EPROTO (a 200 reply
 * that does not parse), -ECANCELED (*cancel was set), -ENOMEM.
 */

/* mst_etcd_lease_grant - a lease of ttl_s seconds: *id and the TTL etcd
 * granted, *granted_s (it may raise a small one). */
int mst_etcd_lease_grant(struct mst_etcd *e, int64_t ttl_s, int64_t *id, int64_t *granted_s);
/* mst_etcd_lease_keepalive - renew lease id once: *ttl_s is its TTL after the
 * renewal; 0 when etcd no longer knows the lease (expired or revoked). */
int mst_etcd_lease_keepalive(struct mst_etcd *e, int64_t id, int64_t *ttl_s);
/* mst_etcd_lease_revoke - revoke lease id, deleting the keys attached to it.
 * -ENOENT when it was already gone. */
int mst_etcd_lease_revoke(struct mst_etcd *e, int64_t id);
/*
 * mst_etcd_create - one transaction: if key does not exist (its create
 * revision is 0), put value attached to lease (0: none). 0 and *create_rev
 * (the new key's create revision) when this call created it; -EEXIST when
 * the key existed, with *create_rev left untouched.
 */
int mst_etcd_create(struct mst_etcd *e, const char *key, const char *value, int64_t lease,
		    int64_t *create_rev);
/* mst_etcd_get - read key (a linearizable read): 0 and *kv, -ENOENT when it
 * does not exist, -EPROTO when its value is longer than MST_ETCD_VALUE_MAX. */
int mst_etcd_get(struct mst_etcd *e, const char *key, struct mst_etcd_kv *kv);

/*
 * The bounded JSON extractor the client parses replies with (etcd_json.c),
 * exposed for tests. mst_ejson_find - the value at path in the JSON text
 * s[0..n): path elements are object member names, or "#N" for the N-th
 * element of an array. 0 with *v and *vlen the raw text of the value (a
 * string keeps its quotes); -ENOENT when absent, -EPROTO when the text is
 * malformed on the way there or nests deeper than 32. Pure; any thread.
 */
int mst_ejson_find(const char *s, size_t n, const char *const *path, size_t depth, const char **v,
		   size_t *vlen);
/* mst_ejson_int - the integer at path, written as digits or as a string of
 * digits (protobuf's JSON for int64); -ENOENT, -EPROTO (not such a number or
 * out of range). */
int mst_ejson_int(const char *s, size_t n, const char *const *path, size_t depth, int64_t *out);
/* mst_ejson_bool - 1 for true, 0 for false or absent, -EPROTO otherwise. */
int mst_ejson_bool(const char *s, size_t n, const char *const *path, size_t depth);
/* mst_b64_encode - standard base64 of src into dst (cap bytes, NUL
 * terminated); the length written, or -ENOSPC. */
int mst_b64_encode(const void *src, size_t n, char *dst, size_t cap);
/* mst_b64_decode - decode n base64 chars (standard alphabet, padded) into
 * dst (cap bytes); the length decoded, -EPROTO on bad input, -ENOSPC. */
int mst_b64_decode(const char *src, size_t n, void *dst, size_t cap);

#endif /* LUNAR_MASTER_ETCD_H */
