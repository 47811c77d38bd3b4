/*
 * scan.c - the restart scan: list the bucket files, parse each metadata file
 * (resynchronizing past torn or corrupt records at DSK_META_ALIGN
 * boundaries), apply deletion records, read every object back and check its
 * CRC32C. What verifies goes into the index, newest copy of a key winning;
 * the rest is counted as dropped. Buckets left empty are deleted. Every
 * number read from a file is bounded before it sizes memory or a loop; a
 * bucket whose files cannot be opened for another reason than being absent
 * (out of descriptors, say) is left on disk for a later start.
 */
#include "dsk_int.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "key.h"
#include "log.h"
#include "lunar.h"

/* Bounds on what a metadata file may claim: record indexes (a bucket is
 * sealed far below this) and the bytes of the file read at all. */
#define DSK_SCAN_MAX_INDEX (1u << 20)
#define DSK_SCAN_MAX_META  (256ull << 20)

struct dsk_scan_ent {
	uint32_t idx;
	uint32_t crc;
	uint64_t off;
	uint64_t len;
	const char *tenant; /* into the metadata buffer */
	uint16_t tlen, klen;
	int deleted;
};

/* A DEL record: it deletes the PUTs of idx among the first `before` entries. */
struct dsk_scan_del {
	uint32_t idx;
	size_t before;
};

struct dsk_scan_meta {
	struct dsk_scan_ent *v;
	size_t n, cap;
	struct dsk_scan_del *del;
	size_t ndel, del_cap;
	uint64_t dropped;
};

static int dsk_scan_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* Grow *v (of *cap elements of size each) to hold one more than n. */
static int dsk_scan_grow(void **v, size_t *cap, size_t n, size_t size)
{
	void *p;

	if (n < *cap)
		return 0;
	p = realloc(*v, (*cap ? *cap * 2 : 64) * size);
	if (!p)
		return LUNAR_ERR_INTERNAL;
	*v = p;
	*cap = *cap ? *cap * 2 : 64;
	return 0;
}

/* Bucket ids present in the directory, sorted, without duplicates. */
static int dsk_scan_ids(struct dsk_store *s, uint32_t **out, size_t *n)
{
	size_t cap = 0;
	uint32_t *ids = NULL;
	struct dirent *de;
	DIR *d = opendir(s->dir);

	*n = 0;
	if (!d)
		return LUNAR_ERR_FILE_READ_FAIL;
	while ((de = readdir(d))) {
		char ext[8];
		unsigned id;
		int used = 0;

		if (strlen(de->d_name) < 13 || de->d_name[0] != 'b' || de->d_name[9] != '.' ||
		    sscanf(de->d_name, "b%8x.%5s%n", &id, ext, &used) != 2 ||
		    strlen(de->d_name) != (size_t)used ||
		    (strcmp(ext, "dat") && strcmp(ext, "meta")))
			continue;
		if (dsk_scan_grow((void **)&ids, &cap, *n, sizeof(*ids)))
			goto err;
		ids[(*n)++] = id;
	}
	closedir(d);
	if (*n)
		qsort(ids, *n, sizeof(*ids), dsk_scan_cmp);
	for (size_t i = 0, k = 0; i < *n; i++) {
		if (!k || ids[i] != ids[k - 1])
			ids[k++] = ids[i];
		if (i + 1 == *n)
			*n = k;
	}
	*out = ids;
	return 0;
err:
	closedir(d);
	free(ids);
	return LUNAR_ERR_INTERNAL;
}

/* A record's header is whole, in range and checksummed; max_idx bounds the
 * record index (a bucket never holds more objects than it is sealed at). */
static int dsk_scan_valid(const char *p, size_t left, const struct dsk_meta_hdr *h,
			  uint32_t max_idx)
{
	static const char zero[4];
	uint32_t crc;

	if (h->version != DSK_META_VERSION || (h->type != DSK_META_PUT && h->type != DSK_META_DEL))
		return 0;
	if (h->index >= max_idx)
		return 0;
	if (!h->tenant_len || h->tenant_len > 63 || !h->key_len || h->key_len > 4096)
		return 0;
	if (h->rec_len != dsk_meta_size(h->tenant_len, h->key_len) || h->rec_len > left)
		return 0;
	if (h->type == DSK_META_PUT &&
	    (!h->length || h->offset % DSK_ALIGN || h->offset > UINT64_MAX / 2 ||
	     h->length > UINT64_MAX / 2 - h->offset))
		return 0;
	crc = lc_crc32c(0, p, 4);
	crc = lc_crc32c(crc, zero, 4);
	crc = lc_crc32c(crc, p + 8, h->rec_len - 8);
	if (crc != h->crc)
		return 0;
	/* The names go on to the index and the master: what no client could
	 * have stored is not a record of ours. */
	p += sizeof(*h);
	return !lc_tenant_check(p, h->tenant_len) && !lc_key_check(p + h->tenant_len, h->key_len);
}

static int dsk_scan_add(struct dsk_scan_meta *m, const char *p, const struct dsk_meta_hdr *h)
{
	if (h->type == DSK_META_DEL) {
		if (dsk_scan_grow((void **)&m->del, &m->del_cap, m->ndel, sizeof(*m->del)))
			return LUNAR_ERR_INTERNAL;
		m->del[m->ndel++] = (struct dsk_scan_del){.idx = h->index, .before = m->n};
		return 0;
	}
	if (dsk_scan_grow((void **)&m->v, &m->cap, m->n, sizeof(*m->v)))
		return LUNAR_ERR_INTERNAL;
	m->v[m->n++] = (struct dsk_scan_ent){
	    .idx = h->index,
	    .crc = h->data_crc,
	    .off = h->offset,
	    .len = h->length,
	    .tenant = p + sizeof(*h),
	    .tlen = h->tenant_len,
	    .klen = h->key_len,
	};
	return 0;
}

/*
 * Mark the entries the DEL records delete: a DEL deletes the PUTs of its
 * index written before it. Sorted by index, with the last DEL of each index
 * kept, each entry costs one binary search (a file of n PUTs and n DELs is
 * O(n log n), not O(n^2)).
 */
static void dsk_scan_apply_dels(struct dsk_scan_meta *m)
{
	size_t k = 0;

	if (!m->ndel)
		return;
	qsort(m->del, m->ndel, sizeof(*m->del), dsk_scan_cmp);
	for (size_t i = 0; i < m->ndel; i++) {
		if (k && m->del[k - 1].idx == m->del[i].idx) {
			if (m->del[i].before > m->del[k - 1].before)
				m->del[k - 1].before = m->del[i].before;
		} else {
			m->del[k++] = m->del[i];
		}
	}
	m->ndel = k;
	for (size_t i = 0; i < m->n; i++) {
		const struct dsk_scan_del *d =
		    bsearch(&m->v[i].idx, m->del, m->ndel, sizeof(*m->del), dsk_scan_cmp);

		m->v[i].deleted = d && i < d->before;
	}
}

/* Parse buf[0..size): valid PUT records into m, marked deleted as the DEL
 * records say; torn or corrupt ones counted. */
static int dsk_scan_parse(const char *buf, size_t size, uint32_t max_idx, struct dsk_scan_meta *m)
{
	const uint32_t magic = DSK_META_MAGIC;
	size_t pos = 0;
	int rc = 0;

	while (pos < size) {
		struct dsk_meta_hdr h;
		size_t left = size - pos;

		if (left < sizeof(h)) {
			if (left >= 4 && !memcmp(buf + pos, &magic, 4))
				m->dropped++; /* a record cut inside its header */
			break;
		}
		memcpy(&h, buf + pos, sizeof(h));
		if (h.magic != magic) {
			pos += DSK_META_ALIGN; /* a hole or padding: resynchronize */
			continue;
		}
		if (!dsk_scan_valid(buf + pos, left, &h, max_idx)) {
			m->dropped++;
			pos += DSK_META_ALIGN;
			continue;
		}
		rc = dsk_scan_add(m, buf + pos, &h);
		if (rc < 0)
			break;
		pos += h.rec_len;
	}
	if (!rc)
		dsk_scan_apply_dels(m);
	free(m->del);
	m->del = NULL;
	m->ndel = m->del_cap = 0;
	return rc;
}

static int dsk_scan_read_meta(struct dsk_ioctx *c, int fd, char **out, size_t *size)
{
	struct stat st;
	char *buf;
	size_t done = 0;

	if (fstat(fd, &st) < 0)
		return LUNAR_ERR_FILE_READ_FAIL;
	if ((uint64_t)st.st_size > DSK_SCAN_MAX_META)
		st.st_size = (off_t)DSK_SCAN_MAX_META; /* no bucket writes that much */
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		return LUNAR_ERR_INTERNAL;
	while (done < (size_t)st.st_size) {
		struct dsk_io io;

		dsk_io_set(&io, DSK_IO_READ, fd, buf + done, (size_t)st.st_size - done, done, -1);
		dsk_io_run(c, &io, 1);
		if (io.res <= 0)
			break; /* shrank, or unreadable: parse what we have */
		done += (size_t)io.res;
	}
	*out = buf;
	*size = done;
	return 0;
}

/*
 * Turn verified entries into live records of b, whose data file holds
 * data_bytes: a record past it, or larger than the store, is not read (a
 * crafted length could have the scan read a sparse terabyte). Only verified
 * records count towards the bucket's size.
 */
static void dsk_scan_verify(struct dsk_store *s, struct dsk_ioctx *c, struct dsk_bucket *b,
			    struct dsk_scan_meta *m, uint64_t data_bytes)
{
	uint64_t limit = data_bytes < s->cfg.capacity ? data_bytes : s->cfg.capacity;

	for (size_t i = 0; i < m->n; i++) {
		struct dsk_scan_ent *e = &m->v[i];
		const char *key = e->tenant + e->tlen;
		struct dsk_rec *r, *old;
		uint32_t crc;

		if (e->idx + 1 > b->count)
			b->count = e->idx + 1;
		if (e->deleted || (e->idx < b->recs_cap && b->recs[e->idx]))
			continue;
		if (e->off > limit || e->len > limit - e->off ||
		    dsk_read_crc(c, b->dfd, e->off, e->len, NULL, 0, &crc) < 0 || crc != e->crc) {
			m->dropped++;
			continue;
		}
		if (DSK_PAD(e->off + e->len, DSK_ALIGN) > b->data_end)
			b->data_end = DSK_PAD(e->off + e->len, DSK_ALIGN);
		r = dsk_rec_alloc(e->tenant, e->tlen, key, e->klen);
		if (!r) {
			m->dropped++;
			continue;
		}
		r->idx = e->idx;
		r->off = e->off;
		r->len = e->len;
		r->crc = e->crc;
		r->state = DSK_REC_LIVE;
		if (dsk_bucket_rec_add(b, r) < 0) {
			free(r);
			m->dropped++;
			continue;
		}
		old = dsk_index_find(&s->ix, r->name, r->tlen, key, r->klen, r->hash);
		if (old) /* an older copy whose deletion record was lost */
			dsk_rec_drop(s, old);
		dsk_index_insert(&s->ix, r);
	}
}

/* The largest record index a metadata file may name. */
static uint32_t max_index(const struct dsk_store *s)
{
	return s->cfg.bucket_objects > DSK_SCAN_MAX_INDEX ? s->cfg.bucket_objects
							  : DSK_SCAN_MAX_INDEX;
}

/* Scan bucket id: linked into s, or deleted when unusable. 0, or -errno
 * when one of its files cannot be opened for another reason than being
 * absent: then it is left as it is. */
static int dsk_scan_bucket(struct dsk_store *s, struct dsk_ioctx *c, uint32_t id,
			   struct dsk_scan_stats *st)
{
	struct dsk_scan_meta m = {0};
	struct dsk_bucket *b;
	struct stat sb;
	char *buf = NULL;
	size_t size = 0;
	uint64_t data_bytes;
	int dfd = -1, mfd;

	mfd = dsk_bucket_fd_open(s, id, "meta", 0);
	if (mfd < 0 && mfd != -ENOENT)
		return mfd;
	if (mfd < 0)
		goto err_unlink; /* data without metadata: unreachable */
	if (dsk_scan_read_meta(c, mfd, &buf, &size) < 0 ||
	    dsk_scan_parse(buf, size, max_index(s), &m) < 0)
		goto err_close;
	dfd = dsk_bucket_fd_open(s, id, "dat", 0);
	if (dfd < 0 && dfd != -ENOENT) {
		close(mfd);
		free(m.v);
		free(buf);
		return dfd;
	}
	if (dfd < 0) {
		for (size_t i = 0; i < m.n; i++)
			m.dropped += !m.v[i].deleted;
		goto err_close;
	}
	b = dsk_bucket_alloc(id, dfd, mfd);
	if (!b)
		goto err_close;
	if (fstat(dfd, &sb))
		sb.st_size = sb.st_blocks = 0;
	dsk_scan_verify(s, c, b, &m, (uint64_t)sb.st_size);
	/* What the data file takes on disk: its size, but not its holes. */
	data_bytes = (uint64_t)sb.st_size;
	if (data_bytes > (uint64_t)sb.st_blocks * 512)
		data_bytes = (uint64_t)sb.st_blocks * 512;
	if (DSK_PAD(data_bytes, DSK_ALIGN) > b->data_end)
		b->data_end = DSK_PAD(data_bytes, DSK_ALIGN);
	b->meta_end = DSK_PAD(size, DSK_META_ALIGN);
	b->sealed = 1;
	b->last_use = ++s->tick;
	s->used += b->data_end + b->meta_end;
	dsk_bucket_link(s, b);
	st->records_dropped += m.dropped;
	free(m.v);
	free(buf);
	return 0;

err_close:
	if (dfd >= 0)
		close(dfd);
	if (mfd >= 0)
		close(mfd);
err_unlink:
	LC_WARN(DSK_LOG, "bucket %08x unusable: removed (%llu records dropped)", id,
		(unsigned long long)m.dropped);
	dsk_bucket_unlink(s, id);
	st->records_dropped += m.dropped;
	st->buckets_dropped++;
	free(m.v);
	free(buf);
	return 0;
}

int dsk_scan(struct dsk_store *s, struct dsk_scan_stats *st)
{
	struct dsk_ioctx *c;
	struct dsk_bucket *b, *next;
	uint32_t *ids = NULL;
	size_t n;
	int rc;

	rc = dsk_scan_ids(s, &ids, &n);
	if (rc < 0)
		return rc;
	c = dsk_ctx_get(s);
	/* New buckets are numbered past every bucket kept (the list's tail,
	 * ids ascending) or left in place; names of files the scan removed do
	 * not count, and the numbering never wraps back onto bucket 1. */
	s->next_id = 1;
	for (size_t i = 0; i < n; i++) {
		int err = dsk_scan_bucket(s, c, ids[i], st);

		if (err)
			LC_WARN(DSK_LOG, "bucket %08x left on disk, unread: %s", ids[i],
				strerror(-err));
		if ((err || (s->tail && s->tail->id == ids[i])) && ids[i] != UINT32_MAX)
			s->next_id = ids[i] + 1;
	}
	dsk_ctx_put(c);
	free(ids);
	for (b = s->head; b; b = next) {
		next = b->next;
		if (b->live)
			continue;
		dsk_bucket_unlist(s, b);
		s->used -= b->data_end + b->meta_end;
		dsk_bucket_unlink(s, b->id);
		dsk_bucket_free(b);
		st->buckets_dropped++;
	}
	st->buckets = s->nbuckets;
	st->records_ok = s->ix.count;
	s->dropped_at_scan = st->records_dropped;
	return 0;
}
