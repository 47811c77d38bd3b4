/*
 * async.c - the asynchronous single-key calls: lunar_put_async and
 * lunar_get_async check their arguments as lunar_put and lunar_get_into do
 * and start the request (request.c, shm_start_one); lunar_wait finishes it.
 * One thread may so keep several requests in flight, as an event loop
 * keeps several connections busy, without a thread switch per request.
 */
#include "shm_int.h"

#include <stdlib.h>

static int start(struct lunar_client *c, const struct shm_op *op, const char *key, void *buf,
		 size_t len, struct lunar_pending **out)
{
	struct lunar_pending *p;
	size_t key_len;
	int rc;

	if (!out)
		return LUNAR_ERR_INVALID_PARAMS;
	*out = NULL;
	if (!c || !buf || !len)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = shm_key_check(key, &key_len);
	if (rc)
		return rc;
	p = calloc(1, sizeof(*p));
	if (!p)
		return LUNAR_ERR_INTERNAL;
	p->v = (struct iovec){buf, len};
	p->it = (struct shm_item){key, key_len, &p->v, 1, 0};
	rc = shm_start_one(c, op, p);
	if (rc)
		free(p);
	else
		*out = p;
	return rc;
}

int lunar_put_async(struct lunar_client *c, const char *key, const void *buf, size_t len,
		    const struct lunar_put_cfg *cfg, struct lunar_pending **out)
{
	struct shm_op op = shm_put_op(LC_OP_PUT, cfg);

	return start(c, &op, key, (void *)buf, len, out);
}

int lunar_get_async(struct lunar_client *c, const char *key, void *buf, size_t cap,
		    struct lunar_pending **out)
{
	static const struct shm_op op = {.op = LC_OP_GET};

	return start(c, &op, key, buf, cap, out);
}

int lunar_ready(struct lunar_pending *p)
{
	return !p || shm_pending_ready(p);
}

int64_t lunar_wait(struct lunar_pending *p)
{
	int64_t rc;

	if (!p)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = shm_finish_one(p);
	free(p);
	return rc;
}
