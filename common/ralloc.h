/*
 * ralloc.h - a range allocator: hands out [offset, offset + len) ranges of a
 * space it never touches (a proxy's DRAM segment, a client arena). Best fit
 * over size-segregated free lists, O(1)-ish allocate and free, neighbours
 * coalesced on free. The master uses one per segment; liblunar one per arena.
 * Not thread-safe: the owner serialises calls.
 */
#ifndef LUNAR_COMMON_RALLOC_H
#define LUNAR_COMMON_RALLOC_H

#include <stdint.h>

struct lc_ralloc;

/* lc_ralloc_create - a space of size bytes, every range aligned to align (a
 * power of two >= 1; lengths round up to it). NULL on bad arguments or ENOMEM. */
struct lc_ralloc *lc_ralloc_create(uint64_t size, uint64_t align);
/* lc_ralloc_destroy - free the allocator (not the space). NULL is a no-op. */
void lc_ralloc_destroy(struct lc_ralloc *a);
/* lc_ralloc_get - allocate len bytes (len > 0), rounded up to the alignment;
 * 0 and *off, or -ENOSPC, or -ENOMEM when bookkeeping memory runs out. */
int lc_ralloc_get(struct lc_ralloc *a, uint64_t len, uint64_t *off);
/*
 * lc_ralloc_take - allocate like lc_ralloc_get, but known by the handle it
 * returns rather than by offset: only lc_ralloc_give frees it, and
 * lc_ralloc_put does not find it. It skips lc_ralloc_get's entry in a table
 * of offsets, a cache miss once the table is large. *off is the range's
 * offset. NULL with *err -ENOSPC or -ENOMEM (else *err is left alone).
 */
struct lc_range;
struct lc_range *lc_ralloc_take(struct lc_ralloc *a, uint64_t len, uint64_t *off, int *err);
/*
 * lc_ralloc_take_at - allocate exactly [off, off + len) (len rounded up),
 * known by its handle as lc_ralloc_take's: for rebuilding an allocator from
 * ranges already in use (an HA failover). Cheap when called in ascending
 * offset order. NULL with *err -EINVAL (off unaligned or past the end),
 * -EEXIST (part of the range is allocated) or -ENOMEM.
 */
struct lc_range *lc_ralloc_take_at(struct lc_ralloc *a, uint64_t off, uint64_t len, int *err);
/* lc_ralloc_give - free a range r of a's from lc_ralloc_take, and give the
 * length it had allocated (len rounded up) in *freed (if not NULL). Returns
 * 0, or -EINVAL if r is not allocated: a range given twice is caught unless
 * its bookkeeping has been reused since. r is invalid after the give, and
 * after lc_ralloc_destroy. */
int lc_ralloc_give(struct lc_ralloc *a, struct lc_range *r, uint64_t *freed);
/*
 * lc_ralloc_split - cut the allocated range r (a handle from take, take_at
 * or split) into up to three allocated ranges around [off, off + len) (len
 * rounded up; it must lie inside r): returns the handle of [off, off + len);
 * *head is the part of r before it (r itself) or NULL, *tail the part after
 * it or NULL. Nothing changes state: lc_ralloc_used stays. For carving a
 * piece out of space set aside earlier. NULL with *err -EINVAL (r free,
 * off unaligned, or the range not inside r) or -ENOMEM; r is then unchanged.
 */
struct lc_range *lc_ralloc_split(struct lc_ralloc *a, struct lc_range *r, uint64_t off,
				 uint64_t len, struct lc_range **head, struct lc_range **tail,
				 int *err);
/* lc_ralloc_round - len rounded up to the alignment, as lc_ralloc_get takes it. */
uint64_t lc_ralloc_round(const struct lc_ralloc *a, uint64_t len);
/* lc_ralloc_put - free the range that lc_ralloc_get returned at off, and
 * give its allocated length in *freed (if not NULL). Returns 0, or -ENOENT
 * if no allocated range starts at off. */
int lc_ralloc_put(struct lc_ralloc *a, uint64_t off, uint64_t *freed);
/* Figures, under the owner's serialisation like every call: lc_ralloc_used -
 * bytes allocated (rounded lengths); lc_ralloc_capacity - the size given to
 * lc_ralloc_create; lc_ralloc_largest_free - the longest free range. */
uint64_t lc_ralloc_used(const struct lc_ralloc *a);
uint64_t lc_ralloc_capacity(const struct lc_ralloc *a);
uint64_t lc_ralloc_largest_free(const struct lc_ralloc *a);

#endif /* LUNAR_COMMON_RALLOC_H */
