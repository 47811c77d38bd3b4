/*
 * mreg.c - registration of client memory (LC_REG_ADD/DEL on the session
 * socket): the proxy checks the memfd's seals and size, maps the range and
 * gives it a region id that segments may name. A refused registration gets
 * a code; a malformed message disconnects the client.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include "log.h"
#include "lunar.h"
#include "px_int.h"

/*
 * The registration budget. Every registered range is a mapping of the
 * proxy's and takes address space, which a sparse sealed memfd gets for
 * free. A client may map at most PX_REG_SESSION_BYTES; all clients together
 * at most PX_REG_PROXY_BYTES and --max-registrations ranges (by default
 * what vm.max_map_count leaves once the proxy's own mappings and every
 * client's region are counted), so the proxy itself never runs out; and the
 * clients of one uid at most half of each, so one user cannot shut the
 * others out. Clients of one uid are not kept from each other here: they
 * could as well signal or trace each other.
 */
#define PX_REG_SESSION_BYTES (256ull << 30)
#define PX_REG_PROXY_BYTES   (8ull << 40)
#define PX_REG_RESERVE_MAPS  8192  /* vm.max_map_count left to the proxy's own */
#define PX_REG_MAPS_DEFAULT  32768 /* when vm.max_map_count cannot be read */

unsigned px_mreg_default_max(unsigned max_clients)
{
	unsigned long long maps = 0;
	FILE *f = fopen("/proc/sys/vm/max_map_count", "re");
	long long n;

	if (!f || fscanf(f, "%llu", &maps) != 1)
		maps = PX_REG_MAPS_DEFAULT + PX_REG_RESERVE_MAPS + max_clients;
	if (f)
		fclose(f);
	n = (long long)maps - PX_REG_RESERVE_MAPS - (long long)max_clients;
	return n < LC_MAX_REGIONS ? LC_MAX_REGIONS : n > 65536 ? 65536 : (unsigned)n;
}

/* What uid's clients have registered, or NULL when nothing. */
static struct px_reg_owner *owner_find(const struct px_proxy *px, uid_t uid)
{
	for (size_t i = 0; i < px->n_reg_owners; i++)
		if (px->reg_owners[i].uid == uid)
			return &px->reg_owners[i];
	return NULL;
}

/* owner_find, or a new empty entry; NULL without memory. */
static struct px_reg_owner *owner_get(struct px_proxy *px, uid_t uid)
{
	struct px_reg_owner *o = owner_find(px, uid), *v;

	if (o)
		return o;
	v = realloc(px->reg_owners, (px->n_reg_owners + 1) * sizeof(*v));
	if (!v)
		return NULL;
	px->reg_owners = v;
	v[px->n_reg_owners] = (struct px_reg_owner){.uid = uid};
	return &v[px->n_reg_owners++];
}

/* Forget o once it has no range left. */
static void owner_put(struct px_proxy *px, struct px_reg_owner *o)
{
	if (!o->ranges)
		*o = px->reg_owners[--px->n_reg_owners];
}

/* Whether s may map len more bytes as one more range. */
static bool within_budget(const struct px_session *s, uint64_t len)
{
	const struct px_proxy *px = s->px;
	const struct px_reg_owner *o = owner_find(px, s->uid);
	uint32_t max = px->cfg.max_registrations, ranges = o ? o->ranges : 0;
	uint64_t bytes = o ? o->bytes : 0;

	return s->reg_bytes + len <= PX_REG_SESSION_BYTES && px->reg_ranges < max &&
	       ranges < (max + 1) / 2 && atomic_load(&px->reg_bytes) + len <= PX_REG_PROXY_BYTES &&
	       bytes + len <= PX_REG_PROXY_BYTES / 2;
}

static void charge(struct px_session *s, struct px_reg_owner *o, uint64_t len)
{
	s->reg_bytes += len;
	o->bytes += len;
	o->ranges++;
	s->px->reg_ranges++;
	atomic_fetch_add(&s->px->reg_bytes, len);
}

static void uncharge(struct px_session *s, struct px_reg_owner *o, uint64_t len)
{
	s->reg_bytes -= len;
	o->bytes -= len;
	o->ranges--;
	s->px->reg_ranges--;
	atomic_fetch_sub(&s->px->reg_bytes, len);
	owner_put(s->px, o);
}

int px_mreg_fd_check(int fd, uint64_t *size)
{
	int seals = fd >= 0 ? fcntl(fd, F_GET_SEALS) : -1;
	struct statfs fs;
	struct stat st;

	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0)
		return LUNAR_ERR_INVALID_PARAMS;
	/* The shrink seal does not stop a hole punched in a hugetlbfs file,
	 * which gives its huge pages back: with the pool empty, the proxy's
	 * next touch of the range would be a SIGBUS. */
	if (fs.f_type == HUGETLBFS_MAGIC)
		return LUNAR_ERR_INVALID_PARAMS;
	*size = (uint64_t)st.st_size;
	return 0;
}

static int reg_add(struct px_session *s, const struct lc_reg_req *q, int fd, uint32_t *id)
{
	long page = sysconf(_SC_PAGESIZE);
	struct px_reg_owner *o;
	struct px_mreg *m;
	uint64_t size;
	uint32_t i;
	void *p;

	if (px_mreg_fd_check(fd, &size))
		return LUNAR_ERR_INVALID_PARAMS;
	if (q->length == 0 || q->length > PX_REG_SESSION_BYTES || q->offset % (uint64_t)page ||
	    q->offset > size || q->length > size - q->offset)
		return LUNAR_ERR_INVALID_PARAMS;
	for (i = 1; i <= LC_MAX_REGIONS && s->rg.mregs[i]; i++)
		;
	if (i > LC_MAX_REGIONS || !within_budget(s, q->length))
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	o = owner_get(s->px, s->uid);
	m = o ? calloc(1, sizeof(*m)) : NULL;
	if (!m) {
		if (o)
			owner_put(s->px, o);
		return LUNAR_ERR_INTERNAL;
	}
	p = mmap(NULL, q->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)q->offset);
	if (p == MAP_FAILED) {
		owner_put(s->px, o);
		free(m);
		return LUNAR_ERR_INVALID_PARAMS;
	}
	charge(s, o, q->length);
	m->base = p;
	m->len = q->length;
	/* An MR when RDMA is on, so remote transfers land here with no copy. */
	m->mr = eng_mem_add(s->px->engine, p, q->length);
	m->mr_del = eng_mem_del;
	atomic_init(&m->refs, 1);
	s->rg.mregs[i] = m;
	*id = i;
	return 0;
}

static int reg_del(struct px_session *s, uint32_t id)
{
	struct px_mreg *m;

	if (id == 0 || id > LC_MAX_REGIONS || !(m = s->rg.mregs[id]))
		return LUNAR_ERR_INVALID_PARAMS;
	/* Every range of s was charged to its uid, which so has an entry. */
	uncharge(s, owner_find(s->px, s->uid), m->len);
	px_mreg_put(m);
	s->rg.mregs[id] = NULL;
	return 0;
}

int px_mreg_handle(struct px_session *s, const struct lc_reg_req *q, int fd, const char **why)
{
	struct lc_reg_rep rep = {.magic = LC_REG_MAGIC, .cookie = q->cookie};

	if (q->magic != LC_REG_MAGIC || (q->op != LC_REG_ADD && q->op != LC_REG_DEL) ||
	    (q->op == LC_REG_DEL && fd >= 0)) {
		*why = "malformed registration message";
		px_closer_close(s->px->closer, fd);
		return -1;
	}
	if (q->op == LC_REG_ADD) {
		rep.code = reg_add(s, q, fd, &rep.region);
		px_closer_close(s->px->closer, fd); /* the mapping keeps the memory */
	} else {
		rep.code = reg_del(s, q->region);
		rep.region = q->region;
	}
	/* 24 bytes into an empty socket buffer: a full buffer means the
	 * client sends without reading replies. */
	if (send(s->sock, &rep, sizeof(rep), MSG_DONTWAIT | MSG_NOSIGNAL) != sizeof(rep)) {
		*why = "registration replies not read";
		return -1;
	}
	return 0;
}

void px_mreg_drop_all(struct px_session *s)
{
	for (uint32_t i = 1; i <= LC_MAX_REGIONS; i++)
		reg_del(s, i);
}
