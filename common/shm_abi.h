/*
 * shm_abi.h - the byte layout shared by liblunar and lunar-proxy.
 *
 * One memfd per client session, created, sized and sealed by the proxy and
 * mapped MAP_SHARED by both. It holds offsets, never pointers. The proxy
 * treats every byte of it as hostile: it copies, validates, then acts.
 * docs/shm-abi.md explains the rules; the static_asserts below pin the sizes.
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
#include <stdint.h>

#define LC_SHM_MAGIC 0x524e554cu /* "LUNR" little-endian */
#define LC_PROTO_VERSION 1
#define LC_TENANT_MAX 64 /* bytes including the NUL */
#define LC_CACHELINE 64

/* Handshake, over the UNIX socket. */
struct lc_hello {
	uint32_t magic;
	uint16_t version;
	uint16_t flags;
	uint32_t pid;
	uint32_t rsvd;
	uint64_t arena_bytes; /* 0: proxy default */
	char tenant[LC_TENANT_MAX]; /* NUL-terminated; empty: "default" */
};

/* Sent by the proxy with SCM_RIGHTS [memfd, eventfd] when code == 0. */
struct lc_welcome {
	uint32_t magic;
	uint16_t version;
	uint16_t rsvd;
	int32_t code; /* 0, or a LUNAR_ERR_* refusal (no fds then) */
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
#define LC_REG_MAGIC 0x4745524cu /* "LREG" */
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
	uint64_t reserved[32];
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
	LC_OP_PUT = 1,      /* items: key + value segments */
	LC_OP_UPSERT,       /* items: key + value segments */
	LC_OP_GET,          /* items: key + destination segments; result = bytes */
	LC_OP_GET_SIZE,     /* items: key; result = size */
	LC_OP_EXISTS,       /* items: key; result = 1, 0 or code */
	LC_OP_REMOVE,       /* items: key */
	LC_OP_REMOVE_ALL,   /* no args; completion result = count */
	LC_OP_REMOVE_REGEX, /* arg = the pattern bytes; completion result = count */
	LC_OP_PREFIX_MATCH, /* items: keys; completion result = leading hits */
	LC_OP_HEALTH,       /* no args; completion result = 0 or 2 */
	LC_OP_MAX
};

#define LC_SQE_FORCE 1u     /* remove: ignore leases */
#define LC_SQE_HARD_PIN 2u  /* put: hard pin */
#define LC_SQE_SOFT_PIN 4u  /* put: soft pin */

/* Submission descriptor. Single-key calls are batches of one item. */
struct lc_sqe {
	uint16_t op;    /* enum lc_op */
	uint16_t flags; /* LC_SQE_* */
	uint32_t slot;  /* completion slot index */
	uint32_t count; /* items at arg_off */
	uint32_t replica_num;
	uint64_t arg_off; /* region offset of the argument block */
	uint64_t arg_len; /* its bytes */
	uint64_t seq;     /* echoed in the completion slot */
	uint32_t soft_pin_ttl_ms;
	uint32_t rsvd0;
	/* put/upsert: preferred segment names, NUL-terminated one after the
	 * other (at most LC_PREF_MAX names, LC_PREF_BYTES bytes); 0/0 none. */
	uint64_t pref_off;
	uint64_t pref_len;
};

#define LC_PREF_MAX 8
#define LC_PREF_BYTES 1024

/* One key of a request. The proxy writes result back when done. */
struct lc_item {
	uint64_t key_off; /* region offset of key bytes (no NUL needed) */
	uint32_t key_len;
	uint32_t nseg;    /* struct lc_seg at seg_off */
	uint64_t seg_off;
	int64_t result;   /* per key: bytes, 1/0, or a LUNAR_ERR_* code */
};

/* One piece of a value. region 0 is the session region itself (off is a
 * region offset inside the arena); 1..LC_MAX_REGIONS a registered region
 * (off relative to its start). */
struct lc_seg {
	uint32_t region;
	uint32_t rsvd;
	uint64_t off;
	uint64_t len;
};

enum lc_slot_state {
	LC_SLOT_IDLE = 0,
	LC_SLOT_PENDING = 1, /* submitted, the waiter is spinning */
	LC_SLOT_WAITING = 2, /* submitted, the waiter sleeps on the futex */
	LC_SLOT_DONE = 3,    /* result, seq and done_ns are valid */
};

/* Completion slot: the futex word the waiting thread watches. */
struct lc_cslot {
	uint32_t state; /* enum lc_slot_state; futex word */
	uint32_t rsvd;
	int64_t result;
	uint64_t seq;
	uint64_t done_ns; /* CLOCK_MONOTONIC at completion: steers the waiter's spin */
	uint64_t pad[4];
};

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

#endif /* LUNAR_COMMON_SHM_ABI_H */
