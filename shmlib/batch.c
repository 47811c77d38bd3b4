/*
 * batch.c - the keyed path every object call takes (a single-key call is a
 * batch of one): per-key checks, one request for the keys that passed, and
 * results scattered back index-aligned. Also the public batch calls.
 *
 * A batch whose request fails as a whole (proxy gone, arena too small)
 * returns that code and also stores it as every key's result.
 */
#include "shm_int.h"

#include <stdlib.h>
#include <string.h>

#include "key.h"

static int key_check(const char *key)
{
	return key ? lc_key_check(key, strnlen(key, LUNAR_KEY_MAX + 1)) : LUNAR_ERR_INVALID_KEY;
}

/* A value or a destination: at least one byte (values are never empty,
 * and the protocol has no item without segments for put or get). */
static int iov_check(const struct iovec *iov, int iovcnt)
{
	size_t total = 0;

	if (!iov || iovcnt <= 0 || iovcnt > LUNAR_IOV_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	for (int j = 0; j < iovcnt; j++) {
		if ((!iov[j].iov_base && iov[j].iov_len) || total + iov[j].iov_len < total)
			return LUNAR_ERR_INVALID_PARAMS;
		total += iov[j].iov_len;
	}
	return total ? 0 : LUNAR_ERR_INVALID_PARAMS;
}

int64_t shm_batch_run(struct lunar_client *c, const struct shm_op *op, size_t n,
		      const char *const *keys, const struct iovec *const *iovs, const int *iovcnts,
		      int64_t *results)
{
	struct shm_item *items = malloc(n * (sizeof(*items) + sizeof(size_t)));
	size_t *idx = (size_t *)(items + n);
	uint32_t m = 0;
	int64_t rc = 0;

	if (!items)
		return LUNAR_ERR_INTERNAL;
	for (size_t i = 0; i < n; i++) {
		int bad = key_check(keys[i]);

		if (!bad && iovs)
			bad = iov_check(iovs[i], iovcnts[i]);
		if (bad) {
			if (results)
				results[i] = bad;
			continue;
		}
		items[m] = (struct shm_item){keys[i], strlen(keys[i]), iovs ? iovs[i] : NULL,
					     iovs ? iovcnts[i] : 0, 0};
		idx[m++] = i;
	}
	if (m)
		rc = shm_run_items(c, op, items, m);
	for (uint32_t k = 0; k < m && results; k++)
		results[idx[k]] = items[k].result;
	free(items);
	return rc;
}

struct shm_op shm_put_op(uint16_t op, const struct lunar_put_cfg *cfg)
{
	struct shm_op o = {.op = op, .replica_num = 1};

	if (!cfg)
		return o;
	if (cfg->replica_num)
		o.replica_num = cfg->replica_num;
	o.flags = (uint16_t)((cfg->hard_pin ? LC_SQE_HARD_PIN : 0) |
			     (cfg->soft_pin ? LC_SQE_SOFT_PIN : 0));
	o.soft_pin_ttl_ms = cfg->soft_pin_ttl_ms;
	if (cfg->preferred_segments) {
		o.pref = cfg->preferred_segments;
		o.npref = cfg->preferred_count;
	}
	return o;
}

/* Whole-call checks shared by the public batch calls: 1 when n == 0 (do
 * nothing, whatever the arrays), else 0 or INVALID_PARAMS. */
static int batch_args(struct lunar_client *c, size_t n, int arrays_given)
{
	if (!c || n > LUNAR_BATCH_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	if (!n)
		return 1;
	return arrays_given ? 0 : LUNAR_ERR_INVALID_PARAMS;
}

/* The int-result batch calls go through a 64-bit result array. */
static int batch_int(struct lunar_client *c, const struct shm_op *op, size_t n,
		     const char *const *keys, const struct iovec *const *iovs, const int *iovcnts,
		     int *results)
{
	int64_t *r64 = malloc(n * sizeof(*r64));
	int64_t rc;

	if (!r64)
		return LUNAR_ERR_INTERNAL;
	rc = shm_batch_run(c, op, n, keys, iovs, iovcnts, r64);
	for (size_t i = 0; i < n; i++)
		results[i] = (int)r64[i];
	free(r64);
	return rc < 0 ? (int)rc : 0;
}

int lunar_batch_put(struct lunar_client *c, size_t n, const char *const *keys,
		    const struct iovec *const *iovs, const int *iovcnts,
		    const struct lunar_put_cfg *cfg, int *results)
{
	struct shm_op op = shm_put_op(LC_OP_PUT, cfg);
	int rc = batch_args(c, n, keys && iovs && iovcnts && results);

	if (rc)
		return rc > 0 ? 0 : rc;
	return batch_int(c, &op, n, keys, iovs, iovcnts, results);
}

int lunar_batch_get_into(struct lunar_client *c, size_t n, const char *const *keys,
			 const struct iovec *const *iovs, const int *iovcnts, int64_t *results)
{
	struct shm_op op = {.op = LC_OP_GET};
	int rc = batch_args(c, n, keys && iovs && iovcnts && results);
	int64_t r;

	if (rc)
		return rc > 0 ? 0 : rc;
	r = shm_batch_run(c, &op, n, keys, iovs, iovcnts, results);
	return r < 0 ? (int)r : 0;
}

int lunar_batch_exists(struct lunar_client *c, size_t n, const char *const *keys, int *results)
{
	struct shm_op op = {.op = LC_OP_EXISTS};
	int rc = batch_args(c, n, keys && results);

	if (rc)
		return rc > 0 ? 0 : rc;
	return batch_int(c, &op, n, keys, NULL, NULL, results);
}

/* Keys after the first invalid one cannot be part of an existing prefix,
 * so they are not sent. */
int64_t lunar_prefix_match(struct lunar_client *c, size_t n, const char *const *keys)
{
	struct shm_op op = {.op = LC_OP_PREFIX_MATCH};
	size_t valid = 0;
	int64_t rc;

	rc = batch_args(c, n, keys != NULL);
	if (rc)
		return rc > 0 ? 0 : rc;
	while (valid < n && !key_check(keys[valid]))
		valid++;
	if (!valid)
		return 0;
	rc = shm_batch_run(c, &op, valid, keys, NULL, NULL, NULL);
	return rc > (int64_t)valid ? (int64_t)valid : rc;
}
