/*
 * store_c.c - Mooncake's store C ABI (store_c.h) over the lunar_* calls. A
 * mooncake_store_t is a small handle around one lunar_client; setup connects
 * it to the node's proxy. Mooncake's conventions hold at this edge: NULL
 * arguments and unset handles are -1, batches have no size limit (they go to
 * the proxy in slices of LUNAR_BATCH_MAX keys).
 */
#include "store_c.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "atomic.h"
#include "log.h"
#include "lunar.h"

#define STORE_LOG "store_c"
/* Mooncake returns -1 for bad arguments, whatever the reason. */
#define STORE_EINVAL (-1)

struct store_handle {
	pthread_mutex_t lock;	     /* serializes setup and init_all */
	struct lunar_client *client; /* NULL until setup; written once, under lock */
};

/* The handle's client, or NULL when store is NULL or not set up. Any thread;
 * pairs with the release store in store_connect. */
static struct lunar_client *store_client(mooncake_store_t store)
{
	struct store_handle *h = store;

	return h ? lc_load_acquire(&h->client) : NULL;
}

static const char *str_or(const char *s)
{
	return s ? s : "(null)";
}

mooncake_store_t mooncake_store_create(void)
{
	struct store_handle *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	pthread_mutex_init(&h->lock, NULL);
	return h;
}

void mooncake_store_destroy(mooncake_store_t store)
{
	struct store_handle *h = store;

	if (!h)
		return;
	lunar_close(h->client);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* Connect once; a second setup on a connected handle is a no-op, as the
 * proxy it would reach is the same node's. The callers hold cancellation
 * off, as liblunar's calls do: a cancel at the log line would leave h->lock
 * held for good. */
static int store_connect(struct store_handle *h)
{
	struct lunar_client *c;
	int rc = 0;

	pthread_mutex_lock(&h->lock);
	if (h->client)
		goto out_unlock;
	rc = lunar_connect(NULL, &c);
	if (rc) {
		LC_WARN(STORE_LOG, "cannot connect to lunar-proxy: %s", lunar_strerror(rc));
		goto out_unlock;
	}
	lc_store_release(&h->client, c);
out_unlock:
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
			 const char *metadata_server, uint64_t global_segment_size,
			 uint64_t local_buffer_size, const char *protocol, const char *device_name,
			 const char *master_server_addr)
{
	int rc, cancel;

	if (!store)
		return STORE_EINVAL;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	LC_INFO(STORE_LOG,
		"setup: local_hostname=%s metadata_server=%s global_segment_size=%llu "
		"local_buffer_size=%llu protocol=%s device=%s master=%s are lunar-proxy "
		"settings; ignored here",
		str_or(local_hostname), str_or(metadata_server),
		(unsigned long long)global_segment_size, (unsigned long long)local_buffer_size,
		str_or(protocol), str_or(device_name), str_or(master_server_addr));
	rc = store_connect(store);
	pthread_setcancelstate(cancel, NULL);
	return rc;
}

int mooncake_store_init_all(mooncake_store_t store, const char *protocol, const char *device_name,
			    uint64_t mount_segment_size)
{
	int rc, cancel;

	if (!store)
		return STORE_EINVAL;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	LC_INFO(STORE_LOG,
		"init_all: protocol=%s device=%s mount_segment_size=%llu are lunar-proxy "
		"settings; ignored here",
		str_or(protocol), str_or(device_name), (unsigned long long)mount_segment_size);
	rc = store_connect(store);
	pthread_setcancelstate(cancel, NULL);
	return rc;
}

int mooncake_store_health_check(mooncake_store_t store)
{
	struct lunar_client *c = store_client(store);

	if (!store)
		return STORE_EINVAL;
	/* lunar_health already says 1 for an unreachable proxy, 2 for the master. */
	return c ? lunar_health(c) : 1;
}

/* cfg from Mooncake's config; 0, or INVALID_PARAMS for counts that do not
 * fit. */
static int store_cfg(const mooncake_replicate_config_t *mc, struct lunar_put_cfg *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	if (!mc)
		return 0;
	if (mc->replica_num > UINT_MAX || mc->preferred_segments_count > UINT_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	cfg->replica_num = (unsigned)mc->replica_num;
	cfg->soft_pin = mc->with_soft_pin != 0;
	cfg->hard_pin = mc->with_hard_pin != 0;
	if (mc->preferred_segments) {
		cfg->preferred_segments = (const char *const *)mc->preferred_segments;
		cfg->preferred_count = (unsigned)mc->preferred_segments_count;
	}
	return 0;
}

int mooncake_store_put(mooncake_store_t store, const char *key, const void *value, size_t size,
		       const mooncake_replicate_config_t *config)
{
	struct lunar_client *c = store_client(store);
	struct lunar_put_cfg cfg;
	int rc;

	if (!c || !key || (!value && size))
		return STORE_EINVAL;
	rc = store_cfg(config, &cfg);
	return rc ? rc : lunar_put(c, key, value, size, &cfg);
}

int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
			    const mooncake_replicate_config_t *config)
{
	return mooncake_store_put(store, key, buffer, size, config);
}

/* Mooncake's whole-call checks for the batch calls: -1 when any key is
 * NULL or a buffer is NULL with a nonzero size. */
static int batch_check(const char **keys, void **buffers, const size_t *sizes, size_t count)
{
	for (size_t i = 0; i < count; i++) {
		if (!keys[i] || (buffers && !buffers[i] && sizes[i]))
			return STORE_EINVAL;
	}
	return 0;
}

/* One iovec per key, rebuilt for each slice of at most LUNAR_BATCH_MAX keys. */
struct batch_iov {
	struct iovec iov[LUNAR_BATCH_MAX];
	const struct iovec *iovp[LUNAR_BATCH_MAX];
	int cnt[LUNAR_BATCH_MAX];
};

static void batch_iov_fill(struct batch_iov *b, void **buffers, const size_t *sizes, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		b->iov[i] = (struct iovec){buffers[i], sizes[i]};
		b->iovp[i] = &b->iov[i];
		b->cnt[i] = 1;
	}
}

/* A slice that failed as a whole ends the call: the keys not yet sent get
 * the same code. */
static void fill_int(int *results, size_t n, int rc)
{
	for (size_t i = 0; i < n; i++)
		results[i] = rc;
}

static void fill_i64(int64_t *results, size_t n, int rc)
{
	for (size_t i = 0; i < n; i++)
		results[i] = rc;
}

int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
				  const size_t *sizes, size_t count,
				  const mooncake_replicate_config_t *config, int *results_out)
{
	struct lunar_client *c = store_client(store);
	struct lunar_put_cfg cfg;
	struct batch_iov *b;
	int rc;

	if (!c || !keys || !buffers || !sizes || !results_out ||
	    batch_check(keys, buffers, sizes, count))
		return STORE_EINVAL;
	rc = store_cfg(config, &cfg);
	if (rc || !count)
		return rc;
	b = malloc(sizeof(*b));
	if (!b)
		return LUNAR_ERR_INTERNAL;
	for (size_t off = 0; off < count; off += LUNAR_BATCH_MAX) {
		size_t n = count - off < LUNAR_BATCH_MAX ? count - off : LUNAR_BATCH_MAX;

		batch_iov_fill(b, buffers + off, sizes + off, n);
		rc = lunar_batch_put(c, n, keys + off, b->iovp, b->cnt, &cfg, results_out + off);
		if (rc) {
			fill_int(results_out + off + n, count - off - n, rc);
			break;
		}
	}
	free(b);
	return rc;
}

int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer, size_t size)
{
	struct lunar_client *c = store_client(store);

	if (!c || !key || (!buffer && size))
		return STORE_EINVAL;
	return lunar_get_into(c, key, buffer, size);
}

int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
				  const size_t *sizes, size_t count, int64_t *results_out)
{
	struct lunar_client *c = store_client(store);
	struct batch_iov *b;
	int rc = 0;

	if (!c || !keys || !buffers || !sizes || !results_out ||
	    batch_check(keys, buffers, sizes, count))
		return STORE_EINVAL;
	if (!count)
		return 0;
	b = malloc(sizeof(*b));
	if (!b)
		return LUNAR_ERR_INTERNAL;
	for (size_t off = 0; off < count; off += LUNAR_BATCH_MAX) {
		size_t n = count - off < LUNAR_BATCH_MAX ? count - off : LUNAR_BATCH_MAX;

		batch_iov_fill(b, buffers + off, sizes + off, n);
		rc = lunar_batch_get_into(c, n, keys + off, b->iovp, b->cnt, results_out + off);
		if (rc) {
			fill_i64(results_out + off + n, count - off - n, rc);
			break;
		}
	}
	free(b);
	return rc;
}

int mooncake_store_is_exist(mooncake_store_t store, const char *key)
{
	struct lunar_client *c = store_client(store);

	if (!c || !key)
		return STORE_EINVAL;
	return lunar_exists(c, key);
}

int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
				  int *results_out)
{
	struct lunar_client *c = store_client(store);
	int rc = 0;

	if (!c || !keys || !results_out || batch_check(keys, NULL, NULL, count))
		return STORE_EINVAL;
	for (size_t off = 0; off < count; off += LUNAR_BATCH_MAX) {
		size_t n = count - off < LUNAR_BATCH_MAX ? count - off : LUNAR_BATCH_MAX;

		rc = lunar_batch_exists(c, n, keys + off, results_out + off);
		if (rc) {
			fill_int(results_out + off + n, count - off - n, rc);
			break;
		}
	}
	return rc;
}

int64_t mooncake_store_get_size(mooncake_store_t store, const char *key)
{
	struct lunar_client *c = store_client(store);

	if (!c || !key)
		return STORE_EINVAL;
	return lunar_get_size(c, key);
}

int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len)
{
	char name[HOST_NAME_MAX + 1];
	size_t len;

	if (!store || !buf_out || !buf_len)
		return STORE_EINVAL;
	if (gethostname(name, sizeof(name)))
		return LUNAR_ERR_INTERNAL;
	name[sizeof(name) - 1] = '\0'; /* POSIX leaves a truncated name unterminated */
	len = strlen(name);
	if (len >= buf_len)
		return STORE_EINVAL;
	memcpy(buf_out, name, len + 1);
	return 0;
}

int mooncake_store_remove(mooncake_store_t store, const char *key, int force)
{
	struct lunar_client *c = store_client(store);

	if (!c || !key)
		return STORE_EINVAL;
	return lunar_remove(c, key, force);
}

int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force)
{
	struct lunar_client *c = store_client(store);

	if (!c || !pattern)
		return STORE_EINVAL;
	return lunar_remove_by_regex(c, pattern, force);
}

int64_t mooncake_store_remove_all(mooncake_store_t store, int force)
{
	struct lunar_client *c = store_client(store);

	if (!c)
		return STORE_EINVAL;
	return lunar_remove_all(c, force);
}

/*
 * Mooncake registers any memory with its transfer engine. Only sealed memfd
 * memory can be shared with the proxy; other memory (LUNAR_ERR_INVALID_PARAMS
 * from lunar_register) still works, staged through the arena, so it is
 * accepted as Mooncake accepts it: a program that checks the result runs
 * unchanged. Unregistering such memory succeeds likewise.
 */
int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size)
{
	struct lunar_client *c = store_client(store);
	int rc;

	if (!c || !buffer || !size)
		return STORE_EINVAL;
	rc = lunar_register(c, buffer, size);
	return rc == LUNAR_ERR_INVALID_PARAMS ? 0 : rc;
}

int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer)
{
	struct lunar_client *c = store_client(store);
	int rc;

	if (!c || !buffer)
		return STORE_EINVAL;
	rc = lunar_unregister(c, buffer);
	return rc == LUNAR_ERR_INVALID_PARAMS ? 0 : rc;
}
