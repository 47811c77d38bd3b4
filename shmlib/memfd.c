/*
 * memfd.c - find the memfd behind a range of this process's memory, for
 * lunar_register: the mapping that holds the range in /proc/self/maps, a
 * descriptor of the same file among ours (or through /proc/self/map_files,
 * which needs privilege), then its seals and size. The proxy maps the
 * page-aligned span around the range from that descriptor.
 */
#include "shm_int.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "log.h"

/* One line of /proc/self/maps. */
struct shm_map {
	uintptr_t lo, hi;
	uint64_t off; /* file offset of lo */
	uint64_t dev, ino;
};

/* The mapping that holds lo: 0 when it also holds hi and is a shared,
 * readable and writable mapping of a memfd; else -1. */
static int map_find(uintptr_t lo, uintptr_t hi, struct shm_map *m)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char *line = NULL, perms[8];
	size_t cap = 0;
	int rc = -1;

	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0) {
		unsigned long long a, b, off, ino;
		unsigned maj, mnr;
		int path = 0;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &a, &b, perms, &off, &maj,
			   &mnr, &ino, &path) < 7 ||
		    lo < a || lo >= b)
			continue;
		if (hi <= b && path && !strncmp(line + path, "/memfd:", 7) &&
		    !strncmp(perms, "rw", 2) && perms[3] == 's') {
			*m = (struct shm_map){a, b, off, makedev(maj, mnr), ino};
			rc = 0;
		}
		break;
	}
	free(line);
	fclose(f);
	return rc;
}

/* fd is m's file, open for reading and writing (the proxy maps it so). */
static int fd_is(int fd, const struct shm_map *m)
{
	struct stat st;
	int fl;

	if (fstat(fd, &st) || (uint64_t)st.st_dev != m->dev || (uint64_t)st.st_ino != m->ino)
		return 0;
	fl = fcntl(fd, F_GETFL);
	return fl >= 0 && (fl & O_ACCMODE) == O_RDWR;
}

/* A new descriptor (CLOEXEC) of m's file, or -1. Each candidate is checked
 * again after dup: another thread may close a number and reuse it while we
 * look. */
static int fd_find(const struct shm_map *m)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[64];
	int fd = -1;

	while (d && fd < 0 && (e = readdir(d))) {
		char *end;
		long n = strtol(e->d_name, &end, 10);

		if (end == e->d_name || *end || n == dirfd(d) || !fd_is((int)n, m))
			continue;
		fd = fcntl((int)n, F_DUPFD_CLOEXEC, 0);
		if (fd >= 0 && !fd_is(fd, m)) {
			close(fd);
			fd = -1;
		}
	}
	if (d)
		closedir(d);
	if (fd >= 0)
		return fd;
	/* The caller kept the mapping and closed every descriptor: opening
	 * the mapped file needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE). */
	snprintf(path, sizeof(path), "/proc/self/map_files/%llx-%llx", (unsigned long long)m->lo,
		 (unsigned long long)m->hi);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd >= 0 && !fd_is(fd, m)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int shm_memfd_span(void *p, size_t len, struct shm_region *rg)
{
	uintptr_t lo = (uintptr_t)p, hi = lo + len, page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uint64_t end, size;
	struct shm_map m;
	struct stat st;
	int seals;

	memset(rg, 0, sizeof(*rg));
	rg->fd = -1;
	if (map_find(lo, hi, &m)) {
		LC_DEBUG(SHM_LOG, "register %p+%zu: not inside one shared memfd mapping", p, len);
		return LUNAR_ERR_INVALID_PARAMS;
	}
	rg->fd = fd_find(&m);
	if (rg->fd < 0) {
		LC_WARN(SHM_LOG, "register %p+%zu: no read-write descriptor of its memfd", p, len);
		return LUNAR_ERR_INVALID_PARAMS;
	}
	rg->base = p;
	rg->len = len;
	rg->span = (uint8_t *)(lo & ~(page - 1));
	rg->file_off = m.off + ((uintptr_t)rg->span - m.lo);
	rg->dev = m.dev;
	rg->ino = m.ino;
	/* The span ends at the page after the range, or at the end of the
	 * file if that comes first: the proxy cannot map pages past it. */
	end = rg->file_off + (((hi + page - 1) & ~(page - 1)) - (uintptr_t)rg->span);
	seals = fcntl(rg->fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(rg->fd, &st)) {
		LC_DEBUG(SHM_LOG, "register %p+%zu: memfd not sealed against shrinking", p, len);
		goto err_close;
	}
	size = (uint64_t)st.st_size;
	if (size < rg->file_off + (hi - (uintptr_t)rg->span)) {
		LC_DEBUG(SHM_LOG, "register %p+%zu: range past the end of its memfd", p, len);
		goto err_close;
	}
	rg->span_len = (end < size ? end : size) - rg->file_off;
	return 0;
err_close:
	close(rg->fd);
	rg->fd = -1;
	return LUNAR_ERR_INVALID_PARAMS;
}
