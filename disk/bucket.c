/*
 * bucket.c - bucket objects and their files: "b<id>.dat" holds the padded
 * object bytes, "b<id>.meta" the records naming them. Opening, listing,
 * per-bucket record slots, record allocation and the metadata encoder.
 */
#include "dsk_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "lunar.h"

void dsk_bucket_path(const struct dsk_store *s, uint32_t id, const char *ext, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/b%08x.%s", s->dir, id, ext);
}

int dsk_bucket_fd_open(const struct dsk_store *s, uint32_t id, const char *ext, int create)
{
	char path[4096 + DSK_NAME_MAX];
	int flags = O_RDWR | O_CLOEXEC;
	int fd;

	if (create)
		flags |= O_CREAT | O_EXCL;
	/* Only object bytes bypass the page cache: metadata records are small
	 * and not block sized. */
	if (s->direct && !strcmp(ext, "dat"))
		flags |= O_DIRECT;
	dsk_bucket_path(s, id, ext, path, sizeof(path));
	fd = open(path, flags, 0644);
	return fd < 0 ? -errno : fd;
}

struct dsk_bucket *dsk_bucket_alloc(uint32_t id, int dfd, int mfd)
{
	struct dsk_bucket *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->id = id;
	b->dfd = dfd;
	b->mfd = mfd;
	return b;
}

int dsk_bucket_open(struct dsk_store *s, uint32_t id, struct dsk_bucket **out)
{
	int dfd, mfd;

	dfd = dsk_bucket_fd_open(s, id, "dat", 1);
	if (dfd < 0) {
		LC_ERROR(DSK_LOG, "create bucket %08x data: %s", id, strerror(-dfd));
		return LUNAR_ERR_FILE_WRITE_FAIL;
	}
	mfd = dsk_bucket_fd_open(s, id, "meta", 1);
	if (mfd < 0) {
		LC_ERROR(DSK_LOG, "create bucket %08x metadata: %s", id, strerror(-mfd));
		goto err_unlink;
	}
	*out = dsk_bucket_alloc(id, dfd, mfd);
	if (!*out)
		goto err_close;
	return 0;

err_close:
	close(mfd);
err_unlink:
	close(dfd);
	dsk_bucket_unlink(s, id);
	return LUNAR_ERR_FILE_WRITE_FAIL;
}

void dsk_bucket_free(struct dsk_bucket *b)
{
	if (!b)
		return;
	if (b->dfd >= 0)
		close(b->dfd);
	if (b->mfd >= 0)
		close(b->mfd);
	free(b->recs);
	free(b);
}

void dsk_bucket_unlink(const struct dsk_store *s, uint32_t id)
{
	char path[4096 + DSK_NAME_MAX];

	dsk_bucket_path(s, id, "dat", path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		LC_WARN(DSK_LOG, "unlink %s: %s", path, strerror(errno));
	dsk_bucket_path(s, id, "meta", path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		LC_WARN(DSK_LOG, "unlink %s: %s", path, strerror(errno));
}

void dsk_bucket_link(struct dsk_store *s, struct dsk_bucket *b)
{
	b->next = NULL;
	b->prev = s->tail;
	if (s->tail)
		s->tail->next = b;
	else
		s->head = b;
	s->tail = b;
	s->nbuckets++;
}

void dsk_bucket_unlist(struct dsk_store *s, struct dsk_bucket *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		s->head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		s->tail = b->prev;
	b->prev = b->next = NULL;
	if (s->open == b)
		s->open = NULL;
	s->nbuckets--;
}

int dsk_bucket_rec_add(struct dsk_bucket *b, struct dsk_rec *r)
{
	if (r->idx >= b->recs_cap) {
		uint32_t cap = b->recs_cap ? b->recs_cap : 64;
		struct dsk_rec **recs;

		while (cap <= r->idx)
			cap *= 2;
		recs = realloc(b->recs, cap * sizeof(*recs));
		if (!recs)
			return LUNAR_ERR_INTERNAL;
		memset(recs + b->recs_cap, 0, (cap - b->recs_cap) * sizeof(*recs));
		b->recs = recs;
		b->recs_cap = cap;
	}
	b->recs[r->idx] = r;
	r->b = b;
	b->live++;
	return 0;
}

void dsk_rec_drop(struct dsk_store *s, struct dsk_rec *r)
{
	struct dsk_bucket *b = r->b;

	dsk_index_remove(&s->ix, r);
	if (b && r->idx < b->recs_cap && b->recs[r->idx] == r) {
		b->recs[r->idx] = NULL;
		b->live--;
	}
	free(r);
}

struct dsk_rec *dsk_rec_alloc(const char *tenant, size_t tlen, const char *key, size_t klen)
{
	struct dsk_rec *r = calloc(1, sizeof(*r) + tlen + klen + 2);

	if (!r)
		return NULL;
	memcpy(r->name, tenant, tlen);
	memcpy(r->name + tlen + 1, key, klen);
	r->tlen = (uint16_t)tlen;
	r->klen = (uint16_t)klen;
	r->hash = dsk_index_hash(tenant, tlen, key, klen);
	return r;
}

void dsk_meta_encode(void *buf, enum dsk_meta_type type, uint32_t index, uint64_t off, uint64_t len,
		     uint32_t data_crc, const char *tenant, size_t tlen, const char *key,
		     size_t klen)
{
	struct dsk_meta_hdr h = {
	    .magic = DSK_META_MAGIC,
	    .type = (uint16_t)type,
	    .version = DSK_META_VERSION,
	    .tenant_len = (uint16_t)tlen,
	    .key_len = (uint16_t)klen,
	    .index = index,
	    .rec_len = dsk_meta_size(tlen, klen),
	    .offset = off,
	    .length = len,
	    .data_crc = data_crc,
	};
	char *p = buf;

	memset(p, 0, h.rec_len);
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), tenant, tlen);
	memcpy(p + sizeof(h) + tlen, key, klen);
	h.crc = lc_crc32c(0, p, h.rec_len);
	memcpy(p + offsetof(struct dsk_meta_hdr, crc), &h.crc, sizeof(h.crc));
}
