/*
 * sync.c - a barrier across lunar-bench processes: one 32-bit arrival count
 * per phase in a file every process maps, and a shared futex to sleep on.
 * A new file is zeros, so no process has to set it up first.
 */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"
#include "bench.h"
#include "clock.h"
#include "futex.h"

#define SYNC_BYTES 4096u

int bench_sync_open(struct bench_sync *s, const char *path, unsigned procs)
{
	struct stat st;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0 || fstat(fd, &st) ||
	    ((uint64_t)st.st_size < SYNC_BYTES && ftruncate(fd, SYNC_BYTES))) {
		perror("lunar-bench: --sync-file");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	s->count = mmap(NULL, SYNC_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (s->count == MAP_FAILED) {
		perror("lunar-bench: --sync-file");
		return -1;
	}
	s->procs = procs;
	return 0;
}

int bench_sync_wait(struct bench_sync *s, unsigned k, unsigned timeout_ms)
{
	uint64_t end = lc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	uint32_t *c, v;

	if (k >= SYNC_BYTES / sizeof(*c))
		return -1;
	c = &s->count[k];
	v = lc_fetch_add(c, 1u) + 1;
	if (v > s->procs) {
		fprintf(stderr,
			"lunar-bench: --sync-file: more than %u processes at barrier %u "
			"(a file used before?)\n",
			s->procs, k);
		return -1;
	}
	if (v == s->procs) {
		lc_futex_wake(c, 0x7fffffff);
		return 0;
	}
	while ((v = lc_load_acquire(c)) < s->procs) {
		uint64_t now = lc_now_ns();

		if (now >= end) {
			fprintf(stderr,
				"lunar-bench: --sync-file: %u of %u processes at barrier %u "
				"after %u ms\n",
				v, s->procs, k, timeout_ms);
			return -1;
		}
		lc_futex_wait(c, v, end - now);
	}
	return 0;
}

void bench_sync_close(struct bench_sync *s)
{
	if (s->count)
		munmap(s->count, SYNC_BYTES);
	s->count = NULL;
}
