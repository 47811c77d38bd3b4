/*
 * session.c - one client of the proxy: the handshake (peer credentials,
 * client limit, version), the sealed memfd region laid out per shm_abi.h,
 * and the reference count that keeps the region mapped while requests run.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "atomic.h"
#include "clock.h"
#include "key.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"
#include "ring.h"
#include "uds.h"

#define PX_RING_ENTRIES	    256u
#define PX_SLOTS	    256u
#define PX_ARENA_MIN	    (1ull << 20)
#define PX_ARENA_MAX	    (16ull << 30)
#define PX_HELLO_TIMEOUT_MS 2000

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

static uint64_t next_client_id(void)
{
	static atomic_uint_fast64_t id = 1;

	return atomic_fetch_add(&id, 1);
}

/* Lay out the header, ring and slots of a fresh region (see shm_abi.h). */
static void region_layout(struct px_region *rg, uint8_t *base, uint64_t arena, uint64_t cid)
{
	struct lc_shm_hdr *h = (struct lc_shm_hdr *)base;
	uint64_t sqes_off = 4096 + sizeof(struct lc_ring_ctl);
	uint64_t slots_off = sqes_off + PX_RING_ENTRIES * sizeof(struct lc_sqe);

	rg->base = base;
	rg->entries = PX_RING_ENTRIES;
	rg->slot_count = PX_SLOTS;
	rg->ring = (struct lc_ring_ctl *)(base + 4096);
	rg->sqes = (struct lc_sqe *)(base + sqes_off);
	rg->slots = (struct lc_cslot *)(base + slots_off);
	rg->arena_off = align_up(slots_off + PX_SLOTS * sizeof(struct lc_cslot), 4096);
	rg->arena_size = arena;
	rg->size = rg->arena_off + arena;

	h->magic = LC_SHM_MAGIC;
	h->version = LC_PROTO_VERSION;
	h->hdr_size = sizeof(*h);
	h->region_size = rg->size;
	h->client_id = cid;
	h->ring_off = 4096;
	h->ring_entries = PX_RING_ENTRIES;
	h->sqes_off = (uint32_t)sqes_off;
	h->slots_off = (uint32_t)slots_off;
	h->slot_count = PX_SLOTS;
	h->arena_off = rg->arena_off;
	h->arena_size = arena;
	h->max_batch = LUNAR_BATCH_MAX;
	h->max_segs = LUNAR_IOV_MAX;
	h->key_max = LUNAR_KEY_MAX;
	lc_ring_init(rg->ring);
}

/* Create, size, seal and map the session's memfd. */
static int region_create(struct px_session *s, uint64_t arena)
{
	uint64_t hdr_bytes =
	    align_up(4096 + sizeof(struct lc_ring_ctl) + PX_RING_ENTRIES * sizeof(struct lc_sqe) +
			 PX_SLOTS * sizeof(struct lc_cslot),
		     4096);
	uint64_t size = hdr_bytes + arena;
	void *base;

	s->memfd = memfd_create("lunar-session", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (s->memfd < 0)
		return -errno;
	if (ftruncate(s->memfd, (off_t)size) < 0 ||
	    fcntl(s->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		goto err_close;
	base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->memfd, 0);
	if (base == MAP_FAILED)
		goto err_close;
	region_layout(&s->rg, base, arena, s->client_id);
	memcpy(((struct lc_shm_hdr *)base)->http_addr, s->px->http_addr, LC_HTTP_ADDR_MAX);
	LC_ASSERT(s->rg.size == size);
	/* Staged gets land in the arena: an MR lets RDMA put them there. */
	s->rg.arena_mr = eng_mem_add(s->px->engine, s->rg.base + s->rg.arena_off, arena);
	return 0;
err_close:
	close(s->memfd);
	s->memfd = -1;
	return -errno;
}

/* Who may connect: root, our own uid, our group (the socket's), and the
 * --allow-uid / --allow-gid lists. Checked before any memory is mapped. */
static int peer_allowed(const struct px_config *cfg, int sock, struct px_session *s)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	s->pid = cr.pid;
	s->uid = cr.uid;
	if (cr.uid == 0 || cr.uid == geteuid() || cr.gid == getegid())
		return 1;
	for (unsigned i = 0; i < cfg->n_allow_uid; i++)
		if (cfg->allow_uid[i] == cr.uid)
			return 1;
	for (unsigned i = 0; i < cfg->n_allow_gid; i++)
		if (cfg->allow_gid[i] == cr.gid)
			return 1;
	return 0;
}

/* Check the hello; fill tenant and arena size. 0 or the refusal code. */
static int hello_check(struct px_proxy *px, const struct lc_hello *h, struct px_session *s,
		       uint64_t *arena)
{
	size_t tlen = strnlen(h->tenant, sizeof(h->tenant));

	if (h->magic != LC_SHM_MAGIC)
		return LUNAR_ERR_PROTOCOL;
	if (h->version != LC_PROTO_VERSION)
		return LUNAR_ERR_VERSION_MISMATCH;
	if (tlen == sizeof(h->tenant))
		return LUNAR_ERR_INVALID_PARAMS;
	if (tlen == 0)
		strcpy(s->tenant, "default");
	else if (lc_tenant_check(h->tenant, tlen))
		return LUNAR_ERR_INVALID_PARAMS;
	else
		memcpy(s->tenant, h->tenant, tlen + 1);
	*arena = h->arena_bytes ? h->arena_bytes : px->cfg.arena_size;
	if (*arena < PX_ARENA_MIN)
		*arena = PX_ARENA_MIN;
	if (*arena > PX_ARENA_MAX)
		*arena = PX_ARENA_MAX;
	*arena = align_up(*arena, 4096);
	return 0;
}

static enum px_reject reject_reason(int code)
{
	switch (code) {
	case LUNAR_ERR_UNAUTHORIZED: return PX_REJECT_UNAUTHORIZED;
	case LUNAR_ERR_TOO_MANY_CLIENTS: return PX_REJECT_TOO_MANY_CLIENTS;
	case LUNAR_ERR_VERSION_MISMATCH: return PX_REJECT_VERSION;
	case LUNAR_ERR_PROTOCOL:
	case LUNAR_ERR_INVALID_PARAMS: return PX_REJECT_BAD_HELLO;
	default: return PX_REJECT_INTERNAL;
	}
}

static void refuse(int sock, int code)
{
	struct lc_welcome w = {.magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION, .code = code};

	send(sock, &w, sizeof(w), MSG_DONTWAIT | MSG_NOSIGNAL);
}

int px_session_accept(struct px_proxy *px, int sock, struct px_session **out)
{
	struct px_session *s = calloc(1, sizeof(*s));
	int rc = LUNAR_ERR_INTERNAL;

	if (!s)
		goto err;
	s->sock = sock;
	s->memfd = -1;
	s->efd = -1;
	s->rxfd = -1;
	s->px = px;
	s->client_id = next_client_id();
	s->rx_deadline_ms = lc_now_ms() + PX_HELLO_TIMEOUT_MS;
	s->lease_cap = px_lease_cap_alloc();
	atomic_init(&s->refs, 1);
	if (!peer_allowed(&px->cfg, sock, s))
		rc = LUNAR_ERR_UNAUTHORIZED;
	else if (px->nsessions >= px->cfg.max_clients)
		rc = LUNAR_ERR_TOO_MANY_CLIENTS;
	else
		rc = 0;
	/* A refused client still gets its answer after its hello (it would
	 * miss one sent before it wrote); no memory is ever mapped for it. */
	s->refusal = rc;
	*out = s;
	return 0;
err:
	PX_COUNT(px, rejected[PX_REJECT_INTERNAL], 1);
	refuse(sock, rc);
	px_closer_close(px->closer, sock);
	return rc;
}

/* The hello is complete: check it, make the region, send the welcome. */
static int session_open(struct px_proxy *px, struct px_session *s)
{
	struct lc_welcome w = {.magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION};
	uint64_t arena;
	int rc, fds[2];

	rc = s->refusal ? s->refusal : hello_check(px, &s->rx.hello, s, &arena);
	if (!rc && region_create(s, arena))
		rc = LUNAR_ERR_INTERNAL;
	if (!rc && (s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
		rc = LUNAR_ERR_INTERNAL;
	if (rc) {
		PX_COUNT(px, rejected[reject_reason(rc)], 1);
		LC_WARN("proxy", "client pid %d uid %u refused: %s", (int)s->pid, (unsigned)s->uid,
			lunar_strerror(rc));
		refuse(s->sock, rc);
		return -1;
	}
	w.client_id = s->client_id;
	w.region_size = s->rg.size;
	/* With a master of its own every put lands here, and the copy into
	 * the segment takes the CRC32C for nothing. */
	w.flags = (px->cfg.embedded ? 0 : LC_WELCOME_SEG_CRC) | LC_WELCOME_LANDED;
	fds[0] = s->memfd;
	fds[1] = s->efd;
	if (lc_uds_send(s->sock, &w, sizeof(w), fds, 2))
		return -1;
	s->open = 1;
	LC_DEBUG("proxy", "client %llu pid %d tenant %s: %llu-byte region",
		 (unsigned long long)s->client_id, (int)s->pid, s->tenant,
		 (unsigned long long)s->rg.size);
	return 1;
}

/* The most descriptors Linux passes in one message (SCM_MAX_FD). */
#define PX_SCM_MAX_FD 253

/* Keep the first descriptor a message brings, close any others; returns
 * how many it brought. Only the control data of a successful recvmsg is
 * read: after a failed one the buffer still holds whatever it held before. */
static size_t take_fds(struct px_session *s, struct msghdr *msg)
{
	size_t n = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		int *fd = (int *)CMSG_DATA(c);
		size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n += nfd;
		for (size_t i = 0; i < nfd; i++) {
			if (s->rxfd < 0)
				s->rxfd = fd[i];
			else
				px_closer_close(s->px->closer, fd[i]);
		}
	}
	return n;
}

/*
 * Gather bytes (and at most one descriptor) of the message being received:
 * 1 when it is complete, 0 when more must come (a read that found nothing,
 * as after out-of-band data, takes no descriptor), -1 on hang-up or error,
 * or with *why set when the message brought more descriptors than a message
 * of ours carries. The control buffer holds as many as the kernel passes in
 * one message: descriptors it cannot deliver it closes itself, in this
 * thread, where such a close may block; ours go to the closer.
 */
static int gather(struct px_session *s, size_t want, const char **why)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * PX_SCM_MAX_FD)];
	} ctl;
	struct iovec iov = {(char *)&s->rx + s->rxlen, want - s->rxlen};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	msg.msg_control = ctl.buf;
	msg.msg_controllen = sizeof(ctl.buf);
	n = recvmsg(s->sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : -1;
	if (n == 0)
		return -1;
	if (take_fds(s, &msg) > LC_UDS_MAX_FDS || (msg.msg_flags & MSG_CTRUNC)) {
		*why = "more descriptors than a message carries";
		return -1;
	}
	if (s->rxlen == 0 && s->open)
		s->rx_deadline_ms = lc_now_ms() + PX_HELLO_TIMEOUT_MS;
	s->rxlen += (size_t)n;
	return s->rxlen == want;
}

int px_session_input(struct px_proxy *px, struct px_session *s, const char **why)
{
	size_t want = s->open ? sizeof(s->rx.reg) : sizeof(s->rx.hello);
	int rc, fd;

	*why = NULL;
	rc = gather(s, want, why);
	if (rc <= 0)
		return rc;
	fd = s->rxfd;
	s->rxfd = -1;
	s->rxlen = 0;
	if (!s->open) {
		px_closer_close(px->closer, fd);
		return session_open(px, s);
	}
	return px_mreg_handle(s, &s->rx.reg, fd, why);
}

int px_session_expired(const struct px_session *s, uint64_t now_ms)
{
	return (!s->open || s->rxlen) && now_ms > s->rx_deadline_ms;
}

void px_session_get(struct px_session *s)
{
	atomic_fetch_add(&s->refs, 1);
}

void px_session_put(struct px_session *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	if (atomic_load(&s->leased)) /* none of its requests runs any more */
		px_lease_reader_gone(s->px, s);
	eng_mem_del(s->rg.arena_mr);
	if (s->rg.base)
		munmap(s->rg.base, s->rg.size);
	if (s->memfd >= 0)
		close(s->memfd);
	if (s->efd >= 0)
		close(s->efd);
	px_closer_close(s->px->closer, s->rxfd);
	/* The client's hang-up, now: the close itself may wait in the closer's
	 * queue behind a slow one, and a fencing client waits for this. */
	shutdown(s->sock, SHUT_RDWR);
	px_closer_close(s->px->closer, s->sock);
	px_lease_cap_free(s->lease_cap);
	free(s);
}

bool px_session_mid_call(const struct px_session *s)
{
	const struct px_region *rg = &s->rg;

	if (atomic_load(&s->inflight))
		return true;
	if (!s->open)
		return false;
	if (lc_ring_consumable(rg->ring, rg->entries, s->cons) != 0)
		return true;
	for (uint32_t i = 0; i < rg->slot_count; i++)
		if (LC_READ_ONCE(rg->slots[i].state) != LC_SLOT_IDLE)
			return true;
	return false;
}

void px_session_kill(struct px_session *s, const char *why)
{
	bool was = atomic_exchange(&s->dead, true);

	if (!was && why)
		LC_WARN("proxy", "client %llu (pid %d) disconnected: %s",
			(unsigned long long)s->client_id, (int)s->pid, why);
}
