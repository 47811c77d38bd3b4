/*
 * mreg.c - registration of client memory (LC_REG_ADD/DEL on the session
 * socket): the proxy checks the memfd's seals and size, maps the range and
 * gives it a region id that segments may name. A refused registration gets
 * a code; a malformed message disconnects the client.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <linux/magic.h>

#include "log.h"
#include "lunar.h"
#include "proxy/px_int.h"

/* Address space a client may have the proxy map, and all clients together:
 * registration must not let one client exhaust the proxy's address space
 * (or vm.max_map_count) for the others. */
#define PX_REG_SESSION_BYTES (256ull << 30)
#define PX_REG_PROXY_BYTES (8ull << 40)

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
	if (i > LC_MAX_REGIONS || s->reg_bytes + q->length > PX_REG_SESSION_BYTES)
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	if (atomic_fetch_add(&s->px->reg_bytes, q->length) + q->length > PX_REG_PROXY_BYTES) {
		atomic_fetch_sub(&s->px->reg_bytes, q->length);
		return LUNAR_ERR_NO_AVAILABLE_HANDLE;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return LUNAR_ERR_INTERNAL;
	p = mmap(NULL, q->length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)q->offset);
	if (p == MAP_FAILED) {
		atomic_fetch_sub(&s->px->reg_bytes, q->length);
		free(m);
		return LUNAR_ERR_INVALID_PARAMS;
	}
	s->reg_bytes += q->length;
	m->base = p;
	m->len = q->length;
	atomic_init(&m->refs, 1);
	s->rg.mregs[i] = m;
	*id = i;
	return 0;
}

static int reg_del(struct px_session *s, uint32_t id)
{
	if (id == 0 || id > LC_MAX_REGIONS || !s->rg.mregs[id])
		return LUNAR_ERR_INVALID_PARAMS;
	s->reg_bytes -= s->rg.mregs[id]->len;
	atomic_fetch_sub(&s->px->reg_bytes, s->rg.mregs[id]->len);
	px_mreg_put(s->rg.mregs[id]);
	s->rg.mregs[id] = NULL;
	return 0;
}

int px_mreg_handle(struct px_session *s, const struct lc_reg_req *q, int fd, const char **why)
{
	struct lc_reg_rep rep = { .magic = LC_REG_MAGIC, .cookie = q->cookie };

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
