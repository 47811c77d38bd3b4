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

#include "key.h"
#include "log.h"
#include "lunar.h"
#include "proxy/px_int.h"
#include "ring.h"
#include "uds.h"

#define PX_RING_ENTRIES 256u
#define PX_SLOTS 256u
#define PX_ARENA_MIN (1ull << 20)
#define PX_ARENA_MAX (16ull << 30)
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
	uint64_t hdr_bytes = align_up(4096 + sizeof(struct lc_ring_ctl) +
					      PX_RING_ENTRIES * sizeof(struct lc_sqe) +
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
	LC_ASSERT(s->rg.size == size);
	return 0;
err_close:
	close(s->memfd);
	s->memfd = -1;
	return -errno;
}

/* Who may connect: root, our own uid, or a member of our group. */
static int peer_allowed(int sock, struct px_session *s)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
		return 0;
	s->pid = cr.pid;
	s->uid = cr.uid;
	return cr.uid == 0 || cr.uid == geteuid() || cr.gid == getegid();
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

static void refuse(int sock, int code)
{
	struct lc_welcome w = { .magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION, .code = code };

	lc_uds_send(sock, &w, sizeof(w), NULL, 0);
	close(sock);
}

static int session_setup(struct px_proxy *px, int sock, struct px_session *s)
{
	struct lc_hello h;
	uint64_t arena;
	int rc;

	if (!peer_allowed(sock, s))
		return LUNAR_ERR_UNAUTHORIZED;
	if (px->nsessions >= px->cfg.max_clients)
		return LUNAR_ERR_TOO_MANY_CLIENTS;
	rc = lc_uds_recv(sock, &h, sizeof(h), NULL, 0, PX_HELLO_TIMEOUT_MS);
	if (rc < 0)
		return LUNAR_ERR_PROTOCOL;
	rc = hello_check(px, &h, s, &arena);
	if (rc)
		return rc;
	rc = region_create(s, arena);
	if (rc)
		return LUNAR_ERR_INTERNAL;
	s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return s->efd < 0 ? LUNAR_ERR_INTERNAL : 0;
}

int px_session_open(struct px_proxy *px, int sock, struct px_session **out)
{
	struct px_session *s = calloc(1, sizeof(*s));
	struct lc_welcome w = { .magic = LC_SHM_MAGIC, .version = LC_PROTO_VERSION };
	int rc, fds[2];

	if (!s) {
		refuse(sock, LUNAR_ERR_INTERNAL);
		return LUNAR_ERR_INTERNAL;
	}
	s->sock = sock;
	s->memfd = -1;
	s->efd = -1;
	s->px = px;
	s->client_id = next_client_id();
	atomic_init(&s->refs, 1);
	rc = session_setup(px, sock, s);
	if (rc) {
		LC_WARN("proxy", "client pid %d uid %u refused: %s", (int)s->pid, (unsigned)s->uid,
			lunar_strerror(rc));
		goto err;
	}
	w.client_id = s->client_id;
	w.region_size = s->rg.size;
	fds[0] = s->memfd;
	fds[1] = s->efd;
	if (lc_uds_send(sock, &w, sizeof(w), fds, 2)) {
		rc = LUNAR_ERR_PROTOCOL;
		goto err_quiet;
	}
	LC_DEBUG("proxy", "client %llu pid %d tenant %s: %llu-byte region",
		 (unsigned long long)s->client_id, (int)s->pid, s->tenant,
		 (unsigned long long)s->rg.size);
	*out = s;
	return 0;
err:
	w.code = rc;
	lc_uds_send(sock, &w, sizeof(w), NULL, 0);
err_quiet:
	s->sock = -1;
	close(sock);
	px_session_put(s);
	return rc;
}

void px_session_get(struct px_session *s)
{
	atomic_fetch_add(&s->refs, 1);
}

void px_session_put(struct px_session *s)
{
	if (atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	if (s->rg.base)
		munmap(s->rg.base, s->rg.size);
	if (s->memfd >= 0)
		close(s->memfd);
	if (s->efd >= 0)
		close(s->efd);
	if (s->sock >= 0)
		close(s->sock);
	free(s);
}

void px_session_kill(struct px_session *s, const char *why)
{
	bool was = atomic_exchange(&s->dead, true);

	if (!was && why)
		LC_WARN("proxy", "client %llu (pid %d) disconnected: %s",
			(unsigned long long)s->client_id, (int)s->pid, why);
}
