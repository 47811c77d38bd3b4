/*
 * disk_util.h - helpers for the disk-tier integration tests (test_disk_*.c):
 * the master and proxies of the tests that run a cluster, a tiny HTTP GET
 * against a daemon's HTTP port, the port a proxy logged,
 * puts that wait out NO_AVAILABLE_HANDLE (offload back-pressure), reads
 * checked byte for byte, a record damaged on disk, and percentiles.
 * Static, test main thread only.
 */
#ifndef LUNAR_TESTS_INTEGRATION_DISK_UTIL_H
#define LUNAR_TESTS_INTEGRATION_DISK_UTIL_H

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define D_MIB (1024u * 1024u)

/* The master of the tests that run one: its RPC and HTTP ports. */
static int d_master_port, d_master_http;

/* Start that master on free ports with the given offload policy and client
 * TTL and 200 ms leases (600 ms under a sanitizer: a read must end inside
 * its lease, and a sanitizer's build reads several times slower); 0 or -1. */
static inline int d_start_master(const char *offload, const char *client_ttl)
{
	const char *lease = h_sanitizer() ? "600ms" : "200ms";
	char http[16];

	d_master_port = h_free_port();
	d_master_http = h_free_port();
	snprintf(http, sizeof(http), "%d", d_master_http);
	return h_start_master("master", d_master_port, "--http-port", http, "--offload", offload,
			      "--kv-lease-ttl", lease, "--client-ttl", client_ttl, NULL)
		   ? 0
		   : -1;
}

/* A proxy of that master with a 16 MiB segment, an SSD tier of capacity in
 * dir and a 100 ms heartbeat. */
static inline struct h_proc *d_start_proxy(const char *name, const char *sock, const char *dir,
					   const char *capacity)
{
	/* The disk tests' apps remove by force: admin calls. */
	return h_start_proxy(name, sock, d_master_port, "--segment-size", "16MiB", "--disk-dir",
			     dir, "--disk-capacity", capacity, "--ping-interval", "100ms",
			     "--admin-calls", NULL);
}

/* GET path from 127.0.0.1:port into buf (NUL-terminated body and headers);
 * the byte count, or -1. */
static inline ssize_t d_http_get(int port, const char *path, char *buf, size_t cap)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	char req[512];
	size_t got = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) || write(fd, req, strlen(req)) < 0) {
		close(fd);
		return -1;
	}
	while (got + 1 < cap && (n = read(fd, buf + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	return (ssize_t)got;
}

/* The unsigned number after "\"name\":" in a JSON text, or -1. */
static inline long long d_json_num(const char *json, const char *name)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", name);
	p = strstr(json, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

/* The HTTP port a proxy logged ("HTTP on http://127.0.0.1:PORT"), or -1. */
static inline int d_proxy_http_port(const struct h_proc *p)
{
	static char buf[1 << 16];
	int fd = open(p->log, O_RDONLY | O_CLOEXEC), port = -1;
	ssize_t n;
	const char *s, *last = NULL;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	for (s = buf; (s = strstr(s, "HTTP on http://127.0.0.1:")); s++)
		last = s;
	if (last)
		port = atoi(last + strlen("HTTP on http://127.0.0.1:"));
	return port;
}

/* The master's view of key: per replica in the order listed, 'M' for
 * MEMORY and 'D' for LOCAL_DISK, lower case when its endpoint is mine (may
 * be NULL); "" when the key is not found. */
static inline void d_replicas_at(int http_port, const char *key, const char *mine, char *out,
				 size_t cap)
{
	static char buf[1 << 16];
	char path[256], ep[128];
	const char *p, *e;
	size_t n = 0;

	snprintf(path, sizeof(path), "/admin/stat?tenant=default&key=%s", key);
	out[0] = '\0';
	if (d_http_get(http_port, path, buf, sizeof(buf)) <= 0 ||
	    !(p = strstr(buf, "\"replicas\"")))
		return;
	while ((p = strstr(p, "\"type\":\"")) && n + 1 < cap) {
		char t = !strncmp(p + 8, "MEMORY", 6) ? 'M' : 'D';

		p += 8;
		e = strstr(p, "\"endpoint\":\"");
		if (e && mine && sscanf(e + 12, "%127[^\"]", ep) == 1 && !strcmp(ep, mine))
			t = (char)(t - 'A' + 'a');
		out[n++] = t;
	}
	out[n] = '\0';
}

static inline void d_replicas(int http_port, const char *key, char *out, size_t cap)
{
	d_replicas_at(http_port, key, NULL, out, cap);
}

/* The data endpoint a proxy logged ("data port HOST:PORT;") into out. */
static inline int d_proxy_endpoint(const struct h_proc *p, char *out, size_t cap)
{
	static char buf[1 << 16];
	int fd = open(p->log, O_RDONLY | O_CLOEXEC);
	const char *s;
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	s = strstr(buf, "; data port ");
	if (!s || cap < 2)
		return -1;
	snprintf(out, cap, "%.*s", (int)strcspn(s + 12, ";"), s + 12);
	return 0;
}

/* Put key (content h_fill(h_seed(key))) retrying NO_AVAILABLE_HANDLE, the
 * back-pressure of offloads in flight, for up to 30 s. The last code. */
static inline int d_put(struct lunar_client *c, const char *key, uint8_t *buf, size_t len)
{
	uint64_t end = h_now_ms() + 30000;
	int rc;

	h_fill(buf, len, h_seed(key));
	while ((rc = lunar_put(c, key, buf, len, NULL)) == LUNAR_ERR_NO_AVAILABLE_HANDLE &&
	       h_now_ms() < end)
		h_sleep_ms(20);
	return rc;
}

/* Get key and check every byte: its length, or the code (wrong bytes fail
 * the test). */
static inline int64_t d_get_exact(struct lunar_client *c, const char *key, uint8_t *buf, size_t cap)
{
	int64_t n = lunar_get_into(c, key, buf, cap), bad;

	if (n < 0)
		return n;
	bad = h_verify(buf, (size_t)n, h_seed(key));
	H_ASSERT_MSG(bad < 0, "%s read %lld bytes, wrong at byte %lld", key, (long long)n,
		     (long long)bad);
	return n;
}

/*
 * d_corrupt_record - flip one byte in the middle of the data of the record
 * of (tenant, key) in the SSD tier under dir, found through the bucket
 * metadata files (bNNNNNNNN.meta: records of a 48-byte header, struct
 * dsk_meta_hdr of disk/dsk_int.h, little-endian, then tenant and key; the
 * data's offset at byte 24 of the header, its length at 32). For a proxy
 * that is down: its restart scan must drop the record. 0, or -1 when no
 * record of the key is found.
 */
static inline int d_corrupt_record(const char *dir, const char *tenant, const char *key)
{
	size_t tlen = strlen(tenant), klen = strlen(key);
	static char meta[1 << 20];
	char path[PATH_MAX + 300];
	struct dirent *e;
	int rc = -1;
	DIR *d = opendir(dir);

	while (d && rc && (e = readdir(d))) {
		size_t nlen = strlen(e->d_name);
		ssize_t n;
		int fd;

		if (nlen < 6 || strcmp(e->d_name + nlen - 5, ".meta"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		n = fd < 0 ? -1 : read(fd, meta, sizeof(meta));
		if (fd >= 0)
			close(fd);
		for (ssize_t h = 0; h + 48 + (ssize_t)(tlen + klen) <= n && rc; h += 8) {
			const uint8_t *p = (const uint8_t *)meta + h;
			uint64_t off, len;
			uint8_t b;

			/* magic "DSK\x1a", type PUT (1), the names' lengths, the names */
			if (memcmp(p, "DSK\x1a", 4) || p[8] != 1 || p[9] ||
			    p[12] + 256u * p[13] != tlen || p[14] + 256u * p[15] != klen ||
			    memcmp(p + 48, tenant, tlen) || memcmp(p + 48 + tlen, key, klen))
				continue;
			memcpy(&off, p + 24, 8);
			memcpy(&len, p + 32, 8);
			snprintf(path, sizeof(path), "%s/%.*s.dat", dir, (int)(nlen - 5),
				 e->d_name);
			fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd >= 0 && pread(fd, &b, 1, (off_t)(off + len / 2)) == 1) {
				b ^= 0x5a;
				rc = pwrite(fd, &b, 1, (off_t)(off + len / 2)) == 1 ? 0 : -1;
			}
			if (fd >= 0)
				close(fd);
		}
	}
	if (d)
		closedir(d);
	return rc;
}

static inline int d_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The p-th percentile (0..100) of v[0..n), sorting v. */
static inline uint64_t d_percentile(uint64_t *v, size_t n, unsigned p)
{
	size_t i;

	qsort(v, n, sizeof(*v), d_cmp_u64);
	i = (n * p + 99) / 100;
	return v[i ? i - 1 : 0];
}

static inline uint64_t d_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

#endif /* LUNAR_TESTS_INTEGRATION_DISK_UTIL_H */
