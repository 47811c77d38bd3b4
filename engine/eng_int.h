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
#include "auth.h"
#include "lunar.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define ENG_LOG		       "engine"
#define ENG_ENDPOINT_MAX       300 /* "host:port", host up to NI_MAXHOST-ish */
#define ENG_DEFAULT_TIMEOUT_MS 5000
#define ENG_DEFAULT_CONNS      8
#define ENG_DEFAULT_IO_THREADS 4
#define ENG_SLICE_MIN	       (256ull << 10) /* bytes; smaller transfers use one connection */
/* Bytes checksummed at a time beside the socket (io.c): well inside L2,
 * and large enough that the extra syscalls cost nothing. */
#define ENG_CRC_CHUNK (256ull << 10)
/* A keyed WRITE's frame when the writer computes its CRC32C (tcp.c): the
 * checksum pass leaves it in L2 for the send's copy (half of a 1 MiB L2),
 * and fewer frames mean fewer replies and wakeups at the owner. */
#define ENG_WRITE_FRAME (512ull << 10)
#define ENG_SLICE_MAX	4 /* slices (connections) of one transfer */
static_assert(ENG_SLICE_MAX <= sizeof(((struct eng_op *)0)->priv.slice_crc) / sizeof(uint32_t),
	      "a CRC32C slot per slice");
static_assert(ENG_SLICE_MAX <= sizeof(((struct eng_op *)0)->priv.slice_landed) / sizeof(uint64_t),
	      "a landed count per slice");
#define ENG_NO_DEADLINE UINT64_MAX /* wait without a time limit */
#define ENG_SOCK_BUF	(4 << 20)  /* bytes of socket buffer each way (eng_sock_bufs) */

/*
 * TCP wire protocol, version 5 (version 3 without the mount). All integers
 * little-endian, headers fixed size. One request in flight per connection;
 * a client reuses a connection for the next request once the reply has
 * been read in full. A request header is 128 bytes and a reply header 64,
 * keyed or not (a keyless request is the keyed layout below with its mount
 * where the counter goes and zero after it, a keyless reply the keyed one
 * with everything after the first 24 bytes zero). The kernel copies a
 * payload into a socket's buffers right behind its header, from page
 * fragments of the sending thread, and how fast depends on where it lands
 * there: with version 1's 24-byte replies the owner's copy of 1 MiB gets
 * from 4 threads ran at a quarter of its speed, and 64-byte requests made
 * 4 MiB puts under some key lengths half as fast (the proxy's RPCs to the
 * master go out from the same thread and move those fragments too); these
 * sizes measured evenly.
 *
 *   request (128 bytes)                reply (64 bytes)
 *   u32 magic   ENG_WIRE_REQ_MAGIC     u32 magic   ENG_WIRE_REP_MAGIC
 *   u16 version ENG_WIRE_VERSION       i32 status  0 or a LUNAR_ERR_* code
 *   u16 op      ENG_OP_READ/WRITE      u64 id      the request's id
 *   u64 offset  into the segment       u64 length  the request's length
 *   u64 length  bytes, > 0
 *   u64 id      chosen by the client   40 bytes zero
 *   u64 mount   the segment's mount the client was granted the range
 *               under (eng_cap.mount; 0 when none)
 *   88 bytes zero
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
 * RDMA_CONNECT: a 120-byte body follows (rdma_int.h); the server answers
 * with its own body, or a refusal, and the connection then only keeps the
 * queue pairs alive (docs/protocol.md); on a keyed wire it then carries
 * RDMA_XFER requests, each with a 264-byte body under its MAC (rdma_int.h),
 * which the owner serves with its QPs and answers with a reply header.
 * The server refuses (status != 0) a bad magic, version or op, a length of 0,
 * a range not inside its segment, and (UNAUTHORIZED) a READ, WRITE or
 * RDMA_CONNECT naming another mount than its own (eng_engine_set_mount),
 * so that a write granted before a re-mount never lands after it; after a
 * refusal it closes the connection (a refused WRITE's payload is never
 * read). A client drops a
 * connection on any error, so a connection is either idle between requests
 * or in the middle of exactly one.
 *
 * Keyed wire, version 4 (both engines have the cluster key, SPEC §13). A
 * connection opens with the auth handshake (auth.h), the dialler as client
 * claiming AUTH_ROLE_NODE, the data port's owner as server:
 *   hs client hello (72)    u32 magic ENG_WIRE_HS_MAGIC, u16 version 4,
 *                           u16 role, 64 bytes hello
 *   hs server hello (104)   u32 magic, u16 version 4, u16 0, 64 bytes
 *                           hello, 32 bytes proof (role SERVER)
 *   hs client proof (32)    32 bytes proof (role NODE)
 * Nothing else is parsed before the handshake checked; a failure closes the
 * connection without a word. Then every frame is a longer header:
 *   keyed request (128)                     keyed reply (64)
 *    0 the 32-byte request, version 4        0 the 24-byte reply
 *   32 u64 counter   0, 1, 2, ... per conn  24 u64 counter  the request's
 *   40 u32 crc       WRITE: CRC32C of the   32 16 bytes MAC
 *                    payload; else 0        48 16 bytes zero
 *   44 u32 reserved  0
 *   48 u64 cap_offset   the capability's range: the request's
 *   56 u64 cap_length   [offset, offset + length) lies inside it
 *   64 u64 cap_version  the object version it was granted for
 *   72 u64 cap_expiry   CLOCK_REALTIME ms
 *   80 16 bytes cap     auth_cap_make under the segment's secret
 *   96 16 bytes MAC
 *  112 16 bytes zero
 * The request's MAC is auth_mac(client tx_key, counter, bytes 0..96 of the
 * header, then a READ_DISK's name); the reply's is auth_mac(server tx_key,
 * the request's counter, bytes 0..32 of the reply), so a reply answers one
 * request only. The server takes counters strictly in order (TCP keeps
 * it) and each once. It closes the connection with no reply on a bad MAC
 * or counter; with a MAC'd UNAUTHORIZED reply, before touching the segment,
 * when the capability does not check (segment = the owner's segment name,
 * subject NULL, or "tenant\0key" for READ_DISK, op, cap range, version,
 * expiry later than now - ENG_CAP_SKEW_MS) or the range is not inside it;
 * with CHECKSUM_MISMATCH when a WRITE's payload is not the CRC32C its
 * header named (checked before a success reply). A READ reply carries no
 * payload CRC: the reader checks the value's CRC32C against the master's
 * record anyway, and a second pass on the owner would cost per byte.
 * Payload bytes are not MAC'd: an on-path attacker who rewrites TCP
 * payloads is out of scope until an encrypted mode exists.
 */
#define ENG_WIRE_REQ_MAGIC     0x51524e4cu /* "LNRQ" */
#define ENG_WIRE_REP_MAGIC     0x50524e4cu /* "LNRP" */
#define ENG_WIRE_HS_MAGIC      0x53484e4cu /* "LNHS" */
#define ENG_WIRE_VERSION       5
#define ENG_WIRE_VERSION_KEYED 4
#define ENG_WIRE_REQ_SIZE      32   /* the request's fields */
#define ENG_WIRE_REP_SIZE      24   /* the reply's fields */
#define ENG_WIRE_REQ_FRAME     128  /* a request header on the wire, keyed or not */
#define ENG_WIRE_REP_FRAME     64   /* a reply header on the wire, keyed or not */
#define ENG_WIRE_KREQ_MACD     96   /* bytes of the keyed request under its MAC */
#define ENG_CAP_SKEW_MS	       2000 /* error of the owner's estimate of the master's clock */
/* A keyless owner's mount from a fence to the next: no mount's token (the
 * master never picks it), so every range is refused. */
#define ENG_MOUNT_FENCED UINT64_MAX

enum eng_wire_op {
	ENG_OP_READ = 1,
	ENG_OP_WRITE = 2,
	ENG_OP_READ_DISK = 3,
	ENG_OP_RDMA_CONNECT = 4, /* rdma_int.h: set up queue pairs, body follows */
	ENG_OP_RDMA_XFER = 5,	 /* rdma_int.h: keyed, after a connect: the owner moves */
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

struct eng_wire_kreq {
	struct eng_wire_req h;
	union {
		uint64_t ctr;	/* keyed */
		uint64_t mount; /* keyless */
	};
	uint32_t crc;
	uint32_t reserved;
	uint64_t cap_offset;
	uint64_t cap_length;
	uint64_t cap_version;
	uint64_t cap_expiry_ms;
	unsigned char cap[ENG_CAP_BYTES];
	unsigned char mac[AUTH_TAG_BYTES];
	unsigned char pad[16]; /* zero, not under the MAC */
};

struct eng_wire_krep {
	struct eng_wire_rep h;
	uint64_t ctr;
	unsigned char mac[AUTH_TAG_BYTES];
	unsigned char pad[16]; /* zero, not under the MAC */
};

static_assert(sizeof(struct eng_wire_req) == ENG_WIRE_REQ_SIZE, "request header size");
static_assert(sizeof(struct eng_wire_kreq) == ENG_WIRE_REQ_FRAME, "keyed request size");
static_assert(sizeof(struct eng_wire_krep) == ENG_WIRE_REP_FRAME, "keyed reply size");
static_assert(offsetof(struct eng_wire_kreq, mac) == ENG_WIRE_KREQ_MACD, "keyed request layout");
static_assert(offsetof(struct eng_wire_kreq, cap) == 80, "keyed request layout");
static_assert(offsetof(struct eng_wire_krep, mac) == 32, "keyed reply layout");
static_assert(ENG_CAP_BYTES == AUTH_CAP_BYTES, "capability size");
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
 * eng_wire_req_check - whether a decoded request of wire version version
 * (ENG_WIRE_VERSION or _KEYED), for one of the ops in the set ops
 * (ENG_OP_SET), may be served on a segment of seg_size bytes: 0, or the
 * status to refuse it with. The range check cannot overflow whatever
 * offset and length hold.
 */
#define ENG_OP_SET(op) (1u << (op))
#define ENG_OPS_DATA   (ENG_OP_SET(ENG_OP_READ) | ENG_OP_SET(ENG_OP_WRITE))
int eng_wire_req_check(const struct eng_wire_req *r, uint64_t seg_size, uint16_t version,
		       unsigned ops);
/* eng_wire_kreq_encode/_decode, eng_wire_krep_encode/_decode - the same for
 * the keyed headers (the embedded plain header too); in place. */
void eng_wire_kreq_encode(struct eng_wire_kreq *r);
void eng_wire_kreq_decode(struct eng_wire_kreq *r);
void eng_wire_krep_encode(struct eng_wire_krep *r);
void eng_wire_krep_decode(struct eng_wire_krep *r);
/*
 * eng_wire_kreq_seal - number the encoded keyed request raw with the next
 * counter of s (*ctr) and MAC it and the name (nlen bytes, READ_DISK; NULL
 * otherwise). raw is on-the-wire bytes except ctr, which this sets.
 */
void eng_wire_kreq_seal(struct eng_wire_kreq *raw, struct auth_session *s, const void *name,
			size_t nlen, uint64_t *ctr);
/*
 * eng_wire_kreq_open - check the keyed request raw (the bytes as received,
 * untrusted) and name under s: its MAC, then its counter (the next one
 * expected, accepted once); decode raw in place when both check. 0, or the
 * reason to refuse: ENG_REJ_MAC or ENG_REJ_REPLAY. Connection thread only.
 */
int eng_wire_kreq_open(struct eng_wire_kreq *raw, struct auth_session *s, const void *name,
		       size_t nlen);
/*
 * eng_wire_krep_seal / _open - MAC an encoded keyed reply to the request
 * numbered ctr: the reply's bytes before its MAC, then the blen bytes of
 * body when the reply carries one under its MAC (an RDMA connect's; else
 * NULL, 0). seal fills raw->ctr and raw->mac; open checks them and decodes
 * raw (0, or -EPROTO for a bad MAC or another counter).
 */
void eng_wire_krep_seal(struct eng_wire_krep *raw, const struct auth_session *s, uint64_t ctr,
			const unsigned char *body, size_t blen);
int eng_wire_krep_open(struct eng_wire_krep *raw, const struct auth_session *s, uint64_t ctr,
		       const unsigned char *body, size_t blen);
/*
 * eng_wire_cap_check - whether the decoded keyed request r may touch its
 * range under the segment's secret: the capability checks for (segment,
 * subject, op, cap range, version, expiry) with ENG_CAP_SKEW_MS of grace
 * at now_ms (the master's capability clock as the owner estimates it,
 * eng_engine_set_clock), and r's range lies inside the cap's (for
 * READ_DISK: r's length is at most cap_length). 0 or LUNAR_ERR_UNAUTHORIZED.
 * O(1): one keyed BLAKE2b over a few dozen bytes.
 */
int eng_wire_cap_check(const struct eng_wire_kreq *r, const unsigned char *secret,
		       const char *segment, const void *subject, size_t subject_len,
		       uint64_t now_ms);

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
	/* Sends only: a frame header that goes out before the bytes, in the
	 * same sendmsg (eng_iovc_head); not counted in left. */
	const char *head;
	size_t hlen; /* header bytes still to send */
};

/* eng_iovc_init - a cursor over len bytes of iov starting skip bytes in,
 * no header. The caller makes sure skip + len lies inside iov. */
void eng_iovc_init(struct eng_iovc *c, const struct iovec *iov, int cnt, uint64_t skip,
		   uint64_t len);
/*
 * eng_iovc_window - fill win (ENG_IOV_WINDOW entries) with what one
 * sendmsg or recvmsg moves next: c's bytes from where it stands, at most
 * ENG_IOV_CHUNK of each entry (far below SSIZE_MAX), preceded by the
 * header when one is left. An entry cut at ENG_IOV_CHUNK ends the window,
 * so whatever prefix of it a syscall moves is the cursor's next bytes.
 * Returns how many entries.
 */
#define ENG_IOV_WINDOW 64
#define ENG_IOV_CHUNK  (1ull << 30)
int eng_iovc_window(const struct eng_iovc *c, struct iovec *win);
/* eng_iovc_head - send the hlen bytes at head (kept valid until sent)
 * before c's bytes, in the same syscall: one sendmsg per frame, not two. */
static inline void eng_iovc_head(struct eng_iovc *c, const void *head, size_t hlen)
{
	c->head = head;
	c->hlen = hlen;
}
/*
 * eng_io_poll - poll fd for events without sleeping, yielding between
 * looks, for the busy-poll budget (eng_busy_poll_set) or until deadline_ns
 * if sooner: 1 once ready (errors and hang-ups count as ready), 0 when the
 * budget is spent, at once with no budget. Counted in eng_busy_poll_stats
 * (polled or slept), unless the budget is 0.
 */
int eng_io_poll(int fd, short events, uint64_t deadline_ns);
/*
 * eng_io_wait - wait until fd is ready for poll() events or deadline_ns
 * passes. Errors and hang-ups count as ready: the next syscall reports them.
 * A wait for POLLIN with a deadline (bytes are due) busy-polls first
 * (eng_io_poll); any other sleeps at once. Returns 0, -ETIMEDOUT or -errno.
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
/* eng_iov_crc - the CRC32C of bytes [skip, skip + len) of iov, which holds
 * them (as for eng_iovc_init). */
uint32_t eng_iov_crc(const struct iovec *iov, int iovcnt, uint64_t skip, uint64_t len);
/* eng_io_send_buf / eng_io_recv_buf - eng_io_send (no flags) / eng_io_recv
 * of the len bytes at buf. */
int eng_io_send_buf(int fd, const void *buf, size_t len, uint64_t deadline_ns);
int eng_io_recv_buf(int fd, void *buf, size_t len, uint64_t deadline_ns);
/*
 * eng_io_send_crc / eng_io_recv_crc - eng_io_send / eng_io_recv that also
 * extend *crc (lc_crc32c) over the bytes moved, a chunk at a time while it
 * is in the cache: before sending it, right after receiving it. Same
 * returns; *crc is meaningful only on 0. A receive with landed not NULL
 * calls it with arg and the bytes received so far as each chunk lands (for
 * struct eng_op's landed).
 */
typedef void eng_landed_fn(void *arg, uint64_t moved);
int eng_io_send_crc(int fd, struct eng_iovc *c, uint32_t *crc, uint64_t deadline_ns);
int eng_io_recv_crc(int fd, struct eng_iovc *c, uint32_t *crc, uint64_t deadline_ns,
		    eng_landed_fn *landed, void *arg);

/*
 * eng_addr_resolve - the first address of "host:port" (IPv4 dotted, a host
 * name, or "[v6]:port") into *sa / *len, a name looked up by deadline_ns
 * (ENG_NO_DEADLINE: as long as DNS takes; lc_resolve). Returns 0 or -EINVAL
 * (bad text) / -EHOSTUNREACH (name did not resolve) / -ETIMEDOUT (not by
 * the deadline) / -ENOMEM.
 */
int eng_addr_resolve(const char *endpoint, uint64_t deadline_ns, struct sockaddr_storage *sa,
		     socklen_t *len);
/* eng_addr_format - "host:port" ("[host]:port" for an IPv6 literal) into buf. */
int eng_addr_format(char *buf, size_t cap, const char *host, uint16_t port);
/* eng_sock_nodelay - TCP_NODELAY on fd; returns 0 or -errno. */
int eng_sock_nodelay(int fd);
/*
 * eng_sock_bufs - ENG_SOCK_BUF send and receive buffers on fd (best
 * effort, capped by net.core.[rw]mem_max), so one socket holds a whole
 * slice in flight. Before connect() or listen(): the window scale is
 * agreed in the handshake, and accepted sockets inherit the listener's.
 */
void eng_sock_bufs(int fd);

/*
 * The request a data-port connection is serving: where to reply, and on a
 * keyed connection its session and the request's counter (the reply's MAC
 * binds it).
 */
struct eng_srv_req {
	int fd;
	struct auth_session *s; /* NULL: keyless */
	uint64_t ctr;
	uint64_t id;
	_Atomic uint64_t *idle; /* the connection's wait for work (eng_srv_wait); NULL none */
};
/*
 * eng_srv_wait - wait, for as long as it takes, for input on q's
 * connection (a request's first byte, or EOF), its slot meanwhile free for
 * the server to take back for a new connection (as between requests):
 * 0 when input came, -ECONNABORTED when the slot was taken back, else
 * -errno (server.c).
 */
int eng_srv_wait(const struct eng_srv_req *q);

/*
 * eng_disk_serve - answer the READ_DISK request req (decoded) on q->fd; its
 * name is in name (nlen bytes, checked by the MAC) on a keyed connection,
 * else NULL and read here. 0 to go on with the next request, < 0 to close.
 * Data-port thread (disk.c).
 */
int eng_disk_serve(struct eng_engine *e, const struct eng_srv_req *q,
		   const struct eng_wire_req *req, const char *name, uint64_t deadline_ns);
/* eng_send_rep - send one reply header (keyed when q->s); 0 or -errno (server.c). */
int eng_send_rep(const struct eng_srv_req *q, int32_t status, uint64_t length, int flags,
		 uint64_t deadline_ns);
/*
 * eng_reject - count a refusal for reason r and log it, at most once a
 * second per engine (why, the peer's fd for its address). Any thread.
 */
void eng_reject(struct eng_engine *e, enum eng_reject r, int fd, const char *why);
/*
 * eng_hs_server / eng_hs_client - the handshake on a new connection fd,
 * as the data port's owner / as the dialler (role NODE), filling *s;
 * 0, -EACCES (the peer failed it) or -errno (the connection failed, or
 * timed out). The server counts nothing: *why says how it failed, for
 * its caller to count (a failed connection not when the caller cut it
 * short itself). Block until deadline_ns at most (keyed.c).
 */
int eng_hs_server(struct eng_engine *e, int fd, struct auth_session *s, uint64_t deadline_ns,
		  const char **why);
int eng_hs_client(struct eng_engine *e, int fd, struct auth_session *s, uint64_t deadline_ns);
/*
 * eng_secret_check - eng_wire_cap_check of the decoded keyed request r
 * (subject: a READ_DISK's name, else NULL) under the segment's secret and
 * name, now on the master's capability clock (our CLOCK_MONOTONIC plus the
 * offset eng_engine_set_clock measured; never the wall clock, which may be
 * stepped on either machine); LUNAR_ERR_UNAUTHORIZED also before
 * eng_engine_set_secret. Any thread (a read lock).
 */
int eng_secret_check(struct eng_engine *e, const struct eng_wire_kreq *r, const void *subject,
		     size_t subject_len);

/* The data port: a listener thread and a thread per accepted connection. */
struct eng_srv_conn;
struct eng_server {
	int lfd;
	int done_fd; /* eventfd: a connection thread finished, the listener joins it */
	pthread_t listener;
	atomic_int stopping;
	/* Under lock: the listener adds to conns and reaps them, a fence
	 * (eng_server_fence) shuts them down and waits on gone, which a
	 * connection's thread signals when it finishes. gen counts fences. */
	pthread_mutex_t lock;
	pthread_cond_t gone;
	uint64_t gen;
	struct eng_srv_conn *conns;
	/* Connections taken back to make room: [1] in their handshake, [0]
	 * past it (eng_engine_evicted). */
	atomic_uint_fast64_t evicted[2];
};

/* A client connection: its socket, and its session when keyed. */
struct eng_cconn {
	int fd;
	int keyed;
	struct auth_session s;
	struct eng_pool *pool; /* whose open count it is in */
};
/* eng_cconn_close - close and free c (its session wiped). NULL ok. */
void eng_cconn_close(struct eng_cconn *c);

/* The client side: a hash of peers, each with its idle connections. */
#define ENG_POOL_BUCKETS 64
struct eng_peer;
struct eng_pool {
	pthread_mutex_t lock;
	struct eng_peer *bucket[ENG_POOL_BUCKETS];
	unsigned max_idle;
	atomic_uint open; /* connections dialled and not yet closed, idle or in use */
};

/*
 * The I/O threads that run submitted transfers (aio.c): a queue of ops
 * with slices nobody has claimed yet; a thread claims one slice at a time.
 * live[i] is the socket thread i is moving bytes on (-1: none), so that a
 * shutdown can cut it short.
 */
struct eng_exec {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct eng_op *head, *tail;
	int stopping;
	unsigned nthreads;
	pthread_t *threads;
	int *live;
};

/* A completion queue (engine.h). */
struct eng_cq {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct eng_op *head, *tail; /* completed, not yet taken */
	struct eng_engine *e;	    /* set by the first submit */
};
/* eng_cq_init/_fini - an embedded cq (eng_xfer_batch's, on its stack). */
int eng_cq_init(struct eng_cq *cq);
void eng_cq_fini(struct eng_cq *cq);

struct eng_engine {
	struct eng_config cfg; /* the caller's, with defaults filled in; cfg.host = host */
	char host[ENG_ENDPOINT_MAX];
	char endpoint[ENG_ENDPOINT_MAX]; /* set before the listener starts, then read-only */
	uint64_t timeout_ns;
	atomic_uint_fast64_t next_id;
	struct eng_server srv;
	struct eng_pool pool;
	struct eng_exec exec;
	/* Keyed: the cluster key, and the segment's capability secret. */
	int keyed;
	struct auth_key key;
	pthread_rwlock_t secret_lock;
	/* The segment's mount epoch (eng_engine_epoch), from 1; a fence
	 * raises it under the write side, a local WRITE copies under the read
	 * side (writers preferred: a fence is not starved by copies). Atomic:
	 * eng_engine_epoch reads it without the lock. */
	pthread_rwlock_t epoch_lock;
	_Atomic uint64_t epoch;
	/* Keyless: the mount token requests must name (eng_engine_set_mount),
	 * ENG_MOUNT_FENCED from a fence to the next mount. */
	_Atomic uint64_t mount;
	int have_secret;
	unsigned char secret[AUTH_KEY_BYTES];
	char seg_name[ENG_ENDPOINT_MAX];
	/* The master's capability clock minus our CLOCK_MONOTONIC, in ms
	 * (eng_engine_set_clock), under secret_lock like the secret. */
	int64_t clock_off_ms;
	atomic_uint_fast64_t rejected[ENG_REJ_COUNT];
	_Atomic uint64_t reject_logged_ns;
	struct eng_rdma *rdma;			     /* NULL: no RDMA device (rdma_int.h) */
	atomic_uint_fast64_t xstat[ENG_TR_COUNT][3]; /* xfers, bytes, failures */
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
/*
 * eng_server_fence - shut down every connection open now and wait until
 * each one's thread has finished: moved what its peer had already sent,
 * ended its RDMA queue pairs, replied or failed. After it, no request
 * taken before it moves a byte into or out of the segment. 0, or
 * -ETIMEDOUT when one is still busy at deadline_ns (lc_now_ns clock).
 * Any thread but a connection's; not concurrent with eng_server_stop.
 */
int eng_server_fence(struct eng_engine *e, uint64_t deadline_ns);

/* eng_pool_init/_fini - an empty pool keeping up to max_idle idle
 * connections per peer; fini closes them. Not concurrent with take/put. */
int eng_pool_init(struct eng_pool *p, unsigned max_idle);
void eng_pool_fini(struct eng_pool *p);
/*
 * eng_pool_take - a connection of e's pool to endpoint: an idle pooled one
 * with nothing come on it since its last reply (*pooled = 1; idle ones
 * with bytes or an end of stream waiting are closed), or a new one
 * dialled before deadline_ns (*pooled = 0, keyed 0, no handshake yet), its
 * socket published in live while it connects (as eng_conn_take's: a stop
 * cuts the connect short). 0 and *out, owned by the caller, or -errno.
 * Any thread; blocks on DNS the first time a peer is seen, and on connect.
 */
int eng_pool_take(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, int *pooled,
		  struct eng_cconn **out, int *live);
/* eng_pool_flush - close every idle connection to endpoint (its peer went
 * away). Any thread. */
void eng_pool_flush(struct eng_pool *p, const char *endpoint);
/* eng_pool_give - hand back a healthy idle connection to endpoint: kept,
 * or closed when the peer already has max_idle. Any thread. */
void eng_pool_give(struct eng_pool *p, const char *endpoint, struct eng_cconn *c);

/*
 * One transport: xfer moves total bytes of iov to (ENG_WRITE) or from
 * (ENG_READ, ENG_READ_STAGED) [off, off + total) of the segment served at
 * endpoint, total > 0.
 * Returns as eng_xfer (0, ENG_XFER_UNSENT, LUNAR_ERR_UNAUTHORIZED or
 * LUNAR_ERR_TRANSFER_FAIL). Any thread, blocks until done or
 * deadline_ns (lc_now_ns clock: the transfer's end, set when it was
 * submitted, so time spent queued or waiting for a connection counts).
 * eng_xfer picks the transport. crc: as eng_xfer (NULL, or set to the
 * CRC32C of the bytes moved). live: on an I/O thread, its slot to publish
 * each socket in (eng_exec_live), else NULL.
 */
struct eng_transport_ops {
	int (*xfer)(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
		    const struct iovec *iov, int iovcnt, uint64_t total, const struct eng_cap *cap,
		    uint32_t *crc, uint64_t deadline_ns, int *live);
};

/*
 * eng_tcp_run - run one request/reply exchange fn(arg, c, &replied) on a
 * pooled connection to endpoint (a new one of a keyed engine has passed
 * the handshake) (fn returns 0 when the connection is idle
 * again, else -errno and whether a reply byte came). A pooled connection
 * that fails before any reply is retried once on a new one. 0 or -errno;
 * *ran (if not NULL) tells whether fn ran at all: when it did not, no
 * connection could be made and nothing was sent. live: as eng_conn_take's
 * (fn publishes its own while it runs).
 */
typedef int (*eng_conn_fn)(void *arg, struct eng_cconn *c, int *replied);
/*
 * eng_conn_take - a connection to endpoint: pooled (*pooled set) or new,
 * which a keyed engine takes through the auth handshake first, its socket
 * published in live while it connects and through the handshake (an I/O
 * thread's slot, eng_exec_live; NULL none). 0 and *out, or -errno and
 * *out NULL.
 */
int eng_conn_take(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, int *pooled,
		  struct eng_cconn **out, int *live);
/*
 * eng_send_req - send the request header req (host order, id set) on c: a
 * plain one, or on a keyed connection the keyed header with cap (NULL:
 * zeros), crc and the MAC over it and name (nlen bytes, sent after it).
 * Sets *ctr to the counter used. flags as eng_io_send. 0 or -errno.
 */
int eng_send_req(struct eng_cconn *c, const struct eng_wire_req *req, const struct eng_cap *cap,
		 uint32_t crc, const void *name, size_t nlen, int flags, uint64_t deadline_ns,
		 uint64_t *ctr);
/*
 * eng_recv_rep - receive the reply header to the request numbered ctr into
 * *rep (decoded; its MAC checked on a keyed connection: -EPROTO when it
 * does not). *replied tells whether a byte came. 0 or -errno.
 */
int eng_recv_rep(struct eng_cconn *c, uint64_t ctr, struct eng_wire_rep *rep, uint64_t deadline_ns,
		 int *replied);
/* eng_cap_mount - the mount a keyless request under cap names (NULL: 0). */
static inline uint64_t eng_cap_mount(const struct eng_cap *cap)
{
	return cap ? cap->mount : 0;
}
/*
 * eng_refusal - the -errno of a peer's refusal with status (< 0):
 * -EKEYREJECTED when the owner did not take the capability for the range
 * (LUNAR_ERR_UNAUTHORIZED: a grant under a secret of another mount of its
 * segment, or keyless one naming another mount, which a fresh list
 * replaces), -EPROTO for any other refusal.
 */
static inline int eng_refusal(int32_t status)
{
	return status == LUNAR_ERR_UNAUTHORIZED ? -EKEYREJECTED : -EPROTO;
}
/*
 * eng_xfer_failed - eng_xfer's result for a transfer that failed with rc
 * (-errno; ran: a byte of it may have left): LUNAR_ERR_UNAUTHORIZED for
 * an owner's refusal of the capability, else TRANSFER_FAIL or, when
 * nothing ran, ENG_XFER_UNSENT.
 */
static inline int eng_xfer_failed(int rc, int ran)
{
	if (rc == -EKEYREJECTED)
		return LUNAR_ERR_UNAUTHORIZED;
	return ran ? LUNAR_ERR_TRANSFER_FAIL : ENG_XFER_UNSENT;
}
int eng_tcp_run(struct eng_engine *e, const char *endpoint, uint64_t deadline_ns, eng_conn_fn fn,
		void *arg, int *ran, int *live);

/*
 * eng_local_run - op (checked: total bytes, within iov) on this engine's
 * own segment, a copy on the calling thread: its result, and op->crc when
 * asked. A WRITE naming an epoch (op->epoch) copies only while that is
 * still the segment's, else fails with TRANSFER_FAIL having copied nothing.
 */
int eng_local_run(struct eng_engine *e, struct eng_op *op, uint64_t total);

/*
 * eng_tcp_plan - cut the remote transfer op (total > 0, priv.total set)
 * into slices (priv.nslices, priv.chunk), all bounded by priv.deadline_ns
 * (the caller's): 0, or
 * ENG_XFER_UNSENT when it must not go at all (a keyed engine, no cap).
 * eng_tcp_slice - run slice idx of op on the calling thread (publishing
 * its socket in *live while it moves bytes, when live is not NULL):
 * 0 or -errno; *ran: a connection was made, so bytes may have gone out.
 * When op wants a CRC32C, the slice leaves its own bytes' in
 * priv.slice_crc[idx], computed on the way.
 * eng_tcp_crc - the CRC32C of all of op's bytes: the one another transport
 * gave (priv.scrc, when priv.has_scrc), else the slices' combined (no pass
 * over the bytes).
 */
int eng_tcp_plan(struct eng_engine *e, struct eng_op *op);
int eng_tcp_slice(struct eng_engine *e, struct eng_op *op, unsigned idx, int *ran, int *live);
uint32_t eng_tcp_crc(const struct eng_op *op);
/*
 * eng_exec_start / _stop - start io_threads I/O threads (0 or -errno) /
 * cancel what is queued, cut running slices short, join (aio.c).
 */
int eng_exec_start(struct eng_engine *e);
void eng_exec_stop(struct eng_engine *e);
/*
 * eng_exec_live - publish in *live (an I/O thread's slot) the socket fd a
 * slice now runs on (or connects, or shakes hands on), for eng_exec_stop
 * to cut short; -1 once done with it, before it is closed or pooled: that
 * waits for a stop shutting it down, so a stop never reaches a socket
 * number reused since. 1 when a stop came already (fd is shut down at
 * once), else 0.
 */
int eng_exec_live(struct eng_engine *e, int *live, int fd);
/* eng_tcp_slices - how many slices a TCP transfer of total bytes is cut
 * into (eng_tcp_plan): 1 up to ENG_SLICE_MIN or with cfg.slices 1, at most
 * cfg.slices. */
unsigned eng_tcp_slices(const struct eng_engine *e, uint64_t total);
/* eng_transport - the transport of a transfer to endpoint (engine.c): the
 * one place that chooses. */
const struct eng_transport_ops *eng_transport(const struct eng_engine *e, const char *endpoint);

/* eng_op_of - an op for one synchronous transfer of eng_xfer's arguments
 * (its CRC wanted when crc is not NULL). */
static inline struct eng_op eng_op_of(const char *endpoint, enum eng_dir dir, uint64_t off,
				      const struct iovec *iov, int iovcnt,
				      const struct eng_cap *cap, const uint32_t *crc)
{
	return (struct eng_op){.endpoint = endpoint,
			       .dir = dir,
			       .off = off,
			       .iov = iov,
			       .iovcnt = iovcnt,
			       .cap = cap,
			       .want_crc = crc != NULL};
}

extern const struct eng_transport_ops eng_local_ops;
extern const struct eng_transport_ops eng_tcp_ops;

#endif /* LUNAR_ENGINE_ENG_INT_H */
