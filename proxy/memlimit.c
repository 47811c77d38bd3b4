/*
 * memlimit.c - the segment fitted under the proxy's memory cgroup. A
 * segment larger than the cgroup lets the proxy hold is an OOM kill waiting
 * to happen: the prefault makes it resident at start, and puts fill it. So
 * at start the proxy reads its limit (cgroup v2: the smallest memory.max
 * from its cgroup up to the mount's root; v1: the memory controller's
 * hierarchical_memory_limit), keeps PX_MEM_RESERVE_MIN plus 1/16 of the
 * limit for everything else it allocates, and shrinks the segment to the
 * rest, saying so. Puts beyond the segment then get NO_AVAILABLE_HANDLE like
 * on any full segment, and the proxy keeps serving.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lunar.h"
#include "px_int.h"

/* What the proxy needs besides its segment: the heap it keeps (64 MiB,
 * main.c), the lease cache (20 MiB at least), threads' stacks, the
 * metadata of an embedded master. */
#define PX_MEM_RESERVE_MIN (128ull << 20)
#define PX_MEM_SEG_ALIGN   (2ull << 20) /* a huge page */
#define PX_MEM_SEG_MIN	   (16ull << 20)
/* v1 writes "no limit" as a page-rounded LONG_MAX. */
#define PX_MEM_UNLIMITED (1ull << 62)

/* The mount point of the cgroup hierarchy: fstype "cgroup2", or "cgroup"
 * with option opt (v1: "memory"), and the hierarchy path it shows (its
 * root, "/" unless in a cgroup namespace's view). 0 or -1. */
static int cg_mount(const char *fstype, const char *opt, char *mnt, size_t cap, char *root,
		    size_t rcap)
{
	char line[4096];
	FILE *f = fopen("/proc/self/mountinfo", "re");
	int rc = -1;

	while (f && rc && fgets(line, sizeof(line), f)) {
		char r[1024], m[1024], fs[64], super[1024];
		char *dash = strstr(line, " - ");

		if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2 ||
		    sscanf(dash + 3, "%63s %*s %1023s", fs, super) != 2 || strcmp(fs, fstype))
			continue;
		if (opt) {
			char *tok, *save = NULL;
			int found = 0;

			for (tok = strtok_r(super, ",", &save); tok && !found;
			     tok = strtok_r(NULL, ",", &save))
				found = !strcmp(tok, opt);
			if (!found)
				continue;
		}
		snprintf(mnt, cap, "%s", m);
		snprintf(root, rcap, "%s", r);
		rc = 0;
	}
	if (f)
		fclose(f);
	return rc;
}

/* The proxy's cgroup path in the hierarchy of controller (NULL: v2's
 * "0::" line), from /proc/self/cgroup. 0 or -1. */
static int cg_path(const char *controller, char *out, size_t cap)
{
	char line[4096];
	FILE *f = fopen("/proc/self/cgroup", "re");
	int rc = -1;

	/* Lines "id:controllers:path"; v2's is "0::path". */
	while (f && rc && fgets(line, sizeof(line), f)) {
		char *ctl = strchr(line, ':'), *path = ctl ? strchr(ctl + 1, ':') : NULL;
		char *tok, *save = NULL;

		if (!path)
			continue;
		*ctl++ = '\0';
		*path++ = '\0';
		path[strcspn(path, "\n")] = '\0';
		if (!controller) {
			if (!strcmp(line, "0") && !*ctl) {
				snprintf(out, cap, "%s", path);
				rc = 0;
			}
			continue;
		}
		for (tok = strtok_r(ctl, ",", &save); tok && rc; tok = strtok_r(NULL, ",", &save))
			if (!strcmp(tok, controller)) {
				snprintf(out, cap, "%s", path);
				rc = 0;
			}
	}
	if (f)
		fclose(f);
	return rc;
}

/* The directory of the proxy's cgroup under mnt: the path, less the
 * mount's root when the mount shows a subtree. */
static void cg_dir(char *out, size_t cap, const char *mnt, const char *root, const char *path)
{
	size_t rl = strlen(root);

	if (strcmp(root, "/") && !strncmp(path, root, rl))
		path += rl;
	snprintf(out, cap, "%s%s%s", mnt, *path == '/' ? "" : "/", path);
}

/* A limit file's number ("max": none); UINT64_MAX when unreadable. */
static uint64_t cg_read(const char *dir, const char *file, const char *key)
{
	char path[4096 + 64], line[256];
	uint64_t v = UINT64_MAX;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, file);
	f = fopen(path, "re");
	while (f && fgets(line, sizeof(line), f)) {
		size_t kl = key ? strlen(key) : 0;

		if (key && (strncmp(line, key, kl) || line[kl] != ' '))
			continue;
		if (strncmp(line + kl + !!key, "max", 3))
			v = strtoull(line + kl + !!key, NULL, 10);
		break;
	}
	if (f)
		fclose(f);
	return v >= PX_MEM_UNLIMITED ? UINT64_MAX : v;
}

uint64_t px_mem_limit(void)
{
	char mnt[1024], root[1024], path[2048], dir[4096];
	uint64_t limit = UINT64_MAX, v;

	if (!cg_mount("cgroup2", NULL, mnt, sizeof(mnt), root, sizeof(root)) &&
	    !cg_path(NULL, path, sizeof(path))) {
		/* memory.max binds in every ancestor too, up to the mount. */
		cg_dir(dir, sizeof(dir), mnt, root, path);
		for (;;) {
			char *slash;

			v = cg_read(dir, "memory.max", NULL);
			limit = v < limit ? v : limit;
			slash = strrchr(dir, '/');
			if (strlen(dir) <= strlen(mnt) || !slash)
				break;
			*slash = '\0';
		}
	}
	if (!cg_mount("cgroup", "memory", mnt, sizeof(mnt), root, sizeof(root)) &&
	    !cg_path("memory", path, sizeof(path))) {
		cg_dir(dir, sizeof(dir), mnt, root, path);
		v = cg_read(dir, "memory.stat", "hierarchical_memory_limit");
		if (v == UINT64_MAX)
			v = cg_read(dir, "memory.limit_in_bytes", NULL);
		limit = v < limit ? v : limit;
	}
	return limit;
}

int px_mem_fit(struct px_config *c)
{
	uint64_t limit, reserve, room;

	if (!c->segment_size)
		return 0;
	limit = px_mem_limit();
	if (limit == UINT64_MAX)
		return 0;
	reserve = PX_MEM_RESERVE_MIN + limit / 16;
	room = limit > reserve ? (limit - reserve) & ~(PX_MEM_SEG_ALIGN - 1) : 0;
	if (c->segment_size <= room)
		return 0;
	if (room < PX_MEM_SEG_MIN) {
		LC_ERROR("proxy",
			 "the memory cgroup lets the proxy use %llu bytes: too little for a "
			 "segment (it keeps %llu for itself, a segment needs %llu more); raise "
			 "the limit, or run with --segment-size 0",
			 (unsigned long long)limit, (unsigned long long)reserve,
			 (unsigned long long)PX_MEM_SEG_MIN);
		return LUNAR_ERR_INVALID_PARAMS;
	}
	LC_WARN("proxy",
		"a %llu-byte segment does not fit the memory cgroup's limit of %llu bytes "
		"(%llu kept for the proxy itself): serving %llu bytes; raise the limit or lower "
		"--segment-size",
		(unsigned long long)c->segment_size, (unsigned long long)limit,
		(unsigned long long)reserve, (unsigned long long)room);
	c->segment_size = room;
	return 0;
}
