/*
 * shm_abi.h - the byte layout shared by liblunar and lunar-proxy.
 *
 * One memfd per client session, created, sized and sealed by the proxy and
 * mapped MAP_SHARED by both. It holds offsets, never pointers. The proxy
 * treats every byte of it as hostile: it copies, validates, then acts.
 * docs/shm-abi.md explains the rules; the static_asserts below pin the sizes
 * and offsets.
 *
 *   0            header (struct lc_shm_hdr, one page)
 *   ring_off     ring control (struct lc_ring_ctl, three cache lines)
 *   sqes_off     ring_entries x struct lc_sqe (64 B each)
 *   slots_off    slot_count x struct lc_cslot (64 B each)
 *   arena_off    arena_size bytes: keys, item arrays, staged values
 */
#ifndef LUNAR_COMMON_SHM_ABI_H
#define LUNAR_COMMON_SHM_ABI_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#define LC_SHM_MAGIC	 0x524e554cu /* "LUNR" little-endian */
#define LC_PROTO_VERSION 1
#define LC_TENANT_MAX	 64 /* bytes including the NUL */
#define LC_CACHELINE	 64
#define LC_HTTP_ADDR_MAX 64 /* lc_shm_hdr.http_addr, bytes including the NUL */

/* Handshake, over the UNIX socket. */
struct lc_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint32_t pid;
	uint32_t rsvd;
	uint64_t arena_bytes;	    /* 0: proxy default */
	char tenant[LC_TENANT_MAX]; /* NUL-terminated; empty: "default" */
};

/* Sent by the proxy with SCM_RIGHTS [memfd, eventfd] when code == 0. */
struct lc_welcome {
	uint32_t magic;
	uint16_t version;
	uint16_t flags; /* LC_WELCOME_*; an older proxy's 0 asks for nothing */
	int32_t code;	/* 0, or a LUNAR_ERR_* refusal (no fds then) */
	uint32_t rsvd2;
	uint64_t client_id;
	uint64_t region_size;
};

/*
 * Memory registration, over the same socket after the handshake (the only
 * messages a client may send there). ADD carries one memfd with SCM_RIGHTS:
 * [offset, offset + length) of it (offset page-aligned) becomes region
 * `region` (1..LC_MAX_REGIONS, chosen by the proxy) that lc_seg.region may
 * name, with lc_seg.off relative to the start of that range. The memfd must
 * be sealed against shrinking (F_SEAL_SHRINK) and at least offset + length
 * bytes long. DEL drops a region once requests using it have finished.
 * Every request gets exactly one reply, in order.
 */
#define LC_REG_MAGIC   0x4745524cu /* "LREG" */
#define LC_MAX_REGIONS 64

enum lc_reg_op { LC_REG_ADD = 1, LC_REG_DEL = 2 };

struct lc_reg_req {
	uint32_t magic;
	uint16_t op; /* enum lc_reg_op */
	uint16_t rsvd;
	uint32_t region; /* DEL: the region; ADD: 0 */
	uint32_t rsvd2;
	uint64_t offset; /* ADD: in the memfd, page-aligned */
	uint64_t length; /* ADD: bytes */
	uint64_t cookie; /* echoed */
};

struct lc_reg_rep {
	uint32_t magic;
	int32_t code; /* 0 or LUNAR_ERR_* */
	uint32_t region;
	uint32_t rsvd;
	uint64_t cookie;
};

struct lc_shm_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t hdr_size;
	uint64_t region_size;
	uint64_t client_id;
	uint32_t ring_off;
	uint32_t ring_entries; /* power of two */
	uint32_t sqes_off;
	uint32_t slots_off;
	uint32_t slot_count;
	uint32_t rsvd0;
	uint64_t arena_off;
	uint64_t arena_size;
	uint32_t max_batch; /* most items per request */
	uint32_t max_segs;  /* most lc_seg per item */
	uint32_t key_max;
	uint32_t rsvd1;
	/*
	 * Cut from the reserved words, so still version 1 both ways: a proxy
	 * from before writes zeros here (the client then falls back), a
	 * client from before never reads it. "HOST:PORT" where the proxy
	 * serves HTTP (/metrics, /disk/status, ...), NUL-terminated; empty:
	 * not told.
	 */
	char http_addr[LC_HTTP_ADDR_MAX];
	uint64_t reserved[24];
};

#define LC_RING_NEED_WAKEUP 1u

/* Ring control: producer, consumer and flag words on separate cache lines. */
struct lc_ring_ctl {
	uint32_t reserved0; /* 0: producers keep their indexes to themselves */
	uint32_t prod_tail; /* published to the consumer; producers only store it */
	uint8_t pad0[LC_CACHELINE - 8];
	uint32_t cons_head; /* written by the proxy only */
	uint8_t pad1[LC_CACHELINE - 4];
	uint32_t flags; /* LC_RING_NEED_WAKEUP, written by the proxy */
	/* Hints from the proxy for how waiters wait (shm-abi.md, Completing). */
	uint32_t crowded;  /* more clients busy than spare CPUs */
	uint32_t loop_cpu; /* the CPU its loop last ran on, plus one; 0: unknown */
	uint8_t pad2[LC_CACHELINE - 12];
};

enum lc_op {
	LC_OP_PUT = 1,	    /* items: key + value segments */
	LC_OP_UPSERT,	    /* items: key + value segments */
	LC_OP_GET,	    /* items: key + destination segments; result = bytes */
	LC_OP_GET_SIZE,	    /* items: key; result = size */
	LC_OP_EXISTS,	    /* items: key; result = 1, 0 or code */
	LC_OP_REMOVE,	    /* items: key */
	LC_OP_REMOVE_ALL,   /* no args; completion result = count */
	LC_OP_REMOVE_REGEX, /* arg = the pattern bytes; completion result = count */
	LC_OP_PREFIX_MATCH, /* items: keys; completion result = leading hits */
	LC_OP_HEALTH,	    /* no args; completion result = 0 or 2 */
	LC_OP_MAX
};

#define LC_SQE_FORCE	1u /* remove: ignore leases */
#define LC_SQE_HARD_PIN 2u /* put: hard pin */
#define LC_SQE_SOFT_PIN 4u /* put: soft pin */
#define LC_SQE_SEG_CRC	8u /* put: each lc_seg's crc is the CRC32C of its bytes */

/* Take each put piece's CRC32C in the staging copy and send it
 * (LC_SQE_SEG_CRC): the proxy's puts mostly go to other nodes, whose
 * writes then need no pass over the bytes before they go. */
#define LC_WELCOME_SEG_CRC 1u
/* The proxy tells a one-value get's landed bytes (lc_cslot.landed). */
#define LC_WELCOME_LANDED 2u

/* Submission descriptor. Single-key calls are batches of one item. */
struct lc_sqe {
	uint16_t op;	/* enum lc_op */
	uint16_t flags; /* LC_SQE_* */
	uint32_t slot;	/* completion slot index */
	uint32_t count; /* items at arg_off */
	uint32_t replica_num;
	uint64_t arg_off; /* region offset of the argument block */
	uint64_t arg_len; /* its bytes */
	uint64_t seq;	  /* echoed in the completion slot */
	uint32_t soft_pin_ttl_ms;
	uint32_t rsvd0;
	/* put/upsert: preferred segment names, NUL-terminated one after the
	 * other (at most LC_PREF_MAX names, LC_PREF_BYTES bytes); 0/0 none. */
	uint64_t pref_off;
	uint64_t pref_len;
};

#define LC_PREF_MAX   8
#define LC_PREF_BYTES 1024

/* One key of a request. The proxy writes result back when done. */
struct lc_item {
	uint64_t key_off; /* region offset of key bytes (no NUL needed) */
	uint32_t key_len;
	uint32_t nseg; /* struct lc_seg at seg_off */
	uint64_t seg_off;
	int64_t result; /* per key: bytes, 1/0, or a LUNAR_ERR_* code */
};

/* One piece of a value. region 0 is the session region itself (off is a
 * region offset inside the arena); 1..LC_MAX_REGIONS a registered region
 * (off relative to its start). crc: with LC_SQE_SEG_CRC, the CRC32C of the
 * piece's bytes as the client staged them (its word, which the owner of
 * every remote replica checks the bytes against); else 0. */
struct lc_seg {
	uint32_t region;
	uint32_t crc;
	uint64_t off;
	uint64_t len;
};

enum lc_slot_state {
	LC_SLOT_IDLE = 0,
	LC_SLOT_PENDING = 1, /* submitted, the waiter is spinning */
	LC_SLOT_WAITING = 2, /* submitted, the waiter sleeps on the futex */
	LC_SLOT_DONE = 3,    /* result, seq and done_ns are valid */
};

/* Why a call failed, beyond its code (the code stays what engines act on). */
enum lc_reason {
	LC_REASON_NONE = 0,
	/* a put's value is larger than every segment; reason_arg: the largest
	 * segment's bytes. Its items say NO_AVAILABLE_HANDLE. */
	LC_REASON_TOO_LARGE = 1,
};

/* Completion slot: the futex word the waiting thread watches. */
struct lc_cslot {
	uint32_t state;	 /* enum lc_slot_state; futex word */
	uint32_t reason; /* enum lc_reason */
	int64_t result;
	uint64_t seq;
	uint64_t done_ns;    /* CLOCK_MONOTONIC at completion: steers the waiter's spin */
	uint64_t reason_arg; /* see enum lc_reason */
	/* A one-value get staged in one piece of the arena, with a proxy that
	 * sent LC_WELCOME_LANDED: how much of the value has landed there, as
	 * lc_landed_pack(gen, tells, bytes) — the first bytes, in place, of
	 * the proxy's attempt gen at reading it. The client stores 0 before it
	 * submits; the proxy stores the next gen (1, 2, ...) with 0 bytes
	 * before each attempt, tells set when the attempt will raise the bytes
	 * (release) as they land. The waiter may copy landed bytes out before
	 * DONE; only DONE's result says whether they are the value: it keeps
	 * what it copied only when the final word names the gen it copied
	 * from, else it copies again. */
	uint64_t landed;
	uint64_t pad[2];
};

/* lc_cslot.landed: gen in bits 40-63, tells in bit 39, bytes below. */
#define LC_LANDED_GEN_SHIFT  40
#define LC_LANDED_TELLS	     (1ull << 39)
#define LC_LANDED_BYTES_MASK (LC_LANDED_TELLS - 1)

static inline uint64_t lc_landed_pack(uint32_t gen, int tells, uint64_t bytes)
{
	return (uint64_t)gen << LC_LANDED_GEN_SHIFT | (tells ? LC_LANDED_TELLS : 0) |
	       (bytes & LC_LANDED_BYTES_MASK);
}

static inline uint32_t lc_landed_gen(uint64_t word)
{
	return (uint32_t)(word >> LC_LANDED_GEN_SHIFT);
}

static inline int lc_landed_tells(uint64_t word)
{
	return (word & LC_LANDED_TELLS) != 0;
}

static inline uint64_t lc_landed_bytes(uint64_t word)
{
	return word & LC_LANDED_BYTES_MASK;
}

static_assert(sizeof(struct lc_hello) == 88, "lc_hello layout");
static_assert(sizeof(struct lc_welcome) == 32, "lc_welcome layout");
static_assert(sizeof(struct lc_reg_req) == 40, "lc_reg_req layout");
static_assert(sizeof(struct lc_reg_rep) == 24, "lc_reg_rep layout");
static_assert(sizeof(struct lc_shm_hdr) <= 4096, "lc_shm_hdr fits its page");
static_assert(sizeof(struct lc_shm_hdr) == 336, "lc_shm_hdr layout");
static_assert(sizeof(struct lc_ring_ctl) == 3 * LC_CACHELINE, "lc_ring_ctl layout");
static_assert(sizeof(struct lc_sqe) == 64, "lc_sqe layout");
static_assert(sizeof(struct lc_item) == 32, "lc_item layout");
static_assert(sizeof(struct lc_seg) == 24, "lc_seg layout");
static_assert(sizeof(struct lc_cslot) == 64, "lc_cslot layout");

/* Every field's offset, as docs/shm-abi.md gives it: a change here is a
 * change of LC_PROTO_VERSION. */
#define LC_AT(type, field, off)                                                                    \
	static_assert(offsetof(struct type, field) == (off), #type "." #field " offset")
LC_AT(lc_hello, magic, 0);
LC_AT(lc_hello, version, 4);
LC_AT(lc_hello, flags, 6);
LC_AT(lc_hello, pid, 8);
LC_AT(lc_hello, rsvd, 12);
LC_AT(lc_hello, arena_bytes, 16);
LC_AT(lc_hello, tenant, 24);
LC_AT(lc_welcome, magic, 0);
LC_AT(lc_welcome, version, 4);
LC_AT(lc_welcome, flags, 6);
LC_AT(lc_welcome, code, 8);
LC_AT(lc_welcome, rsvd2, 12);
LC_AT(lc_welcome, client_id, 16);
LC_AT(lc_welcome, region_size, 24);
LC_AT(lc_reg_req, magic, 0);
LC_AT(lc_reg_req, op, 4);
LC_AT(lc_reg_req, rsvd, 6);
LC_AT(lc_reg_req, region, 8);
LC_AT(lc_reg_req, rsvd2, 12);
LC_AT(lc_reg_req, offset, 16);
LC_AT(lc_reg_req, length, 24);
LC_AT(lc_reg_req, cookie, 32);
LC_AT(lc_reg_rep, magic, 0);
LC_AT(lc_reg_rep, code, 4);
LC_AT(lc_reg_rep, region, 8);
LC_AT(lc_reg_rep, rsvd, 12);
LC_AT(lc_reg_rep, cookie, 16);
LC_AT(lc_shm_hdr, magic, 0);
LC_AT(lc_shm_hdr, version, 4);
LC_AT(lc_shm_hdr, hdr_size, 6);
LC_AT(lc_shm_hdr, region_size, 8);
LC_AT(lc_shm_hdr, client_id, 16);
LC_AT(lc_shm_hdr, ring_off, 24);
LC_AT(lc_shm_hdr, ring_entries, 28);
LC_AT(lc_shm_hdr, sqes_off, 32);
LC_AT(lc_shm_hdr, slots_off, 36);
LC_AT(lc_shm_hdr, slot_count, 40);
LC_AT(lc_shm_hdr, rsvd0, 44);
LC_AT(lc_shm_hdr, arena_off, 48);
LC_AT(lc_shm_hdr, arena_size, 56);
LC_AT(lc_shm_hdr, max_batch, 64);
LC_AT(lc_shm_hdr, max_segs, 68);
LC_AT(lc_shm_hdr, key_max, 72);
LC_AT(lc_shm_hdr, rsvd1, 76);
LC_AT(lc_shm_hdr, http_addr, 80);
LC_AT(lc_shm_hdr, reserved, 144);
LC_AT(lc_ring_ctl, reserved0, 0);
LC_AT(lc_ring_ctl, prod_tail, 4);
LC_AT(lc_ring_ctl, cons_head, 64);
LC_AT(lc_ring_ctl, flags, 128);
LC_AT(lc_ring_ctl, crowded, 132);
LC_AT(lc_ring_ctl, loop_cpu, 136);
LC_AT(lc_sqe, op, 0);
LC_AT(lc_sqe, flags, 2);
LC_AT(lc_sqe, slot, 4);
LC_AT(lc_sqe, count, 8);
LC_AT(lc_sqe, replica_num, 12);
LC_AT(lc_sqe, arg_off, 16);
LC_AT(lc_sqe, arg_len, 24);
LC_AT(lc_sqe, seq, 32);
LC_AT(lc_sqe, soft_pin_ttl_ms, 40);
LC_AT(lc_sqe, rsvd0, 44);
LC_AT(lc_sqe, pref_off, 48);
LC_AT(lc_sqe, pref_len, 56);
LC_AT(lc_item, key_off, 0);
LC_AT(lc_item, key_len, 8);
LC_AT(lc_item, nseg, 12);
LC_AT(lc_item, seg_off, 16);
LC_AT(lc_item, result, 24);
LC_AT(lc_seg, region, 0);
LC_AT(lc_seg, crc, 4);
LC_AT(lc_seg, off, 8);
LC_AT(lc_seg, len, 16);
LC_AT(lc_cslot, state, 0);
LC_AT(lc_cslot, reason, 4);
LC_AT(lc_cslot, result, 8);
LC_AT(lc_cslot, seq, 16);
LC_AT(lc_cslot, done_ns, 24);
LC_AT(lc_cslot, reason_arg, 32);
LC_AT(lc_cslot, landed, 40);
#undef LC_AT

#endif /* LUNAR_COMMON_SHM_ABI_H */
