/*
 * store.c - the store object: open (config, backend, O_DIRECT probe, restart
 * scan), close, the read-only queries (lookup, list, stats) and the test
 * hooks.
 */
#include "dsk_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "lunar.h"

static atomic_int dsk_no_direct; /* dsk_test_no_direct */

static int dsk_config_check(const struct dsk_config *in, struct dsk_config *cfg)
{
	if (!in || !in->dir || !*in->dir || !in->capacity || in->high_watermark < 0 ||
	    in->high_watermark > 1 ||
	    (in->policy != DSK_FIFO && in->policy != DSK_LRU && in->policy != DSK_CLOCK))
		return LUNAR_ERR_INVALID_PARAMS;
	*cfg = *in;
	if (!cfg->bucket_bytes)
		cfg->bucket_bytes = DSK_DEFAULT_BUCKET_BYTES;
	if (!cfg->bucket_objects)
		cfg->bucket_objects = DSK_DEFAULT_BUCKET_OBJECTS;
	if (cfg->high_watermark == 0)
		cfg->high_watermark = DSK_DEFAULT_HIGH_WATERMARK;
	return 0;
}

/* Does the directory's filesystem take O_DIRECT? tmpfs refuses the open;
 * some filesystems accept it and refuse the first aligned write. */
static int dsk_probe_direct(struct dsk_store *s)
{
	char path[4096 + DSK_NAME_MAX];
	struct dsk_ioctx *c;
	struct dsk_io io;
	int fd;

	if (atomic_load(&dsk_no_direct))
		return 0;
	snprintf(path, sizeof(path), "%s/.direct-probe", s->dir);
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0) {
		LC_INFO(DSK_LOG, "%s: no O_DIRECT (%s), buffered I/O", s->dir, strerror(errno));
		return 0;
	}
	c = dsk_ctx_get(s);
	memset(c->bounce, 0, DSK_ALIGN);
	dsk_io_set(&io, DSK_IO_WRITE, fd, c->bounce, DSK_ALIGN, 0, c->bounce_index);
	s->ops->run(c, &io, 1); /* never injected: a probe, not a put */
	dsk_ctx_put(c);
	close(fd);
	unlink(path);
	if (io.res != DSK_ALIGN)
		LC_INFO(DSK_LOG, "%s: O_DIRECT write refused, buffered I/O", s->dir);
	return io.res == DSK_ALIGN;
}

static int dsk_store_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		LC_ERROR(DSK_LOG, "mkdir %s: %s", dir, strerror(errno));
		return LUNAR_ERR_FILE_READ_FAIL;
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || access(dir, R_OK | W_OK | X_OK) < 0) {
		LC_ERROR(DSK_LOG, "%s: not a writable directory", dir);
		return LUNAR_ERR_FILE_READ_FAIL;
	}
	return 0;
}

int dsk_store_open(const struct dsk_config *cfg, struct dsk_store **out,
		   struct dsk_scan_stats *scan)
{
	struct dsk_scan_stats st = {0};
	struct dsk_store *s;
	int rc;

	s = calloc(1, sizeof(*s));
	if (!s)
		return LUNAR_ERR_INTERNAL;
	rc = dsk_config_check(cfg, &s->cfg);
	if (rc < 0)
		goto err_free;
	rc = dsk_store_dir(cfg->dir);
	if (rc < 0)
		goto err_free;
	rc = LUNAR_ERR_INTERNAL;
	s->dir = strdup(cfg->dir);
	if (!s->dir || dsk_index_init(&s->ix) < 0)
		goto err_free;
	s->cfg.dir = s->dir;
	s->ops = dsk_io_select(cfg->force_sync_io);
	if (!s->ops)
		goto err_index;
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->evict_mu, NULL);
	pthread_cond_init(&s->drained, NULL);
	rc = dsk_ctxpool_init(s);
	if (rc < 0)
		goto err_locks;
	s->direct = dsk_probe_direct(s);
	rc = dsk_scan(s, &st);
	if (rc < 0)
		goto err_scan;
	LC_INFO(DSK_LOG, "%s: %llu buckets, %llu records, %llu dropped; %s%s", s->dir,
		(unsigned long long)st.buckets, (unsigned long long)st.records_ok,
		(unsigned long long)st.records_dropped, s->ops->name,
		s->direct ? ", O_DIRECT" : "");
	if (scan)
		*scan = st;
	*out = s;
	return 0;

err_scan:
	for (struct dsk_bucket *b = s->head, *next; b; b = next) {
		next = b->next;
		dsk_bucket_free(b);
	}
	dsk_ctxpool_fini(s);
err_locks:
	pthread_cond_destroy(&s->drained);
	pthread_mutex_destroy(&s->evict_mu);
	pthread_mutex_destroy(&s->mu);
err_index:
	dsk_index_fini(&s->ix);
err_free:
	free(s->dir);
	free(s);
	return rc;
}

void dsk_store_close(struct dsk_store *s)
{
	struct dsk_ioctx *c;

	if (!s)
		return;
	c = dsk_ctx_get(s);
	for (struct dsk_bucket *b = s->head, *next; b; b = next) {
		next = b->next;
		if (b->dirty) {
			struct dsk_io ios[2];

			dsk_io_set(&ios[0], DSK_IO_FSYNC, b->dfd, NULL, 0, 0, -1);
			dsk_io_set(&ios[1], DSK_IO_FSYNC, b->mfd, NULL, 0, 0, -1);
			s->ops->run(c, ios, 2);
		}
		dsk_bucket_free(b);
	}
	dsk_ctx_put(c);
	dsk_index_fini(&s->ix);
	dsk_ctxpool_fini(s);
	pthread_cond_destroy(&s->drained);
	pthread_mutex_destroy(&s->evict_mu);
	pthread_mutex_destroy(&s->mu);
	free(s->dir);
	free(s);
}

int dsk_lookup(struct dsk_store *s, const char *tenant, const char *key, struct dsk_record *rec)
{
	size_t tlen, klen;
	struct dsk_rec *r;
	int rc = LUNAR_ERR_OBJECT_NOT_FOUND;

	if (!s || !tenant || !key || !rec)
		return LUNAR_ERR_INVALID_PARAMS;
	tlen = strlen(tenant);
	klen = strlen(key);
	pthread_mutex_lock(&s->mu);
	r = dsk_index_find(&s->ix, tenant, tlen, key, klen,
			   dsk_index_hash(tenant, tlen, key, klen));
	if (r && r->state == DSK_REC_LIVE) {
		*rec = (struct dsk_record){
		    .length = r->len,
		    .crc32c = r->crc,
		    .location = (uint64_t)r->b->id << 32 | r->idx,
		};
		rc = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

int dsk_list(struct dsk_store *s, int (*fn)(void *arg, const struct dsk_record *rec), void *arg)
{
	int rc = 0;

	pthread_mutex_lock(&s->mu);
	for (struct dsk_bucket *b = s->head; b && !rc; b = b->next) {
		for (uint32_t i = 0; i < b->count && i < b->recs_cap && !rc; i++) {
			struct dsk_rec *r = b->recs[i];
			struct dsk_record rec;

			if (!r || r->state != DSK_REC_LIVE)
				continue;
			rec = (struct dsk_record){
			    .tenant = r->name,
			    .key = dsk_rec_key(r),
			    .length = r->len,
			    .crc32c = r->crc,
			    .location = (uint64_t)b->id << 32 | r->idx,
			};
			rc = fn(arg, &rec);
		}
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

void dsk_stats(struct dsk_store *s, struct dsk_stats *st)
{
	uint64_t records = 0;

	pthread_mutex_lock(&s->mu);
	for (struct dsk_bucket *b = s->head; b; b = b->next)
		for (uint32_t i = 0; i < b->count && i < b->recs_cap; i++)
			records += b->recs[i] && b->recs[i]->state == DSK_REC_LIVE;
	*st = (struct dsk_stats){
	    .capacity = s->cfg.capacity,
	    .used = s->used,
	    .buckets = s->nbuckets,
	    .records = records,
	    .queue_depth = atomic_load(&s->inflight),
	    .write_failures = s->write_failures,
	    .read_failures = s->read_failures,
	    .checksum_failures = s->checksum_failures,
	    .full_failures = s->full_failures,
	    .dropped_at_scan = s->dropped_at_scan,
	    .evicted_buckets = s->evicted_buckets,
	    .rescued = s->rescued,
	    .notify_failures = s->notify_failures,
	    .uring = s->ops == &dsk_uring_ops,
	    .direct = s->direct,
	};
	pthread_mutex_unlock(&s->mu);
}

void dsk_test_inject(struct dsk_store *s, int op, int err)
{
	atomic_store(&s->inject_err, err);
	atomic_store(&s->inject_op, err ? op : 0);
}

void dsk_test_read_hook(struct dsk_store *s, void (*fn)(void *arg), void *arg)
{
	pthread_mutex_lock(&s->mu);
	s->read_hook_arg = arg;
	s->read_hook = fn;
	pthread_mutex_unlock(&s->mu);
}

void dsk_test_no_direct(int on)
{
	atomic_store(&dsk_no_direct, on);
}
