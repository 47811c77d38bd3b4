/*
 * test_multiproc.c - many application processes on one proxy (SPEC §1:
 * one process per GPU rank, each with its own handle). 24 forked processes
 * connect, each puts 50 keys (1 KiB..128 KiB); once all have written, each
 * reads the 100 keys of two other processes and checks sizes, existence and
 * every byte. Odd processes read into lunar_alloc memory, even ones into
 * malloc memory. Every process must exit 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "tests/cmocka_main.h"

#define NPROC	 24
#define NKEYS	 50
#define MIN_LEN	 1024u
#define MAX_LEN	 (128u * 1024u)
#define PHASE_MS 25000

static char sock[PATH_MAX];

static int setup(void **state)
{
	(void)state;
	return h_embedded_node(sock, NULL, "--segment-size", "256MiB", NULL) ? 0 : -1;
}

static void key_of(int proc, int k, char *key, size_t len)
{
	snprintf(key, len, "multiproc/p%02d/k%02d", proc, k);
}

static size_t len_of(const char *key)
{
	return MIN_LEN + (size_t)(h_seed(key) % (MAX_LEN - MIN_LEN + 1));
}

/* Exit codes name the phase that failed; the message goes to stderr. */
enum { EX_OK, EX_CONNECT = 10, EX_PUT, EX_SIGNAL, EX_WAIT, EX_READ, EX_BYTES, EX_EXISTS };

static int put_mine(struct lunar_client *c, int me, uint8_t *buf)
{
	char key[64];

	for (int k = 0; k < NKEYS; k++) {
		size_t len;
		int rc;

		key_of(me, k, key, sizeof(key));
		len = len_of(key);
		h_fill(buf, len, h_seed(key));
		rc = lunar_put(c, key, buf, len, NULL);
		if (rc) {
			fprintf(stderr, "process %d: put %s = %d (%s)\n", me, key, rc, h_code(rc));
			return EX_PUT;
		}
	}
	return EX_OK;
}

static int read_theirs(struct lunar_client *c, int me, int them, uint8_t *buf)
{
	const char *keys[NKEYS];
	char names[NKEYS][64];
	int res[NKEYS], rc;

	for (int k = 0; k < NKEYS; k++) {
		int64_t got, bad;
		size_t len;

		key_of(them, k, names[k], sizeof(names[k]));
		keys[k] = names[k];
		len = len_of(names[k]);
		memset(buf, 0, len);
		got = lunar_get_into(c, names[k], buf, MAX_LEN);
		if (got != (int64_t)len) {
			fprintf(stderr, "process %d: get %s = %lld (%s), expected %zu\n", me,
				names[k], (long long)got, h_code(got), len);
			return EX_READ;
		}
		if ((bad = h_verify(buf, len, h_seed(names[k]))) >= 0) {
			fprintf(stderr, "process %d: %s wrong at byte %lld\n", me, names[k],
				(long long)bad);
			return EX_BYTES;
		}
	}
	rc = lunar_batch_exists(c, NKEYS, keys, res);
	for (int k = 0; k < NKEYS; k++)
		if (rc || res[k] != 1) {
			fprintf(stderr, "process %d: batch_exists = %d, [%d] %s = %d\n", me, rc, k,
				keys[k], res[k]);
			return EX_EXISTS;
		}
	return EX_OK;
}

/* One application process. Never returns. */
static void child_main(int me, int done_fd, int go_fd)
{
	struct lunar_client *c;
	uint8_t *wbuf = malloc(MAX_LEN), *rbuf;
	int rc;
	char b;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	c = h_client_try(sock, H_CLIENT_TIMEOUT_MS, &rc);
	if (!c || !wbuf) {
		fprintf(stderr, "process %d: connect = %d (%s)\n", me, rc, h_code(rc));
		_exit(EX_CONNECT);
	}
	rbuf = me % 2 ? lunar_alloc(c, MAX_LEN) : malloc(MAX_LEN);
	if (!rbuf)
		_exit(EX_CONNECT);
	rc = put_mine(c, me, wbuf);
	if (rc)
		_exit(rc);
	if (write(done_fd, "P", 1) != 1)
		_exit(EX_SIGNAL);
	/* The parent closes the go pipe once every process has written. */
	if (read(go_fd, &b, 1) != 0)
		_exit(EX_WAIT);
	rc = read_theirs(c, me, (me + 1) % NPROC, rbuf);
	if (!rc)
		rc = read_theirs(c, me, (me + 7) % NPROC, rbuf);
	lunar_close(c);
	_exit(rc);
}

/* Wait for n bytes on fd until deadline; how many came. */
static int gather(int fd, int n, uint64_t deadline)
{
	int got = 0;
	char b[NPROC];

	while (got < n && h_now_ms() < deadline) {
		struct pollfd p = {fd, POLLIN, 0};
		ssize_t r;

		if (poll(&p, 1, (int)(deadline - h_now_ms())) <= 0)
			continue;
		r = read(fd, b, sizeof(b));
		if (r <= 0)
			break;
		got += (int)r;
	}
	return got;
}

static void test_multiproc_processes_see_each_other(void **state)
{
	pid_t pids[NPROC];
	int status[NPROC], done[2], go[2], wrote, ok = 0;
	uint64_t t0 = h_now_ms(), t_put, deadline;

	(void)state;
	H_ASSERT(pipe2(done, O_CLOEXEC) == 0 && pipe2(go, O_CLOEXEC) == 0);
	fflush(NULL);
	for (int i = 0; i < NPROC; i++) {
		pids[i] = fork();
		H_ASSERT(pids[i] >= 0);
		if (pids[i] == 0) {
			close(done[0]);
			close(go[1]);
			child_main(i, done[1], go[0]);
		}
	}
	close(done[1]);
	close(go[0]);
	wrote = gather(done[0], NPROC, t0 + PHASE_MS);
	t_put = h_now_ms();
	close(go[1]); /* go */
	close(done[0]);
	deadline = h_now_ms() + PHASE_MS;
	for (int i = 0; i < NPROC; i++) {
		status[i] = -1;
		while (h_now_ms() < deadline) {
			pid_t r = waitpid(pids[i], &status[i], WNOHANG);

			if (r == pids[i])
				break;
			status[i] = -1;
			h_sleep_ms(10);
		}
		if (status[i] == -1) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
		}
		ok += status[i] != -1 && WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0;
	}
	print_message("%d processes: %d wrote %d keys each in %llu ms; %d read 2x%d keys of "
		      "others and exited 0; %llu ms in all\n",
		      NPROC, wrote, NKEYS, (unsigned long long)(t_put - t0), ok, NKEYS,
		      (unsigned long long)(h_now_ms() - t0));
	H_ASSERT_MSG(wrote == NPROC, "only %d of %d processes wrote their keys", wrote, NPROC);
	for (int i = 0; i < NPROC; i++) {
		H_ASSERT_MSG(status[i] != -1, "process %d still ran after %d ms (killed)", i,
			     PHASE_MS);
		H_ASSERT_MSG(WIFEXITED(status[i]) && WEXITSTATUS(status[i]) == 0,
			     "process %d: status 0x%x (exit %d, see stderr)", i, status[i],
			     WIFEXITED(status[i]) ? WEXITSTATUS(status[i]) : -1);
	}
}

LUNAR_TEST_MAIN(setup, h_teardown, test_multiproc_processes_see_each_other)
