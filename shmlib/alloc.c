/*
 * alloc.c - lunar_alloc/lunar_free: memory shared with the proxy from the
 * start. Chunks are memfds sealed against resizing, mapped here and kept in
 * the registration table like lunar_register memory, so a restarted proxy
 * gets them registered again and blocks stay valid across restarts. Blocks
 * are carved out of chunks by a range allocator under alloc_lock; chunks
 * live until lunar_close, and emptied ones serve later blocks.
 */
#include "shm_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "ralloc.h"

#define SHM_CHUNK_MIN	(64ull << 20)
#define SHM_ALLOC_ALIGN LC_CACHELINE

/* A sealed, mapped memfd of at least len bytes for chunk ch; 0 or -errno,
 * rg describing it for registration (rg->fd the caller's on 0). */
static int chunk_map(struct shm_chunk *ch, size_t len, struct shm_region *rg)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t size = ((uint64_t)len + page - 1) & ~(page - 1);
	struct stat st;
	int fd, rc;

	if (size < SHM_CHUNK_MIN)
		size = SHM_CHUNK_MIN;
	fd = memfd_create("lunar-alloc", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	/* Sealed against shrinking, so the proxy's mapping never faults. */
	if (ftruncate(fd, (off_t)size) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(fd, &st))
		goto err_close;
	ch->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ch->base == MAP_FAILED)
		goto err_close;
	ch->size = size;
	*rg = (struct shm_region){
	    .base = ch->base,
	    .len = size,
	    .span = ch->base,
	    .span_len = size,
	    .dev = (uint64_t)st.st_dev,
	    .ino = (uint64_t)st.st_ino,
	    .fd = fd,
	    .chunk = 1,
	};
	return 0;
err_close:
	rc = -errno;
	close(fd);
	return rc;
}

/* A new registered chunk with room for len bytes; 0 or a code. */
static int chunk_new(struct lunar_client *c, size_t len, struct shm_chunk **out)
{
	struct shm_region rg;
	struct shm_chunk *ch;
	int rc;

	if (len > SIZE_MAX / 2)
		return LUNAR_ERR_INVALID_PARAMS;
	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return LUNAR_ERR_INTERNAL;
	rc = chunk_map(ch, len, &rg);
	if (rc) {
		LC_WARN(SHM_LOG, "lunar_alloc: memfd of %zu bytes: %s", len, strerror(-rc));
		rc = LUNAR_ERR_INTERNAL;
		goto err_free;
	}
	ch->ra = lc_ralloc_create(ch->size, SHM_ALLOC_ALIGN);
	rc = ch->ra ? shm_regs_add(c, &rg) : LUNAR_ERR_INTERNAL;
	if (rc)
		goto err_unmap;
	*out = ch;
	return 0;
err_unmap:
	/* 1 (registered already) cannot be for a fresh mapping; a stale
	 * range the caller unmapped unregistered makes INVALID_PARAMS. */
	LC_WARN(SHM_LOG, "lunar_alloc: register %llu bytes: %s", (unsigned long long)ch->size,
		lunar_strerror(rc < 0 ? rc : LUNAR_ERR_INTERNAL));
	lc_ralloc_destroy(ch->ra);
	munmap(ch->base, ch->size);
	close(rg.fd);
err_free:
	free(ch);
	return rc < 0 ? rc : LUNAR_ERR_INTERNAL;
}

void *lunar_alloc(struct lunar_client *c, size_t len)
{
	struct shm_chunk *ch;
	uint64_t off;
	void *p = NULL;
	int cancel;

	if (!c || !len || shm_call_begin(c, &cancel))
		return NULL;
	pthread_mutex_lock(&c->alloc_lock);
	for (ch = c->chunks; ch; ch = ch->next)
		if (!lc_ralloc_get(ch->ra, len, &off))
			break;
	if (!ch && !chunk_new(c, len, &ch)) {
		ch->next = c->chunks;
		c->chunks = ch;
		if (lc_ralloc_get(ch->ra, len, &off))
			ch = NULL;
	}
	if (ch)
		p = ch->base + off;
	pthread_mutex_unlock(&c->alloc_lock);
	shm_call_end(cancel);
	return p;
}

void lunar_free(struct lunar_client *c, void *p)
{
	struct shm_chunk *ch;
	int rc = -1, cancel;

	if (!c || !p || shm_call_begin(c, &cancel))
		return;
	pthread_mutex_lock(&c->alloc_lock);
	for (ch = c->chunks; ch; ch = ch->next) {
		if ((uint8_t *)p >= ch->base && (uint8_t *)p < ch->base + ch->size) {
			rc = lc_ralloc_put(ch->ra, (uint64_t)((uint8_t *)p - ch->base), NULL);
			break;
		}
	}
	pthread_mutex_unlock(&c->alloc_lock);
	shm_call_end(cancel);
	if (rc)
		LC_DEBUG(SHM_LOG, "lunar_free(%p): not from lunar_alloc, ignored", p);
}

void shm_chunks_fini(struct lunar_client *c)
{
	struct shm_chunk *ch, *next;

	for (ch = c->chunks; ch; ch = next) {
		next = ch->next;
		lc_ralloc_destroy(ch->ra);
		munmap(ch->base, ch->size);
		free(ch);
	}
	c->chunks = NULL;
}
