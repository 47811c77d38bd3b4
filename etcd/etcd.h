/*
 * etcd.h - a small etcd v3 client for the masters' leader election and the
 * leader discovery of proxies and tools (SPEC §14): leases, a
 * create-if-absent transaction and reads of one key, over libcurl and
 * etcd's JSON gateway (/v3/..., etcd 3.4 and later). Several
 * endpoints: a call that gets no usable answer from one tries the next.
 * Replies are untrusted: bounded in size, parsed by a bounded extractor.
 */
#ifndef LUNAR_ETCD_ETCD_H
#define LUNAR_ETCD_ETCD_H

#include <stddef.h>
#include <stdint.h>

#define ETCD_ENDPOINTS_MAX 16	 /* URLs in one --etcd list */
#define ETCD_VALUE_MAX	   1024	 /* bytes of a value this client reads back */
#define ETCD_REPLY_MAX	   65536 /* bytes of one gateway reply; more is an error */

struct etcd_client;

/* One key as read back: its value (NUL terminated), its create revision (the
 * view, when the key is the leader key) and the lease it is attached to. */
struct etcd_kv {
	char value[ETCD_VALUE_MAX + 1];
	size_t value_len;
	int64_t create_rev;
	int64_t mod_rev;
	int64_t lease;
};

/*
 * etcd_alloc - a client of the comma-separated http:// URLs in urls.
 * Every request is bounded by timeout_ms (connect included); when cancel is
 * not NULL, a request in flight is abandoned soon after *cancel becomes
 * non-zero (read atomically; the caller owns it and keeps it alive). Returns
 * 0 and *out, -EINVAL for an empty or malformed list (or more than
 * ETCD_ENDPOINTS_MAX URLs), -ENOMEM. Free with etcd_free.
 * A client is not thread-safe: one thread at a time.
 */
int etcd_alloc(const char *urls, unsigned timeout_ms, const int *cancel, struct etcd_client **out);
/* etcd_free - close connections and free. NULL is a no-op. */
void etcd_free(struct etcd_client *e);
/* etcd_endpoint - the URL the last answer came from (or the next one to
 * try). Valid until etcd_free. */
const char *etcd_endpoint(const struct etcd_client *e);

/*
 * The calls below block for at most about timeout_ms per endpoint tried. They
 * return 0 on success, or: -ENOENT (etcd answered: no such key or lease),
 * -EEXIST (etcd_create: the key exists), -EIO (no endpoint gave a usable
 * answer: down, no quorum, timed out, an error status), -EPROTO (a 200 reply
 * that does not parse), -ECANCELED (*cancel was set), -ENOMEM.
 */

/* etcd_lease_grant - a lease of ttl_s seconds: *id and the TTL etcd
 * granted, *granted_s (it may raise a small one). */
int etcd_lease_grant(struct etcd_client *e, int64_t ttl_s, int64_t *id, int64_t *granted_s);
/* etcd_lease_keepalive - renew lease id once: *ttl_s is its TTL after the
 * renewal; 0 when etcd no longer knows the lease (expired or revoked). */
int etcd_lease_keepalive(struct etcd_client *e, int64_t id, int64_t *ttl_s);
/* etcd_lease_revoke - revoke lease id, deleting the keys attached to it.
 * -ENOENT when it was already gone. */
int etcd_lease_revoke(struct etcd_client *e, int64_t id);
/*
 * etcd_create - one transaction: if key does not exist (its create
 * revision is 0), put value attached to lease (0: none). 0 and *create_rev
 * (the new key's create revision) when this call created it; -EEXIST when
 * the key existed, with *create_rev left untouched.
 */
int etcd_create(struct etcd_client *e, const char *key, const char *value, int64_t lease,
		int64_t *create_rev);
/* etcd_get - read key (a linearizable read): 0 and *kv, -ENOENT when it
 * does not exist, -EPROTO when its value is longer than ETCD_VALUE_MAX. */
int etcd_get(struct etcd_client *e, const char *key, struct etcd_kv *kv);

/* etcd_put - put key = value attached to lease (0: none), unconditionally.
 * -EIO also when etcd does not know the lease. */
int etcd_put(struct etcd_client *e, const char *key, const char *value, int64_t lease);
/*
 * etcd_list - the keys under prefix (a non-empty prefix; at most max, 1 to
 * 1024, in key order) into kvs[0..max): the number read (0 when none), or
 * the codes above (-EPROTO when a value is longer than ETCD_VALUE_MAX).
 */
int etcd_list(struct etcd_client *e, const char *prefix, struct etcd_kv *kvs, size_t max);

/*
 * The bounded JSON extractor the client parses replies with (etcd_json.c),
 * exposed for tests. etcd_json_find - the value at path in the JSON text
 * s[0..n): path elements are object member names, or "#N" for the N-th
 * element of an array. 0 with *v and *vlen the raw text of the value (a
 * string keeps its quotes); -ENOENT when absent, -EPROTO when the text is
 * malformed on the way there or nests deeper than 32. Pure; any thread.
 */
int etcd_json_find(const char *s, size_t n, const char *const *path, size_t depth, const char **v,
		   size_t *vlen);
/* etcd_json_int - the integer at path, written as digits or as a string of
 * digits (protobuf's JSON for int64); -ENOENT, -EPROTO (not such a number or
 * out of range). */
int etcd_json_int(const char *s, size_t n, const char *const *path, size_t depth, int64_t *out);
/* etcd_json_bool - 1 for true, 0 for false or absent, -EPROTO otherwise. */
int etcd_json_bool(const char *s, size_t n, const char *const *path, size_t depth);
/* etcd_b64_encode - standard base64 of src into dst (cap bytes, NUL
 * terminated); the length written, or -ENOSPC. */
int etcd_b64_encode(const void *src, size_t n, char *dst, size_t cap);
/* etcd_b64_decode - decode n base64 chars (standard alphabet, padded) into
 * dst (cap bytes); the length decoded, -EPROTO on bad input, -ENOSPC. */
int etcd_b64_decode(const char *src, size_t n, void *dst, size_t cap);

#endif /* LUNAR_ETCD_ETCD_H */
