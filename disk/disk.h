/*
 * disk.h - the proxy's SSD tier: a bucket store under one directory. Objects
 * are appended to bucket files (data file + metadata file per bucket); the
 * metadata record carries the object's CRC32C and its own checksum, so a
 * crash at any point leaves a record that verifies or one that the restart
 * scan drops. Eviction goes a whole bucket at a time (fifo or lru), after
 * telling the owner (the proxy, which tells the master) and after reads in
 * flight on the bucket have finished. I/O runs through io_uring, with
 * O_DIRECT where the filesystem takes it.
 */
#ifndef LUNAR_DISK_DISK_H
#define LUNAR_DISK_DISK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define DSK_DEFAULT_BUCKET_BYTES   (256ull << 20)
#define DSK_DEFAULT_BUCKET_OBJECTS 500u
#define DSK_DEFAULT_HIGH_WATERMARK 0.9

enum dsk_policy {
	DSK_FIFO = 0,  /* evict the oldest bucket */
	DSK_LRU = 1,   /* evict the bucket least recently read (or written) */
	DSK_CLOCK = 2, /* the oldest bucket, but its records read since they were
			* written move to the newest first (FIFO with a second
			* chance), up to half the bucket and DSK_RESCUE_BYTES */
};
#define DSK_RESCUE_BYTES (16u << 20)

/* One stored object, as handed to the eviction callback and to dsk_list.
 * The strings and the struct are owned by the store and valid only during
 * the call that presents them. */
struct dsk_record {
	const char *tenant;
	const char *key;
	uint64_t length;   /* value bytes */
	uint32_t crc32c;   /* CRC32C of the value (lc_crc32c convention, seed 0) */
	uint64_t location; /* opaque: bucket id << 32 | record index */
};

/*
 * dsk_evict_fn - called before a bucket is deleted, with every live record
 * of the bucket (n may be 0 only if never called: empty buckets go without
 * a call). Runs on the evicting thread with no store lock held; it may block
 * (an RPC to the master) but must not call back into this store. Return 0 to
 * let the bucket go, nonzero to keep it (it stays readable; eviction tries
 * the next candidate).
 */
typedef int (*dsk_evict_fn)(void *arg, const struct dsk_record *recs, size_t n);

/*
 * dsk_moved_fn - DSK_CLOCK: recs[0..n) were rewritten (their location is
 * the new one) as their bucket went; the old copies, left out of the
 * notify call, are gone. Runs on the evicting thread with no store lock
 * held; it may block, and may call dsk_remove (say, for a record its
 * owner no longer wants), but nothing else of this store. NULL: moves are
 * not told (and the owner still knows the old locations).
 */
typedef void (*dsk_moved_fn)(void *arg, const struct dsk_record *recs, size_t n);

struct dsk_config {
	const char *dir;	 /* created if missing (one level) */
	uint64_t capacity;	 /* bytes of bucket files kept; > 0 */
	uint64_t bucket_bytes;	 /* seal a bucket at this size; 0: 256 MiB */
	unsigned bucket_objects; /* seal a bucket at this many objects; 0: 500 */
	double high_watermark;	 /* evict after a put above this share; 0: 0.9 */
	enum dsk_policy policy;
	int force_sync_io;   /* use pread/pwrite even where io_uring works (tests) */
	int sync_writes;     /* each put: fdatasync data, then write + fdatasync metadata */
	dsk_evict_fn notify; /* NULL: evict without telling anyone */
	dsk_moved_fn moved;  /* DSK_CLOCK's moves; notify_arg is its arg too */
	void *notify_arg;
};

/* What the restart scan of dsk_store_open found. */
struct dsk_scan_stats {
	uint64_t buckets;	  /* buckets kept */
	uint64_t records_ok;	  /* records verified (metadata and data CRC) */
	uint64_t records_dropped; /* torn, corrupt, short or unreadable records */
	uint64_t buckets_dropped; /* bucket files removed: no live record left */
};

struct dsk_stats {
	uint64_t capacity;
	uint64_t used; /* bytes reserved in bucket files (data padded + metadata) */
	uint64_t buckets;
	uint64_t records;     /* live, readable records */
	uint64_t queue_depth; /* I/O requests in flight now */
	uint64_t write_failures;
	uint64_t read_failures; /* I/O errors and short (truncated) reads */
	uint64_t checksum_failures;
	uint64_t full_failures; /* puts refused: no space could be freed */
	uint64_t dropped_at_scan;
	uint64_t evicted_buckets;
	uint64_t rescued; /* DSK_CLOCK: records moved to a newer bucket */
	uint64_t notify_failures;
	int uring;  /* 1: io_uring backend, 0: synchronous pread/pwrite */
	int direct; /* 1: data files use O_DIRECT */
};

struct dsk_store;

/*
 * dsk_store_open - create cfg->dir if needed, choose the I/O backend (io_uring
 * unless unavailable or force_sync_io) and O_DIRECT (probed on the directory),
 * then scan existing buckets: every metadata record is checked and every
 * object's bytes are read and checked against its CRC32C; torn or corrupt
 * records are dropped (and counted in *scan if scan is not NULL), buckets left
 * without a live record are deleted. Kept buckets are sealed; new objects go
 * to new buckets. Blocks for the whole scan. cfg is copied except cfg->dir,
 * which is copied too; nothing of the caller's is kept. Returns 0 and *out,
 * LUNAR_ERR_INVALID_PARAMS (bad config), LUNAR_ERR_FILE_READ_FAIL (directory
 * unusable) or LUNAR_ERR_INTERNAL (out of memory, io_uring setup failed).
 */
int dsk_store_open(const struct dsk_config *cfg, struct dsk_store **out,
		   struct dsk_scan_stats *scan);

/*
 * dsk_store_close - flush (fdatasync) unsynced buckets, close files, free.
 * The caller guarantees no other call on s is running or will start. NULL ok.
 */
void dsk_store_close(struct dsk_store *s);

/*
 * dsk_put - store the value iov[0..iovcnt) (total > 0, as one object) under
 * (tenant, key), with crc32c its CRC32C as computed by the caller (the
 * store records it without recomputing: a wrong one makes every read of the
 * object fail with CHECKSUM_MISMATCH, never return wrong bytes). The value's bytes may change
 * while the store copies them (an offload's source, a segment range freed and placed again
 * meanwhile): the record then fails its reads the same way; ThreadSanitizer does not track
 * those copies (LC_UNTRACKED_BEGIN, atomic.h). The caller keeps ownership of iov
 * and its memory; the store does not hold it after the call. Blocks until the data and metadata
 * writes complete (and are flushed, with sync_writes). Any thread, several at once; takes the store
 * lock briefly, I/O runs outside it. If the object does not fit, first evicts buckets by policy
 * (calling notify on this thread). Returns 0 and *location (may be NULL), or LUNAR_ERR_INVALID_KEY
 * / INVALID_PARAMS, LUNAR_ERR_OBJECT_ALREADY_EXISTS (the key is stored or being stored; the first
 * value stays), LUNAR_ERR_NO_AVAILABLE_HANDLE (full and nothing can be evicted: counted in
 * full_failures), LUNAR_ERR_FILE_WRITE_FAIL (I/O error such as ENOSPC: counted; the object is not
 * readable, now or after a restart).
 */
int dsk_put(struct dsk_store *s, const char *tenant, const char *key, const struct iovec *iov,
	    int iovcnt, uint32_t crc32c, uint64_t *location);

/* One object of a dsk_put_batch: inputs, then the outcome. */
struct dsk_put_item {
	const char *tenant, *key;
	const void *buf; /* the value: len > 0 bytes */
	uint64_t len;
	uint32_t crc32c;   /* as dsk_put's */
	int rc;		   /* out: as dsk_put returns */
	uint64_t location; /* out, when rc is 0 */
};

/*
 * dsk_put_batch - store each of v[0..n) as dsk_put would, packed: objects
 * placed one after the other in a bucket are copied into a staging buffer
 * (registered with the ring where the kernel allows) and go to disk with
 * one data write per DSK_BOUNCE (4 MiB) and one metadata write, in one
 * submission; an object larger than that goes alone through dsk_put. Each
 * item's rc and location are set; the caller keeps v and the buffers, which
 * are not held after the call. Blocks; any thread. A failed write fails the
 * objects of its group only.
 */
void dsk_put_batch(struct dsk_store *s, struct dsk_put_item *v, size_t n);

/*
 * dsk_get - read the value of (tenant, key) into iov[0..iovcnt), whose total
 * must be at least the value's length. Verifies the CRC32C before returning
 * success. Blocks; any thread, several at once; the bucket is not deleted
 * while the read runs. Marks the bucket recently used (lru). Returns the
 * value length, or LUNAR_ERR_OBJECT_NOT_FOUND (absent, being written, or its
 * file was truncated/deleted), LUNAR_ERR_BUFFER_OVERFLOW (iov too small;
 * nothing read), LUNAR_ERR_CHECKSUM_MISMATCH (bytes on disk are corrupt), or
 * LUNAR_ERR_FILE_READ_FAIL (I/O error). On any error the contents of iov are
 * unspecified and must not be used; a corrupt or short record is dropped
 * from the index, so later reads say OBJECT_NOT_FOUND. rec (NULL: not
 * wanted): when a record was found, whatever came of its read, a copy of
 * it, with tenant and key the caller's (so rec->key says it was found);
 * else untouched. It is the record read, which a later dsk_lookup may no
 * longer name.
 */
int64_t dsk_get(struct dsk_store *s, const char *tenant, const char *key, const struct iovec *iov,
		int iovcnt, struct dsk_record *rec);

/* One read of a dsk_get_batch: inputs, then the outcome. */
struct dsk_get_item {
	const char *tenant, *key;
	void *buf; /* the destination, cap bytes */
	uint64_t cap;
	int64_t res;	   /* out: as dsk_get returns */
	uint32_t crc32c;   /* out: the record's CRC32C, when it was found */
	uint64_t length;   /* out: its length, likewise */
	uint64_t location; /* out: its location, likewise */
};

/*
 * dsk_get_batch - dsk_get of each of v[0..n), together: every record is
 * pinned at once, and the reads go in one submission (per DSK_RING_DEPTH
 * runs), records adjacent in a bucket file coalesced into one vectored
 * read straight into their destinations when O_DIRECT alignment allows
 * (the others are read one by one after). Each CRC32C is checked. Sets each
 * item's res (and crc32c); blocks; any thread. The caller keeps v and the
 * buffers.
 */
void dsk_get_batch(struct dsk_store *s, struct dsk_get_item *v, size_t n);

/*
 * dsk_lookup - copy the record of (tenant, key) into *rec (its strings are
 * NULL: the caller has them) without reading the value. Any thread. Returns 0
 * or LUNAR_ERR_OBJECT_NOT_FOUND.
 */
int dsk_lookup(struct dsk_store *s, const char *tenant, const char *key, struct dsk_record *rec);

/*
 * dsk_remove - forget (tenant, key): it is no longer readable, and a deletion
 * record in its bucket's metadata keeps it gone after a restart. Space comes
 * back when its bucket goes (at once if it was the bucket's last live
 * record). Any thread; blocks on one small write. Returns 0 or
 * LUNAR_ERR_OBJECT_NOT_FOUND.
 */
int dsk_remove(struct dsk_store *s, const char *tenant, const char *key);

/*
 * dsk_evict - evict one bucket by policy now (notify first; a refusal moves
 * on to the next candidate), waiting for reads in flight on it. Blocks; any
 * thread; evictions run one at a time. Returns the bytes freed (> 0) or
 * LUNAR_ERR_NO_AVAILABLE_HANDLE when no bucket could be evicted.
 */
int64_t dsk_evict(struct dsk_store *s);

/*
 * dsk_list - call fn for every live record (the restart re-registration with
 * the master), in bucket order, with the store lock held: fn must be quick
 * and must not call into the store. Stops at and returns fn's first nonzero
 * return; 0 when all were listed.
 */
int dsk_list(struct dsk_store *s, int (*fn)(void *arg, const struct dsk_record *rec), void *arg);

/* dsk_stats - a snapshot of the counters. Any thread. */
void dsk_stats(struct dsk_store *s, struct dsk_stats *st);

#endif /* LUNAR_DISK_DISK_H */
