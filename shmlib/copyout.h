/*
 * copyout.h - copying a staged get's value out of the arena while it
 * lands.
 *
 * A proxy that says so (LC_WELCOME_LANDED) tells a one-value get's waiter
 * how much of the value has landed in the arena (lc_cslot.landed: an
 * attempt's gen, whether the attempt tells its bytes, and their count,
 * the value's first). A waiter with nothing else to do copies those bytes
 * to the caller's buffer as they come, so that the copy runs beside the
 * wire instead of after it. What it copied counts only if the attempt it
 * copied from is the one that succeeded: the final word names that
 * attempt's gen; any other means copy again. The word comes from the
 * proxy: its bytes are clamped to the buffer, never trusted as a length.
 */
#ifndef LUNAR_SHMLIB_COPYOUT_H
#define LUNAR_SHMLIB_COPYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shm_abi.h"

/* Buffers smaller than this are copied at DONE: the proxy tells what
 * landed a checksum chunk (256 KiB) at a time, and a value of one chunk
 * leaves nothing to overlap. */
#define SHM_COPYOUT_MIN (512u << 10)

struct shm_copyout {
	const uint8_t *src; /* the value's staging place in the arena */
	uint8_t *dst;	    /* the caller's buffer */
	uint64_t len;	    /* dst's bytes */
	uint64_t copied;    /* dst's first bytes that hold attempt gen's */
	uint32_t gen;	    /* 0: nothing copied yet */
	uint64_t kept;	    /* at DONE: dst's first bytes that hold the value */
};

/* shm_copyout_init - d for copying len bytes from src to dst as they land,
 * or NULL when len is under SHM_COPYOUT_MIN. The one rule for sync and
 * async gets; the proxy tells only for a get of one value into one piece
 * of the arena (px_decode), which is what callers pass here. */
static inline struct shm_copyout *shm_copyout_init(struct shm_copyout *d, const uint8_t *src,
						   uint8_t *dst, uint64_t len)
{
	if (len < SHM_COPYOUT_MIN)
		return NULL;
	*d = (struct shm_copyout){.src = src, .dst = dst, .len = len};
	return d;
}

/* shm_copyout_step - copy what landed beyond d->copied, as word says (an
 * attempt other than d's starts over). 1 if it copied bytes, else 0. */
static inline int shm_copyout_step(struct shm_copyout *d, uint64_t word)
{
	uint64_t got = lc_landed_bytes(word);

	if (lc_landed_gen(word) != d->gen) {
		d->gen = lc_landed_gen(word);
		d->copied = 0;
	}
	if (got > d->len)
		got = d->len;
	if (got <= d->copied)
		return 0;
	memcpy(d->dst + d->copied, d->src + d->copied, got - d->copied);
	d->copied = got;
	return 1;
}

/* shm_copyout_kept - how many of dst's first bytes already hold the value,
 * given the landed word read after DONE (a successful get's). */
static inline uint64_t shm_copyout_kept(const struct shm_copyout *d, uint64_t word)
{
	if (!d->gen || lc_landed_gen(word) != d->gen)
		return 0;
	return d->copied < lc_landed_bytes(word) ? d->copied : lc_landed_bytes(word);
}

#endif /* LUNAR_SHMLIB_COPYOUT_H */
