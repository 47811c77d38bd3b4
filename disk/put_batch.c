/*
 * put_batch.c - the packed write path for many small objects (the proxy's
 * offload of 64 KiB KV blocks). Records reserved one after the other in a
 * bucket form a group, written with one vectored write: each object
 * straight from the caller's memory when O_DIRECT alignment allows, else
 * copied, zero padded to 4 KiB, into the context's registered bounce
 * buffer; the group's metadata records, adjacent in the metadata file, go
 * with one more write. Up to DSK_GROUPS_MAX groups go in one submission, so
 * the disk sees several large sequential writes at once. One 64 KiB write
 * at a time ran at a third of what the disk takes.
 */
#include "dsk_int.h"

#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"

#define DSK_GROUP_BYTES (4u << 20) /* data bytes of one group's write */
#define DSK_GROUP_VEC	256u	   /* pieces of one group's write (<= IOV_MAX) */
#define DSK_GROUPS_MAX	30u	   /* groups a submission: 4 requests each <= ring */

struct dsk_wgroup {
	unsigned first, n;     /* plans[first .. first + n) */
	unsigned vfirst, nvec; /* its pieces: vec[vfirst .. vfirst + nvec) */
	uint64_t doff, dend, moff, mend;
	int dfd, mfd;
	char *meta; /* the group's metadata records, mend - moff bytes */
};

/* What one submission writes. */
struct dsk_wbatch {
	struct dsk_ioctx *c;
	struct dsk_put_plan plans[DSK_BATCH_MAX];
	struct dsk_put_item *items[DSK_BATCH_MAX];
	struct iovec vec[2 * DSK_BATCH_MAX]; /* an object, and its padding if apart */
	unsigned n, nv;
	struct dsk_wgroup g[DSK_GROUPS_MAX];
	unsigned ng;
	uint64_t staged; /* bounce bytes taken */
};

/* Whether the plan just reserved extends the last group. */
static int group_extends(const struct dsk_wbatch *w, const struct dsk_put_plan *p, uint64_t dlen)
{
	const struct dsk_wgroup *g = w->ng ? &w->g[w->ng - 1] : NULL;

	return g && p->dfd == g->dfd && p->r->off == g->dend && p->moff == g->mend &&
	       g->dend + dlen - g->doff <= DSK_GROUP_BYTES && g->nvec + 2 <= DSK_GROUP_VEC;
}

/* Zeros that pad a buffered file's record to its 4 KiB slot. */
static const char zeros[DSK_ALIGN];

/* The pieces the bytes of it (dlen padded) go from, appended to w->vec:
 * the caller's memory (and zeros up to dlen), or a padded copy in the
 * bounce buffer. The pieces added. */
static unsigned item_pieces(struct dsk_wbatch *w, const struct dsk_put_item *it, uint64_t dlen)
{
	char *dst;

	if (!w->c->s->direct || (!((uintptr_t)it->buf % DSK_ALIGN) && it->len == dlen)) {
		w->vec[w->nv++] = (struct iovec){(void *)it->buf, it->len};
		if (it->len == dlen)
			return 1;
		w->vec[w->nv++] = (struct iovec){(void *)zeros, dlen - it->len};
		return 2;
	}
	dst = (char *)w->c->bounce + w->staged;
	/* The caller's bytes may change meanwhile (dsk_put): untracked. */
	LC_UNTRACKED_BEGIN();
	memcpy(dst, it->buf, it->len);
	LC_UNTRACKED_END();
	memset(dst + it->len, 0, dlen - it->len);
	w->staged += dlen;
	w->vec[w->nv++] = (struct iovec){dst, dlen};
	return 1;
}

/* Whether the batch must be written before it can take an object of dlen
 * bytes. */
static int batch_full(const struct dsk_wbatch *w, const struct dsk_put_item *it, uint64_t dlen)
{
	int staged = w->c->s->direct && ((uintptr_t)it->buf % DSK_ALIGN || it->len != dlen);

	return w->n == DSK_BATCH_MAX || w->ng == DSK_GROUPS_MAX ||
	       (staged && w->staged + dlen > DSK_BOUNCE);
}

static void batch_add(struct dsk_wbatch *w, struct dsk_put_plan *p, struct dsk_put_item *it,
		      uint64_t dlen)
{
	struct dsk_wgroup *g;

	if (!group_extends(w, p, dlen)) {
		g = &w->g[w->ng++];
		*g = (struct dsk_wgroup){.first = w->n,
					 .vfirst = w->nv,
					 .doff = p->r->off,
					 .dend = p->r->off,
					 .moff = p->moff,
					 .mend = p->moff,
					 .dfd = p->dfd,
					 .mfd = p->mfd};
	}
	g = &w->g[w->ng - 1];
	g->nvec += item_pieces(w, it, dlen);
	w->plans[w->n] = *p;
	w->items[w->n++] = it;
	g->n++;
	g->dend += dlen;
	g->mend += p->mlen;
}

/* Queue group g's writes at ios (its data, then its metadata, flushed
 * first with sync_writes); the requests queued. */
static unsigned group_ios(struct dsk_wbatch *w, struct dsk_wgroup *g, struct dsk_io *ios)
{
	int sync = w->c->s->cfg.sync_writes;
	unsigned n = 0;

	g->meta = malloc(g->mend - g->moff);
	if (!g->meta)
		return 0;
	for (unsigned i = g->first; i < g->first + g->n; i++)
		memcpy(g->meta + (w->plans[i].moff - g->moff), w->plans[i].meta, w->plans[i].mlen);
	dsk_io_set(&ios[n], DSK_IO_WRITE, g->dfd, NULL, g->dend - g->doff, g->doff, -1);
	ios[n].vec = &w->vec[g->vfirst];
	ios[n++].nvec = (int)g->nvec;
	if (sync) {
		ios[0].flags = DSK_IO_LINK;
		dsk_io_set(&ios[n], DSK_IO_FSYNC, g->dfd, NULL, 0, 0, -1);
		ios[n++].flags = DSK_IO_LINK;
	}
	dsk_io_set(&ios[n++], DSK_IO_WRITE, g->mfd, g->meta, g->mend - g->moff, g->moff, -1);
	if (sync) {
		ios[n - 1].flags = DSK_IO_LINK;
		dsk_io_set(&ios[n++], DSK_IO_FSYNC, g->mfd, NULL, 0, 0, -1);
	}
	return n;
}

#ifdef LUNAR_FAILPOINTS
/* Test builds only (common/failpoint.h): die as on a power cut inside the
 * first group's write - its data written and no metadata, or the metadata
 * torn - as dsk_put_failpoints does for one record. */
static void batch_failpoints(struct dsk_wbatch *w, struct dsk_io *ios, unsigned n)
{
	int torn = LC_FAILPOINT("disk-torn-meta");
	struct dsk_wgroup *g = &w->g[0];

	if (!torn && !LC_FAILPOINT("disk-crash-before-meta"))
		return;
	if (torn) {
		memset(g->meta + 24, 0, g->mend - g->moff - 24);
	} else {
		ios[0].flags = 0; /* the data alone */
		n = 1;
	}
	dsk_io_run(w->c, ios, n);
	lc_failpoint_crash(torn ? "disk-torn-meta" : "disk-crash-before-meta");
}
#else
#define batch_failpoints(w, ios, n) ((void)0)
#endif

/* Write every group in one submission; publish or drop its records. */
static void batch_write(struct dsk_store *s, struct dsk_wbatch *w)
{
	struct dsk_io ios[DSK_GROUPS_MAX * 4];
	unsigned at[DSK_GROUPS_MAX + 1], n = 0;

	for (unsigned k = 0; k < w->ng; k++) {
		at[k] = n;
		n += group_ios(w, &w->g[k], ios + n);
	}
	at[w->ng] = n;
	if (w->ng && at[1])
		batch_failpoints(w, ios, at[1]);
	if (n)
		dsk_io_run(w->c, ios, n);
	for (unsigned k = 0; k < w->ng; k++) {
		struct dsk_wgroup *g = &w->g[k];
		int rc = at[k + 1] == at[k] ? LUNAR_ERR_INTERNAL
					    : dsk_put_check(ios + at[k], at[k + 1] - at[k]);

		for (unsigned i = g->first; i < g->first + g->n; i++) {
			w->items[i]->rc = rc;
			dsk_put_done(s, w->plans[i].r, rc);
			free(w->plans[i].meta);
		}
		free(g->meta);
	}
	w->n = w->ng = w->nv = 0;
	w->staged = 0;
}

/* Reserve it's place (plan in *p, metadata encoded); 0 or a code. */
static int item_reserve(struct dsk_store *s, struct dsk_put_item *it, struct dsk_put_plan *p,
			int no_evict)
{
	struct iovec v = {(void *)it->buf, it->len};
	size_t tlen, klen;
	uint64_t len;
	int rc = dsk_put_args(it->tenant, it->key, &v, 1, &len);

	if (rc < 0)
		return rc;
	tlen = strlen(it->tenant);
	klen = strlen(it->key);
	*p = (struct dsk_put_plan){.mlen = dsk_meta_size(tlen, klen), .no_evict = no_evict};
	p->meta = malloc(p->mlen);
	p->r = dsk_rec_alloc(it->tenant, tlen, it->key, klen);
	if (!p->meta || !p->r) {
		rc = LUNAR_ERR_INTERNAL;
		goto err_free;
	}
	p->r->len = len;
	p->r->crc = it->crc32c;
	rc = dsk_put_reserve(s, p, DSK_PAD(len, DSK_ALIGN));
	if (rc < 0)
		goto err_free;
	dsk_meta_encode(p->meta, DSK_META_PUT, p->r->idx, p->r->off, len, it->crc32c, it->tenant,
			tlen, it->key, klen);
	it->location = (uint64_t)p->r->b->id << 32 | p->r->idx;
	return 0;

err_free:
	free(p->r);
	free(p->meta);
	return rc;
}

/* Whether reserving it would evict: eviction waits for a bucket's writers,
 * and the batch's pending records are ours, so those are written first. */
static int would_evict(struct dsk_store *s, const struct dsk_put_item *it, uint64_t dlen)
{
	return it->tenant && it->key &&
	       !dsk_put_fits(s, dlen + dsk_meta_size(strlen(it->tenant), strlen(it->key)));
}

void dsk_put_batch(struct dsk_store *s, struct dsk_put_item *v, size_t n)
{
	dsk_put_batch_ex(s, v, n, 0);
}

/*
 * The batch being built, per thread and per level: an eviction a put of
 * this batch runs may rescue records by writing them anew, a batch of its
 * own on this thread (dsk_rescue_write, no_evict, so no deeper). With one
 * batch a thread, the rescue's took the outer batch's I/O context: the
 * outer one then wrote through a context it no longer held, unlocked it a
 * second time, and left its own locked for good.
 */
#define DSK_WBATCH_LEVELS 2
static __thread struct dsk_wbatch wbatch[DSK_WBATCH_LEVELS];
static __thread unsigned wlevel;

void dsk_put_batch_ex(struct dsk_store *s, struct dsk_put_item *v, size_t n, int no_evict)
{
	struct dsk_wbatch *w;

	if (wlevel >= DSK_WBATCH_LEVELS) {
		LC_ERROR(DSK_LOG, "a put batch %u deep: refused", wlevel + 1);
		for (size_t i = 0; i < n; i++)
			v[i].rc = LUNAR_ERR_INTERNAL;
		return;
	}
	w = &wbatch[wlevel++];
	w->c = dsk_ctx_get(s);
	w->n = w->ng = w->nv = 0;
	w->staged = 0;
	for (size_t i = 0; i < n; i++) {
		struct dsk_put_item *it = &v[i];
		uint64_t dlen = DSK_PAD(it->len, DSK_ALIGN);
		struct dsk_put_plan p;

		if (dlen > DSK_BOUNCE && no_evict) {
			it->rc = LUNAR_ERR_NO_AVAILABLE_HANDLE;
			continue;
		}
		if (dlen > DSK_BOUNCE) {
			struct iovec iov = {(void *)it->buf, it->len};

			/* It may evict, as below: our pending records first. */
			if (w->n)
				batch_write(s, w);
			it->rc =
			    dsk_put(s, it->tenant, it->key, &iov, 1, it->crc32c, &it->location);
			continue;
		}
		if (w->n && (batch_full(w, it, dlen) || (!no_evict && would_evict(s, it, dlen))))
			batch_write(s, w);
		it->rc = item_reserve(s, it, &p, no_evict);
		if (it->rc == 0)
			batch_add(w, &p, it, dlen);
	}
	if (w->n)
		batch_write(s, w);
	dsk_ctx_put(w->c);
	wlevel--;
	dsk_evict_watermark(s);
}
