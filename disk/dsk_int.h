/*
 * dsk_int.h - disk store internals shared by the files of disk/: the on-disk
 * record format, the I/O request object and the backend ops table
 * (io_uring / synchronous), the in-memory index, buckets and the store.
 * Never included from outside disk/ (tests use the dsk_test_* hooks).
 *
 * Errors: LUNAR_ERR_* codes as in disk.h, except the helpers that wrap a
 * system call (dsk_uring_probe, dsk_bucket_fd_open, the backends' ops),
 * which return -errno for their caller to log and convert.
 */
#ifndef LUNAR_DISK_DSK_INT_H
#define LUNAR_DISK_DSK_INT_H

#include "disk.h"
#include "crc32c.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DSK_LOG	       "disk"
#define DSK_ALIGN      4096u	  /* data records start and are padded to this */
#define DSK_META_ALIGN 512u	  /* metadata records are padded to this */
#define DSK_BOUNCE     (4u << 20) /* aligned staging buffer per I/O context */
#define DSK_NCTX       4	  /* I/O contexts (ring + bounce), each under a mutex */
#define DSK_RING_DEPTH 128	  /* > LUNAR_IOV_MAX + a metadata write + fsyncs */
#define DSK_NAME_MAX   64	  /* "b%08x.meta" */
#define DSK_BATCH_MAX  256u	  /* objects in one packed write (put_batch.c) */
#define DSK_PAD(x, a)  (((x) + (a)-1) & ~(uint64_t)((a)-1))

/*
 * Metadata file: a sequence of records, each starting on a DSK_META_ALIGN
 * boundary and padded with zeros to one (rec_len). All integers little-endian
 * (the host; static_assert below). A record is valid when magic, version and
 * rec_len are sane and crc (CRC32C of the whole rec_len bytes with the crc
 * field zero) matches; a PUT record is live when its data bytes
 * [offset, offset + length) of the data file match data_crc and no DEL record
 * names its index. The magic holds bytes (0x1a) that a key or tenant can never
 * contain, so after a torn record the scan resynchronizes by looking for it
 * at the next DSK_META_ALIGN boundaries.
 */
#define DSK_META_MAGIC	 0x1a4b5344u /* "DSK\x1a" */
#define DSK_META_VERSION 1u

enum dsk_meta_type {
	DSK_META_PUT = 1, /* an object: data at offset, length bytes */
	DSK_META_DEL = 2, /* the PUT with this index was removed */
};

struct dsk_meta_hdr {
	uint32_t magic;
	uint32_t crc;
	uint16_t type;
	uint16_t version;
	uint16_t tenant_len;
	uint16_t key_len; /* key follows tenant, no NULs */
	uint32_t index;	  /* record index within the bucket */
	uint32_t rec_len; /* total bytes, a multiple of DSK_META_ALIGN */
	uint64_t offset;
	uint64_t length;
	uint32_t data_crc;
	uint32_t reserved;
};
static_assert(sizeof(struct dsk_meta_hdr) == 48, "metadata header is 48 bytes");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "on-disk format is little-endian");

/* dsk_meta_size - padded size of a record naming tenant_len + key_len bytes. */
static inline uint32_t dsk_meta_size(size_t tenant_len, size_t key_len)
{
	return (uint32_t)DSK_PAD(sizeof(struct dsk_meta_hdr) + tenant_len + key_len,
				 DSK_META_ALIGN);
}

/* dsk_meta_encode - fill buf (dsk_meta_size bytes) with one record. */
void dsk_meta_encode(void *buf, enum dsk_meta_type type, uint32_t index, uint64_t off, uint64_t len,
		     uint32_t data_crc, const char *tenant, size_t tlen, const char *key,
		     size_t klen);

/* ---- I/O requests and backends ----------------------------------------- */

enum dsk_io_op {
	DSK_IO_NOP = 0, /* skipped; res left as set (failure injection) */
	DSK_IO_READ,
	DSK_IO_WRITE,
	DSK_IO_FSYNC, /* fdatasync */
};

#define DSK_IO_LINK 1u /* the next request runs only if this one succeeds in full */

/* One I/O request object: set inputs, run a batch, read res. */
struct dsk_io {
	enum dsk_io_op op;
	unsigned flags;
	int fd;
	int buf_index; /* registered buffer holding buf, or -1 */
	void *buf;
	size_t len;
	const struct iovec *vec; /* READ into / WRITE from vec[0..nvec) (len bytes), not buf */
	int nvec;
	uint64_t off;
	int64_t res; /* out: bytes done, or -errno (-ECANCELED after a failed link) */
};

struct dsk_ioctx {
	pthread_mutex_t mu; /* held by the one thread using this context */
	struct dsk_store *s;
	void *bounce;	  /* DSK_BOUNCE bytes, DSK_ALIGN aligned */
	int bounce_index; /* registered buffer index of bounce, or -1 */
	void *impl;	  /* backend state (the ring) */
};

/*
 * struct dsk_io_ops - an I/O backend. ctx_init sets up c->impl (and may
 * register c->bounce, setting bounce_index) and returns 0 or -errno; run
 * submits ios[0..n) (n <= DSK_RING_DEPTH) as one batch and waits for all of
 * them, setting each res; it returns 0 or -errno when the batch could not be
 * submitted at all. Called with c->mu held.
 */
struct dsk_io_ops {
	const char *name;
	int (*ctx_init)(struct dsk_ioctx *c);
	void (*ctx_fini)(struct dsk_ioctx *c);
	int (*run)(struct dsk_ioctx *c, struct dsk_io *ios, unsigned n);
};

extern const struct dsk_io_ops dsk_uring_ops;
extern const struct dsk_io_ops dsk_sync_ops;

/* dsk_uring_probe - 0 if io_uring can be set up here, else -errno. */
int dsk_uring_probe(void);

/* dsk_io_select - the one place that picks the backend. */
const struct dsk_io_ops *dsk_io_select(int force_sync);

/* dsk_ctxpool_init - the store's DSK_NCTX I/O contexts, each with its bounce
 * buffer and backend state (s->ops chosen already). 0, or
 * LUNAR_ERR_INTERNAL with none left (the cause logged). Store opening only. */
int dsk_ctxpool_init(struct dsk_store *s);
/* dsk_ctxpool_fini - undo dsk_ctxpool_init; contexts never set up are
 * skipped. No context may be in use. */
void dsk_ctxpool_fini(struct dsk_store *s);
/* dsk_ctx_get - a free context, locked (blocks while all are busy). */
struct dsk_ioctx *dsk_ctx_get(struct dsk_store *s);
/* dsk_ctx_put - unlock c, taken by dsk_ctx_get on this thread. */
void dsk_ctx_put(struct dsk_ioctx *c);
/* dsk_io_run - apply failure injection, count queue depth, run the batch. */
int dsk_io_run(struct dsk_ioctx *c, struct dsk_io *ios, unsigned n);

static inline void dsk_io_set(struct dsk_io *io, enum dsk_io_op op, int fd, void *buf, size_t len,
			      uint64_t off, int buf_index)
{
	io->op = op;
	io->flags = 0;
	io->fd = fd;
	io->buf = buf;
	io->len = len;
	io->off = off;
	io->buf_index = buf_index;
	io->vec = NULL;
	io->nvec = 0;
	io->res = 0;
}

/* dsk_iov_to_buf - copy n bytes of the iov byte stream, from skip bytes in,
 * to dst. */
void dsk_iov_to_buf(const struct iovec *iov, int iovcnt, uint64_t skip, void *dst, size_t n);
/* dsk_buf_to_iov_crc - copy n bytes of src into the iov byte stream, from skip
 * bytes in, returning lc_crc32c(crc, src, n) (src is read once). */
uint32_t dsk_buf_to_iov_crc(const struct iovec *iov, int iovcnt, uint64_t skip, const void *src,
			    size_t n, uint32_t crc);

/* dsk_read_crc - read [off, off + len) of fd through c's bounce buffer,
 * returning its CRC32C in *crc; 0, LUNAR_ERR_OBJECT_NOT_FOUND (short file)
 * or LUNAR_ERR_FILE_READ_FAIL. With iov, also copies the bytes there. */
int dsk_read_crc(struct dsk_ioctx *c, int fd, uint64_t off, uint64_t len, const struct iovec *iov,
		 int iovcnt, uint32_t *crc);

/* ---- index, buckets, store -------------------------------------------- */

enum dsk_rec_state {
	DSK_REC_PENDING = 0, /* being written: invisible to readers */
	DSK_REC_LIVE = 1,
};

struct dsk_bucket;

struct dsk_rec {
	struct dsk_rec *hnext;
	uint64_t hash;
	struct dsk_bucket *b;
	uint64_t off;
	uint64_t len;
	uint32_t idx;
	uint32_t crc;
	uint16_t tlen;
	uint16_t klen;
	uint8_t state;
	uint8_t ref; /* read since written (DSK_CLOCK) */
	char name[]; /* tenant '\0' key '\0' */
};

static inline const char *dsk_rec_key(const struct dsk_rec *r)
{
	return r->name + r->tlen + 1;
}

struct dsk_index {
	struct dsk_rec **slots;
	size_t mask;
	size_t count;
};

/* The index of live records by (tenant, key); every call with s->mu held
 * (or before the store is shared). */
/* dsk_index_init - an empty index; 0 or LUNAR_ERR_INTERNAL (out of memory). */
int dsk_index_init(struct dsk_index *ix);
/* dsk_index_fini - free the table and every record left in it; a second call
 * does nothing. */
void dsk_index_fini(struct dsk_index *ix);
/* dsk_index_hash - the hash of (tenant, key) records carry in r->hash. Pure. */
uint64_t dsk_index_hash(const char *tenant, size_t tlen, const char *key, size_t klen);
/* dsk_index_find - the record of (tenant, key) with that hash, or NULL;
 * still the index's. */
struct dsk_rec *dsk_index_find(struct dsk_index *ix, const char *tenant, size_t tlen,
			       const char *key, size_t klen, uint64_t hash);
/* dsk_index_insert - add r (r->hash set; the index owns r until removed).
 * Grows the table best effort: never fails. */
void dsk_index_insert(struct dsk_index *ix, struct dsk_rec *r);
/* dsk_index_remove - take r out if present; r is the caller's again. */
void dsk_index_remove(struct dsk_index *ix, struct dsk_rec *r);

struct dsk_bucket {
	struct dsk_bucket *prev, *next; /* the store's list, ascending id */
	uint32_t id;
	int dfd, mfd;
	uint64_t data_end; /* reserved data bytes (next record's offset) */
	uint64_t meta_end; /* reserved metadata bytes */
	uint32_t count;	   /* records reserved: the next index */
	uint32_t live;	   /* records in the index (pending or live) */
	struct dsk_rec **recs;
	uint32_t recs_cap;
	unsigned readers;    /* gets with I/O in flight on this bucket */
	unsigned writers;    /* puts/removes with I/O in flight */
	uint64_t last_use;   /* store tick of creation or last read */
	uint64_t skip_round; /* notify refused in this eviction round */
	unsigned sealed : 1, evicting : 1, dirty : 1;
};

struct dsk_store {
	struct dsk_config cfg;
	char *dir;
	const struct dsk_io_ops *ops;
	int direct;

	pthread_mutex_t mu;	  /* everything below up to the counters */
	pthread_cond_t drained;	  /* a bucket's readers/writers reached 0 */
	pthread_mutex_t evict_mu; /* one eviction at a time; taken before mu */
	struct dsk_index ix;
	struct dsk_bucket *head, *tail; /* ascending id */
	struct dsk_bucket *open;	/* takes new records, or NULL */
	uint64_t nbuckets;
	uint64_t used;
	uint64_t tick;
	uint32_t next_id;
	uint64_t evict_round;
	uint64_t write_failures, read_failures, checksum_failures, full_failures;
	uint64_t dropped_at_scan, evicted_buckets, notify_failures;
	uint64_t rescued; /* records moved forward by DSK_CLOCK */

	atomic_uint_fast64_t inflight; /* I/O requests submitted, not completed */
	atomic_int inject_op;	       /* dsk_test_inject: op of the next failure */
	atomic_int inject_err;
	void (*read_hook)(void *arg); /* dsk_test_read_hook */
	void *read_hook_arg;

	struct dsk_ioctx ctx[DSK_NCTX];
	atomic_uint ctx_next;
};

/* bucket.c - all with s->mu held unless said otherwise */
/* dsk_bucket_path - "<dir>/b<id as 8 hex digits>.<ext>" into buf (cut to
 * cap). Pure; no lock needed. */
void dsk_bucket_path(const struct dsk_store *s, uint32_t id, const char *ext, char *buf,
		     size_t cap);
/* dsk_bucket_fd_open - open the "dat" or "meta" file of bucket id (creating
 * it with O_EXCL if create; data files O_DIRECT when the store is). Returns
 * the fd or -errno. No lock needed. */
int dsk_bucket_fd_open(const struct dsk_store *s, uint32_t id, const char *ext, int create);
/* dsk_bucket_alloc - a zeroed bucket id owning the open files dfd and mfd
 * (on success only); NULL when out of memory. Not listed; no lock needed. */
struct dsk_bucket *dsk_bucket_alloc(uint32_t id, int dfd, int mfd);
/* dsk_bucket_open - create the files of a new bucket id and its object. No
 * lock needed. Returns 0 and *out or LUNAR_ERR_FILE_WRITE_FAIL. */
int dsk_bucket_open(struct dsk_store *s, uint32_t id, struct dsk_bucket **out);
/* dsk_bucket_free - close files and free (the records must be gone). */
void dsk_bucket_free(struct dsk_bucket *b);
/* dsk_bucket_unlink - delete the bucket's files; no lock needed. */
void dsk_bucket_unlink(const struct dsk_store *s, uint32_t id);
/* dsk_bucket_link - append b to the store's list (ids ascending: b's must be
 * the highest); the store owns b then. */
void dsk_bucket_link(struct dsk_store *s, struct dsk_bucket *b);
/* dsk_bucket_unlist - take b out of the list (and out of s->open if it is
 * the open bucket); b is the caller's again. */
void dsk_bucket_unlist(struct dsk_store *s, struct dsk_bucket *b);
/* dsk_bucket_rec_add - put r at b->recs[r->idx], growing the array; r->b is
 * set and b->live counts it. 0 or LUNAR_ERR_INTERNAL (out of memory). */
int dsk_bucket_rec_add(struct dsk_bucket *b, struct dsk_rec *r);
/* dsk_rec_drop - remove r from the index and its bucket, and free it. */
void dsk_rec_drop(struct dsk_store *s, struct dsk_rec *r);
/* dsk_rec_alloc - a zeroed record named (tenant, key), copied, with its hash
 * set; the caller's until inserted. NULL when out of memory. No lock needed. */
struct dsk_rec *dsk_rec_alloc(const char *tenant, size_t tlen, const char *key, size_t klen);

/* scan.c */
/*
 * dsk_scan - the restart scan behind dsk_store_open: read every bucket file
 * of s->dir, keep the records that verify (index and sealed buckets),
 * delete buckets left with none, and count all this in *st. A bucket that
 * cannot be read is logged and left on disk. Returns 0,
 * LUNAR_ERR_FILE_READ_FAIL (directory unreadable) or LUNAR_ERR_INTERNAL.
 * Blocks on disk I/O; store opening only, before the store is shared.
 */
int dsk_scan(struct dsk_store *s, struct dsk_scan_stats *st);

/* put.c: the pieces of a put that put_batch.c shares */
struct dsk_put_plan {
	struct dsk_rec *r;
	int dfd, mfd;
	uint64_t moff; /* the metadata record's offset */
	uint32_t mlen;
	void *meta;
	int no_evict; /* full: fail rather than evict (eviction's own writes) */
};
/* dsk_put_args - check a put's arguments; 0 and *len (the total), or
 * LUNAR_ERR_INVALID_PARAMS / INVALID_KEY. Pure. */
int dsk_put_args(const char *tenant, const char *key, const struct iovec *iov, int iovcnt,
		 uint64_t *len);
/* dsk_put_reserve - reserve p->r's place (dlen padded data bytes, p->mlen
 * metadata bytes) in the open bucket, evicting when full; on success the
 * record is in the index (PENDING) holding a writer reference on its bucket,
 * and p->dfd, mfd, moff are set. Takes s->mu; called without it. Codes as
 * dsk_put. */
int dsk_put_reserve(struct dsk_store *s, struct dsk_put_plan *p, uint64_t dlen);
/* dsk_put_fits - whether need more bytes fit without an eviction now. Takes
 * s->mu. (A batch writes its pending group before a put that would evict:
 * eviction waits for a bucket's writers, and the group's are ours.) */
int dsk_put_fits(struct dsk_store *s, uint64_t need);
/* dsk_put_check - 0 when every request of ios[0..n) did all its bytes, else
 * LUNAR_ERR_FILE_WRITE_FAIL (logged). */
int dsk_put_check(struct dsk_io *ios, unsigned n);
/* dsk_put_done - publish r (rc 0) or drop it, and release its writer
 * reference (the last writer of a sealed bucket flushes it). Without s->mu. */
void dsk_put_done(struct dsk_store *s, struct dsk_rec *r, int rc);

/* get.c: the pieces of a get that get_batch.c shares */
struct dsk_get_plan {
	int fd;
	uint64_t off;
	uint64_t len;
	uint32_t crc;
};
/* dsk_get_read - read p's record into iov[0..iovcnt) (at least p->len
 * bytes) with c, and check its CRC32C: 0 or a code as dsk_get. */
int dsk_get_read(struct dsk_ioctx *c, const struct dsk_get_plan *p, const struct iovec *iov,
		 int iovcnt);
/* dsk_get_failed - after a failed read (rc) of record idx of b: count it and
 * drop the record if its bytes are gone or corrupt. s->mu held. */
void dsk_get_failed(struct dsk_store *s, struct dsk_bucket *b, uint32_t idx, int rc);

/* put_batch.c */
/* dsk_put_batch_ex - dsk_put_batch; with no_evict, a full store fails an
 * object (NO_AVAILABLE_HANDLE) rather than evicting: for eviction itself,
 * which holds evict_mu. */
void dsk_put_batch_ex(struct dsk_store *s, struct dsk_put_item *v, size_t n, int no_evict);

/* rescue.c: DSK_CLOCK's second chance, within one bucket eviction */
struct dsk_rescue;
/* dsk_rescue_read - read the live records of b (being evicted, writers
 * drained) read since written, up to half its data and DSK_RESCUE_BYTES,
 * into memory, and take them out of recs[0..*n) (the notify list, which is
 * compacted). NULL when there are none or no memory. evict_mu held, s->mu
 * not. */
struct dsk_rescue *dsk_rescue_read(struct dsk_store *s, struct dsk_bucket *b,
				   struct dsk_record *recs, size_t *n);
/* dsk_rescue_write - after b is retired: write the rescued records anew
 * (never evicting), tell cfg.moved of those written and cfg.notify of
 * those not, and free r. NULL ok. evict_mu held, s->mu not. */
void dsk_rescue_write(struct dsk_store *s, struct dsk_rescue *r);
/* dsk_rescue_free - drop r unwritten (the bucket stays). NULL ok. */
void dsk_rescue_free(struct dsk_rescue *r);

/* evict.c */
/* dsk_evict_for - free space until need more bytes fit; called without s->mu.
 * 0 if something was freed (retry), else LUNAR_ERR_NO_AVAILABLE_HANDLE. */
int dsk_evict_for(struct dsk_store *s, uint64_t need);
/* dsk_evict_watermark - evict sealed buckets while above the high watermark;
 * skipped if another eviction runs. Called without s->mu. */
void dsk_evict_watermark(struct dsk_store *s);
/* dsk_bucket_release - drop one reader/writer reference (s->mu held). */
void dsk_bucket_release(struct dsk_store *s, struct dsk_bucket *b, int writer);

/* ---- test hooks (tests/unit/test_disk.c only) -------------------------- */

/* dsk_test_inject - the next request of op (DSK_IO_WRITE, DSK_IO_READ or
 * DSK_IO_FSYNC) fails with -err instead of running. err 0 disarms. */
void dsk_test_inject(struct dsk_store *s, int op, int err);
/* dsk_test_read_hook - fn(arg) runs inside every dsk_get after the bucket
 * reference is taken and before the read I/O, with no lock held. */
void dsk_test_read_hook(struct dsk_store *s, void (*fn)(void *arg), void *arg);
/* dsk_test_no_direct - while on, stores opened report no O_DIRECT (exercises
 * the buffered path on filesystems that take O_DIRECT). Process-wide. */
void dsk_test_no_direct(int on);

#endif /* LUNAR_DISK_DSK_INT_H */
