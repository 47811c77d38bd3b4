/*
 * rescue.c - DSK_CLOCK's second chance. FIFO eviction drops a whole bucket,
 * the blocks still being read with the rest; a KV cache whose popular
 * prefixes cycle through the tier loses them once a cycle. So before the
 * oldest bucket goes, its records read since they were written (at most
 * half its data) are read into memory, left out of the owner's notify,
 * and written anew to the newest bucket once the old one is retired; the
 * owner learns their new locations (moved). A rescued record starts with
 * its bit clear: it goes next time unless read again.
 */
#include "dsk_int.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lunar.h"

struct dsk_rescue {
	size_t n;
	struct dsk_get_item *get;
	struct dsk_put_item *put;
	struct dsk_record *rec;
	char *names;
	void *data;
};

void dsk_rescue_free(struct dsk_rescue *r)
{
	if (!r)
		return;
	free(r->get);
	free(r->put);
	free(r->rec);
	free(r->names);
	free(r->data);
	free(r);
}

/* The records of b to rescue (s->mu held): their names into r->names, read
 * items into r->get (buffers in r->data, allocated here). 0 or -1. */
static int rescue_pick(struct dsk_store *s, struct dsk_bucket *b, struct dsk_rescue *r)
{
	uint64_t limit = b->data_end / 2 < DSK_RESCUE_BYTES ? b->data_end / 2 : DSK_RESCUE_BYTES;
	uint64_t bytes = 0, names = 0, at = 0, pos = 0;
	size_t k = 0;

	for (uint32_t i = 0; i < b->count && i < b->recs_cap; i++) {
		const struct dsk_rec *x = b->recs[i];
		uint64_t pad = x ? DSK_PAD(x->len, DSK_ALIGN) : 0;

		if (!x || x->state != DSK_REC_LIVE || !x->ref || pad > DSK_BOUNCE ||
		    bytes + pad > limit)
			continue;
		bytes += pad;
		names += x->tlen + x->klen + 2u;
		k++;
	}
	if (!k)
		return -1;
	r->get = calloc(k, sizeof(*r->get));
	r->names = malloc(names);
	if (!r->get || !r->names || posix_memalign(&r->data, DSK_ALIGN, bytes))
		return -1;
	bytes = 0;
	for (uint32_t i = 0; i < b->count && i < b->recs_cap && r->n < k; i++) {
		const struct dsk_rec *x = b->recs[i];
		uint64_t pad = x ? DSK_PAD(x->len, DSK_ALIGN) : 0;
		size_t l = x ? x->tlen + x->klen + 2u : 0;

		if (!x || x->state != DSK_REC_LIVE || !x->ref || pad > DSK_BOUNCE ||
		    bytes + pad > limit)
			continue;
		bytes += pad;
		memcpy(r->names + at, x->name, l);
		r->get[r->n++] = (struct dsk_get_item){.tenant = r->names + at,
						       .key = r->names + at + x->tlen + 1,
						       .buf = (char *)r->data + pos,
						       .cap = pad};
		at += l;
		pos += pad;
	}
	return 0;
}

/* Take the records read in full out of the notify list recs[0..*n). */
static void rescue_unlist(const struct dsk_rescue *r, uint32_t bucket, struct dsk_record *recs,
			  size_t *n)
{
	size_t kept = 0;

	for (size_t i = 0; i < *n; i++) {
		int rescued = 0;

		for (size_t j = 0; j < r->n && !rescued; j++)
			rescued = r->get[j].res >= 0 && r->get[j].location == recs[i].location &&
				  recs[i].location >> 32 == bucket;
		if (!rescued)
			recs[kept++] = recs[i];
	}
	*n = kept;
}

struct dsk_rescue *dsk_rescue_read(struct dsk_store *s, struct dsk_bucket *b,
				   struct dsk_record *recs, size_t *n)
{
	struct dsk_rescue *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return NULL;
	pthread_mutex_lock(&s->mu);
	rc = rescue_pick(s, b, r);
	pthread_mutex_unlock(&s->mu);
	if (rc) {
		dsk_rescue_free(r);
		return NULL;
	}
	dsk_get_batch(s, r->get, r->n);
	rescue_unlist(r, b->id, recs, n);
	return r;
}

/* Tell the owner: moved[0..nm) have new locations, lost[0..nl) are gone. */
static void rescue_tell(struct dsk_store *s, const struct dsk_record *moved, size_t nm,
			const struct dsk_record *lost, size_t nl)
{
	if (nm && s->cfg.moved)
		s->cfg.moved(s->cfg.notify_arg, moved, nm);
	if (nl && s->cfg.notify && s->cfg.notify(s->cfg.notify_arg, lost, nl))
		LC_WARN(DSK_LOG, "%zu records lost in a rescue; their owner was not told", nl);
}

void dsk_rescue_write(struct dsk_store *s, struct dsk_rescue *r)
{
	size_t nm = 0, nl = 0;

	if (!r)
		return;
	r->put = calloc(r->n, sizeof(*r->put));
	r->rec = calloc(2 * r->n, sizeof(*r->rec));
	if (!r->put || !r->rec) {
		dsk_rescue_free(r);
		return;
	}
	for (size_t i = 0; i < r->n; i++) {
		const struct dsk_get_item *g = &r->get[i];

		r->put[i] = (struct dsk_put_item){.tenant = g->tenant,
						  .key = g->key,
						  .buf = g->buf,
						  .len = g->res >= 0 ? g->length : 0,
						  .crc32c = g->crc32c};
	}
	dsk_put_batch_ex(s, r->put, r->n, 1);
	for (size_t i = 0; i < r->n; i++) {
		const struct dsk_put_item *p = &r->put[i];
		struct dsk_record x = {.tenant = p->tenant,
				       .key = p->key,
				       .length = r->get[i].length,
				       .crc32c = p->crc32c};

		if (r->get[i].res < 0)
			continue; /* not read: still in the notify list */
		x.location = p->rc ? r->get[i].location : p->location;
		if (p->rc)
			r->rec[r->n + nl++] = x;
		else
			r->rec[nm++] = x;
	}
	pthread_mutex_lock(&s->mu);
	s->rescued += nm;
	pthread_mutex_unlock(&s->mu);
	rescue_tell(s, r->rec, nm, r->rec + r->n, nl);
	dsk_rescue_free(r);
}
