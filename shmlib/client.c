/*
 * client.c - the handle: lunar_connect/lunar_close and lunar_health.
 * Options resolve once at connect (opts, then the environment, then
 * defaults); the session behind the handle is replaced transparently when
 * the proxy restarts (conn.c), registered memory with it (region.c).
 */
#include "shm_int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "key.h"
#include "log.h"
#include "uds.h"

#define SHM_TIMEOUT_DEFAULT_MS 30000u

static unsigned timeout_resolve(unsigned given)
{
	const char *s = getenv("LUNAR_TIMEOUT_MS");
	unsigned long v;
	char *end;

	if (!given && s && *s) {
		errno = 0;
		v = strtoul(s, &end, 10);
		if (errno || *end || !v)
			LC_WARN(SHM_LOG, "LUNAR_TIMEOUT_MS=%s ignored: not a positive number", s);
		else
			given = v > INT_MAX ? INT_MAX : (unsigned)v;
	}
	if (!given)
		given = SHM_TIMEOUT_DEFAULT_MS;
	/* poll(2) takes an int. */
	return given > INT_MAX ? INT_MAX : given;
}

static int client_config(struct lunar_client *c, const struct lunar_opts *opts)
{
	const char *path = opts && opts->socket_path ? opts->socket_path : getenv("LUNAR_SOCKET");
	const char *tenant = opts ? opts->tenant : NULL;

	if (path && *path) {
		if (strlen(path) >= sizeof(c->path))
			return LUNAR_ERR_INVALID_PARAMS;
		strcpy(c->path, path);
	} else {
		lc_uds_default_path(c->path, sizeof(c->path));
	}
	/* No tenant: the empty name, which the proxy takes as "default". */
	if (tenant) {
		size_t len = strnlen(tenant, LC_TENANT_MAX);

		if (len >= LC_TENANT_MAX || lc_tenant_check(tenant, len))
			return LUNAR_ERR_INVALID_PARAMS;
		memcpy(c->tenant, tenant, len);
	}
	c->timeout_ms = timeout_resolve(opts ? opts->timeout_ms : 0);
	c->arena_bytes = opts ? opts->arena_bytes : 0;
	return 0;
}

static int client_open(const struct lunar_opts *opts, struct lunar_client **out)
{
	struct lunar_client *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return LUNAR_ERR_INTERNAL;
	c->fork_gen = shm_fork_generation();
	rc = client_config(c, opts);
	if (rc)
		goto err_free;
	rc = shm_regs_init(c);
	if (rc)
		goto err_free;
	rc = shm_conn_open(c, &c->conn);
	if (rc)
		goto err_regs;
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->alloc_lock, NULL);
	*out = c;
	return 0;
err_regs:
	shm_regs_fini(c);
err_free:
	free(c);
	return rc;
}

/* Not a cancellation point either (see shm_call_begin): a cancel in the
 * handshake or a log line would leak the handle and its session. */
int lunar_connect(const struct lunar_opts *opts, struct lunar_client **out)
{
	int rc, cancel;

	if (!out)
		return LUNAR_ERR_INVALID_PARAMS;
	*out = NULL;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
	rc = client_open(opts, out);
	pthread_setcancelstate(cancel, NULL);
	return rc;
}

/* An inherited handle in a forked child: the parent's threads may have held
 * its locks at the fork, so only this process's copies of the memory go. */
static void client_forget(struct lunar_client *c)
{
	for (uint32_t i = 0; i < c->nregs; i++)
		close(c->regs[i].fd);
	shm_chunks_fini(c);
	shm_conns_forget(c);
	free(c);
}

void lunar_close(struct lunar_client *c)
{
	int cancel;

	if (!c)
		return;
	if (shm_call_begin(c, &cancel)) {
		client_forget(c);
		return;
	}
	/* The proxy frees its side, registered regions included, when it
	 * sees the socket close: nothing is unregistered one by one. */
	shm_regs_fini(c);
	shm_chunks_fini(c);
	shm_conn_put(c->conn);
	shm_conns_free(c);
	pthread_mutex_destroy(&c->alloc_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
	shm_call_end(cancel);
}

int lunar_proxy_http_addr(struct lunar_client *c, char *buf, size_t cap)
{
	struct shm_conn *cn;
	size_t n;
	int cancel, rc;

	if (!c || !buf || !cap)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = shm_call_begin(c, &cancel);
	if (rc)
		return rc;
	rc = shm_client_acquire(c, shm_deadline(c), &cn);
	if (!rc) {
		n = strlen(cn->http_addr);
		rc = n < cap ? (int)n : LUNAR_ERR_BUFFER_OVERFLOW;
		if (n < cap)
			memcpy(buf, cn->http_addr, n + 1);
		shm_conn_put(cn);
	}
	shm_call_end(cancel);
	return rc;
}

int lunar_health(struct lunar_client *c)
{
	static const struct shm_op op = {.op = LC_OP_HEALTH};
	int64_t rc;

	if (!c)
		return LUNAR_ERR_INVALID_PARAMS;
	rc = shm_run_raw(c, &op, NULL, 0);
	return rc == LUNAR_ERR_PROXY_UNAVAILABLE ? 1 : (int)rc;
}
