/*
 * ops.c - the public single-object calls. Each keyed call is a batch of one
 * through shm_batch_run; remove_all and remove_by_regex carry no items.
 */
#include "shm_int.h"

#include <string.h>

/* A single-key call: the whole-request code, else the key's result. */
static int64_t one_key(struct lunar_client *c, const struct shm_op *op, const char *key,
		       const struct iovec *iov, int iovcnt)
{
	int valued = op->op == LC_OP_PUT || op->op == LC_OP_UPSERT || op->op == LC_OP_GET;
	int64_t res, rc;

	if (!c)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = shm_batch_run(c, op, 1, &key, valued ? &iov : NULL, &iovcnt, &res);
	return rc < 0 ? rc : res;
}

static int put_one(struct lunar_client *c, uint16_t opc, const char *key, const struct iovec *iov,
		   int iovcnt, const struct lunar_put_cfg *cfg)
{
	struct shm_op op = shm_put_op(opc, cfg);

	return (int)one_key(c, &op, key, iov, iovcnt);
}

int lunar_putv(struct lunar_client *c, const char *key, const struct iovec *iov, int iovcnt,
	       const struct lunar_put_cfg *cfg)
{
	return put_one(c, LC_OP_PUT, key, iov, iovcnt, cfg);
}

int lunar_put(struct lunar_client *c, const char *key, const void *buf, size_t len,
	      const struct lunar_put_cfg *cfg)
{
	struct iovec v = {(void *)buf, len};

	return put_one(c, LC_OP_PUT, key, &v, 1, cfg);
}

int lunar_upsert(struct lunar_client *c, const char *key, const void *buf, size_t len,
		 const struct lunar_put_cfg *cfg)
{
	struct iovec v = {(void *)buf, len};

	return put_one(c, LC_OP_UPSERT, key, &v, 1, cfg);
}

int64_t lunar_getv(struct lunar_client *c, const char *key, const struct iovec *iov, int iovcnt)
{
	static const struct shm_op op = {.op = LC_OP_GET};

	return one_key(c, &op, key, iov, iovcnt);
}

int64_t lunar_get_into(struct lunar_client *c, const char *key, void *buf, size_t cap)
{
	struct iovec v = {buf, cap};

	return lunar_getv(c, key, &v, 1);
}

int64_t lunar_get_size(struct lunar_client *c, const char *key)
{
	static const struct shm_op op = {.op = LC_OP_GET_SIZE};

	return one_key(c, &op, key, NULL, 0);
}

int lunar_exists(struct lunar_client *c, const char *key)
{
	static const struct shm_op op = {.op = LC_OP_EXISTS};

	return (int)one_key(c, &op, key, NULL, 0);
}

int lunar_remove(struct lunar_client *c, const char *key, int force)
{
	struct shm_op op = {.op = LC_OP_REMOVE, .flags = force ? LC_SQE_FORCE : 0};

	return (int)one_key(c, &op, key, NULL, 0);
}

int64_t lunar_remove_all(struct lunar_client *c, int force)
{
	struct shm_op op = {.op = LC_OP_REMOVE_ALL, .flags = force ? LC_SQE_FORCE : 0};

	if (!c)
		return LUNAR_ERR_INVALID_PARAMS;
	return shm_run_raw(c, &op, NULL, 0);
}

int64_t lunar_remove_by_regex(struct lunar_client *c, const char *re, int force)
{
	struct shm_op op = {.op = LC_OP_REMOVE_REGEX, .flags = force ? LC_SQE_FORCE : 0};

	/* The proxy bounds patterns like keys. */
	if (!c || !re || !*re || strnlen(re, LUNAR_KEY_MAX + 1) > LUNAR_KEY_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	return shm_run_raw(c, &op, re, strlen(re));
}
