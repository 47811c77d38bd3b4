/*
 * decode.h - turns one submission from a client's shared region into a
 * request the proxy can trust. The client is hostile: the descriptor is
 * copied once, every offset and length is checked against the region
 * without overflow, keys are copied out, and nothing in shared memory is
 * read twice. Data bytes stay in shared memory (the client may race its own
 * value, never the proxy's bookkeeping). This is the fuzz target's entry.
 */
#ifndef LUNAR_PROXY_DECODE_H
#define LUNAR_PROXY_DECODE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "engine/engine.h"
#include "shm_abi.h"

/*
 * A client memory range registered with LC_REG_ADD, mapped by the proxy.
 * Reference-counted: the session's table holds one reference, every request
 * whose segments point into it one more; unmapped at zero.
 */
struct px_mreg {
	uint8_t *base;
	uint64_t len;
	atomic_int refs;
	struct eng_mem *mr; /* its RDMA registration; NULL: none (TCP) */
	/* How mr is let go (eng_mem_del), set with mr: through a pointer, so
	 * the decoder, which only drops references, links without the engine
	 * (tests/fuzz builds it alone). */
	void (*mr_del)(struct eng_mem *mr);
};

static inline void px_mreg_get(struct px_mreg *m)
{
	atomic_fetch_add(&m->refs, 1);
}

static inline void px_mreg_put(struct px_mreg *m)
{
	if (atomic_fetch_sub(&m->refs, 1) != 1)
		return;
	if (m->mr)
		m->mr_del(m->mr); /* no transfer holds m any more */
	munmap(m->base, m->len);
	free(m);
}

/* The proxy's own copy of a session's layout; never re-read from shm. */
struct px_region {
	uint8_t *base;
	uint64_t size;
	struct lc_ring_ctl *ring;
	struct lc_sqe *sqes;
	struct lc_cslot *slots;
	uint32_t entries;
	uint32_t slot_count;
	uint64_t arena_off;
	uint64_t arena_size;
	/* Registered ranges by region id (index 0 unused); loop thread only. */
	struct px_mreg *mregs[LC_MAX_REGIONS + 1];
	struct eng_mem *arena_mr; /* the arena's RDMA registration, or NULL */
};

struct px_item {
	char *key; /* private NUL-terminated copy; owns iov[] too */
	uint32_t key_len;
	int64_t result;	   /* written back to the item at item_off */
	uint64_t item_off; /* region offset of this item's lc_item */
	struct iovec *iov; /* validated pointers into the region, after key */
	int iovcnt;
	uint64_t total;	   /* sum of iov lengths */
	uint32_t crc;	   /* put: CRC32C of the value as written */
	bool crc_given;	   /* put: crc known before any write: the client's
			    * (LC_SQE_SEG_CRC), or taken first (ops_ahead.c) */
	bool staged;	   /* get: every segment in the arena (px_item_read_dir) */
	uint64_t *landed;  /* one-value staged get: its slot's landed word, else NULL */
	uint32_t land_gen; /* the last attempt's gen in *landed */
};

struct px_req {
	struct px_session *s; /* holds a reference while queued and running */
	struct lc_sqe sqe;    /* private copy */
	uint32_t count;
	struct px_item *items; /* &one when count is 1 */
	struct px_item one;
	char *pattern;	/* LC_OP_REMOVE_REGEX: private NUL-terminated copy */
	char *pref_buf; /* put/upsert: private copy of the preferred names */
	unsigned npref;
	uint32_t nheld;
	uint32_t reason;     /* enum lc_reason, for the completion slot */
	uint64_t reason_arg; /* its argument */
	struct px_req *next; /* pool queue link */
	/* Valid up to npref and nheld; px_decode zeroes only what is above. */
	char *pref[LC_PREF_MAX];
	struct px_mreg *held[LC_MAX_REGIONS]; /* registered ranges in use */
};

/*
 * px_decode - validate sqe (already copied out of the ring) against rg and
 * build a request. Returns 0 and *out (free with px_req_free), or
 * LUNAR_ERR_PROTOCOL with *why naming the violation (the caller disconnects
 * the client), or -ENOMEM. Per-key problems that are not protocol
 * violations (a malformed key) are set as that item's result instead.
 * Pure function of its inputs; any thread.
 */
int px_decode(const struct px_region *rg, const struct lc_sqe *sqe, struct px_req **out,
	      const char **why);
/*
 * px_item_read_dir - how a get reads a value into it: ENG_READ_STAGED when
 * every segment is in the arena, whose bytes liblunar copies out at once and
 * so should find in the cache; else ENG_READ (registered memory, bound for
 * the GPU: streamed past the cache).
 */
static inline enum eng_dir px_item_read_dir(const struct px_item *it)
{
	return it->staged ? ENG_READ_STAGED : ENG_READ;
}

/* px_req_free - free a request from px_decode. NULL is a no-op. */
void px_req_free(struct px_req *r);
/*
 * px_complete - write item results and the completion for r into the region
 * and wake the waiter if it sleeps. result is the completion's result.
 */
void px_complete(const struct px_region *rg, const struct px_req *r, int64_t result);
/*
 * px_refuse - complete the copied descriptor sqe with result without
 * decoding it (BUSY: its request is never looked at). LUNAR_ERR_PROTOCOL with
 * *why when its completion slot is out of range, else 0.
 */
int px_refuse(const struct px_region *rg, const struct lc_sqe *sqe, int64_t result,
	      const char **why);

#endif /* LUNAR_PROXY_DECODE_H */
