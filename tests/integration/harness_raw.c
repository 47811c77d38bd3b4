/*
 * harness_raw.c - the raw client of harness_raw.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "harness.h"
#include "harness_raw.h"
#include "ring.h"
#include "uds.h"

void raw_connect(struct raw *c, const char *sock_path)
{
	memset(c, 0, sizeof(*c));
	c->memfd = c->efd = -1;
	c->sock = lc_uds_connect(sock_path, 0);
	H_ASSERT_MSG(c->sock >= 0, "connect: %s", strerror(-c->sock));
}

void raw_hello(struct raw *c)
{
	raw_hello_tenant(c, NULL);
}

void raw_hello_tenant(struct raw *c, const char *tenant)
{
	struct lc_hello hello = {.magic = LC_SHM_MAGIC,
				 .version = LC_PROTO_VERSION,
				 .pid = (uint32_t)getpid(),
				 .arena_bytes = RAW_ARENA};
	struct lc_welcome w;
	struct stat st;
	int fds[2], n;

	if (tenant)
		snprintf(hello.tenant, sizeof(hello.tenant), "%s", tenant);
	H_ASSERT_EQ(lc_uds_send(c->sock, &hello, sizeof(hello), NULL, 0), 0);
	n = lc_uds_recv(c->sock, &w, sizeof(w), fds, 2, 5000);
	H_ASSERT_MSG(n == 2 && w.code == 0, "welcome: %d fds, code %d", n, n >= 0 ? w.code : 0);
	c->memfd = fds[0];
	c->efd = fds[1];
	c->client_id = w.client_id;
	c->welcome_flags = w.flags;
	H_ASSERT(fstat(c->memfd, &st) == 0 && (uint64_t)st.st_size == w.region_size);
	c->size = w.region_size;
	c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
	H_ASSERT(c->base != MAP_FAILED);
	memcpy(&c->h, c->base, sizeof(c->h));
	H_ASSERT(c->h.magic == LC_SHM_MAGIC && c->h.region_size == c->size);
	H_ASSERT(c->h.arena_off + c->h.arena_size == c->size);
	c->ring = (struct lc_ring_ctl *)(c->base + c->h.ring_off);
	c->prod = (struct lc_ring_prod){.ctl = c->ring};
	c->sqes = (struct lc_sqe *)(c->base + c->h.sqes_off);
	c->slots = (struct lc_cslot *)(c->base + c->h.slots_off);
}

void raw_open(struct raw *c, const char *sock_path)
{
	raw_connect(c, sock_path);
	raw_hello(c);
}

void raw_close(struct raw *c)
{
	if (c->base)
		munmap(c->base, c->size);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->efd >= 0)
		close(c->efd);
	if (c->sock >= 0)
		close(c->sock);
	memset(c, 0, sizeof(*c));
	c->sock = c->memfd = c->efd = -1;
}

uint64_t raw_put(struct raw *c, const void *p, size_t n)
{
	uint64_t off = c->h.arena_off + c->used;

	H_ASSERT(c->used + n <= c->h.arena_size);
	memcpy(c->base + off, p, n);
	c->used = (c->used + n + 7) & ~7ull;
	return off;
}

void raw_kick(struct raw *c)
{
	uint64_t one = 1;

	if (write(c->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		fail_msg("eventfd write: %s", strerror(errno));
}

void raw_submit(struct raw *c, const struct lc_sqe *q)
{
	uint32_t head;

	H_ASSERT_EQ(lc_ring_reserve(&c->prod, c->h.ring_entries, 1, &head), 0);
	memcpy(&c->sqes[head & (c->h.ring_entries - 1)], q, sizeof(*q));
	lc_ring_commit(&c->prod, head, 1);
	raw_kick(c);
}

int raw_wait_done(struct raw *c, uint32_t slot, int ms)
{
	uint64_t end = h_now_ms() + (uint64_t)ms;

	while (h_now_ms() < end) {
		/* acquire: pairs with the proxy's lc_xchg to DONE in proxy/decode.c */
		if (lc_load_acquire(&c->slots[slot].state) == LC_SLOT_DONE)
			return 1;
		h_sleep_ms(1);
	}
	return 0;
}

int64_t raw_call(struct raw *c, const struct lc_sqe *q, int ms)
{
	c->slots[q->slot].state = LC_SLOT_PENDING;
	raw_submit(c, q);
	H_ASSERT_MSG(raw_wait_done(c, q->slot, ms), "request in slot %u not done in %d ms", q->slot,
		     ms);
	return c->slots[q->slot].result;
}

int raw_close_blocker(int secs, int *peer)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct linger lg = {.l_onoff = 1, .l_linger = secs};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
	int small = 4096;
	static char buf[65536];

	H_ASSERT(l >= 0 && c >= 0);
	H_ASSERT(setsockopt(l, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)) == 0);
	H_ASSERT(bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0);
	H_ASSERT(getsockname(l, (struct sockaddr *)&a, &al) == 0);
	H_ASSERT(connect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	*peer = accept(l, NULL, NULL);
	H_ASSERT(*peer >= 0);
	close(l);
	H_ASSERT(fcntl(c, F_SETFL, O_NONBLOCK) == 0);
	/* Fill the peer's window and our send queue until it stays full: the
	 * window may still open a little after the first EAGAIN. */
	for (int k = 0; k < 5; k++) {
		while (send(c, buf, sizeof(buf), MSG_NOSIGNAL) > 0)
			;
		h_sleep_ms(50);
	}
	H_ASSERT(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) == 0);
	return c;
}

int raw_nested_blocker(int secs, int *peer)
{
	int tcp = raw_close_blocker(secs, peer), sp[2];

	/* The socket rides in the queue of sp[0]: whoever closes sp[0] last
	 * makes the last close of the socket, which lingers. */
	H_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sp) == 0);
	H_ASSERT_EQ(lc_uds_send(sp[1], "x", 1, &tcp, 1), 0);
	close(tcp);
	close(sp[1]);
	return sp[0];
}

void raw_register_last(struct raw *c, int fd)
{
	struct lc_reg_req q = {
	    .magic = LC_REG_MAGIC, .op = LC_REG_ADD, .length = 4096, .cookie = 1};

	/* The proxy's close must be the last one, or ours blocks instead: the
	 * descriptor goes with the message's first byte, and the rest, which
	 * the proxy waits for before it acts, only once our copy is closed. */
	H_ASSERT_EQ(lc_uds_send(c->sock, &q, 1, &fd, 1), 0);
	close(fd);
	H_ASSERT_EQ(lc_uds_send(c->sock, (const char *)&q + 1, sizeof(q) - 1, NULL, 0), 0);
}

void raw_register_blocker(struct raw *c, int secs, int *peer)
{
	raw_register_last(c, raw_nested_blocker(secs, peer));
}
