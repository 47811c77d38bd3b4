/*
 * harness_after.c - the aftermath of a fault test (see harness_after.h): a
 * background client forked before the fault, the baseline it is compared
 * with, and the comparison. The client is a process, not a thread: the
 * tests fork and kill children of their own, and a forked copy of a thread
 * in the middle of a call would hold its handle's locks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness_after.h"
#include "http_get.h"

#define METRICS_MAX (1u << 20)

struct h_after_shm {
	atomic_int stop;
	atomic_int pause;
	atomic_int paused;
	atomic_ullong rounds;
	atomic_ullong errors;
	char first_err[200];
};

int64_t h_metric_sum(int port, const char *prefix)
{
	char *text = malloc(METRICS_MAX);
	size_t n = strlen(prefix);
	int64_t sum = -1;

	if (!text)
		return -1;
	if (hg_get(port, "/metrics", text, METRICS_MAX) != 200) {
		free(text);
		return -1;
	}
	for (const char *line = text; *line;) {
		const char *sp = strchr(line + n, ' ');
		char nx = line[n];

		if (!strncmp(line, prefix, n) && sp &&
		    (nx == ' ' || (nx == '{' && !strchr(prefix, '{'))))
			sum = (sum < 0 ? 0 : sum) + (int64_t)strtod(sp + 1, NULL);
		line = strchr(line, '\n');
		if (!line)
			break;
		line++;
	}
	free(text);
	return sum;
}

static void bg_fail(struct h_after_shm *s, uint64_t i, const char *what, int64_t rc)
{
	if (atomic_fetch_add(&s->errors, 1) == 0)
		snprintf(s->first_err, sizeof(s->first_err), "round %llu: %s returned %lld (%s)",
			 (unsigned long long)i, what, (long long)rc, h_code(rc));
}

/* One round: put a patterned value, read it back, remove it. */
static void bg_round(struct h_after_shm *s, struct lunar_client *c, uint64_t i, uint8_t *buf,
		     uint8_t *out)
{
	size_t len = 1 + (size_t)((i * 7919u) % H_AFTER_MAX_LEN);
	char key[64];
	int64_t rc;

	snprintf(key, sizeof(key), "h-after/%d/%llu", (int)getpid(), (unsigned long long)i);
	h_fill(buf, len, h_seed(key));
	rc = lunar_put(c, key, buf, len, NULL);
	if (rc) {
		bg_fail(s, i, "put", rc);
		return;
	}
	rc = lunar_get_into(c, key, out, H_AFTER_MAX_LEN);
	if (rc != (int64_t)len)
		bg_fail(s, i, "get_into", rc);
	else if (h_verify(out, len, h_seed(key)) >= 0)
		bg_fail(s, i, "verify", 0);
	rc = lunar_remove(c, key, 1);
	if (rc)
		bg_fail(s, i, "remove", rc);
}

struct bg_arg {
	const char *sock;
	struct h_after_shm *shm;
};

static void bg_main(int ready_fd, void *arg)
{
	struct bg_arg *ba = arg;
	struct h_after_shm *s = ba->shm;
	struct lunar_opts o = {.socket_path = ba->sock, .timeout_ms = H_CLIENT_TIMEOUT_MS};
	struct lunar_client *c = NULL;
	uint8_t *buf = malloc(H_AFTER_MAX_LEN), *out = malloc(H_AFTER_MAX_LEN);
	int rc = lunar_connect(&o, &c);

	if (rc || !buf || !out) {
		fprintf(stderr, "h_after: background client cannot connect: %d (%s)\n", rc,
			h_code(rc));
		_exit(1);
	}
	if (write(ready_fd, "R", 1) != 1)
		_exit(1);
	close(ready_fd);
	for (uint64_t i = 0; !atomic_load(&s->stop); i++) {
		if (atomic_load(&s->pause)) {
			atomic_store(&s->paused, 1);
			while (atomic_load(&s->pause) && !atomic_load(&s->stop))
				usleep(2000);
			atomic_store(&s->paused, 0);
			continue;
		}
		bg_round(s, c, i, buf, out);
		atomic_fetch_add(&s->rounds, 1);
	}
	lunar_close(c);
	_exit(0);
}

/* The proxy's and the master's figures into *now (fields fds..keys). */
static void snapshot(const struct h_after *a, struct h_after *now)
{
	int64_t peers = h_metric_sum(a->proxy_http, "lunar_proxy_peer_connections");
	int64_t master = h_metric_sum(a->proxy_http, "lunar_proxy_master_connections");
	const int ports[] = {a->proxy_http, a->proxy_data};

	/* Neither the connection that read the gauges, if still open, nor
	 * connections into the data port, which peers pool: ours to them, and
	 * those to the master (one a call in flight, a burst's for a second),
	 * are the gauges (a proxy with an embedded master has none). */
	now->fds = peers < 0 ? -1
			     : h_pid_fd_count_but_ports(a->proxy->pid, ports, 2) - (int)peers -
				   (master > 0 ? (int)master : 0);
	now->maps = h_pid_maps_count(a->proxy->pid, "memfd:");
	now->used = h_metric_sum(a->master_http, "lunar_master_segment_used_bytes");
	now->keys = h_metric_sum(a->master_http, "lunar_master_keys");
}

static int same(const struct h_after *x, const struct h_after *y)
{
	return x->fds == y->fds && x->maps == y->maps && x->used == y->used && x->keys == y->keys;
}

/* The baseline once it holds still for 200 ms: a session closed just before
 * (the readiness probe's, the test's own) gives its descriptors back in
 * the proxy's closer thread, a little later. */
static void settle(struct h_after *a)
{
	uint64_t end = h_now_ms() + 3000, still = h_now_ms();
	struct h_after prev;

	snapshot(a, a);
	do {
		prev = *a;
		h_sleep_ms(20);
		snapshot(a, a);
		if (!same(a, &prev))
			still = h_now_ms();
	} while (h_now_ms() - still < 200 && h_now_ms() < end);
}

void h_after_begin(struct h_after *a, const char *sock, struct h_proc *proxy, int master_http)
{
	static struct bg_arg ba;
	uint64_t end;

	memset(a, 0, sizeof(*a));
	snprintf(a->sock, sizeof(a->sock), "%s", sock);
	a->proxy = proxy;
	a->master_http = master_http;
	a->proxy_http = hg_log_http_port(proxy->log);
	H_ASSERT_MSG(a->proxy_http > 0, "h_after: %s logged no HTTP port", proxy->name);
	a->proxy_data = hg_log_data_port(proxy->log);
	H_ASSERT_MSG(a->proxy_data > 0, "h_after: %s logged no data port", proxy->name);
	settle(a);
	H_ASSERT_MSG(a->fds > 0 && a->maps >= 0 && a->used >= 0 && a->keys >= 0,
		     "h_after: no baseline (fds %d, maps %d, used %lld, keys %lld)", a->fds,
		     a->maps, (long long)a->used, (long long)a->keys);
	a->shm =
	    mmap(NULL, sizeof(*a->shm), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	H_ASSERT(a->shm != MAP_FAILED);
	memset(a->shm, 0, sizeof(*a->shm));
	ba = (struct bg_arg){a->sock, a->shm};
	a->bg = h_fork_ready(bg_main, &ba, NULL);
	H_ASSERT_MSG(a->bg > 0, "h_after: the background client did not start");
	end = h_now_ms() + H_READY_TIMEOUT_MS;
	while (atomic_load(&a->shm->rounds) == 0 && h_now_ms() < end)
		h_sleep_ms(2);
	H_ASSERT_MSG(atomic_load(&a->shm->rounds) > 0,
		     "h_after: the background client made no "
		     "round (%s)",
		     a->shm->first_err);
	printf("  aftermath baseline: proxy %d fds, %d memfd maps; master %lld used bytes, "
	       "%lld keys\n",
	       a->fds, a->maps, (long long)a->used, (long long)a->keys);
}

void h_after_pause(struct h_after *a)
{
	uint64_t end = h_now_ms() + H_CLIENT_TIMEOUT_MS;

	atomic_store(&a->shm->pause, 1);
	while (!atomic_load(&a->shm->paused) && h_now_ms() < end)
		h_sleep_ms(1);
	H_ASSERT_MSG(atomic_load(&a->shm->paused), "h_after: the background client never paused");
}

void h_after_resume(struct h_after *a)
{
	atomic_store(&a->shm->pause, 0);
}

uint64_t h_after_rounds(const struct h_after *a)
{
	return a->shm ? atomic_load(&a->shm->rounds) : 0;
}

/* Stop the client and reap it: its exit status, or -1 when it had to be
 * killed. */
static int bg_stop(struct h_after *a)
{
	uint64_t end = h_now_ms() + H_CLIENT_TIMEOUT_MS + 2000;
	int status = -1;

	if (a->bg <= 0)
		return 0;
	atomic_store(&a->shm->stop, 1);
	while (waitpid(a->bg, &status, WNOHANG) == 0) {
		if (h_now_ms() > end) {
			kill(a->bg, SIGKILL);
			waitpid(a->bg, NULL, 0);
			status = -1;
			break;
		}
		h_sleep_ms(2);
	}
	a->bg = 0;
	return status;
}

void h_after_end(struct h_after *a)
{
	uint64_t rounds = atomic_load(&a->shm->rounds), end = h_now_ms() + 5000;
	struct lunar_client *c;
	struct h_after now;
	int status;

	/* Still making progress after the fault... */
	while (atomic_load(&a->shm->rounds) == rounds && h_now_ms() < end)
		h_sleep_ms(2);
	H_ASSERT_MSG(atomic_load(&a->shm->rounds) > rounds,
		     "aftermath: the background client made no progress for 5 s (%llu rounds)",
		     (unsigned long long)rounds);
	rounds = atomic_load(&a->shm->rounds);
	status = bg_stop(a);
	/* ...and never failed. */
	H_ASSERT_MSG(atomic_load(&a->shm->errors) == 0,
		     "aftermath: the background client saw %llu errors, first: %s",
		     (unsigned long long)atomic_load(&a->shm->errors), a->shm->first_err);
	H_ASSERT_MSG(status == 0, "aftermath: the background client ended with status 0x%x",
		     status);
	c = h_client(a->sock);
	H_ASSERT_EQ(lunar_put(c, "h-after/new", "v", 1, NULL), 0);
	H_ASSERT_EQ(lunar_remove(c, "h-after/new", 1), 0);
	lunar_close(c);
	end = h_now_ms() + H_AFTER_SETTLE_MS;
	do {
		snapshot(a, &now);
		if (same(&now, a))
			break;
		h_sleep_ms(50);
	} while (h_now_ms() < end);
	printf("  aftermath: %llu clean rounds; proxy %d fds (baseline %d), %d memfd maps (%d); "
	       "master %lld used bytes (%lld), %lld keys (%lld)\n",
	       (unsigned long long)rounds, now.fds, a->fds, now.maps, a->maps, (long long)now.used,
	       (long long)a->used, (long long)now.keys, (long long)a->keys);
	if (now.fds != a->fds)
		h_pid_dump_fds(a->proxy->pid);
	H_ASSERT_MSG(now.fds == a->fds, "aftermath: proxy holds %d descriptors, %d before", now.fds,
		     a->fds);
	H_ASSERT_MSG(now.maps == a->maps, "aftermath: proxy maps %d memfd ranges, %d before",
		     now.maps, a->maps);
	H_ASSERT_MSG(now.used == a->used, "aftermath: master has %lld bytes used, %lld before",
		     (long long)now.used, (long long)a->used);
	H_ASSERT_MSG(now.keys == a->keys, "aftermath: master has %lld keys, %lld before",
		     (long long)now.keys, (long long)a->keys);
	munmap(a->shm, sizeof(*a->shm));
	a->shm = NULL;
}

void h_after_abandon(struct h_after *a)
{
	if (a->bg > 0)
		bg_stop(a);
	if (a->shm) {
		munmap(a->shm, sizeof(*a->shm));
		a->shm = NULL;
	}
}
