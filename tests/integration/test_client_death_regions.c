/*
 * test_client_death_regions.c - a client dies with memory registered and puts
 * in flight (SPEC §5.6). A forked child connects, registers its own sealed
 * memfd, takes lunar_alloc memory and starts puts from registered, alloc'd
 * and malloc memory on three threads; then it is SIGKILLed. Within 2 s the
 * proxy's descriptor count (/proc/<pid>/fd) is back at its baseline, taken
 * before the child connected, and its /proc/<pid>/maps holds no more
 * "memfd:" mappings than then: the session region and every registered
 * range are unmapped. Once with a proxy holding each put for 5 s before
 * commit (the puts are surely in flight, and their workers still hold the
 * regions when the child dies), once with a plain proxy and a stream of puts,
 * and once more held, with an idle grandchild the dying child forked while
 * its puts ran: the grandchild's inherited copy of the session socket must
 * not hold the session open (liblunar closes it in every forked child).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define MIB	   (1024u * 1024u)
#define REG_LEN	   (8u * MIB)
#define VAL_LEN	   (1u * MIB + 3)
#define RELEASE_MS 2000
#define NWRITERS   3

static struct h_proc *proxy;
static char sock[PATH_MAX];

struct writer {
	struct lunar_client *c;
	const char *mode;
	int kind; /* 0 registered, 1 alloc'd, 2 malloc */
	uint8_t *buf;
};

/* In the child: put new keys until killed. */
static void *writer_main(void *arg)
{
	struct writer *w = arg;
	char key[96];

	for (int i = 0;; i++) {
		snprintf(key, sizeof(key), "death/%s/%d/%d", w->mode, w->kind, i);
		(void)lunar_put(w->c, key, w->buf, VAL_LEN, NULL);
	}
	return NULL;
}

/* What the doomed client does: its mode's name, and whether it forks an
 * idle grandchild. */
struct doomed {
	const char *mode;
	int fork_idle;
};

/* The doomed client: never returns. Reports readiness with one byte, then
 * the pid of the idle grandchild when fork_idle. */
static void child_main(int ready_fd, void *arg)
{
	const struct doomed *d = arg;
	const char *mode = d->mode;
	int fork_idle = d->fork_idle;
	static struct writer w[NWRITERS];
	struct lunar_opts o = {.socket_path = sock, .timeout_ms = 10000};
	struct lunar_client *c = NULL;
	pthread_t th[NWRITERS];
	uint8_t *reg;
	int fd, rc;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	rc = lunar_connect(&o, &c);
	fd = memfd_create("t3-dying-reg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (rc || fd < 0 || ftruncate(fd, REG_LEN) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		fprintf(stderr, "child: connect %d (%s) / memfd: %s\n", rc, h_code(rc),
			strerror(errno));
		_exit(2);
	}
	reg = mmap(NULL, REG_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (reg == MAP_FAILED || (rc = lunar_register(c, reg, REG_LEN)) != 0) {
		fprintf(stderr, "child: register: %d (%s)\n", rc, h_code(rc));
		_exit(3);
	}
	w[0] = (struct writer){c, mode, 0, reg + 4096};
	w[1] = (struct writer){c, mode, 1, lunar_alloc(c, VAL_LEN)};
	w[2] = (struct writer){c, mode, 2, malloc(VAL_LEN)};
	for (int i = 0; i < NWRITERS; i++) {
		if (!w[i].buf) {
			fprintf(stderr, "child: buffer %d: out of memory\n", i);
			_exit(4);
		}
		h_fill(w[i].buf, VAL_LEN, h_seed(mode) + (uint64_t)i);
		if (pthread_create(&th[i], NULL, writer_main, &w[i])) {
			fprintf(stderr, "child: pthread_create failed\n");
			_exit(5);
		}
	}
	h_sleep_ms(100);
	if (write(ready_fd, "R", 1) != 1)
		_exit(6);
	if (fork_idle) {
		pid_t idle = fork();

		if (idle == 0) {
			alarm(30); /* bounded, should the test not kill it */
			for (;;)
				pause();
		}
		if (write(ready_fd, &idle, sizeof(idle)) != sizeof(idle))
			_exit(7);
	}
	for (;;)
		pause();
}

static int setup(void **state)
{
	(void)state;
	if (h_init() != 0)
		return -1;
	snprintf(sock, sizeof(sock), "%s", h_path("proxy.sock"));
	return 0;
}

/* The proxy's descriptors and memfd mappings, once two readings 100 ms
 * apart agree (sessions of the harness's readiness check may still close). */
static void steady_counts(pid_t pid, int *fds, int *memfds)
{
	int f = -2, m = -2;

	for (int i = 0; i < 30; i++) {
		int nf = h_pid_fd_count(pid), nm = h_pid_maps_count(pid, "memfd:");

		if (nf == f && nm == m)
			break;
		f = nf;
		m = nm;
		h_sleep_ms(100);
	}
	*fds = f;
	*memfds = m;
}

static void run_death(const char *mode, int delayed, int fork_idle)
{
	int base_fds, base_memfds, fds = -1, memfds = -1, dying = -1, rd = -1, status = 0;
	struct doomed d = {mode, fork_idle};
	struct pollfd pf;
	uint64_t killed, took;
	struct lunar_client *c;
	pid_t pid, idle = 0;

	if (delayed)
		proxy = h_start_proxy(mode, sock, H_EMBEDDED, "--segment-size", "64MiB",
				      "--debug-put-delay", "5s", NULL);
	else
		proxy = h_start_proxy(mode, sock, H_EMBEDDED, "--segment-size", "64MiB", NULL);
	H_ASSERT(proxy != NULL);
	steady_counts(proxy->pid, &base_fds, &base_memfds);
	print_message("%s: baseline %d fds, %d memfd maps\n", mode, base_fds, base_memfds);
	H_ASSERT(base_fds > 0 && base_memfds >= 0);

	pid = h_fork_ready(child_main, &d, &rd);
	H_ASSERT_MSG(pid > 0, "%s: the child never got its puts going", mode);
	pf = (struct pollfd){rd, POLLIN, 0};
	if (fork_idle && (poll(&pf, 1, 10000) != 1 ||
			  read(rd, &idle, sizeof(idle)) != sizeof(idle) || idle <= 0)) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
		close(rd);
		H_ASSERT_MSG(0, "%s: the child never said its grandchild's pid (status 0x%x)", mode,
			     status);
	}
	close(rd);
	h_sleep_ms(300); /* puts in flight */
	fds = h_pid_fd_count(proxy->pid);
	dying = h_pid_maps_count(proxy->pid, "memfd:t3-dying-reg");
	memfds = h_pid_maps_count(proxy->pid, "memfd:");
	print_message("%s: child running: %d fds, %d memfd maps (%d of its memfd)\n", mode, fds,
		      memfds, dying);
	H_ASSERT_MSG(waitpid(pid, &status, WNOHANG) == 0, "%s: the child ended early (0x%x)", mode,
		     status);
	H_ASSERT_MSG(fds > base_fds && dying >= 1 && memfds >= base_memfds + 3,
		     "%s: the proxy does not hold the child's session and regions", mode);

	kill(pid, SIGKILL);
	H_ASSERT_EQ(waitpid(pid, &status, 0), pid);
	killed = h_now_ms();
	do {
		fds = h_pid_fd_count(proxy->pid);
		memfds = h_pid_maps_count(proxy->pid, "memfd:");
		dying = h_pid_maps_count(proxy->pid, "memfd:t3-dying-reg");
		if (fds <= base_fds && memfds <= base_memfds && dying == 0)
			break;
		h_sleep_ms(10);
	} while (h_now_ms() - killed < RELEASE_MS);
	took = h_now_ms() - killed;
	if (idle > 0) {
		H_ASSERT_MSG(kill(idle, 0) == 0, "%s: the idle grandchild is gone already", mode);
		kill(idle, SIGKILL);
	}
	print_message("%s: %llu ms after the kill: %d fds (baseline %d), %d memfd maps "
		      "(baseline %d), %d of the child's memfd\n",
		      mode, (unsigned long long)took, fds, base_fds, memfds, base_memfds, dying);
	H_ASSERT_MSG(fds <= base_fds, "%s: %d proxy fds %llu ms after the kill, baseline %d", mode,
		     fds, (unsigned long long)took, base_fds);
	H_ASSERT_MSG(dying == 0 && memfds <= base_memfds,
		     "%s: %d memfd maps (%d of the child's memfd) %llu ms after the kill, "
		     "baseline %d",
		     mode, memfds, dying, (unsigned long long)took, base_memfds);
	H_ASSERT(h_alive(proxy));

	/* The proxy serves on; puts held back at death were revoked. */
	c = h_client(sock);
	if (delayed)
		for (int k = 0; k < NWRITERS; k++) {
			char key[96];

			snprintf(key, sizeof(key), "death/%s/%d/0", mode, k);
			H_ASSERT_EQ(lunar_exists(c, key), 0);
		}
	H_ASSERT_EQ(lunar_health(c), 0);
	lunar_close(c);
	h_stop(proxy);
	proxy = NULL;
}

static void test_client_death_regions_releases_held_regions(void **state)
{
	(void)state;
	run_death("held", 1, 0);
}

static void test_client_death_regions_not_held_by_forked_child(void **state)
{
	(void)state;
	run_death("forked", 1, 1);
}

static void test_client_death_regions_releases_streaming_regions(void **state)
{
	(void)state;
	run_death("streaming", 0, 0);
}

LUNAR_TEST_MAIN(setup, h_teardown, test_client_death_regions_releases_held_regions,
		test_client_death_regions_releases_streaming_regions,
		test_client_death_regions_not_held_by_forked_child)
