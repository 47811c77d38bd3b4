/*
 * rdma_dev.c - the RDMA device an engine uses: libibverbs loaded at run
 * time, the device and port picked from --rdma-devices, a protection
 * domain, and the memory registered with it - the engine's segment (which
 * peers may read and write) and the ranges the proxy maps for its clients
 * (which only this host's QPs touch), each an MR.
 */
#include "rdma_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define ENG_GID_SCAN 16 /* GID table entries looked at for a usable one */

/* The first non-zero GID of the port (RoCE needs one; IB may use LID). */
static void pick_gid(struct eng_rdma_dev *d)
{
	union ibv_gid gid;

	d->gid_index = -1;
	for (int i = 0; i < ENG_GID_SCAN; i++) {
		if (d->ibv.query_gid(d->ctx, d->port, i, &gid))
			break;
		if (gid.global.subnet_prefix || gid.global.interface_id) {
			d->gid_index = i;
			memcpy(d->gid, gid.raw, 16);
			return;
		}
	}
}

/* Whether the open device's port is active and addressable; fills d. */
static int port_ok(struct eng_rdma_dev *d, uint8_t port)
{
	struct ibv_port_attr pa;
	struct ibv_device_attr da;

	memset(&pa, 0, sizeof(pa));
	memset(&da, 0, sizeof(da));
	if (d->ibv.query_port(d->ctx, port, &pa) || pa.state != IBV_PORT_ACTIVE)
		return 0;
	d->port = port;
	d->mtu = (uint8_t)pa.active_mtu;
	d->lid = pa.lid;
	pick_gid(d);
	if (d->gid_index < 0 && !d->lid)
		return 0;
	if (d->ibv.query_device(d->ctx, &da))
		return 0;
	d->max_rd_atom =
	    (unsigned)(da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom
								  : da.max_qp_init_rd_atom);
	if (d->max_rd_atom > 16)
		d->max_rd_atom = 16;
	if (!d->max_rd_atom)
		d->max_rd_atom = 1;
	return 1;
}

/* Open dev; with port 0 the first active port. 0, or -ENOENT. */
static int try_device(struct eng_rdma_dev *d, struct ibv_device *dev, uint8_t port)
{
	struct ibv_device_attr da;

	d->ctx = d->ibv.open_device(dev);
	if (!d->ctx)
		return -ENOENT;
	memset(&da, 0, sizeof(da));
	if (!d->ibv.query_device(d->ctx, &da)) {
		d->windows = (da.device_cap_flags &
			      (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) &&
			     da.max_mw >= ENG_RDMA_SGE_MAX;
		for (uint8_t p = port ? port : 1; p <= (port ? port : da.phys_port_cnt); p++)
			if (port_ok(d, p)) {
				snprintf(d->name, sizeof(d->name), "%s:%u",
					 d->ibv.get_device_name(dev), p);
				return 0;
			}
	}
	d->ibv.close_device(d->ctx);
	d->ctx = NULL;
	return -ENOENT;
}

/* Whether the device called name matches one entry of spec ("auto": all);
 * *port is the entry's ":port" or 0. */
static int spec_match(const char *spec, const char *name, uint8_t *port)
{
	size_t n = strlen(name);

	*port = 0;
	if (!strcmp(spec, "auto"))
		return 1;
	for (const char *p = spec; *p;) {
		size_t len = strcspn(p, ",");

		if (len >= n && !strncmp(p, name, n) && (len == n || p[n] == ':')) {
			if (len > n)
				*port = (uint8_t)atoi(p + n + 1);
			return 1;
		}
		p += len + (p[len] == ',');
	}
	return 0;
}

static int open_ctx(struct eng_rdma_dev *d, const char *spec)
{
	struct ibv_device **list;
	int n = 0, rc = -ENOENT;
	uint8_t port;

	list = d->ibv.get_device_list(&n);
	if (!list)
		return -ENOENT;
	for (int i = 0; i < n && rc; i++)
		if (spec_match(spec, d->ibv.get_device_name(list[i]), &port))
			rc = try_device(d, list[i], port);
	d->ibv.free_device_list(list);
	return rc;
}

/* Register [base, base + len): open to the peer when remote, with windows
 * only through those bound to it. */
static struct ibv_mr *reg(struct eng_rdma_dev *d, void *base, uint64_t len, int remote)
{
	int access = IBV_ACCESS_LOCAL_WRITE;

	if (remote && d->windows)
		access |= IBV_ACCESS_MW_BIND;
	else if (remote)
		access |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	return d->ibv.reg_mr(d->pd, base, (size_t)len, access);
}

int eng_rdma_dev_open(const char *spec, int keyed, struct eng_rdma_dev **out)
{
	struct eng_rdma_dev *d = calloc(1, sizeof(*d));
	int rc = -ENOMEM;

	if (!d)
		return rc;
	rc = eng_ibv_load(&d->ibv);
	if (rc)
		goto err_free;
	rc = open_ctx(d, spec);
	if (rc)
		goto err_unload;
	rc = -ENOMEM;
	d->pd = d->ibv.alloc_pd(d->ctx);
	if (!d->pd)
		goto err_close;
	d->keyed = keyed;
	d->windows &= keyed;
	pthread_rwlock_init(&d->mem_lock, NULL);
	atomic_init(&d->refs, 1);
	atomic_init(&d->seg_state, ENG_SEG_PENDING);
	d->refuse = getenv("LUNAR_RDMA_DEBUG_REFUSE") != NULL;
	*out = d;
	return 0;

err_close:
	d->ibv.close_device(d->ctx);
err_unload:
	eng_ibv_unload(&d->ibv);
err_free:
	free(d);
	return rc;
}

int eng_rdma_seg_register(struct eng_rdma_dev *d, void *base, uint64_t len)
{
	struct ibv_mr *mr = reg(d, base, len, !d->keyed);
	int rc = errno ? -errno : -ENOMEM;

	if (!mr) {
		eng_rdma_seg_fail(d);
		return rc;
	}
	d->seg.mr = mr;
	d->seg.base = base;
	d->seg.len = len;
	d->seg.lkey = mr->lkey;
	d->seg.rkey = mr->rkey;
	d->seg.remote = !d->keyed;
	atomic_store_explicit(&d->seg_state, ENG_SEG_READY, memory_order_release);
	return 0;
}

void eng_rdma_seg_fail(struct eng_rdma_dev *d)
{
	atomic_store_explicit(&d->seg_state, ENG_SEG_FAILED, memory_order_release);
}

int eng_rdma_seg_state(struct eng_rdma_dev *d)
{
	return atomic_load_explicit(&d->seg_state, memory_order_acquire);
}

void eng_rdma_dev_put(struct eng_rdma_dev *d)
{
	if (!d || atomic_fetch_sub(&d->refs, 1) != 1)
		return;
	if (d->seg.mr)
		d->ibv.dereg_mr(d->seg.mr);
	d->ibv.dealloc_pd(d->pd);
	d->ibv.close_device(d->ctx);
	eng_ibv_unload(&d->ibv);
	pthread_rwlock_destroy(&d->mem_lock);
	free(d);
}

/* Whether m holds all of [p, p + len), and is open to the peer when remote. */
static int holds(const struct eng_mem *m, const char *p, uint64_t len, int remote)
{
	return m->mr && p >= m->base && (uint64_t)(p - m->base) <= m->len &&
	       len <= m->len - (uint64_t)(p - m->base) && (!remote || m->remote);
}

/* The client memory holding all of [p, p + len) (open to the peer when
 * remote), or NULL; mem_lock held. A list: registrations are few per
 * client and rarely change. */
static const struct eng_mem *mem_find(struct eng_rdma_dev *d, const char *p, uint64_t len,
				      int remote)
{
	const struct eng_mem *m = d->mems;

	while (m && !holds(m, p, len, remote))
		m = m->next;
	return m;
}

int eng_rdma_mem_keys(struct eng_rdma_dev *d, const void *p, uint64_t len, uint32_t *lkey,
		      uint32_t *rkey)
{
	const struct eng_mem *found;

	if (eng_rdma_seg_state(d) == ENG_SEG_READY && holds(&d->seg, p, len, 0)) {
		*lkey = d->seg.lkey;
		*rkey = d->seg.rkey;
		return 0;
	}
	pthread_rwlock_rdlock(&d->mem_lock);
	found = mem_find(d, p, len, 0);
	if (found) {
		*lkey = found->lkey;
		*rkey = found->rkey;
	}
	pthread_rwlock_unlock(&d->mem_lock);
	return found ? 0 : -ENOENT;
}

struct ibv_mr *eng_rdma_mem_mr(struct eng_rdma_dev *d, const void *p, uint64_t len)
{
	const struct eng_mem *m;

	pthread_rwlock_rdlock(&d->mem_lock);
	m = mem_find(d, p, len, 1);
	pthread_rwlock_unlock(&d->mem_lock);
	return m ? m->mr : NULL;
}

struct eng_mem *eng_mem_add(struct eng_engine *e, void *base, uint64_t len)
{
	struct eng_rdma_dev *d = e && e->rdma ? e->rdma->dev : NULL;
	struct eng_mem *m;

	if (!d || !base || !len || !(m = calloc(1, sizeof(*m))))
		return NULL;
	m->mr = reg(d, base, len, d->keyed);
	if (!m->mr) {
		LC_WARN(ENG_LOG,
			"RDMA: cannot register %llu bytes of client memory (%s): "
			"its transfers use TCP",
			(unsigned long long)len, strerror(errno));
		free(m);
		return NULL;
	}
	m->dev = d;
	m->base = base;
	m->len = len;
	m->lkey = m->mr->lkey;
	m->rkey = m->mr->rkey;
	m->remote = d->keyed;
	atomic_fetch_add(&d->refs, 1);
	pthread_rwlock_wrlock(&d->mem_lock);
	m->next = d->mems;
	if (d->mems)
		d->mems->prev = m;
	d->mems = m;
	pthread_rwlock_unlock(&d->mem_lock);
	return m;
}

void eng_mem_del(struct eng_mem *m)
{
	struct eng_rdma_dev *d;

	if (!m)
		return;
	d = m->dev;
	pthread_rwlock_wrlock(&d->mem_lock);
	if (m->prev)
		m->prev->next = m->next;
	else
		d->mems = m->next;
	if (m->next)
		m->next->prev = m->prev;
	pthread_rwlock_unlock(&d->mem_lock);
	d->ibv.dereg_mr(m->mr);
	free(m);
	eng_rdma_dev_put(d);
}
