/*
 * eng_int.h - engine internals shared by the files of engine/: the engine
 * object, the transport ops table, the TCP wire format, scatter/gather
 * cursors with deadlines, endpoint addresses, the server and the client
 * connection pool. Never included from outside engine/.
 *
 * Errors: the socket, address and wire helpers here return -errno (or a
 * wire status where said); the transports and engine.c turn them into the
 * LUNAR_ERR_* codes of engine.h once, before an engine.h call returns.
 */
#ifndef LUNAR_ENGINE_ENG_INT_H
#define LUNAR_ENGINE_ENG_INT_H

#include "engine.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define ENG_LOG		       "engine"
#define ENG_ENDPOINT_MAX       300 /* "host:port", host up to NI_MAXHOST-ish */
#define ENG_DEFAULT_TIMEOUT_MS 5000
#define ENG_DEFAULT_CONNS      8
#define ENG_NO_DEADLINE	       UINT64_MAX /* wait without a time limit */

/*
 * TCP wire protocol, version 1. All integers little-endian, headers fixed
 * size, no padding. One request in flight per connection; a client reuses a
 * connection for the next request once the reply has been read in full.
 *
 *   request (32 bytes)                 reply (24 bytes)
 *   u32 magic   ENG_WIRE_REQ_MAGIC     u32 magic   ENG_WIRE_REP_MAGIC
 *   u16 version ENG_WIRE_VERSION       i32 status  0 or a LUNAR_ERR_* code
 *   u16 op      ENG_OP_READ/WRITE      u64 id      the request's id
 *   u64 offset  into the segment       u64 length  the request's length
 *   u64 length  bytes, > 0
 *   u64 id      chosen by the client
 *
 * WRITE: the request is followed by `length` payload bytes, which the server
 * stores at [offset, offset + length) of its segment, then it replies.
 * READ: the server replies, and on status 0 the reply is followed by
 * `length` bytes of the segment.
 * READ_DISK: offset is the length of the name that follows the request,
 * "tenant\0key" (no trailing NUL, at most ENG_DISK_NAME_MAX bytes); length
 * is the most value bytes the client takes (<= ENG_DISK_READ_MAX). The
 * server reads the value from its disk tier and replies with status 0 and
 * reply length = the value's length, followed by that many bytes; or with
 * a disk code (OBJECT_NOT_FOUND, CHECKSUM_MISMATCH, ...) and length 0,
 * after which the connection stays usable.
 * The server refuses (status != 0) a bad magic, version or op, a length of 0,
 * and a range not inside its segment; after a refusal it closes the
 * connection (a refused WRITE's payload is never read). A client drops a
 * connection on any error, so a connection is either idle between requests
 * or in the middle of exactly one.
 */
#define ENG_WIRE_REQ_MAGIC 0x51524e4cu /* "LNRQ" */
#define ENG_WIRE_REP_MAGIC 0x50524e4cu /* "LNRP" */
#define ENG_WIRE_VERSION   1
#define ENG_WIRE_REQ_SIZE  32
#define ENG_WIRE_REP_SIZE  24

enum eng_wire_op {
	ENG_OP_READ = 1,
	ENG_OP_WRITE = 2,
	ENG_OP_READ_DISK = 3,
};
#define ENG_DISK_NAME_MAX (64 + 1 + 4096)

struct eng_wire_req {
	uint32_t magic;
	uint16_t version;
	uint16_t op;
	uint64_t offset;
	uint64_t length;
	uint64_t id;
};

struct eng_wire_rep {
	uint32_t magic;
	int32_t status;
	uint64_t id;
	uint64_t length;
};

static_assert(sizeof(struct eng_wire_req) == ENG_WIRE_REQ_SIZE, "request header size");
static_assert(sizeof(struct eng_wire_rep) == ENG_WIRE_REP_SIZE, "reply header size");
static_assert(offsetof(struct eng_wire_req, id) == 24, "request header layout");
static_assert(offsetof(struct eng_wire_rep, length) == 16, "reply header layout");

/* eng_wire_req_encode/_decode, eng_wire_rep_encode/_decode - host order <->
 * the little-endian bytes on the wire; in place, any thread. */
void eng_wire_req_encode(struct eng_wire_req *r);
void eng_wire_req_decode(struct eng_wire_req *r);
void eng_wire_rep_encode(struct eng_wire_rep *r);
void eng_wire_rep_decode(struct eng_wire_rep *r);
/*
 * eng_wire_req_check - whether a decoded request may be served on a segment
 * of seg_size bytes: 0, or the status to refuse it with. The range check
 * cannot overflow whatever offset and length hold.
 */
int eng_wire_req_check(const struct eng_wire_req *r, uint64_t seg_size);

/*
 * A position in a scatter list and the bytes still to move from there: the
 * I/O helpers advance it, so a partial transfer resumes where it stopped. The
 * iovec array itself is never written.
 */
struct eng_iovc {
	const struct iovec *iov;
	int cnt;
	int idx;       /* current entry */
	size_t off;    /* bytes of iov[idx] already moved */
	uint64_t left; /* bytes still to move */
};

/* eng_iovc_init - a cursor over len bytes of iov starting skip bytes in.
 * The caller makes sure skip + len lies inside iov. */
void eng_iovc_init(struct eng_iovc *c, const struct iovec *iov, int cnt, uint64_t skip,
		   uint64_t len);
/*
 * eng_io_wait - wait until fd is ready for poll() events or deadline_ns
 * passes. Errors and hang-ups count as ready: the next syscall reports them.
 * Returns 0, -ETIMEDOUT or -errno.
 */
int eng_io_wait(int fd, short events, uint64_t deadline_ns);
/*
 * eng_io_send - send all c->left bytes on the stream socket fd (blocking or
 * not), waiting for room at most until deadline_ns (lc_now_ns() clock,
 * ENG_NO_DEADLINE: forever). flags is added to each sendmsg (MSG_MORE).
 * Never raises SIGPIPE. Returns 0, -ETIMEDOUT or -errno; c shows progress.
 */
int eng_io_send(int fd, struct eng_iovc *c, int flags, uint64_t deadline_ns);
/*
 * eng_io_recv - receive exactly c->left bytes into the cursor's memory,
 * same deadline rules. Returns 0, -ECONNRESET on EOF, -ETIMEDOUT or -errno.
 */
int eng_io_recv(int fd, struct eng_iovc *c, uint64_t deadline_ns);

/*
 * eng_addr_resolve - the first address of "host:port" (IPv4 dotted, a host
 * name, or "[v6]:port") into *sa / *len. Blocks on DNS. Returns 0 or -EINVAL
 * (bad text) / -EHOSTUNREACH (name did not resolve).
 */
int eng_addr_resolve(const char *endpoint, struct sockaddr_storage *sa, socklen_t *len);
/* eng_addr_format - "host:port" ("[host]:port" for an IPv6 literal) into buf. */
int eng_addr_format(char *buf, size_t cap, const char *host, uint16_t port);
/* eng_sock_nodelay - TCP_NODELAY on fd; returns 0 or -errno. */
int eng_sock_nodelay(int fd);

/*
 * eng_disk_serve - answer the READ_DISK request req (decoded, its name not
 * read yet) on fd: 0 to go on with the next request, < 0 to close. Data-port
 * thread (disk.c).
 */
int eng_disk_serve(struct eng_engine *e, int fd, const struct eng_wire_req *req,
		   uint64_t deadline_ns);
/* eng_send_rep - send one reply header; 0 or -errno (server.c). */
int eng_send_rep(int fd, int32_t status, uint64_t id, uint64_t length, int flags,
		 uint64_t deadline_ns);

/* The data port: a listener thread and a thread per accepted connection. */
struct eng_srv_conn;
struct eng_server {
	int lfd;
	int done_fd; /* eventfd: a connection thread finished, the listener joins it */
	pthread_t listener;
	atomic_int stopping;
	struct eng_srv_conn *conns; /* only the listener thread touches it while running */
};

/* The client side: a hash of peers, each with its idle connections. */
#define ENG_POOL_BUCKETS 64
struct eng_peer;
struct eng_pool {
	pthread_mutex_t lock;
	struct eng_peer *bucket[ENG_POOL_BUCKETS];
	unsigned max_idle;
};

struct eng_engine {
	struct eng_config cfg; /* the caller's, with defaults filled in; cfg.host = host */
	char host[ENG_ENDPOINT_MAX];
	char endpoint[ENG_ENDPOINT_MAX]; /* set before the listener starts, then read-only */
	uint64_t timeout_ns;
	atomic_uint_fast64_t next_id;
	struct eng_server srv;
	struct eng_pool pool;
};

/*
 * eng_server_start - bind e->host and the configured port (0: the kernel
 * picks), listen, fill e->endpoint with the bound address, start the listener
 * thread. Returns 0 or -errno.
 * eng_server_stop - shut the listener and every live connection down, join
 * all their threads, close. Only after a successful start; once.
 */
int eng_server_start(struct eng_engine *e);
void eng_server_stop(struct eng_engine *e);

/* eng_pool_init/_fini - an empty pool keeping up to max_idle idle
 * connections per peer; fini closes them. Not concurrent with take/put. */
int eng_pool_init(struct eng_pool *p, unsigned max_idle);
void eng_pool_fini(struct eng_pool *p);
/*
 * eng_pool_take - a connection to endpoint: an idle pooled one (*pooled = 1)
 * or a new one dialled before deadline_ns (*pooled = 0). Returns the fd,
 * owned by the caller, or -errno. Any thread; blocks on DNS the first time a
 * peer is seen, and on connect.
 */
int eng_pool_take(struct eng_pool *p, const char *endpoint, uint64_t deadline_ns, int *pooled);
/* eng_pool_flush - close every idle connection to endpoint (its peer went
 * away). Any thread. */
void eng_pool_flush(struct eng_pool *p, const char *endpoint);
/* eng_pool_give - hand back a healthy idle fd of endpoint: kept, or closed
 * when the peer already has max_idle. Any thread. */
void eng_pool_give(struct eng_pool *p, const char *endpoint, int fd);

/*
 * One transport: xfer moves total bytes of iov to (ENG_WRITE) or from
 * (ENG_READ, ENG_READ_STAGED) [off, off + total) of the segment served at
 * endpoint, total > 0.
 * Returns 0 or LUNAR_ERR_TRANSFER_FAIL. Any thread, blocks until done or
 * the engine's timeout. eng_xfer picks the transport. crc: as eng_xfer (NULL,
 * or set to the CRC32C of the bytes moved).
 */
struct eng_transport_ops {
	int (*xfer)(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		    const struct iovec *iov, int iovcnt, uint64_t total, uint32_t *crc);
};

/*
 * eng_tcp_run - run one request/reply exchange fn(arg, fd, &replied) on a
 * pooled connection to endpoint (fn returns 0 when the connection is idle
 * again, else -errno and whether a reply byte came). A pooled connection
 * that fails before any reply is retried once on a new one. 0 or -errno;
 * *ran (if not NULL) tells whether fn ran at all: when it did not, no
 * connection could be made and nothing was sent.
 */
typedef int (*eng_conn_fn)(void *arg, int fd, int *replied);
int eng_tcp_run(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, eng_conn_fn fn,
		void *arg, int *ran);

extern const struct eng_transport_ops eng_local_ops;
extern const struct eng_transport_ops eng_tcp_ops;

#endif /* LUNAR_ENGINE_ENG_INT_H */
