/*
 * test_uds.c - pathname UNIX sockets with descriptor passing: listen with a
 * mode, never over a live listener or a file that is no socket, removal of
 * the listener's own file only, connect, whole messages with SCM_RIGHTS
 * descriptors, the receive deadline, peer hang-up, and extra descriptors
 * closed. Each case works in its own temp directory and removes it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "uds.h"

struct uds_fixture {
	char dir[64];
	char path[128];
	int lfd; /* listening socket */
	int cli; /* connected client end */
	int srv; /* accepted server end */
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

static int fd_is_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static int fd_cloexec(int fd)
{
	return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

static int setup_dir(void **state)
{
	struct uds_fixture *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/lunar-test-uds-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof(f->path), "%s/proxy.sock", f->dir);
	f->lfd = f->cli = f->srv = -1;
	*state = f;
	return 0;
}

/* A listening socket and one connected pair. */
static int setup_pair(void **state)
{
	struct uds_fixture *f;

	if (setup_dir(state))
		return -1;
	f = *state;
	f->lfd = lc_uds_listen(f->path, 0600);
	if (f->lfd < 0)
		return -1;
	f->cli = lc_uds_connect(f->path, 0);
	if (f->cli < 0)
		return -1;
	/* The listener is non-blocking; a UNIX connect is queued at once. */
	f->srv = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	return f->srv < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	struct uds_fixture *f = *state;

	if (f->srv >= 0)
		close(f->srv);
	if (f->cli >= 0)
		close(f->cli);
	if (f->lfd >= 0)
		close(f->lfd);
	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void test_uds_listen_mode(void **state)
{
	struct uds_fixture *f = *state;
	static const unsigned modes[] = {0600, 0660, 0666, 0640};
	mode_t old = umask(0077); /* chmod, not the umask, decides */
	struct stat st;

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		int fd = lc_uds_listen(f->path, modes[i]);

		assert_true(fd >= 0);
		assert_true(fd_cloexec(fd));
		assert_int_equal(stat(f->path, &st), 0);
		assert_true(S_ISSOCK(st.st_mode));
		assert_int_equal(st.st_mode & 07777, modes[i]);
		close(fd);
	}
	umask(old);
}

static void test_uds_listen_replaces_stale(void **state)
{
	struct uds_fixture *f = *state;
	int a, b, c;

	/* A socket file left by a dead proxy is replaced. */
	a = lc_uds_listen(f->path, 0600);
	assert_true(a >= 0);
	close(a);
	b = lc_uds_listen(f->path, 0600);
	assert_true(b >= 0);
	c = lc_uds_connect(f->path, 0);
	assert_true(c >= 0);
	assert_true(fd_cloexec(c));
	close(c);
	close(b);
}

static void test_uds_listen_refuses_live(void **state)
{
	struct uds_fixture *f = *state;
	struct lc_uds_file file;
	struct stat st;
	int a, fd;

	/* A path a listener serves is not taken: it keeps its file. */
	a = lc_uds_listen_file(f->path, 0600, &file);
	assert_true(a >= 0);
	assert_int_equal(lc_uds_listen(f->path, 0600), -EADDRINUSE);
	assert_int_equal(stat(f->path, &st), 0);
	assert_true(st.st_dev == file.dev && st.st_ino == file.ino);
	close(a);
	/* Nor is a file that is not a socket. */
	unlink(f->path);
	fd = open(f->path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(lc_uds_listen(f->path, 0600), -EEXIST);
	assert_int_equal(stat(f->path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
}

static void test_uds_unlink_file_only_ours(void **state)
{
	struct uds_fixture *f = *state;
	struct lc_uds_file file;
	int a, b;

	a = lc_uds_listen_file(f->path, 0600, &file);
	assert_true(a >= 0);
	/* Replaced underneath: the new file stays. */
	assert_int_equal(unlink(f->path), 0);
	b = lc_uds_listen(f->path, 0600);
	assert_true(b >= 0);
	assert_int_equal(lc_uds_unlink_file(f->path, &file), -EEXIST);
	assert_int_equal(access(f->path, F_OK), 0);
	close(b);
	close(a);
	/* Our own file goes. */
	unlink(f->path);
	a = lc_uds_listen_file(f->path, 0600, &file);
	assert_true(a >= 0);
	assert_int_equal(lc_uds_unlink_file(f->path, &file), 0);
	assert_int_equal(access(f->path, F_OK), -1);
	assert_int_equal(lc_uds_unlink_file(f->path, &file), -ENOENT);
	close(a);
}

static void test_uds_connect_errors(void **state)
{
	struct uds_fixture *f = *state;
	char longpath[200];

	assert_int_equal(lc_uds_connect(f->path, 0), -ENOENT);
	memset(longpath, 'x', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(lc_uds_connect(longpath, 0), -ENAMETOOLONG);
	assert_int_equal(lc_uds_listen(longpath, 0600), -ENAMETOOLONG);
	/* A listener that went away: the file remains, nobody answers. */
	close(lc_uds_listen(f->path, 0600));
	assert_int_equal(lc_uds_connect(f->path, 0), -ECONNREFUSED);
}

/* A listener that stopped accepting, its backlog full: a connect with a
 * timeout gives up (-EAGAIN), it does not block for good. */
static void test_uds_connect_timeout(void **state)
{
	struct uds_fixture *f = *state;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), fds[4], n = 0, rc = 0;
	struct timespec t0, t1;

	assert_true(l >= 0);
	assert_true(strlen(f->path) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, f->path, strlen(f->path) + 1);
	assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(l, 0), 0);
	alarm(10); /* without the timeout the connect below never returns */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (n < 4 && (rc = lc_uds_connect(f->path, 200)) >= 0)
		fds[n++] = rc;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	alarm(0);
	assert_int_equal(rc, -EAGAIN);
	assert_true(n >= 1); /* the backlog took some */
	assert_true(t1.tv_sec - t0.tv_sec < 5);
	while (n--)
		close(fds[n]);
	close(l);
}

static void test_uds_pass_two_fds(void **state)
{
	struct uds_fixture *f = *state;
	char msg[32] = "hello with a pipe", got[32] = {0}, buf[8];
	int p[2], fds[LC_UDS_MAX_FDS] = {-1, -1, -1, -1};

	assert_int_equal(pipe(p), 0);
	assert_int_equal(lc_uds_send(f->cli, msg, sizeof(msg), p, 2), 0);
	/* The sender's copies may go: the receiver holds its own. */
	close(p[0]);
	close(p[1]);
	assert_int_equal(lc_uds_recv(f->srv, got, sizeof(got), fds, LC_UDS_MAX_FDS, 1000), 2);
	assert_memory_equal(got, msg, sizeof(msg));
	assert_true(fd_is_open(fds[0]) && fd_is_open(fds[1]));
	assert_true(fd_cloexec(fds[0]) && fd_cloexec(fds[1]));
	assert_int_equal(fds[2], -1);

	/* Order kept: [0] is the read end, [1] the write end. */
	assert_int_equal(write(fds[1], "ping", 4), 4);
	assert_int_equal(read(fds[0], buf, sizeof(buf)), 4);
	assert_memory_equal(buf, "ping", 4);
	close(fds[1]);
	assert_int_equal(read(fds[0], buf, sizeof(buf)), 0);
	close(fds[0]);
}

static void test_uds_no_fds(void **state)
{
	struct uds_fixture *f = *state;
	uint64_t out = 0x0123456789abcdefull, in = 0;

	assert_int_equal(lc_uds_send(f->cli, &out, sizeof(out), NULL, 0), 0);
	assert_int_equal(lc_uds_recv(f->srv, &in, sizeof(in), NULL, 0, 1000), 0);
	assert_true(in == out);
	/* And the other way. */
	assert_int_equal(lc_uds_send(f->srv, &out, sizeof(out), NULL, 0), 0);
	in = 0;
	assert_int_equal(lc_uds_recv(f->cli, &in, sizeof(in), NULL, 0, 1000), 0);
	assert_true(in == out);
}

static void test_uds_send_bad_count(void **state)
{
	struct uds_fixture *f = *state;
	int fds[LC_UDS_MAX_FDS + 1] = {0, 0, 0, 0, 0};
	char b = 'x';

	assert_int_equal(lc_uds_send(f->cli, &b, 1, fds, LC_UDS_MAX_FDS + 1), -EINVAL);
	assert_int_equal(lc_uds_send(f->cli, &b, 1, fds, -1), -EINVAL);
	/* Nothing was sent. */
	assert_int_equal(lc_uds_recv(f->srv, &b, 1, NULL, 0, 20), -ETIMEDOUT);
}

static void test_uds_recv_timeout(void **state)
{
	struct uds_fixture *f = *state;
	char buf[16];
	int64_t t0 = now_ms(), dt;

	assert_int_equal(lc_uds_recv(f->srv, buf, sizeof(buf), NULL, 0, 100), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_true(dt >= 90);
	assert_true(dt < 2000);
	/* Zero: no wait at all. */
	assert_int_equal(lc_uds_recv(f->srv, buf, sizeof(buf), NULL, 0, 0), -ETIMEDOUT);
}

static void test_uds_recv_timeout_partial_closes_fds(void **state)
{
	struct uds_fixture *f = *state;
	char buf[16];
	int p[2], fds[2] = {-1, -1};

	/* Half a message carrying the write end, then silence. */
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_int_equal(lc_uds_send(f->cli, "half", 4, &p[1], 1), 0);
	close(p[1]);
	assert_int_equal(lc_uds_recv(f->srv, buf, sizeof(buf), fds, 2, 100), -ETIMEDOUT);
	/* The received write end was closed: the pipe now reads EOF. */
	assert_int_equal(read(p[0], buf, sizeof(buf)), 0);
	close(p[0]);
}

struct dribble_arg {
	int sock;
	size_t len;
	long gap_ms;
};

static void *dribble(void *p)
{
	struct dribble_arg *a = p;

	for (size_t i = 0; i < a->len; i++) {
		if (lc_uds_send(a->sock, "d", 1, NULL, 0))
			break;
		sleep_ms(a->gap_ms);
	}
	return NULL;
}

static void test_uds_recv_deadline_whole_message(void **state)
{
	struct uds_fixture *f = *state;
	struct dribble_arg a = {f->cli, 40, 20};
	char buf[40];
	pthread_t t;
	int64_t t0, dt;

	/* A byte every 20 ms never lets one poll time out, but the message as a
	 * whole takes 800 ms: with a per-poll timeout the whole message would
	 * arrive (0); with one deadline the 200 ms timeout fires first. No upper
	 * bound on the time taken: a loaded machine may be late, never early. */
	assert_int_equal(pthread_create(&t, NULL, dribble, &a), 0);
	t0 = now_ms();
	assert_int_equal(lc_uds_recv(f->srv, buf, sizeof(buf), NULL, 0, 200), -ETIMEDOUT);
	dt = now_ms() - t0;
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(dt >= 190);
}

static void test_uds_message_in_pieces(void **state)
{
	struct uds_fixture *f = *state;
	char msg[100], got[100];
	int p[2], fds[2] = {-1, -1};

	for (size_t i = 0; i < sizeof(msg); i++)
		msg[i] = (char)i;
	assert_int_equal(pipe(p), 0);
	/* The descriptor rides on the second piece. */
	assert_int_equal(lc_uds_send(f->cli, msg, 30, NULL, 0), 0);
	assert_int_equal(lc_uds_send(f->cli, msg + 30, 70, &p[0], 1), 0);
	assert_int_equal(lc_uds_recv(f->srv, got, sizeof(got), fds, 2, 1000), 1);
	assert_memory_equal(got, msg, sizeof(msg));
	assert_int_equal(write(p[1], "z", 1), 1);
	assert_int_equal(read(fds[0], got, 1), 1);
	assert_int_equal(got[0], 'z');
	close(fds[0]);
	close(p[0]);
	close(p[1]);
}

static void test_uds_messages_keep_their_fds(void **state)
{
	struct uds_fixture *f = *state;
	int a[2], b[2], fds[4] = {-1, -1, -1, -1};
	uint32_t m1 = 1, m2 = 2, in = 0;
	char c;

	assert_int_equal(pipe(a), 0);
	assert_int_equal(pipe(b), 0);
	assert_int_equal(lc_uds_send(f->cli, &m1, sizeof(m1), &a[0], 1), 0);
	assert_int_equal(lc_uds_send(f->cli, &m2, sizeof(m2), &b[0], 1), 0);
	/* Each receive takes exactly its message and its descriptor. */
	assert_int_equal(lc_uds_recv(f->srv, &in, sizeof(in), fds, 4, 1000), 1);
	assert_int_equal(in, 1);
	assert_int_equal(lc_uds_recv(f->srv, &in, sizeof(in), fds + 1, 3, 1000), 1);
	assert_int_equal(in, 2);
	assert_int_equal(write(a[1], "A", 1), 1);
	assert_int_equal(write(b[1], "B", 1), 1);
	assert_int_equal(read(fds[0], &c, 1), 1);
	assert_int_equal(c, 'A');
	assert_int_equal(read(fds[1], &c, 1), 1);
	assert_int_equal(c, 'B');
	for (int i = 0; i < 2; i++) {
		close(a[i]);
		close(b[i]);
		close(fds[i]);
	}
}

static void test_uds_extra_fds_closed(void **state)
{
	struct uds_fixture *f = *state;
	int p[2], w[3], fds[1] = {-1};
	char b = 0, buf[4];

	/* Three copies of the write end; the receiver keeps one. */
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	w[0] = w[1] = w[2] = p[1];
	assert_int_equal(lc_uds_send(f->cli, "x", 1, w, 3), 0);
	close(p[1]);
	assert_int_equal(lc_uds_recv(f->srv, &b, 1, fds, 1, 1000), 1);
	assert_int_equal(b, 'x');
	/* Only the kept copy holds the pipe open. */
	assert_int_equal(read(p[0], buf, sizeof(buf)), -1);
	assert_int_equal(errno, EAGAIN);
	close(fds[0]);
	assert_int_equal(read(p[0], buf, sizeof(buf)), 0);

	/* maxfds 0: every descriptor closed. */
	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_int_equal(lc_uds_send(f->cli, "y", 1, &p[1], 1), 0);
	close(p[1]);
	assert_int_equal(lc_uds_recv(f->srv, &b, 1, NULL, 0, 1000), 0);
	assert_int_equal(b, 'y');
	assert_int_equal(read(p[0], buf, sizeof(buf)), 0);
	close(p[0]);
}

static void test_uds_peer_closed(void **state)
{
	struct uds_fixture *f = *state;
	char buf[16];

	close(f->cli);
	f->cli = -1;
	assert_int_equal(lc_uds_recv(f->srv, buf, sizeof(buf), NULL, 0, 1000), -ECONNRESET);
	/* Sending to a gone peer is an error, not SIGPIPE. */
	assert_int_equal(lc_uds_send(f->srv, "x", 1, NULL, 0), -EPIPE);
}

static void test_uds_peer_closed_mid_message(void **state)
{
	struct uds_fixture *f = *state;
	char buf[16];
	int p[2], fds[2] = {-1, -1};

	assert_int_equal(pipe2(p, O_NONBLOCK), 0);
	assert_int_equal(lc_uds_send(f->cli, "part", 4, &p[1], 1), 0);
	close(p[1]);
	close(f->cli);
	f->cli = -1;
	assert_int_equal(lc_uds_recv(f->srv, buf, sizeof(buf), fds, 2, 1000), -ECONNRESET);
	/* The descriptor that came with the first part was closed. */
	assert_int_equal(read(p[0], buf, sizeof(buf)), 0);
	close(p[0]);
}

static void test_uds_default_path(void **state)
{
	char buf[PATH_MAX], want[PATH_MAX];
	const char *old = getenv("XDG_RUNTIME_DIR");
	char *saved = old ? strdup(old) : NULL;

	if (geteuid() == 0) {
		setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
		lc_uds_default_path(buf, sizeof(buf));
		assert_string_equal(buf, "/run/lunar/proxy.sock");
	} else {
		setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1);
		lc_uds_default_path(buf, sizeof(buf));
		assert_string_equal(buf, "/run/user/1234/lunar/proxy.sock");
		setenv("XDG_RUNTIME_DIR", "", 1);
		lc_uds_default_path(buf, sizeof(buf));
		snprintf(want, sizeof(want), "/tmp/lunar-%u/proxy.sock", (unsigned)geteuid());
		assert_string_equal(buf, want);
		unsetenv("XDG_RUNTIME_DIR");
		lc_uds_default_path(buf, sizeof(buf));
		assert_string_equal(buf, want);
	}
	/* A small buffer is truncated, still terminated. */
	lc_uds_default_path(buf, 5);
	assert_int_equal(strlen(buf), 4);
	if (saved)
		setenv("XDG_RUNTIME_DIR", saved, 1);
	else
		unsetenv("XDG_RUNTIME_DIR");
	free(saved);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_uds_listen_mode, setup_dir, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_listen_replaces_stale, setup_dir, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_listen_refuses_live, setup_dir, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_unlink_file_only_ours, setup_dir, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_connect_errors, setup_dir, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_connect_timeout, setup_dir, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_pass_two_fds, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_no_fds, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_send_bad_count, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_recv_timeout, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_recv_timeout_partial_closes_fds, setup_pair,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_uds_recv_deadline_whole_message, setup_pair,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_uds_message_in_pieces, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_messages_keep_their_fds, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_extra_fds_closed, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_peer_closed, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_peer_closed_mid_message, setup_pair, teardown),
	    cmocka_unit_test_setup_teardown(test_uds_default_path, NULL, NULL),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
