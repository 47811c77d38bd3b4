/*
 * get_batch.c - reads of many records at once (the proxy's reads of a
 * batch of KV blocks): pin every record's bucket under one store lock,
 * sort the reads by file and offset, coalesce records adjacent in a file
 * into one vectored read straight into their destinations, send all the
 * reads in one submission, then check each CRC32C and unpin. One 64 KiB
 * read at a time made a 247-block batch take tens of milliseconds.
 */
#include "dsk_int.h"

#include <stdlib.h>
#include <string.h>

#include "lunar.h"

#define DSK_RUN_MAX 64 /* records per coalesced read */

enum { GR_ALONE = 0, GR_VEC = 1, GR_STAGED = 2 };

struct dsk_gread {
	struct dsk_get_plan p;
	struct dsk_bucket *b;
	uint32_t idx;
	size_t item; /* index into the caller's items */
	int mode;    /* GR_VEC: straight into the destination; GR_STAGED:
		      * through the bounce buffer; GR_ALONE: one by one, after */
};

/* How a record of len bytes reaches buf. */
static int read_mode(const struct dsk_store *s, const void *buf, uint64_t len)
{
	if (!s->direct || (!((uintptr_t)buf % DSK_ALIGN) && !(len % DSK_ALIGN)))
		return GR_VEC;
	return DSK_PAD(len, DSK_ALIGN) <= DSK_BOUNCE ? GR_STAGED : GR_ALONE;
}

/* Look up and pin every record; the reads planned in g[0..*ng). */
static void plan_reads(struct dsk_store *s, struct dsk_get_item *v, size_t n, struct dsk_gread *g,
		       size_t *ng)
{
	*ng = 0;
	pthread_mutex_lock(&s->mu);
	for (size_t i = 0; i < n; i++) {
		struct dsk_get_item *it = &v[i];
		size_t tl = it->tenant ? strlen(it->tenant) : 0, kl = it->key ? strlen(it->key) : 0;
		struct dsk_rec *r = NULL;

		it->res = LUNAR_ERR_INVALID_PARAMS;
		if (!it->tenant || !it->key || (it->cap && !it->buf))
			continue;
		r = dsk_index_find(&s->ix, it->tenant, tl, it->key, kl,
				   dsk_index_hash(it->tenant, tl, it->key, kl));
		it->res = !r || r->state != DSK_REC_LIVE ? LUNAR_ERR_OBJECT_NOT_FOUND
			  : it->cap < r->len		 ? LUNAR_ERR_BUFFER_OVERFLOW
							 : 0;
		if (it->res)
			continue;
		g[*ng] = (struct dsk_gread){
		    .p = {.fd = r->b->dfd, .off = r->off, .len = r->len, .crc = r->crc},
		    .b = r->b,
		    .idx = r->idx,
		    .item = i,
		    .mode = read_mode(s, it->buf, r->len),
		};
		r->b->readers++;
		r->b->last_use = ++s->tick;
		r->ref = 1;
		it->crc32c = r->crc;
		it->length = r->len;
		it->location = (uint64_t)r->b->id << 32 | r->idx;
		(*ng)++;
	}
	pthread_mutex_unlock(&s->mu);
}

static int gread_cmp(const void *a, const void *b)
{
	const struct dsk_gread *x = a, *y = b;

	if ((x->mode == GR_ALONE) != (y->mode == GR_ALONE))
		return x->mode == GR_ALONE ? 1 : -1; /* the runs first */
	if (x->p.fd != y->p.fd)
		return x->p.fd < y->p.fd ? -1 : 1;
	return x->p.off < y->p.off ? -1 : x->p.off > y->p.off;
}

/* One submission's runs: ios[k] reads g[first[k] .. first[k + 1]). */
struct dsk_runs {
	struct dsk_io ios[DSK_RING_DEPTH];
	unsigned first[DSK_RING_DEPTH + 1];
	unsigned nio;
	uint64_t staged; /* bounce bytes taken */
};

/* Settle g's read from its run io: the value's bytes checked (and copied
 * out of the bounce buffer when staged). */
static void settle(const struct dsk_io *io, const struct dsk_gread *g, struct dsk_get_item *it)
{
	uint64_t at = g->p.off - io->off;
	const char *src = g->mode == GR_STAGED ? (const char *)io->buf + at : it->buf;

	if (io->res < 0) {
		it->res = LUNAR_ERR_FILE_READ_FAIL;
		return;
	}
	if ((uint64_t)io->res < at + g->p.len) {
		it->res = LUNAR_ERR_OBJECT_NOT_FOUND; /* truncated file */
		return;
	}
	if (lc_crc32c(0, src, g->p.len) != g->p.crc) {
		it->res = LUNAR_ERR_CHECKSUM_MISMATCH;
		return;
	}
	if (g->mode == GR_STAGED)
		memcpy(it->buf, src, g->p.len);
	it->res = (int64_t)g->p.len;
}

static void runs_send(struct dsk_ioctx *c, struct dsk_runs *ru, unsigned end,
		      const struct dsk_gread *g, struct dsk_get_item *v)
{
	ru->first[ru->nio] = end;
	if (ru->nio)
		dsk_io_run(c, ru->ios, ru->nio);
	for (unsigned k = 0; k < ru->nio; k++)
		for (unsigned j = ru->first[k]; j < ru->first[k + 1]; j++)
			settle(&ru->ios[k], &g[j], &v[g[j].item]);
	ru->nio = 0;
	ru->staged = 0;
}

/* Whether g (after prev, in the run io) extends that run. */
static int run_extends(const struct dsk_io *io, const struct dsk_gread *prev,
		       const struct dsk_gread *g, uint64_t staged)
{
	if (prev->mode != g->mode || prev->p.fd != g->p.fd ||
	    DSK_PAD(prev->p.off + prev->p.len, DSK_ALIGN) != g->p.off)
		return 0;
	if (g->mode == GR_VEC)
		return io->off + io->len == g->p.off && io->nvec < DSK_RUN_MAX;
	return staged + DSK_PAD(g->p.len, DSK_ALIGN) <= DSK_BOUNCE;
}

/* The runs of g[0..nr), sorted, in as few submissions as fit; vec has nr
 * entries. */
static void read_runs(struct dsk_ioctx *c, struct dsk_gread *g, size_t nr, struct iovec *vec,
		      struct dsk_get_item *v)
{
	static __thread struct dsk_runs ru;

	ru.nio = 0;
	ru.staged = 0;
	for (size_t j = 0; j < nr; j++) {
		struct dsk_io *io = ru.nio ? &ru.ios[ru.nio - 1] : NULL;
		uint64_t pad = DSK_PAD(g[j].p.len, DSK_ALIGN);

		if (io && run_extends(io, &g[j - 1], &g[j], ru.staged)) {
			if (g[j].mode == GR_VEC) {
				vec[j] = (struct iovec){v[g[j].item].buf, g[j].p.len};
				io->nvec++;
				io->len += g[j].p.len;
			} else {
				io->len += pad;
				ru.staged += pad;
			}
			continue;
		}
		if (ru.nio == DSK_RING_DEPTH ||
		    (g[j].mode == GR_STAGED && ru.staged + pad > DSK_BOUNCE))
			runs_send(c, &ru, (unsigned)j, g, v);
		ru.first[ru.nio] = (unsigned)j;
		io = &ru.ios[ru.nio++];
		if (g[j].mode == GR_VEC) {
			vec[j] = (struct iovec){v[g[j].item].buf, g[j].p.len};
			dsk_io_set(io, DSK_IO_READ, g[j].p.fd, NULL, g[j].p.len, g[j].p.off, -1);
			io->vec = &vec[j];
			io->nvec = 1;
		} else {
			dsk_io_set(io, DSK_IO_READ, g[j].p.fd, (char *)c->bounce + ru.staged, pad,
				   g[j].p.off, c->bounce_index);
			ru.staged += pad;
		}
	}
	runs_send(c, &ru, (unsigned)nr, g, v);
}

void dsk_get_batch(struct dsk_store *s, struct dsk_get_item *v, size_t n)
{
	struct dsk_gread *g = n ? malloc(n * sizeof(*g)) : NULL;
	struct iovec *vec = n ? malloc(n * sizeof(*vec)) : NULL;
	struct dsk_ioctx *c;
	size_t ng, nr = 0;

	if (!g || !vec) {
		for (size_t i = 0; i < n; i++)
			v[i].res = LUNAR_ERR_INTERNAL;
		goto out;
	}
	plan_reads(s, v, n, g, &ng);
	qsort(g, ng, sizeof(*g), gread_cmp);
	while (nr < ng && g[nr].mode != GR_ALONE)
		nr++;
	if (s->read_hook && ng)
		s->read_hook(s->read_hook_arg);
	c = dsk_ctx_get(s);
	read_runs(c, g, nr, vec, v);
	for (size_t j = nr; j < ng; j++) {
		struct dsk_get_item *it = &v[g[j].item];
		struct iovec one = {it->buf, it->cap};
		int rc = dsk_get_read(c, &g[j].p, &one, 1);

		it->res = rc < 0 ? rc : (int64_t)g[j].p.len;
	}
	dsk_ctx_put(c);
	pthread_mutex_lock(&s->mu);
	for (size_t j = 0; j < ng; j++) {
		if (v[g[j].item].res < 0)
			dsk_get_failed(s, g[j].b, g[j].idx, (int)v[g[j].item].res);
		dsk_bucket_release(s, g[j].b, 0);
	}
	pthread_mutex_unlock(&s->mu);
out:
	free(g);
	free(vec);
}
