/*
 * harness.h - what every integration test needs to run real lunar-master and
 * lunar-proxy processes on loopback: a temporary directory removed at the end,
 * free ports, child processes with their output in log files, readiness waits,
 * bounded stop/kill, and assertions that print the children's logs on failure.
 *
 * Everything here runs on the test's main thread (cmocka is not thread-safe,
 * and PR_SET_PDEATHSIG follows the thread that forked), except the pattern and
 * clock helpers, which any thread may call.
 */
#ifndef LUNAR_TESTS_INTEGRATION_HARNESS_H
#define LUNAR_TESTS_INTEGRATION_HARNESS_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "lunar.h"

/* h_sanitizer - the sanitizer the build has ($LUNAR_TEST_SANITIZER, set by
 * make asan and make tsan), or NULL. Any thread. */
const char *h_sanitizer(void);
/* A bound on a wait, 3 times longer under a sanitizer, whose build runs
 * several times slower: waits end on their event, the bound only fails. */
#define H_BOUND_MS(ms) (h_sanitizer() ? 3 * (ms) : (ms))
/* Bounds every readiness wait; a process not ready by then fails the test. */
#define H_READY_TIMEOUT_MS H_BOUND_MS(10000)
/* h_stop: SIGTERM, then SIGKILL after this long. */
#define H_STOP_GRACE_MS H_BOUND_MS(3000)
/* Default client timeout, so a lost reply fails a call instead of hanging. */
#define H_CLIENT_TIMEOUT_MS H_BOUND_MS(10000)
/* h_start_proxy's master_port for a proxy with --embedded-master. */
#define H_EMBEDDED 0

struct h_proc {
	char name[32];
	char log[PATH_MAX];
	pid_t pid;   /* 0 once reaped */
	int status;  /* waitpid status once reaped */
	int running; /* started and not yet reaped */
};

/*
 * h_init - create the temporary directory and install the clean-up handlers
 * (atexit, SIGINT, SIGTERM) that kill every child still running. Idempotent.
 * Returns 0 or -1 with a message on stderr.
 */
int h_init(void);
/*
 * h_cluster_key - the cluster key file every child proves (h_init makes one
 * per temporary directory and names it in $LUNAR_CLUSTER_KEY_FILE, which the
 * daemons and tools read), or NULL when the test set $LUNAR_TEST_KEYLESS
 * before h_init.
 */
const char *h_cluster_key(void);
/* h_keyless - for a test that hands out keys itself (or none): call before
 * h_init; the children then find no key unless the test names one. */
void h_keyless(void);
/* h_cleanup - kill every child still running, then remove the temporary
 * directory unless $LUNAR_TEST_KEEP is set. Safe to call twice. */
void h_cleanup(void);
/* h_tmpdir - the temporary directory (h_init must have succeeded). */
const char *h_tmpdir(void);
/* h_path - "<tmpdir>/<name>" in one of H_PATHS static buffers, reused
 * round-robin; copy it to keep it long. */
#define H_PATHS 16
const char *h_path(const char *name);
/* h_named_sock - "<tmpdir>/<name>.sock" into sock: a socket per test, so a
 * proxy that a failed test left running answers no later test. */
void h_named_sock(char sock[PATH_MAX], const char *name);
/* h_bin - "$BUILD/bin/<name>" ($BUILD defaults to "build"), static buffer. */
const char *h_bin(const char *name);
/*
 * h_failpoint_build - make every daemon the harness starts from now on the
 * failpoint build's ("$BUILD/failpoints", which `make failpoints` fills):
 * 0; or 77, with the reason printed, when its daemon (e.g. "lunar-proxy")
 * is not there. Call from main() before the tests run.
 */
int h_failpoint_build(const char *daemon);

/* h_free_port - a loopback TCP port free right now (bind :0, read, close),
 * and none of the last 1024 it returned in this process. Any thread. */
int h_free_port(void);

/*
 * h_spawn - fork and exec argv (argv[0] searched in $PATH if it has no '/'),
 * with stdin /dev/null and stdout+stderr appended to "<tmpdir>/<name>.log".
 * The child gets its own process group and dies with the test process
 * (PR_SET_PDEATHSIG). Returns a harness-owned slot, or NULL.
 */
struct h_proc *h_spawn(const char *name, char *const argv[]);
/* h_alive - 1 while the process runs; reaps it (non-blocking) when it ended. */
int h_alive(struct h_proc *p);
/* h_wait_exit - wait up to timeout_ms for the process to end by itself.
 * Returns its waitpid status, or -1 on timeout (the process keeps running). */
int h_wait_exit(struct h_proc *p, int timeout_ms);
/* h_stop - SIGTERM the process group, SIGKILL after H_STOP_GRACE_MS, always
 * reap. Returns the waitpid status (or the saved one if already reaped). */
int h_stop(struct h_proc *p);
/* h_kill - SIGKILL the process group and reap it. */
void h_kill(struct h_proc *p);
/* h_stop_all - h_stop every process still running. */
void h_stop_all(void);

/* h_dump_log - print the last bytes of p's log to stderr. */
void h_dump_log(const struct h_proc *p);
/* h_dump_logs - h_dump_log every process started so far. */
void h_dump_logs(void);

/* h_wait_tcp - wait until a TCP connect to 127.0.0.1:port succeeds while p
 * runs. 0 or -1 (with p's log printed). */
int h_wait_tcp(struct h_proc *p, int port, int timeout_ms);
/* What lunar-master logs once it serves RPC and HTTP (master/main.c). */
#define H_MASTER_READY "lunar-master: listening on tcp://"
/* h_log_has - whether p's log holds text since p's own start line (a
 * restarted process appends to the log of the one before it). */
int h_log_has(const struct h_proc *p, const char *text);
/* h_wait_log - wait until p's log, since p's start, holds text while p
 * runs. 0 or -1 (with p's log printed). */
int h_wait_log(struct h_proc *p, const char *text, int timeout_ms);
/* h_wait_proxy - wait until sockpath exists and lunar_connect + lunar_health
 * == 0 succeed while p runs. 0 or -1 (with p's log printed). */
int h_wait_proxy(struct h_proc *p, const char *sockpath, int timeout_ms);

/*
 * h_start_master - start "$BUILD/bin/lunar-master --listen 127.0.0.1 --port
 * port" plus the NULL-terminated extra arguments, and wait until it logs
 * that it serves RPC and HTTP and accepts TCP connections. The log is
 * "<name>.log". NULL on failure (log printed).
 */
struct h_proc *h_start_master(const char *name, int port, ...);
/*
 * h_cluster_master - for a group setup: h_init, then h_start_master("master")
 * on a free port (copied to *port) with the NULL-terminated extra
 * arguments. The master, or NULL on any failure.
 */
struct h_proc *h_cluster_master(int *port, ...);

/* h_proxy_pair - proxies "proxyA" and "proxyB" joined to the master on
 * port, each with a 64 MiB segment, on sockets a.sock and b.sock in the
 * temp dir (written to sock_a and sock_b): proxy A, or NULL if either did
 * not start. */
struct h_proc *h_proxy_pair(int port, char sock_a[PATH_MAX], char sock_b[PATH_MAX]);

/*
 * h_start_proxy - start lunar-proxy serving sockpath, joined to the master on
 * master_port, or with --embedded-master when master_port is H_EMBEDDED, plus
 * the NULL-terminated extra arguments ("--segment-size 64MiB" is added unless
 * the extras name a segment size), and wait until it serves clients.
 */
struct h_proc *h_start_proxy(const char *name, const char *sockpath, int master_port, ...);
/* A segment's name: "127.0.0.1:<data port>". */
#define H_SEG_NAME 32
/*
 * h_start_peer - h_start_proxy on a data port chosen here, so that the name
 * of the proxy's segment, copied into seg, is known to the test up front
 * (for preferred_segments). The extras must not name a data port.
 */
struct h_proc *h_start_peer(const char *name, const char *sockpath, int master_port,
			    char seg[H_SEG_NAME], ...);
/*
 * h_remote_pair - for a group setup: a master (h_cluster_master, no
 * extras, which runs h_init) and proxies
 * "proxyA", with no segment (every value its clients put lands on B), and
 * "proxyB", with a 64 MiB segment whose name goes to seg_b, joined to it,
 * on sockets a.sock and b.sock in the temp dir (written to sock_a and
 * sock_b), into *a and *b: 0, or -1 if one of them did not start.
 */
int h_remote_pair(char sock_a[PATH_MAX], char sock_b[PATH_MAX], char seg_b[H_SEG_NAME],
		  struct h_proc **a, struct h_proc **b);

/*
 * h_metric - the value of sample (name and labels, as /metrics writes it)
 * in daemon p's /metrics; fails the test when p does not answer or has no
 * such sample (harness_metrics.c).
 * h_rdma_expected - 1 when this run's proxies must move remote values over
 * RDMA: $LUNAR_TEST_RDMA is "1", as tests/vm/test_rdma_vm.sh sets it inside
 * its machine with soft-RoCE devices; else 0.
 * h_rdma_mark - proxy p's count of RDMA transfers that succeeded so far
 * (its /metrics) when h_rdma_expected, else 0 without asking.
 * h_rdma_check - when h_rdma_expected, fail the test unless p made at least
 * min RDMA transfers that succeeded since mark, a count h_rdma_mark gave;
 * else nothing.
 * h_rdma_redial - when h_rdma_expected, wait out the second in which an
 * engine whose RDMA set-up with a peer failed for want of an answer (a
 * stopped peer: after a failed transfer the engine sets up anew at once)
 * reaches that peer by TCP before it tries again (engine/rdma.c); else
 * nothing. For a test that checks RDMA after one of its peers was stopped.
 */
int64_t h_metric(const struct h_proc *p, const char *sample);
int h_rdma_expected(void);
/* h_rdma_wait_segment - when h_rdma_expected, wait (30 s at most) until
 * proxy p, which has a segment, logged it registered for RDMA: until then
 * it answers peers' RDMA set-ups "not yet" and they take TCP. 0, or -1
 * (with the reason on stderr); else 0 at once. h_start_proxy and
 * h_start_peer call it. */
int h_rdma_wait_segment(const struct h_proc *p);
int64_t h_rdma_mark(const struct h_proc *p);
void h_rdma_check(const struct h_proc *p, int64_t mark, int64_t min);
void h_rdma_redial(void);

/*
 * h_embedded_node - for a group setup: h_init, then a proxy with
 * --embedded-master and the NULL-terminated extra arguments (as for
 * h_start_proxy) serving <tmp>/proxy.sock (its path copied into sock), and,
 * when cl is not NULL, a client of it in *cl. The proxy, or NULL on any
 * failure. Undo with h_embedded_node_stop.
 */
struct h_proc *h_embedded_node(char sock[PATH_MAX], struct lunar_client **cl, ...);
/* h_embedded_node_stop - close *cl (when cl and *cl), then h_cleanup. */
void h_embedded_node_stop(struct lunar_client **cl);
/* h_setup, h_teardown - h_init and h_cleanup as cmocka fixtures (group or
 * test), for tests that start their daemons themselves. */
int h_setup(void **state);
int h_teardown(void **state);

/* h_client - connect to sockpath with H_CLIENT_TIMEOUT_MS; fails the
 * current test when it cannot. Close with lunar_close(). */
struct lunar_client *h_client(const char *sockpath);
/* h_client_try - as h_client with a chosen timeout; NULL on failure, *rc
 * (if not NULL) gets the code. */
struct lunar_client *h_client_try(const char *sockpath, unsigned timeout_ms, int *rc);
/* h_client_arena - as h_client with a chosen timeout and arena size
 * (lunar_opts.arena_bytes; 0: the proxy's default). */
struct lunar_client *h_client_arena(const char *sockpath, unsigned timeout_ms, size_t arena_bytes);

/* Clocks and sleeping; any thread. */
uint64_t h_now_ms(void);
void h_sleep_ms(unsigned ms);

/* Deterministic content: h_seed(key) names the pattern h_fill writes; any
 * thread. h_verify returns -1 when buf holds the pattern, else the offset of
 * the first wrong byte. */
uint64_t h_seed(const char *key);
void h_fill(void *buf, size_t len, uint64_t seed);
int64_t h_verify(const void *buf, size_t len, uint64_t seed);

/*
 * h_put_seeded - puts len bytes of seed's pattern (h_fill) under key through
 * c with cfg (NULL for the defaults), from a buffer of its own: lunar_put's
 * code. Fails the current test when the buffer cannot be had.
 */
int h_put_seeded(struct lunar_client *c, const char *key, size_t len, uint64_t seed,
		 const struct lunar_put_cfg *cfg);
/*
 * h_expect_seeded - gets key through c into a buffer of its own and fails the
 * current test unless it is exactly len bytes of seed's pattern.
 */
void h_expect_seeded(struct lunar_client *c, const char *key, size_t len, uint64_t seed);

/*
 * h_wait_health - wait up to timeout_ms until lunar_health(c) says want (0
 * ok, 1 proxy unreachable, 2 master unreachable or segment not mounted),
 * polling every 20 ms: the milliseconds it took. Fails the current test
 * with the last answer when it never does.
 */
uint64_t h_wait_health(struct lunar_client *c, int want, int timeout_ms);

/* h_code - lunar_strerror's name for a negative code, "-" otherwise. */
const char *h_code(int64_t v);

/*
 * Looking at a running process from outside through /proc (same uid); any
 * thread. h_pid_fd_count - entries of /proc/<pid>/fd, or -1.
 * h_pid_maps_count - lines of /proc/<pid>/maps containing needle, or -1.
 * h_pid_cpu_ms - utime + stime of /proc/<pid>/stat in milliseconds, or -1.
 * h_pid_minor_faults - minor page faults of /proc/<pid>/stat, or -1.
 * h_pid_dump_threads - print each thread's name, CPU milliseconds, wait
 * channel and syscall to stderr (which thread burned CPU when a test says
 * too much, or where a process that ignored SIGTERM waits: h_stop prints
 * it then, with the log's tail).
 */
int h_pid_fd_count(pid_t pid);
/* h_pid_fd_count_but_ports - h_pid_fd_count less pid's TCP connections
 * (not its listeners) on the local ports ports[0..nports): a proxy's HTTP
 * port's, which it closes a little after answering, and its data port's,
 * which peers keep in their pools. */
int h_pid_fd_count_but_ports(pid_t pid, const int *ports, int nports);
/* h_pid_dump_fds - print what each of pid's descriptors is to stderr. */
void h_pid_dump_fds(pid_t pid);
int h_pid_maps_count(pid_t pid, const char *needle);
/* h_app_memfd - an app-owned memfd of len bytes the way an engine makes one
 * for lunar_register: sealed against shrinking, mapped shared. *fd stays
 * open (registering needs a descriptor of it). Fails the test on error. */
uint8_t *h_app_memfd(const char *name, size_t len, int *fd);
int64_t h_pid_cpu_ms(pid_t pid);
/*
 * h_stop_group - SIGSTOP p's process group, then wait up to H_STOP_WAIT_MS
 * until every thread of p is stopped: kill returns before the signal takes
 * effect, and a thread that has not yet stopped may still serve a request.
 * 0, or -1 (p not running, or not stopped in time).
 */
#define H_STOP_WAIT_MS 2000
int h_stop_group(struct h_proc *p);
int64_t h_pid_minor_faults(pid_t pid);
void h_pid_dump_threads(pid_t pid);

/*
 * h_fork_ready - fork a child that runs child(ready_fd, arg), which must not
 * return, and wait up to H_READY_TIMEOUT_MS for it to write 'R' to
 * ready_fd. Returns the child's pid, with the pipe's read end in *rd (the
 * child may send more on it) or closed when rd is NULL; or -1, the child
 * killed and reaped and its status printed.
 */
pid_t h_fork_ready(void (*child)(int ready_fd, void *arg), void *arg, int *rd);

/*
 * h_run_as - run fn(arg) in a forked child as uid:gid, without supplementary
 * groups (as it is when uid:gid is ours already), and return what fn
 * returned (0..254, the child's exit status). -1 if the child could not
 * become uid:gid (said on stderr) or died of a signal.
 */
int h_run_as(uid_t uid, gid_t gid, int (*fn)(void *arg), void *arg);

/* Called by the assertion macros below: prints the logs once per failure. */
void h_on_fail(void);

/*
 * Assertions that print the children's logs before failing, since a failing
 * integration test is usually explained by a daemon's log, not by the test.
 */
#define H_ASSERT(cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			h_on_fail();                                                               \
			fail_msg("assertion failed: %s", #cond);                                   \
		}                                                                                  \
	} while (0)

#define H_ASSERT_MSG(cond, ...)                                                                    \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			h_on_fail();                                                               \
			fail_msg(__VA_ARGS__);                                                     \
		}                                                                                  \
	} while (0)

#define H_ASSERT_EQ(got, want)                                                                     \
	do {                                                                                       \
		int64_t h_got_ = (int64_t)(got);                                                   \
		int64_t h_want_ = (int64_t)(want);                                                 \
		if (h_got_ != h_want_) {                                                           \
			h_on_fail();                                                               \
			fail_msg("%s = %lld (%s), expected %lld (%s)", #got, (long long)h_got_,    \
				 h_code(h_got_), (long long)h_want_, h_code(h_want_));             \
		}                                                                                  \
	} while (0)

#endif /* LUNAR_TESTS_INTEGRATION_HARNESS_H */
