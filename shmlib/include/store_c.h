/*
 * store_c.h - Mooncake's store C ABI, served by liblunar.
 *
 * Same names, types and signatures as Mooncake's store_c.h, so a program
 * written against Mooncake relinks against liblunar unchanged. The handle is
 * a connection to the node's lunar-proxy: the resources Mooncake's client
 * would set up itself (segments, transfer engine, master) belong to the
 * proxy here, and the arguments naming them are logged and ignored.
 */
#ifndef LUNAR_STORE_C_H
#define LUNAR_STORE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *mooncake_store_t;

/* NULL or zeroed = 1 replica, no pins. preferred_segments is advisory. */
typedef struct {
	size_t replica_num;
	int with_soft_pin;
	int with_hard_pin;
	const char **preferred_segments;
	size_t preferred_segments_count;
} mooncake_replicate_config_t;

/*
 * Conventions for every call below:
 * - store comes first; a NULL store, a NULL required argument, or a store
 *   that is not set up returns -1;
 * - other failures return the negative codes of lunar.h (Mooncake's
 *   numbering: OBJECT_NOT_FOUND -704, BUFFER_OVERFLOW -10, ...);
 * - strings and arrays are read during the call only; the caller keeps
 *   ownership of every buffer;
 * - calls block until the proxy answers (bounded by $LUNAR_TIMEOUT_MS) and
 *   may run from any number of threads at once on one handle (setup
 *   included); only destroy must not race with other calls on the handle.
 */

/* mooncake_store_create - a new handle, not yet connected; NULL when out of
 * memory. Free with mooncake_store_destroy. */
mooncake_store_t mooncake_store_create(void);
/* mooncake_store_destroy - close the connection and free the handle; NULL
 * is a no-op. No call may be in flight on it. */
void mooncake_store_destroy(mooncake_store_t store);

/*
 * mooncake_store_setup - connect to the node's lunar-proxy (the socket in
 * $LUNAR_SOCKET, else the default path). Every other argument names a
 * resource the proxy owns; they are logged once and ignored (NULL is fine).
 * Returns 0 (also when already set up), or a code such as PROXY_UNAVAILABLE
 * (-2000) when no proxy serves the socket. Blocks for the handshake.
 */
int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
			 const char *metadata_server, uint64_t global_segment_size,
			 uint64_t local_buffer_size, const char *protocol, const char *device_name,
			 const char *master_server_addr);
/* mooncake_store_init_all - as mooncake_store_setup; the arguments are
 * logged and ignored. */
int mooncake_store_init_all(mooncake_store_t store, const char *protocol, const char *device_name,
			    uint64_t mount_segment_size);
/* mooncake_store_health_check - 0 healthy, 1 not set up or the proxy is
 * unreachable, 2 the master is unreachable; -1 for a NULL store. */
int mooncake_store_health_check(mooncake_store_t store);

/* mooncake_store_put - store value[0..size) under key; an existing key
 * keeps its first value and returns 0. */
int mooncake_store_put(mooncake_store_t store, const char *key, const void *value, size_t size,
		       const mooncake_replicate_config_t *config);
/* mooncake_store_put_from - as mooncake_store_put; zero copy when buffer
 * lies in registered memory. */
int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
			    const mooncake_replicate_config_t *config);
/*
 * mooncake_store_batch_put_from - put count keys; results_out[i] gets key
 * i's code. Returns 0 when the arguments are valid (a NULL key, or a NULL
 * buffer with a nonzero size, fails the whole call with -1), else a code.
 */
int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
				  const size_t *sizes, size_t count,
				  const mooncake_replicate_config_t *config, int *results_out);

/* mooncake_store_get_into - read key into buffer; its size in bytes, or
 * BUFFER_OVERFLOW (-10) when size is smaller than the value. */
int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer, size_t size);
/* mooncake_store_batch_get_into - results_out[i] gets key i's size or
 * code. Returns as mooncake_store_batch_put_from. */
int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
				  const size_t *sizes, size_t count, int64_t *results_out);

/* mooncake_store_is_exist - 1, 0, or a code. */
int mooncake_store_is_exist(mooncake_store_t store, const char *key);
/* mooncake_store_batch_is_exist - results_out[i] gets 1, 0 or a code for
 * key i; returns 0 or a code for the whole call. */
int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
				  int *results_out);
/* mooncake_store_get_size - the value's size in bytes, or a code. */
int64_t mooncake_store_get_size(mooncake_store_t store, const char *key);
/* mooncake_store_get_hostname - this node's host name, NUL-terminated, in
 * buf_out; 0, or -1 when buf_len is too small. Needs no setup. */
int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len);

/* mooncake_store_remove - remove key; a leased object needs force. */
int mooncake_store_remove(mooncake_store_t store, const char *key, int force);
/* mooncake_store_remove_by_regex - remove keys matching the POSIX ERE
 * pattern; the count removed, or a code. */
int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force);
/* mooncake_store_remove_all - remove every key of the handle's tenant; the
 * count removed, or a code. */
int64_t mooncake_store_remove_all(mooncake_store_t store, int force);

/*
 * mooncake_store_register_buffer - share buffer[0..size) with the proxy so
 * puts and gets through it are zero copy (lunar_register: the buffer must lie
 * in a memfd sealed against shrinking). Any other buffer also returns 0 and
 * is then copied through the arena, as Mooncake programs register malloc'd
 * memory. Else a code (the session's table of ranges full, the proxy's
 * refusal). The buffer stays the caller's; keep it mapped until
 * unregistered or the handle destroyed.
 */
int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size);
/* mooncake_store_unregister_buffer - undo mooncake_store_register_buffer
 * (lunar_unregister: waits for calls using it); 0 also for a buffer that was
 * never shared, else a code. */
int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer);

#ifdef __cplusplus
}
#endif
#endif /* LUNAR_STORE_C_H */
