/*
 * engine.c - the engine object and eng_transport, the one place that picks
 * a transport: local when the endpoint is this engine's own, RDMA when this
 * engine has a device (rdma.c then takes TCP itself for a peer without
 * one), TCP otherwise (which then carries the capability on a keyed
 * engine); eng_xfer, a batch of one (aio.c).
 */
#include "eng_int.h"
#include "rdma_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "clock.h"
#include "cpus.h"
#include "log.h"
#include "lunar.h"

/* Copy cfg with its defaults filled in; checks what the server will trust. */
static int config_init(struct eng_engine *e, const struct eng_config *cfg)
{
	const char *host = cfg->host ? cfg->host : "127.0.0.1";

	if (strlen(host) >= sizeof(e->host))
		return -ENAMETOOLONG;
	strcpy(e->host, host);
	if ((cfg->seg_size && !cfg->seg_base) || !cfg->disk_read != !cfg->disk_length)
		return -EINVAL;
	e->cfg = *cfg;
	e->cfg.host = e->host;
	if (!e->cfg.io_timeout_ms)
		e->cfg.io_timeout_ms = ENG_DEFAULT_TIMEOUT_MS;
	if (!e->cfg.conns_per_peer)
		e->cfg.conns_per_peer = ENG_DEFAULT_CONNS;
	if (!e->cfg.io_threads)
		e->cfg.io_threads = ENG_DEFAULT_IO_THREADS;
	if (!e->cfg.slices)
		e->cfg.slices = lc_usable_cpus() / 2;
	if (e->cfg.slices > ENG_SLICE_MAX)
		e->cfg.slices = ENG_SLICE_MAX;
	if (!e->cfg.slices)
		e->cfg.slices = 1;
	e->timeout_ns = (uint64_t)e->cfg.io_timeout_ms * 1000000ull;
	atomic_init(&e->next_id, 1);
	if (cfg->cluster_key) {
		e->keyed = 1;
		e->key = *cfg->cluster_key;
	}
	e->cfg.cluster_key = NULL; /* ours is e->key: the caller may wipe its copy */
	atomic_init(&e->epoch, 1);
	atomic_init(&e->mount, 0);
	return -pthread_rwlock_init(&e->secret_lock, NULL);
}

static int epoch_lock_init(pthread_rwlock_t *l)
{
	pthread_rwlockattr_t a;
	int rc = pthread_rwlockattr_init(&a);

	if (rc)
		return -rc;
	pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	rc = pthread_rwlock_init(l, &a);
	pthread_rwlockattr_destroy(&a);
	return -rc;
}

int eng_engine_create(const struct eng_config *cfg, struct eng_engine **out)
{
	struct eng_engine *e;
	int rc;

	if (!cfg || !out)
		return LUNAR_ERR_INVALID_PARAMS;
	e = calloc(1, sizeof(*e));
	if (!e)
		return LUNAR_ERR_INTERNAL;
	rc = config_init(e, cfg);
	if (rc)
		goto err_free;
	rc = epoch_lock_init(&e->epoch_lock);
	if (rc)
		goto err_lock;
	rc = eng_pool_init(&e->pool, e->cfg.conns_per_peer);
	if (rc)
		goto err_epoch;
	rc = eng_rdma_init(e);
	if (rc)
		goto err_pool;
	rc = eng_exec_start(e);
	if (rc)
		goto err_rdma;
	rc = eng_server_start(e);
	if (rc)
		goto err_exec;
	LC_INFO(ENG_LOG, "serving %llu bytes on %s%s", (unsigned long long)e->cfg.seg_size,
		e->endpoint, e->keyed ? " (keyed: handshake, MACs, capabilities)" : "");
	*out = e;
	return 0;

err_exec:
	eng_exec_stop(e);
err_rdma:
	eng_rdma_fini(e);
err_pool:
	eng_pool_fini(&e->pool);
err_epoch:
	pthread_rwlock_destroy(&e->epoch_lock);
err_lock:
	pthread_rwlock_destroy(&e->secret_lock);
err_free:
	auth_key_wipe(&e->key);
	LC_ERROR(ENG_LOG, "cannot start the data port on %s:%u: %s", e->host, (unsigned)cfg->port,
		 strerror(-rc));
	free(e);
	return rc == -ENODEV || rc == -EINVAL || rc == -ENAMETOOLONG || rc == -EHOSTUNREACH
		   ? LUNAR_ERR_INVALID_PARAMS
		   : LUNAR_ERR_INTERNAL;
}

const char *eng_engine_endpoint(const struct eng_engine *e)
{
	return e->endpoint;
}

void eng_engine_destroy(struct eng_engine *e)
{
	if (!e)
		return;
	eng_server_stop(e);
	eng_rdma_cut(e); /* the I/O threads' RDMA transfers end at once too */
	eng_exec_stop(e);
	eng_rdma_fini(e); /* after the server: its threads held owner-side QPs */
	eng_pool_fini(&e->pool);
	pthread_rwlock_destroy(&e->epoch_lock);
	pthread_rwlock_destroy(&e->secret_lock);
	auth_key_wipe(&e->key);
	sodium_memzero(e->secret, sizeof(e->secret));
	free(e);
}

uint64_t eng_engine_epoch(struct eng_engine *e)
{
	return atomic_load(&e->epoch);
}

void eng_engine_set_mount(struct eng_engine *e, uint64_t mount)
{
	atomic_store(&e->mount, mount);
}

int eng_engine_fence(struct eng_engine *e)
{
	/* Once the copies under way are done: the next ones check it. */
	pthread_rwlock_wrlock(&e->epoch_lock);
	atomic_fetch_add(&e->epoch, 1);
	pthread_rwlock_unlock(&e->epoch_lock);
	atomic_store(&e->mount, ENG_MOUNT_FENCED);
	if (e->keyed) {
		pthread_rwlock_wrlock(&e->secret_lock);
		e->have_secret = 0;
		sodium_memzero(e->secret, sizeof(e->secret));
		pthread_rwlock_unlock(&e->secret_lock);
	}
	return eng_server_fence(e, lc_now_ns() + e->timeout_ns);
}

const struct eng_transport_ops *eng_transport(const struct eng_engine *e, const char *endpoint)
{
	if (!strcmp(endpoint, e->endpoint))
		return &eng_local_ops;
	/* RDMA counts what it used: RDMA, or TCP for a peer without. */
	return e->rdma ? &eng_rdma_ops : &eng_tcp_ops;
}

int eng_engine_crc_on_way(const struct eng_engine *e, const char *endpoint, uint64_t total)
{
	const struct eng_transport_ops *t = eng_transport(e, endpoint);

	return t == &eng_local_ops || (t == &eng_tcp_ops && eng_tcp_slices(e, total) > 1);
}

int eng_engine_tells_landed(const struct eng_engine *e, const char *endpoint)
{
	return eng_transport(e, endpoint) == &eng_tcp_ops;
}

int eng_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
	     const struct iovec *iov, int iovcnt, const struct eng_cap *cap, uint32_t *crc)
{
	struct eng_op op = eng_op_of(endpoint, dir, off, iov, iovcnt, cap, crc);

	if (!e)
		return LUNAR_ERR_TRANSFER_FAIL;
	eng_xfer_batch(e, &op, 1);
	if (!op.result && crc)
		*crc = op.crc;
	return op.result;
}
