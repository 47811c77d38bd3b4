/*
 * batch.c - the keyed path every object call takes (a single-key call is a
 * batch of one): per-key checks on private copies of the caller's scatter
 * lists, one request for the keys that passed, and results scattered back
 * index-aligned. Also the public batch calls.
 *
 * A batch whose request fails as a whole (proxy gone, arena too small)
 * returns that code and also stores it as every key's result.
 */
#include "shm_int.h"

#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "key.h"

int shm_key_check(const char *key, size_t *len)
{
	if (!key)
		return LUNAR_ERR_INVALID_KEY;
	*len = strnlen(key, LUNAR_KEY_MAX + 1);
	return lc_key_check(key, *len);
}

/*
 * Each of the caller's counts, read once into cnt[i] (0 when out of range,
 * which iov_snap refuses); returns their sum, the room the snapshots need.
 */
static size_t iov_counts(const int *iovcnts, size_t n, size_t *cnt)
{
	size_t sum = 0;

	for (size_t i = 0; i < n; i++) {
		int k = LC_READ_ONCE(iovcnts[i]);

		cnt[i] = k > 0 && k <= LUNAR_IOV_MAX ? (size_t)k : 0;
		sum += cnt[i];
	}
	return sum;
}

/*
 * Copy the caller's scatter list of cnt pieces to out, then check the copy:
 * another thread of the application may change its iovecs while the call
 * runs, and layout, staging and copy-back must all see the same lengths. A
 * value or a destination has at least one byte (values are never empty, and
 * the protocol has no item without segments for put or get).
 */
static int iov_snap(const struct iovec *iov, size_t cnt, struct iovec *out)
{
	size_t total = 0;

	if (!iov || !cnt)
		return LUNAR_ERR_INVALID_PARAMS;
	memcpy(out, iov, cnt * sizeof(*out));
	for (size_t j = 0; j < cnt; j++) {
		if ((!out[j].iov_base && out[j].iov_len) || total + out[j].iov_len < total)
			return LUNAR_ERR_INVALID_PARAMS;
		total += out[j].iov_len;
	}
	return total ? 0 : LUNAR_ERR_INVALID_PARAMS;
}

/* Batches up to this many keys count their scatter lists on the stack: a
 * single-key call then makes one allocation. */
#define SHM_COUNTS_ON_STACK 16

/*
 * One allocation: the items, idx (each item's index in the call), and the
 * snapshots of the accepted items' scatter lists, whose room the counts,
 * read once first, give.
 */
int64_t shm_batch_run(struct lunar_client *c, const struct shm_op *op, size_t n,
		      const char *const *keys, const struct iovec *const *iovs, const int *iovcnts,
		      int64_t *results)
{
	size_t on_stack[SHM_COUNTS_ON_STACK], *cnt = on_stack, nv = 0;
	struct shm_item *items;
	struct iovec *v;
	size_t *idx;
	uint32_t m = 0;
	int64_t rc = 0;

	if (iovs) {
		if (n > SHM_COUNTS_ON_STACK && !(cnt = malloc(n * sizeof(*cnt))))
			return LUNAR_ERR_INTERNAL;
		nv = iov_counts(iovcnts, n, cnt);
	}
	items = malloc(n * (sizeof(*items) + sizeof(*idx)) + nv * sizeof(*v));
	if (!items) {
		rc = LUNAR_ERR_INTERNAL;
		goto out;
	}
	idx = (size_t *)(items + n);
	v = (struct iovec *)(idx + n);
	for (size_t i = 0; i < n; i++) {
		size_t k = iovs ? cnt[i] : 0, key_len = 0;
		const char *key = LC_READ_ONCE(keys[i]);
		int bad = shm_key_check(key, &key_len);

		if (!bad && iovs)
			bad = iov_snap(iovs[i], k, v);
		if (bad) {
			if (results)
				results[i] = bad;
			continue;
		}
		items[m] = (struct shm_item){key, key_len, iovs ? v : NULL, (int)k, 0};
		idx[m++] = i;
		v += k;
	}
	if (m)
		rc = shm_run_items(c, op, items, m);
	for (uint32_t k = 0; k < m && results; k++)
		results[idx[k]] = items[k].result;
	free(items);
out:
	if (cnt != on_stack)
		free(cnt);
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
	size_t valid = 0, len;
	int64_t rc;

	rc = batch_args(c, n, keys != NULL);
	if (rc)
		return rc > 0 ? 0 : rc;
	while (valid < n && !shm_key_check(keys[valid], &len))
		valid++;
	if (!valid)
		return 0;
	rc = shm_batch_run(c, &op, valid, keys, NULL, NULL, NULL);
	return rc > (int64_t)valid ? (int64_t)valid : rc;
}
