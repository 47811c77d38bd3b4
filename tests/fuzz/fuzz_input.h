/*
 * fuzz_input.h - how fuzz_decode turns its input bytes into a client region:
 * a fixed header (ring indexes, arena size, registered ranges, up to FZ_SQES
 * descriptors) followed by the bytes that fill the arena. Shared by the target and the
 * seed writer. The region is laid out like proxy/session.c's (header page,
 * ring control, sqes, slots, page-aligned arena) with a small arena of 1 to
 * 16 pages chosen by the input, so the arena's end - where off-by-ones live -
 * is always within reach of a mutation.
 */
#ifndef LUNAR_TESTS_FUZZ_FUZZ_INPUT_H
#define LUNAR_TESTS_FUZZ_FUZZ_INPUT_H

#include <assert.h>
#include <stdint.h>

#include "shm_abi.h"

#define FZ_ENTRIES	      256u
#define FZ_SLOTS	      256u
#define FZ_RING_OFF	      4096u
#define FZ_SQES_OFF	      (FZ_RING_OFF + sizeof(struct lc_ring_ctl))
#define FZ_SLOTS_OFF	      (FZ_SQES_OFF + FZ_ENTRIES * sizeof(struct lc_sqe))
#define FZ_ARENA_OFF	      ((FZ_SLOTS_OFF + FZ_SLOTS * sizeof(struct lc_cslot) + 4095u) & ~4095ull)
#define FZ_ARENA_MAX	      65536u
#define FZ_REGION_MAX	      (FZ_ARENA_OFF + FZ_ARENA_MAX)
#define FZ_SQES		      4
#define FZ_MREGS	      4
#define FZ_ARENA_BYTES(pages) (4096u * (1u + (pages) % 16u))

/* mode bits */
#define FZ_RAW_TAIL 1u /* prod_tail = tail as given; else cons + 1 + ((mode >> 1) & 3) */

struct fz_input {
	uint32_t cons;	     /* the proxy's private consumer index (and cons_head) */
	uint32_t tail;	     /* prod_tail as the client wrote it, with FZ_RAW_TAIL */
	uint8_t mode;	     /* FZ_RAW_TAIL | (extra entries << 1) */
	uint8_t slot_state;  /* the slot's state before px_complete (mod 4) */
	uint8_t arena_pages; /* arena = 4096 * (1 + arena_pages % 16) bytes */
	uint8_t pad;
	/* Registered ranges (LC_REG_ADD): id % (LC_MAX_REGIONS + 1), 0 = none,
	 * of mreg_len bytes each; a later duplicate id replaces an earlier one. */
	uint8_t mreg_id[FZ_MREGS];
	uint16_t mreg_len[FZ_MREGS];
	uint8_t pad2[8];
	struct lc_sqe sqe[FZ_SQES]; /* at ring positions cons, cons + 1, ... */
	/* then the arena's first bytes; the rest of the arena is zero */
};

static_assert(sizeof(struct fz_input) == 32 + FZ_SQES * 64, "fz_input layout");
static_assert(FZ_ARENA_OFF == 40960, "same arena offset as proxy/session.c");

#endif /* LUNAR_TESTS_FUZZ_FUZZ_INPUT_H */
