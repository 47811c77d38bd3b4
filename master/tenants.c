/*
 * tenants.c - bytes stored per tenant and the optional quotas
 * (--tenant-quota NAME=SIZE, --default-tenant-quota SIZE). A tenant is
 * charged the logical size of each value once, whatever its replica count,
 * from PutStart/UpsertStart (a write in flight counts) until the object or
 * the write goes. A tenant with nothing charged is dropped, so names that
 * never stored a byte (a put refused for space, a peer making names up) cost
 * nothing. Few tenants are expected: a list under one leaf lock.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lunar.h"
#include "mst_int.h"

struct mst_tenant {
	struct mst_tenant *next;
	uint64_t quota; /* 0: none */
	uint64_t used;
	char name[];
};

int mst_tenants_init(struct mst_tenants *t)
{
	t->head = NULL;
	return -pthread_mutex_init(&t->lock, NULL);
}

void mst_tenants_fini(struct mst_tenants *t)
{
	struct mst_tenant *x, *n;

	for (x = t->head; x; x = n) {
		n = x->next;
		free(x);
	}
	pthread_mutex_destroy(&t->lock);
}

static uint64_t quota_of(const struct mst_config *cfg, const char *name)
{
	for (unsigned i = 0; i < cfg->n_tenant_quotas; i++)
		if (!strcmp(cfg->tenant_quotas[i].name, name))
			return cfg->tenant_quotas[i].bytes;
	return cfg->default_tenant_quota;
}

/* The tenant called name, created if new. Tenant lock held. */
static struct mst_tenant *tenant_get(struct mst_master *m, const char *name)
{
	struct mst_tenant *x;
	size_t len = strlen(name);

	for (x = m->tenants.head; x; x = x->next)
		if (!strcmp(x->name, name))
			return x;
	x = calloc(1, sizeof(*x) + len + 1);
	if (!x)
		return NULL;
	memcpy(x->name, name, len + 1);
	x->quota = quota_of(&m->cfg, name);
	x->next = m->tenants.head;
	m->tenants.head = x;
	return x;
}

/* Unlink and free t, which nothing is charged to any more. Tenant lock held. */
static void tenant_drop(struct mst_master *m, struct mst_tenant *t)
{
	struct mst_tenant **pp = &m->tenants.head;

	while (*pp != t)
		pp = &(*pp)->next;
	*pp = t->next;
	free(t);
}

int mst_tenant_charge(struct mst_master *m, const char *name, uint64_t bytes,
		      struct mst_tenant **out)
{
	struct mst_tenant *x;
	int rc = 0;

	pthread_mutex_lock(&m->tenants.lock);
	x = tenant_get(m, name);
	if (!x)
		rc = -ENOMEM;
	else if (x->quota && (bytes > x->quota || x->used > x->quota - bytes))
		rc = LUNAR_ERR_TENANT_QUOTA_EXCEEDED;
	else
		x->used += bytes;
	if (rc && x && !x->used) {
		tenant_drop(m, x);
		x = NULL;
	}
	pthread_mutex_unlock(&m->tenants.lock);
	*out = x;
	return rc;
}

void mst_tenant_uncharge(struct mst_master *m, struct mst_tenant *t, uint64_t bytes)
{
	if (!t)
		return;
	pthread_mutex_lock(&m->tenants.lock);
	t->used -= bytes;
	if (!t->used)
		tenant_drop(m, t);
	pthread_mutex_unlock(&m->tenants.lock);
}

uint64_t mst_tenants_count(struct mst_master *m)
{
	uint64_t n = 0;

	pthread_mutex_lock(&m->tenants.lock);
	for (struct mst_tenant *x = m->tenants.head; x; x = x->next)
		n++;
	pthread_mutex_unlock(&m->tenants.lock);
	return n;
}
