/*
 * lunar.h - the Lunar client library (liblunar), the one installed header.
 *
 * An application links liblunar and talks to the node's lunar-proxy through a
 * sealed shared-memory region and a UNIX socket; it never touches the network.
 * Every call returns >= 0 on success and a negative LUNAR_* code on failure.
 * All calls are thread-safe on one handle, and none is a cancellation point
 * (a cancel acts after the call). A handle belongs to the process that
 * opened it: in a forked child every call on an inherited handle returns
 * LUNAR_ERR_ILLEGAL_CLIENT; the child connects afresh.
 */
#ifndef LUNAR_H
#define LUNAR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: Mooncake's numbering, plus the sidecar's own (-2000..). */
enum lunar_code {
	LUNAR_OK = 0,
	LUNAR_ERR_INTERNAL = -1,
	LUNAR_ERR_BUFFER_OVERFLOW = -10,
	LUNAR_ERR_SEGMENT_NOT_FOUND = -101,
	LUNAR_ERR_SEGMENT_ALREADY_EXISTS = -102,
	LUNAR_ERR_NO_AVAILABLE_HANDLE = -200,
	LUNAR_ERR_INVALID_KEY = -400,
	LUNAR_ERR_INVALID_PARAMS = -600,
	LUNAR_ERR_ILLEGAL_CLIENT = -601,
	LUNAR_ERR_REPLICA_IS_NOT_READY = -703,
	LUNAR_ERR_OBJECT_NOT_FOUND = -704,
	LUNAR_ERR_OBJECT_ALREADY_EXISTS = -705,
	LUNAR_ERR_OBJECT_HAS_LEASE = -706,
	LUNAR_ERR_LEASE_EXPIRED = -707,
	LUNAR_ERR_TRANSFER_FAIL = -800,
	LUNAR_ERR_CHECKSUM_MISMATCH = -801,
	LUNAR_ERR_RPC_FAIL = -900,
	LUNAR_ERR_RPC_TIMEOUT = -901,
	LUNAR_ERR_ETCD_OPERATION = -1000,
	LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS = -1010,
	LUNAR_ERR_FILE_READ_FAIL = -1102,
	LUNAR_ERR_FILE_WRITE_FAIL = -1103,
	LUNAR_ERR_TENANT_QUOTA_EXCEEDED = -1700,
	LUNAR_ERR_PROXY_UNAVAILABLE = -2000,
	LUNAR_ERR_UNAUTHORIZED = -2001,
	LUNAR_ERR_TOO_MANY_CLIENTS = -2002,
	LUNAR_ERR_PROTOCOL = -2003,
	LUNAR_ERR_VERSION_MISMATCH = -2004,
	LUNAR_ERR_BUSY = -2005,
};

/* Largest key, in bytes; keys are UTF-8 without NUL or control characters. */
#define LUNAR_KEY_MAX 4096
/* Most keys one batch call may carry. */
#define LUNAR_BATCH_MAX 1024
/* Most iovecs per key. */
#define LUNAR_IOV_MAX 64

struct lunar_client; /* opaque */

/* Zeroed = defaults; more fields may follow in later versions. */
struct lunar_opts {
	const char *socket_path; /* NULL: $LUNAR_SOCKET, then the default path */
	const char *tenant;	 /* NULL: "default" */
	/* A call that times out returns PROXY_UNAVAILABLE once the proxy is
	 * done with its memory, waiting up to the timeout again for that. */
	unsigned timeout_ms; /* 0: $LUNAR_TIMEOUT_MS, then 30000 */
	/*
	 * The size of the session's shared arena. Each call copies its keys
	 * and lists there, and its value too unless the value lies in memory
	 * from lunar_alloc or lunar_register. The arena has two parts:
	 * - small cells, 8 KiB per completion slot but at most an eighth of
	 *   the arena (2 MiB of the proxy's default 64 MiB), which small calls
	 *   take without a lock;
	 * - the rest, which bounds the largest value that can be copied in.
	 * A larger value is copied through lunar_alloc memory instead (whose
	 * chunks stay until lunar_close); a larger batch goes as several
	 * requests.
	 */
	size_t arena_bytes; /* 0: the proxy's default (--arena-size) */
};

/* NULL or zeroed = 1 replica, no pins. */
struct lunar_put_cfg {
	unsigned replica_num;
	int soft_pin;		  /* 1: soft pin with the master's default TTL */
	unsigned soft_pin_ttl_ms; /* 0: default */
	int hard_pin;
	const char *const *preferred_segments;
	unsigned preferred_count;
};

/*
 * lunar_connect - connect to the node's proxy and map the shared region.
 * On success *out owns the connection until lunar_close(). Blocks for the
 * handshake (bounded by the timeout).
 */
int lunar_connect(const struct lunar_opts *opts, struct lunar_client **out);
/* lunar_close - end the session; NULL is a no-op. No call may be in flight. */
void lunar_close(struct lunar_client *c);

/* lunar_put - store buf[0..len) under key. An existing key returns 0 and
 * keeps its first value; LUNAR_ERR_TRANSFER_FAIL (try again) when that
 * value is one whose write failed and which the proxy is taking back. */
int lunar_put(struct lunar_client *c, const char *key, const void *buf, size_t len,
	      const struct lunar_put_cfg *cfg);
/* lunar_putv - as lunar_put, the value given as a scatter list. */
int lunar_putv(struct lunar_client *c, const char *key, const struct iovec *iov, int iovcnt,
	       const struct lunar_put_cfg *cfg);
/* lunar_upsert - store or replace; readers see old or new bytes, never a mix. */
int lunar_upsert(struct lunar_client *c, const char *key, const void *buf, size_t len,
		 const struct lunar_put_cfg *cfg);
/* lunar_get_into - read the value into buf; returns its size, or
 * LUNAR_ERR_BUFFER_OVERFLOW when cap is smaller than the value
 * (LUNAR_ERR_INVALID_PARAMS when cap is 0 or buf NULL). Each read, and each
 * exists or get_size, leases its key for the lease TTL: a client holding
 * leases on the proxy's --max-client-leases keys gets LUNAR_ERR_BUSY for a
 * new key until its leases run out (or it removes keys it read). On any
 * code, what buf holds is unspecified: a large value is copied in as it
 * arrives, before its checksum is known. */
int64_t lunar_get_into(struct lunar_client *c, const char *key, void *buf, size_t cap);
/* lunar_getv - as lunar_get_into, into a scatter list filled in order. */
int64_t lunar_getv(struct lunar_client *c, const char *key, const struct iovec *iov, int iovcnt);
/* lunar_get_size - the value's size in bytes. */
int64_t lunar_get_size(struct lunar_client *c, const char *key);
/* lunar_exists - 1 if key holds a committed value, 0 if not, or a code. */
int lunar_exists(struct lunar_client *c, const char *key);
/* lunar_remove - remove key; a leased object needs force. */
int lunar_remove(struct lunar_client *c, const char *key, int force);
/* lunar_remove_all - remove every object of this tenant; returns the count. */
int64_t lunar_remove_all(struct lunar_client *c, int force);
/* lunar_remove_by_regex - remove this tenant's keys matching POSIX ERE re.
 * INVALID_PARAMS for back-references and for patterns whose nested
 * repetitions multiply past 256 automaton nodes ("(a{0,64}){0,64}"). */
int64_t lunar_remove_by_regex(struct lunar_client *c, const char *re, int force);

/*
 * Batch calls return 0 when the arguments are valid and put per-key results,
 * index-aligned, in results; a bad argument (NULL arrays, n over
 * LUNAR_BATCH_MAX) fails the whole call.
 */
/* lunar_batch_put - lunar_putv for n keys at once (key i's value is
 * iovs[i][0..iovcnts[i])); results[i] is what lunar_putv would return. A
 * key named more than once is put once, from its first occurrence with valid
 * arguments: that value is kept, and every later occurrence's result is the
 * first one's (0 once it is stored, as for a put of an existing key). */
int lunar_batch_put(struct lunar_client *c, size_t n, const char *const *keys,
		    const struct iovec *const *iovs, const int *iovcnts,
		    const struct lunar_put_cfg *cfg, int *results);
/* lunar_batch_get_into - lunar_getv for n keys at once; results[i] is key
 * i's size or code. */
int lunar_batch_get_into(struct lunar_client *c, size_t n, const char *const *keys,
			 const struct iovec *const *iovs, const int *iovcnts, int64_t *results);
/* lunar_batch_exists - lunar_exists for n keys at once; results[i] is 1, 0
 * or a code. */
int lunar_batch_exists(struct lunar_client *c, size_t n, const char *const *keys, int *results);
/* lunar_prefix_match - how many leading keys all exist; one round trip. */
int64_t lunar_prefix_match(struct lunar_client *c, size_t n, const char *const *keys);

/*
 * Asynchronous single-key calls: lunar_put_async and lunar_get_async start
 * what lunar_put and lunar_get_into do and return without waiting for the
 * proxy; lunar_wait then returns what that call returns. One thread can
 * so keep several requests in flight (as an event loop keeps several
 * connections busy) instead of switching between threads for each.
 *
 * On 0, *out is a pending call that exactly one lunar_wait must finish (it
 * frees it), on any thread, before lunar_close; a thread cancelled with
 * calls pending must finish them too (pthread_cleanup_push). It is not
 * usable in a forked child. A code means nothing is pending (*out is
 * NULL): bad arguments as for the synchronous call, PROXY_UNAVAILABLE, or
 * BUSY at once when the session has no completion slot (256) or no arena
 * space free; then finish a pending call and start again. key and cfg are
 * read only before the start returns; buf must stay valid, unchanged for a
 * put and unread for a get, until lunar_wait returns, and registered while
 * the call is pending (lunar_unregister waits for such calls). A value,
 * or for a get a cap, too large for the arena runs to its end before the
 * start returns, as the synchronous call would (for a get of a smaller
 * value into a larger buffer, two round trips); else the timeout counts
 * from the start.
 */
struct lunar_pending; /* opaque */
/* lunar_put_async - start lunar_put(c, key, buf, len, cfg); see above. */
int lunar_put_async(struct lunar_client *c, const char *key, const void *buf, size_t len,
		    const struct lunar_put_cfg *cfg, struct lunar_pending **out);
/* lunar_get_async - start lunar_get_into(c, key, buf, cap); see above. */
int lunar_get_async(struct lunar_client *c, const char *key, void *buf, size_t cap,
		    struct lunar_pending **out);
/* lunar_ready - 1 when lunar_wait(p) would return at once: p is done, or
 * its session broke, lost the proxy or passed p's deadline; else 0. Never
 * blocks; while p is not done it looks at the session's socket (a poll).
 * p NULL counts as ready. */
int lunar_ready(struct lunar_pending *p);
/* lunar_wait - wait for p and return its result; frees p (NULL:
 * INVALID_PARAMS). Once it is called, no thread may use p again. */
int64_t lunar_wait(struct lunar_pending *p);

/*
 * Zero-copy memory: a value that lies in memory shared with the proxy is
 * read or written there in place, never copied through the arena.
 */
/*
 * lunar_alloc - len bytes (64-byte aligned) of memory shared with the proxy,
 * or NULL (len 0, out of memory, a forked child's handle). Carved from
 * chunks of at least 64 MiB; making a chunk blocks for one round trip with
 * the proxy. The block is the caller's until lunar_free; every block, freed
 * or not, is unmapped by lunar_close, after which it must not be touched.
 */
void *lunar_alloc(struct lunar_client *c, size_t len);
/*
 * lunar_free - give back a block of lunar_alloc on the same handle for
 * later lunar_alloc calls (its chunk stays mapped). p NULL, or not from
 * lunar_alloc, is ignored. No call may still be using the block. Makes no
 * round trip, but may wait while another thread's lunar_alloc makes a
 * chunk. Only before lunar_close, which frees every block anyway.
 */
void lunar_free(struct lunar_client *c, void *p);
/*
 * lunar_register - share p[0..len) with the proxy so calls use it in place.
 * The range must lie inside one shared, writable mapping of a memfd sealed
 * against shrinking (memfd_create with MFD_ALLOW_SEALING, then F_SEAL_SHRINK);
 * hugetlbfs memfds are refused. Returns 0 (also when exactly this range is
 * registered already), or INVALID_PARAMS (not such memory, NULL or empty,
 * overlaps a registered range), NO_AVAILABLE_HANDLE (the session's table of
 * ranges is full), or the proxy's refusal. Blocks for one round trip. The
 * memory stays the caller's: keep it mapped until lunar_unregister or
 * lunar_close, which both end the sharing but unmap nothing.
 */
int lunar_register(struct lunar_client *c, void *p, size_t len);
/* lunar_unregister - stop sharing the range lunar_register was given at p,
 * once no call uses it (asynchronous calls pending in it are waited for up
 * to the timeout: BUSY then). */
int lunar_unregister(struct lunar_client *c, void *p);

/*
 * lunar_proxy_http_addr - where the proxy behind c serves HTTP (/metrics,
 * /health, /ready, /disk/status, and /admin/ with an embedded master), as
 * "HOST:PORT" (an IPv6 host in brackets) NUL-terminated in buf[0..cap).
 * Returns its length; 0 with buf "" when the proxy does not say (a proxy
 * older than this call: use its default, 127.0.0.1:9300);
 * BUFFER_OVERFLOW when cap is short (64 bytes always do); INVALID_PARAMS
 * for NULL or cap 0; PROXY_UNAVAILABLE when no proxy answers within the
 * timeout. Connects (or reconnects) if needed, else makes no round trip.
 * Any thread.
 */
int lunar_proxy_http_addr(struct lunar_client *c, char *buf, size_t cap);
/* lunar_health - 0 ok, 1 proxy unreachable, 2 master unreachable. */
int lunar_health(struct lunar_client *c);
/* lunar_strerror - a static string naming code; never NULL. */
const char *lunar_strerror(int code);
/*
 * lunar_error_detail - what the proxy said, beyond the code, about the last
 * call whose completion this thread collected: "" when it said nothing.
 * Today: a put whose value is larger than every segment of the cluster
 * (its code stays NO_AVAILABLE_HANDLE, which engines act on; retrying
 * cannot help). Valid until this thread's next call; never NULL.
 */
const char *lunar_error_detail(void);

#ifdef __cplusplus
}
#endif
#endif /* LUNAR_H */
