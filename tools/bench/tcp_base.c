/*
 * tcp_base.c - lunar-bench --tcp-baseline: what plain TCP does on this
 * machine, for remote puts and gets to be measured against. T client
 * threads, each with its own loopback connection to a server thread of this
 * process, make round trips in either direction: a get's, a 16-byte request
 * answered with SIZE bytes (figures tcp_*), and a put's, a 16-byte header
 * and SIZE bytes answered with 16 (tcp_put_*). The side that sends SIZE
 * bytes sends from a cold 256 MiB set, the other receives into another
 * (both walked in order, so no payload comes from the cache). 8 MiB
 * socket buffers, TCP_NODELAY. Two receive styles, one after the other:
 * blocking recv(MSG_WAITALL), and a busy-poll of recv(MSG_DONTWAIT) by the
 * side waiting for SIZE bytes and by the client waiting for its answer.
 * --server-cpus LIST runs the server threads on those CPUs (the clients stay
 * where the process runs), as two nodes would: on a small machine a server
 * woken onto its client's CPU takes turns with it instead of running beside.
 * --send says how the SIZE bytes go: copied by send (the default),
 * sendfile from a memfd holding the source set, or send with MSG_ZEROCOPY
 * (whose completions say how many the kernel copied after all), or by
 * io_uring (IORING_OP_SENDMSG, one at a time, waited for). Two more
 * put the work a Lunar put's sending side does before its send in front of
 * it, for the ceiling a put can reach in this placement: staged, a copy
 * taking the CRC32C into a buffer of the sender's, then the send from there
 * (the client's copy into its arena, then the proxy's send); crc, a CRC32C
 * pass over the bytes, then the send (a registered value's).
 */
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/errqueue.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench.h"
#include "clock.h"
#include "crc32c.h"

#define TB_SET	   (256ull << 20)
#define TB_SOCKBUF (8 << 20)
#define TB_MAX_T   64
#define TB_REQ	   16
#define TB_GET	   1u
#define TB_PUT	   2u

/* How the SIZE bytes are sent (--send). */
enum tb_send { TB_COPY, TB_SENDFILE, TB_ZEROCOPY, TB_STAGED, TB_CRC, TB_URING };
static const char *const tb_send_names[] = {"copy",   "sendfile", "zerocopy",
					    "staged", "crc",	  "uring"};

struct tb_run {
	uint64_t size, count, per; /* per: bytes of each set one thread walks */
	unsigned threads;
	int put; /* this run's direction: SIZE bytes in the request, not the answer */
	int busy;
	unsigned dirs; /* the directions to run: TB_GET | TB_PUT */
	int pin;       /* server threads on server_cpus */
	cpu_set_t server_cpus;
	enum tb_send send;
	int srcfd; /* TB_SENDFILE: the memfd src maps */
	unsigned char *src, *dst;
	unsigned char *stage; /* TB_STAGED: SIZE bytes a thread, reused as an arena's slot is */
	uint64_t *lat;	      /* count per thread, thread-major */
	int lfd;
};

struct tb_thread {
	struct tb_run *r;
	unsigned idx;
	int fd;
	int rc;
	uint64_t zc_sent, zc_copied; /* TB_ZEROCOPY: sends completed, of them copied */
	uint32_t crc;		     /* TB_STAGED, TB_CRC: kept, so no pass can be dropped */
	struct io_uring ring;	     /* TB_URING: the thread's, made at its first send */
	int has_ring;
};

static void tb_sockopts(const struct tb_run *r, int fd)
{
	int one = 1, buf = TB_SOCKBUF;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (r->send == TB_ZEROCOPY)
		setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one));
	/* FORCE beyond net.core.[rw]mem_max when allowed, else up to it. */
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof(buf)))
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof(buf)))
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

/* Receive len bytes: MSG_WAITALL, or spinning on MSG_DONTWAIT. */
static int tb_recv(int fd, void *buf, size_t len, int busy)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n =
		    recv(fd, (char *)buf + got, len - got, busy ? MSG_DONTWAIT : MSG_WAITALL);

		if (n > 0)
			got += (size_t)n;
		else if (n == 0 || (errno != EAGAIN && errno != EINTR))
			return -1;
	}
	return 0;
}

/* Advance the n pieces at *v past sent bytes. */
static void tb_advance(struct iovec **v, int *n, ssize_t sent)
{
	for (; sent > 0 && *n; ++*v, --*n) {
		if ((size_t)sent < (*v)->iov_len) {
			(*v)->iov_base = (char *)(*v)->iov_base + sent;
			(*v)->iov_len -= (size_t)sent;
			break;
		}
		sent -= (ssize_t)(*v)->iov_len;
	}
}

/* Send the n pieces of v as one stream (v is advanced past what went):
 * a header and its payload leave in one call. */
static int tb_sendv(int fd, struct iovec *v, int n)
{
	while (n) {
		struct msghdr msg = {.msg_iov = v, .msg_iovlen = (size_t)n};
		ssize_t sent = sendmsg(fd, &msg, MSG_NOSIGNAL);

		if (sent < 0 && errno != EINTR)
			return -1;
		tb_advance(&v, &n, sent);
	}
	return 0;
}

/* tb_sendv through t's io_uring: each sendmsg submitted and waited for. */
static int tb_uring_sendv(struct tb_thread *t, struct iovec *v, int n)
{
	if (!t->has_ring && io_uring_queue_init(4, &t->ring, 0))
		return -1;
	t->has_ring = 1;
	while (n) {
		struct msghdr msg = {.msg_iov = v, .msg_iovlen = (size_t)n};
		struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
		struct io_uring_cqe *cqe;
		int sent;

		io_uring_prep_sendmsg(sqe, t->fd, &msg, MSG_NOSIGNAL);
		if (io_uring_submit_and_wait(&t->ring, 1) < 0 || io_uring_wait_cqe(&t->ring, &cqe))
			return -1;
		sent = cqe->res;
		io_uring_cqe_seen(&t->ring, cqe);
		if (sent < 0 && sent != -EINTR)
			return -1;
		tb_advance(&v, &n, sent);
	}
	return 0;
}

static int tb_send(int fd, const void *buf, size_t len)
{
	struct iovec v = {(void *)buf, len};

	return tb_sendv(fd, &v, 1);
}

/* Count the MSG_ZEROCOPY completions t's socket has queued so far. */
static void tb_reap(struct tb_thread *t)
{
	char ctl[CMSG_SPACE(sizeof(struct sock_extended_err))];
	struct msghdr msg = {.msg_control = ctl, .msg_controllen = sizeof(ctl)};

	while (recvmsg(t->fd, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) >= 0) {
		struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
		const struct sock_extended_err *e;

		if (c && c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) {
			e = (const struct sock_extended_err *)CMSG_DATA(c);
			if (e->ee_origin == SO_EE_ORIGIN_ZEROCOPY) {
				t->zc_sent += e->ee_data - e->ee_info + 1u;
				if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
					t->zc_copied += e->ee_data - e->ee_info + 1u;
			}
		}
		msg.msg_controllen = sizeof(ctl);
	}
}

/* Send the SIZE bytes at off in t's source set as --send says, after
 * head (len hlen, none when 0) in the same stream. */
static int tb_send_payload(struct tb_thread *t, const void *head, size_t hlen, uint64_t off)
{
	const struct tb_run *r = t->r;
	struct iovec v[2] = {{(void *)head, hlen}, {r->src + off, r->size}};
	off_t foff = (off_t)off;
	size_t left = r->size;

	if (r->send == TB_STAGED) {
		v[1].iov_base = r->stage + (uint64_t)t->idx * r->size;
		t->crc ^= lc_copy_crc32c_cached(v[1].iov_base, r->src + off, r->size, 0);
	} else if (r->send == TB_CRC) {
		t->crc ^= lc_crc32c(0, r->src + off, r->size);
	}
	if (r->send == TB_COPY || r->send == TB_STAGED || r->send == TB_CRC)
		return tb_sendv(t->fd, hlen ? v : v + 1, hlen ? 2 : 1);
	if (r->send == TB_URING)
		return tb_uring_sendv(t, hlen ? v : v + 1, hlen ? 2 : 1);
	if (hlen && send(t->fd, head, hlen, MSG_MORE | MSG_NOSIGNAL) != (ssize_t)hlen)
		return -1;
	while (left) {
		ssize_t n = r->send == TB_SENDFILE ? sendfile(t->fd, r->srcfd, &foff, left)
						   : send(t->fd, r->src + off + (r->size - left),
							  left, MSG_ZEROCOPY | MSG_NOSIGNAL);

		if (n > 0)
			left -= (size_t)n;
		else if (r->send == TB_ZEROCOPY && n < 0 && errno == ENOBUFS)
			tb_reap(t); /* completions pending past the socket's allowance */
		else if (n < 0 && errno != EINTR)
			return -1;
	}
	return 0;
}

/* The server side of one connection: answer each request, from the source
 * set (a get's), or with the header once its payload is in the destination
 * set (a put's). */
static void *tb_serve(void *arg)
{
	struct tb_thread *t = arg;
	const struct tb_run *r = t->r;
	uint64_t req[2], base = (uint64_t)t->idx * r->per;

	while (!tb_recv(t->fd, req, TB_REQ, 0)) {
		if (req[0] > r->per - r->size)
			break;
		if (r->put ? tb_recv(t->fd, r->dst + base + req[0], r->size, r->busy) ||
				 tb_send(t->fd, req, TB_REQ)
			   : tb_send_payload(t, NULL, 0, base + req[0]))
			break;
		if (r->send == TB_ZEROCOPY)
			tb_reap(t);
	}
	if (r->send == TB_ZEROCOPY)
		tb_reap(t);
	close(t->fd);
	return NULL;
}

/* One round trip of the client's, either direction, at off in its sets. */
static int tb_trip(struct tb_thread *t, uint64_t off)
{
	const struct tb_run *r = t->r;
	uint64_t req[2] = {off, 0}, base = (uint64_t)t->idx * r->per;

	if (!r->put)
		return tb_send(t->fd, req, TB_REQ) ||
		       tb_recv(t->fd, r->dst + base + off, r->size, r->busy);
	if (tb_send_payload(t, req, TB_REQ, base + off) || tb_recv(t->fd, req, TB_REQ, r->busy))
		return -1;
	if (r->send == TB_ZEROCOPY)
		tb_reap(t); /* answered: the receiver has the bytes, their buffers are back */
	return 0;
}

static void *tb_client(void *arg)
{
	struct tb_thread *t = arg;
	const struct tb_run *r = t->r;
	uint64_t off = 0;

	for (uint64_t i = 0; i < r->count; i++) {
		uint64_t t0 = lc_now_ns();

		if (tb_trip(t, off)) {
			t->rc = -1;
			break;
		}
		r->lat[(uint64_t)t->idx * r->count + i] = lc_now_ns() - t0;
		off += r->size;
		if (off > r->per - r->size)
			off = 0;
	}
	return NULL;
}

/* Connect T clients to T server threads on a fresh loopback listener. */
static int tb_connect(struct tb_run *r, struct tb_thread *cl, struct tb_thread *sv)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(sa);

	r->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (r->lfd < 0 || bind(r->lfd, (struct sockaddr *)&sa, len) || listen(r->lfd, TB_MAX_T) ||
	    getsockname(r->lfd, (struct sockaddr *)&sa, &len))
		return -1;
	for (unsigned i = 0; i < r->threads; i++) {
		cl[i] = (struct tb_thread){.r = r, .idx = i};
		sv[i] = (struct tb_thread){.r = r, .idx = i};
		cl[i].fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (cl[i].fd < 0)
			return -1;
		tb_sockopts(r, cl[i].fd);
		if (connect(cl[i].fd, (struct sockaddr *)&sa, len))
			return -1;
		sv[i].fd = accept(r->lfd, NULL, NULL);
		if (sv[i].fd < 0)
			return -1;
		tb_sockopts(r, sv[i].fd);
	}
	close(r->lfd);
	return 0;
}

static int tb_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* One timed run of one direction and style; prints its figures. */
static int tb_run_style(struct tb_run *r)
{
	struct tb_thread cl[TB_MAX_T], sv[TB_MAX_T];
	pthread_t ct[TB_MAX_T], st[TB_MAX_T];
	const char *dir = r->put ? "put_" : "", *style = r->busy ? "busypoll" : "blocking";
	uint64_t t0, ns, n = r->count * r->threads, zc_sent = 0, zc_copied = 0;
	int rc = 0;

	if (tb_connect(r, cl, sv)) {
		perror("lunar-bench --tcp-baseline: loopback connection");
		return BENCH_EXIT_FAIL;
	}
	pthread_attr_t sa;

	pthread_attr_init(&sa);
	if (r->pin && pthread_attr_setaffinity_np(&sa, sizeof(r->server_cpus), &r->server_cpus)) {
		fprintf(stderr, "lunar-bench --tcp-baseline: cannot place the server threads\n");
		return BENCH_EXIT_FAIL;
	}
	for (unsigned i = 0; i < r->threads; i++)
		pthread_create(&st[i], &sa, tb_serve, &sv[i]);
	pthread_attr_destroy(&sa);
	t0 = lc_now_ns();
	for (unsigned i = 0; i < r->threads; i++)
		pthread_create(&ct[i], NULL, tb_client, &cl[i]);
	for (unsigned i = 0; i < r->threads; i++) {
		pthread_join(ct[i], NULL);
		rc |= cl[i].rc;
	}
	ns = lc_now_ns() - t0;
	for (unsigned i = 0; i < r->threads; i++) {
		shutdown(cl[i].fd, SHUT_WR); /* the server sees EOF */
		pthread_join(st[i], NULL);
		if (r->put && r->send == TB_ZEROCOPY)
			tb_reap(&cl[i]);
		if (cl[i].has_ring)
			io_uring_queue_exit(&cl[i].ring);
		if (sv[i].has_ring)
			io_uring_queue_exit(&sv[i].ring);
		zc_sent += r->put ? cl[i].zc_sent : sv[i].zc_sent;
		zc_copied += r->put ? cl[i].zc_copied : sv[i].zc_copied;
		close(cl[i].fd);
	}
	if (rc)
		return BENCH_EXIT_FAIL;
	qsort(r->lat, n, sizeof(*r->lat), tb_cmp);
	printf("tcp_%s%s_gbps=%.3f\n", dir, style, (double)(r->size * n) / (double)ns);
	printf("tcp_%s%s_ops_per_s=%.0f\n", dir, style, (double)n * 1e9 / (double)ns);
	printf("tcp_%s%s_p50_us=%.2f\n", dir, style, bench_pct_us(r->lat, n, 50));
	printf("tcp_%s%s_p99_us=%.2f\n", dir, style, bench_pct_us(r->lat, n, 99));
	if (r->send == TB_ZEROCOPY) {
		printf("tcp_%s%s_zerocopy_sent=%llu\n", dir, style, (unsigned long long)zc_sent);
		printf("tcp_%s%s_zerocopy_copied=%llu\n", dir, style,
		       (unsigned long long)zc_copied);
	}
	return BENCH_EXIT_OK;
}

/* --send copy|sendfile|zerocopy|staged|crc|uring */
static int tb_parse_send(const char *v, enum tb_send *send)
{
	for (unsigned i = 0; i < sizeof(tb_send_names) / sizeof(*tb_send_names); i++)
		if (!strcmp(v, tb_send_names[i])) {
			*send = (enum tb_send)i;
			return 0;
		}
	return bench_usage_error(
	    "--send is copy, sendfile, zerocopy, staged, crc or uring; not '%s'", v);
}

/* --direction get|put|both */
static int tb_parse_dirs(const char *v, unsigned *dirs)
{
	if (!strcmp(v, "get"))
		*dirs = TB_GET;
	else if (!strcmp(v, "put"))
		*dirs = TB_PUT;
	else if (!strcmp(v, "both"))
		*dirs = TB_GET | TB_PUT;
	else
		return bench_usage_error("--direction is get, put or both; not '%s'", v);
	return 0;
}

static int tb_parse(struct tb_run *r, int argc, char **argv)
{
	uint64_t x;
	int missing = 0, rc;

	for (int i = 1; i < argc; i++) {
		const char *v;

		if (!strcmp(argv[i], "--tcp-baseline"))
			continue;
		if ((v = bench_opt_value(argc, argv, &i, "--size", &missing)))
			rc = bench_parse_num("--size", v, 1, 1, TB_SET / TB_MAX_T, &r->size);
		else if ((v = bench_opt_value(argc, argv, &i, "--count", &missing)))
			rc = bench_parse_num("--count", v, 0, 1, 100000000, &r->count);
		else if ((v = bench_opt_value(argc, argv, &i, "--threads", &missing))) {
			rc = bench_parse_num("--threads", v, 0, 1, TB_MAX_T, &x);
			r->threads = (unsigned)x;
		} else if ((v = bench_opt_value(argc, argv, &i, "--server-cpus", &missing))) {
			rc = bench_parse_cpus("--server-cpus", v, &r->server_cpus);
			r->pin = 1;
		} else if ((v = bench_opt_value(argc, argv, &i, "--direction", &missing)))
			rc = tb_parse_dirs(v, &r->dirs);
		else if ((v = bench_opt_value(argc, argv, &i, "--send", &missing)))
			rc = tb_parse_send(v, &r->send);
		else
			return bench_usage_error("--tcp-baseline takes --size, --count, --threads, "
						 "--server-cpus, --direction, --send; not '%s'",
						 argv[i]);
		if (missing)
			return bench_usage_error("option %s needs a value", argv[i]);
		if (rc)
			return rc;
	}
	return 0;
}

int bench_tcp_main(int argc, char **argv)
{
	struct tb_run r = {.size = 1 << 20, .count = 0, .threads = 1, .dirs = TB_GET | TB_PUT};
	int rc = tb_parse(&r, argc, argv);

	if (rc)
		return rc;
	r.per = TB_SET / r.threads / r.size * r.size;
	if (!r.count) /* ~ 2 GiB a style, at least 2000 answers */
		r.count = (2ull << 30) / r.size / r.threads > 2000
			      ? (2ull << 30) / r.size / r.threads
			      : 2000;
	/* sendfile needs a file under the source set: a memfd, mapped. */
	r.srcfd = r.send == TB_SENDFILE ? memfd_create("lunar-bench-tcp", MFD_CLOEXEC) : -1;
	if (r.send == TB_SENDFILE && (r.srcfd < 0 || ftruncate(r.srcfd, TB_SET))) {
		perror("lunar-bench --tcp-baseline: memfd for --send sendfile");
		return BENCH_EXIT_FAIL;
	}
	r.src = r.srcfd >= 0 ? mmap(NULL, TB_SET, PROT_READ | PROT_WRITE, MAP_SHARED, r.srcfd, 0)
			     : mmap(NULL, TB_SET, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	r.dst = mmap(NULL, TB_SET, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	r.lat = calloc(r.count * r.threads, sizeof(*r.lat));
	r.stage = r.send == TB_STAGED ? malloc(r.size * r.threads) : NULL;
	if (r.src == MAP_FAILED || r.dst == MAP_FAILED || !r.lat ||
	    (r.send == TB_STAGED && !r.stage)) {
		fprintf(stderr, "lunar-bench --tcp-baseline: out of memory\n");
		return BENCH_EXIT_FAIL;
	}
	memset(r.src, 0x5a, TB_SET); /* resident, so faults are not measured */
	memset(r.dst, 0xa5, TB_SET);
	if (r.stage)
		memset(r.stage, 0, r.size * r.threads);
	printf("tcp_size=%llu\ntcp_threads=%u\ntcp_count=%llu\ntcp_send=%s\n",
	       (unsigned long long)r.size, r.threads, (unsigned long long)r.count,
	       tb_send_names[r.send]);
	for (r.put = 0; r.put < 2 && !rc; r.put++) {
		if (!(r.dirs & (r.put ? TB_PUT : TB_GET)))
			continue;
		for (r.busy = 0; r.busy < 2 && !rc; r.busy++)
			rc = tb_run_style(&r);
	}
	munmap(r.src, TB_SET);
	munmap(r.dst, TB_SET);
	if (r.srcfd >= 0)
		close(r.srcfd);
	free(r.lat);
	free(r.stage);
	return rc;
}
