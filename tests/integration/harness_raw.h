/*
 * harness_raw.h - a raw client for integration tests: the handshake by
 * hand, then the shared region written directly, so a test can send what
 * liblunar never would (or watch what the proxy writes back).
 */
#ifndef LUNAR_TESTS_HARNESS_RAW_H
#define LUNAR_TESTS_HARNESS_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "shm_abi.h"

#define RAW_ARENA (1u << 20)

struct raw {
	int sock, memfd, efd;
	uint8_t *base;
	uint64_t size;
	uint64_t client_id;
	uint16_t welcome_flags; /* the welcome's LC_WELCOME_* */
	struct lc_shm_hdr h;
	struct lc_ring_ctl *ring;
	struct lc_ring_prod prod; /* producer indexes, as liblunar keeps them */
	struct lc_sqe *sqes;
	struct lc_cslot *slots;
	uint64_t used; /* arena bump allocator, arena-relative */
};

/* raw_open - connect to the proxy at sock_path, say hello, map the region. */
void raw_open(struct raw *c, const char *sock_path);
/* raw_connect, raw_hello - raw_open in two steps: connect only, then the
 * hello, the welcome and the mapping. */
void raw_connect(struct raw *c, const char *sock_path);
void raw_hello(struct raw *c);
/* raw_hello_tenant - raw_hello as tenant (NULL: the default tenant). */
void raw_hello_tenant(struct raw *c, const char *tenant);
/* raw_close - unmap and close everything; c may be half open. */
void raw_close(struct raw *c);
/* raw_put - copy n bytes into the arena; returns their region offset (8-aligned). */
uint64_t raw_put(struct raw *c, const void *p, size_t n);
/* raw_kick - write the eventfd, as a client does when the proxy sleeps. */
void raw_kick(struct raw *c);
/* raw_submit - publish one descriptor the way liblunar does, then kick. */
void raw_submit(struct raw *c, const struct lc_sqe *q);
/* raw_wait_done - 1 once slot is DONE, 0 after ms without. */
int raw_wait_done(struct raw *c, uint32_t slot, int ms);
/* raw_call - mark q's slot PENDING, submit q and wait up to ms for it: the
 * slot's result; fails the test when it does not complete. */
int64_t raw_call(struct raw *c, const struct lc_sqe *q, int ms);
/*
 * raw_close_blocker - a descriptor whose last close blocks for about secs:
 * a connected loopback TCP socket whose send queue is full (the peer never
 * reads), with SO_LINGER {1, secs}. *peer keeps the other end open; closing
 * it ends the block. The proxy disarms such a socket when it arrives.
 */
int raw_close_blocker(int secs, int *peer);
/* raw_nested_blocker - a UNIX socket whose queue holds a raw_close_blocker:
 * its last close blocks the same way, and no option on it changes that. */
int raw_nested_blocker(int secs, int *peer);
/* raw_register_last - send c's proxy fd as memory to register, dropping our
 * copy first, so that the proxy's close of it (the refusal's) is the last. */
void raw_register_last(struct raw *c, int fd);
/* raw_register_blocker - raw_register_last of a raw_nested_blocker; *peer
 * as above. */
void raw_register_blocker(struct raw *c, int secs, int *peer);

#endif /* LUNAR_TESTS_HARNESS_RAW_H */
