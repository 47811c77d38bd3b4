/*
 * engine.h - the data plane: moves bytes between local memory and a proxy's
 * DRAM segment, never through the master. Transports sit behind one ops
 * table: local (the segment is ours: memcpy) and TCP (a pooled connection to
 * the owner's data port, scatter/gather I/O, no intermediate buffers). Each
 * engine also serves its own segment on a TCP data port, checking every
 * (offset, length) against the segment's bounds. With an RDMA device on
 * both sides, remote transfers are one-sided RDMA READ/WRITE instead
 * (rdma*.c), set up over the data port. With a cluster key
 * (SPEC §13) every data-port connection opens with the auth handshake, every
 * frame carries a counter and a MAC, and the owner serves a range only with
 * a capability the master issued for it (eng_cap).
 *
 * Errors: every call returns 0 (or a length) or a negative LUNAR_ERR_* code,
 * plus the engine's own ENG_XFER_UNSENT; never -errno.
 */
#ifndef LUNAR_ENGINE_ENGINE_H
#define LUNAR_ENGINE_ENGINE_H

#include <stdint.h>
#include <sys/uio.h>

struct auth_key;

struct eng_config {
	const char *host; /* listen and advertised address; "127.0.0.1" */
	uint16_t port;	  /* data port; 0 picks a free one */
	void *seg_base;	  /* the local segment served (NULL with seg_size 0) */
	uint64_t seg_size;
	unsigned io_timeout_ms;	 /* per transfer; 0: 5000 */
	unsigned conns_per_peer; /* pooled connections kept per peer; 0: 8 */
	unsigned io_threads;	 /* threads running submitted transfers (eng_xfer_submit); 0: 4 */
	/*
	 * The most connections one TCP transfer of several ENG_SLICE_MIN is
	 * cut over, 1..4. A slice keeps a thread copying on each side, so more
	 * slices than CPUs to run them only contend: 0 is half the CPUs this
	 * thread may use, at least 1, at most 4.
	 */
	unsigned slices;
	/*
	 * Serves disk reads from peers (eng_xfer_disk): read the value of
	 * (tenant, key) from this proxy's disk tier into iov (total = the
	 * length disk_length gave, or the caller's capacity for a read of
	 * our own); return its length or a negative code. Called on a
	 * data-port thread, several at once; may block on disk I/O. NULL: such
	 * requests get OBJECT_NOT_FOUND.
	 */
	int64_t (*disk_read)(void *arg, const char *tenant, const char *key,
			     const struct iovec *iov, int iovcnt);
	/*
	 * The length of that value now, or a negative code (OBJECT_NOT_FOUND):
	 * a peer's read takes a buffer of this size (at most the peer's
	 * capacity), not of the capacity it names. Same threads. Given with
	 * disk_read, or neither is (eng_engine_create refuses one alone).
	 */
	int64_t (*disk_length)(void *arg, const char *tenant, const char *key);
	void *disk_arg;
	/*
	 * The cluster key (copied at create; the caller may wipe its own):
	 * handshake, MACs and capability checks on the data port, both as a
	 * server and as a client. NULL: keyless, frames as in wire version 5.
	 */
	const struct auth_key *cluster_key;
	/*
	 * RDMA devices (SPEC §7): NULL, "" or "none": TCP only; "auto": the
	 * first device with an active port, if any; else a comma-separated
	 * list of device names (each optionally ":port"), the first usable one
	 * (none usable: create fails). Remote transfers take RDMA when both
	 * peers have a device and the connect handshake succeeds, TCP
	 * otherwise. rdma_qps: queue pairs per peer, 1..8 (0: 4).
	 */
	const char *rdma_devices;
	unsigned rdma_qps;
};

/*
 * A capability the master granted for one replica (Replica.cap and its
 * fields): op on [offset, offset + length) of the segment (a transfer may
 * move any part of it; for a disk read offset is 0 and length the most
 * bytes), for the object's version, until expiry_ms (the master's
 * capability clock, eng_engine_set_clock). mount: the mount of the owner's
 * segment the replica was placed in (Replica.mount), which a keyless owner
 * checks instead (eng_engine_set_mount); a keyless grant has only that.
 */
#define ENG_CAP_BYTES 16
struct eng_cap {
	uint64_t offset;
	uint64_t length;
	uint64_t version;
	uint64_t expiry_ms;
	unsigned char tag[ENG_CAP_BYTES];
	uint64_t mount;
};

/* Why a keyed data port refused a peer (eng_engine_rejected). */
enum eng_reject {
	ENG_REJ_HANDSHAKE,  /* no key, wrong key, or a malformed handshake */
	ENG_REJ_MAC,	    /* a frame whose MAC does not check, or cannot
			     * (a READ_DISK name length out of bounds) */
	ENG_REJ_REPLAY,	    /* a counter seen before, or out of order */
	ENG_REJ_CAPABILITY, /* no capability, or one not for this request */
	ENG_REJ_CRC,	    /* a WRITE payload unlike the CRC32C its header named */
	ENG_REJ_COUNT,
};

enum eng_dir {
	ENG_READ = 0,  /* remote segment -> local iov */
	ENG_WRITE = 1, /* local iov -> remote segment */
	/* As ENG_READ, into a buffer that is read again at once (a client's
	 * staging arena): a local copy keeps the bytes in the cache. */
	ENG_READ_STAGED = 2,
};

struct eng_engine;

/* The transports, for the per-transport counters (eng_engine_xfer_stats). */
enum eng_transport {
	ENG_TR_LOCAL = 0,
	ENG_TR_TCP = 1,
	ENG_TR_RDMA = 2,
	ENG_TR_COUNT,
};

struct eng_xfer_stats {
	uint64_t xfers;	   /* transfers that ran on the transport */
	uint64_t bytes;	   /* bytes of those that succeeded */
	uint64_t failures; /* those that failed */
};

/*
 * eng_engine_create - start serving the segment on the data port (a thread
 * per accepted connection). Returns 0 and *out, or a negative code.
 */
int eng_engine_create(const struct eng_config *cfg, struct eng_engine **out);
/* eng_engine_endpoint - "host:port" of this engine's data port. */
const char *eng_engine_endpoint(const struct eng_engine *e);
/*
 * eng_engine_set_secret - the capability secret the master gave the
 * segment called segment at (re-)mount (AUTH_KEY_BYTES); replaces the one
 * before. Until it is set a keyed data port refuses every range. Any
 * thread. 0, or LUNAR_ERR_INVALID_PARAMS (a name too long, a keyless engine).
 */
int eng_engine_set_secret(struct eng_engine *e, const char *segment, const unsigned char *secret);
/*
 * eng_engine_set_mount - the token of the segment's mount the master made
 * (MountSegmentReply.mount): from now on a keyless data port serves
 * READ, WRITE and RDMA connect requests that name it (eng_cap.mount) and
 * refuses others with UNAUTHORIZED, so a write granted under an older
 * mount never lands. Until the first call it serves those naming 0 (an
 * engine no master mounts). Any thread.
 */
void eng_engine_set_mount(struct eng_engine *e, uint64_t mount);
/*
 * eng_engine_fence - begin a new mount of the segment: forget the
 * capability secret and the mount token (the data port refuses every range
 * until the next eng_engine_set_secret, keyless eng_engine_set_mount),
 * close every data connection open now, and wait until none of them can
 * move a byte more into or out of the segment. A master that forgot the
 * segment (it declared the owner dead, restarted, or a new leader took
 * over) forgot the writes it had granted there too: after the fence, the
 * rest of such a write, from a peer that was asleep, can no longer land
 * on a value placed after the re-mount. Blocks while the requests in
 * flight finish: the I/O timeout at most (a request's own deadline is as
 * long, from its start).
 * 0, or -ETIMEDOUT: one is still busy, and the segment must not be
 * mounted yet. Raises the segment's epoch first, once the local WRITEs
 * under way are done: a local WRITE of an older one fails. Any thread but
 * the engine's own.
 * eng_engine_epoch - the segment's mount epoch (>= 1): how many fences
 * it has seen, plus one (eng_op.epoch). Any thread.
 */
int eng_engine_fence(struct eng_engine *e);
uint64_t eng_engine_epoch(struct eng_engine *e);
/*
 * eng_engine_set_clock - the master's capability clock read master_ms
 * (MountSegmentReply.clock_ms and the like) at about local_ms on our
 * CLOCK_MONOTONIC (lc_now_ms; the middle of the call that brought it):
 * capability expiries are checked against lc_now_ms() + (master_ms -
 * local_ms) from now on, so that neither a wall-clock step nor a monotonic
 * clock unlike the master's (another machine, a time namespace) expires
 * every grant or keeps one alive. Replaces the offset before. Any thread.
 */
void eng_engine_set_clock(struct eng_engine *e, uint64_t master_ms, uint64_t local_ms);
/* eng_engine_evicted - connections the data port took back to make room for
 * new ones so far: of those still in their handshake (handshake 1), which
 * the port takes first, or of those idle past it (a relaxed read). */
uint64_t eng_engine_evicted(const struct eng_engine *e, int handshake);
/* eng_engine_rejected - peers refused for reason r so far (a relaxed read). */
uint64_t eng_engine_rejected(const struct eng_engine *e, enum eng_reject r);
/* eng_reject_name - "handshake", "mac", "replay", "capability" or "crc". */
const char *eng_reject_name(enum eng_reject r);
/* eng_transport_name - "local", "tcp" or "rdma". */
const char *eng_transport_name(enum eng_transport t);
/* eng_engine_peer_conns - connections this engine dialled to peers' data
 * ports and has not closed yet, idle in its pool or in use (a relaxed
 * read). Any thread. */
unsigned eng_engine_peer_conns(const struct eng_engine *e);
/* eng_engine_xfer_stats - the counters of transport t so far (relaxed
 * reads; zeros for a bad t). Any thread. */
void eng_engine_xfer_stats(const struct eng_engine *e, enum eng_transport t,
			   struct eng_xfer_stats *out);
/* eng_engine_tells_landed - 1 if a READ from endpoint with want_crc
 * raises its op's landed word as its bytes land (struct eng_op), else 0:
 * a remote read over TCP does; a local copy, and an engine with an RDMA
 * device (which may read one-sidedly), do not. Any thread. */
int eng_engine_tells_landed(const struct eng_engine *e, const char *endpoint);
/* eng_engine_rdma_fallbacks - remote transfers that went over TCP although
 * this engine has an RDMA device (the peer has none, its handshake failed,
 * or local memory not registered). */
uint64_t eng_engine_rdma_fallbacks(const struct eng_engine *e);
/* eng_engine_crc_on_way - 1 if a write of total bytes to endpoint that
 * wants its CRC32C (want_crc) takes it as its bytes move at less cost than
 * a pass of its own before it would: a local copy (checksummed in the
 * copy) or a TCP write cut into slices (each checksummed on its own thread
 * beside its send: over 256 KiB with cfg.slices 2 or more). 0 for a TCP
 * write in one slice (the same pass, on the sending thread) and an RDMA
 * write (a pass after the transfer). Any thread. */
int eng_engine_crc_on_way(const struct eng_engine *e, const char *endpoint, uint64_t total);
/* eng_engine_rdma_device - "name:port" of the RDMA device in use, or NULL. */
const char *eng_engine_rdma_device(const struct eng_engine *e);

/*
 * eng_busy_poll_set - how long, in microseconds, a thread waiting on a TCP
 * connection for a peer's bytes polls it before it sleeps: bytes that are
 * due (a reply, the rest of a transfer), and on the data port a peer's
 * next request right after one it served (a connection idle longer
 * sleeps). The poll yields between looks. 0 (the default) sleeps at once;
 * at most ENG_BUSY_POLL_MAX_US. Process-wide, for every engine, as busy
 * polling is the host's choice (what a wakeup costs there against a spent
 * CPU); any thread, at any time.
 */
#define ENG_BUSY_POLL_MAX_US 1000u
void eng_busy_poll_set(unsigned us);
/*
 * eng_busy_poll_stats - busy polls so far, process-wide (relaxed reads):
 * those that ended with the connection ready (bytes, or a hang-up or
 * error) and those that ran out of budget and went to sleep.
 */
void eng_busy_poll_stats(uint64_t *polled, uint64_t *slept);

/*
 * eng_mem_add - register [base, base + len) (memory that stays mapped until
 * eng_mem_del) with the RDMA device, so transfers to and from it move
 * without a copy. NULL when the engine has no device or the registration
 * failed: transfers touching the range then go over TCP. Any thread; blocks
 * while the kernel pins the pages.
 * eng_mem_del - deregister; only once no transfer uses the range. NULL ok;
 * valid after eng_engine_destroy too.
 */
struct eng_mem;
struct eng_mem *eng_mem_add(struct eng_engine *e, void *base, uint64_t len);
void eng_mem_del(struct eng_mem *m);

/*
 * eng_engine_destroy - stop serving, cancel what was submitted (queued
 * transfers complete with ENG_XFER_UNSENT, running ones are cut short and
 * complete with TRANSFER_FAIL: every submitted op is in its queue when this
 * returns), close pooled connections, free. No eng_xfer* call may be
 * running or start. NULL ok.
 */
void eng_engine_destroy(struct eng_engine *e);

/*
 * eng_xfer's failure when no byte of the request left this process: no
 * connection to the peer could be made (refused, unreachable, connect timed
 * out), or the transfer's time ran out before it began (waiting for a
 * connection or an RDMA QP set), so none of it can reach the peer later.
 * A TRANSFER_FAIL otherwise.
 */
#define ENG_XFER_UNSENT (-8000)

/*
 * eng_xfer - move the bytes of iov (in order, total = sum of lengths) to or
 * from [off, off + total) of the segment served at endpoint. When endpoint is
 * this engine's own, a copy. Synchronous: blocks the calling thread at most
 * io_timeout_ms; any number of threads at once (eng_xfer_batch of one
 * op). Returns 0, ENG_XFER_UNSENT, LUNAR_ERR_UNAUTHORIZED (the owner
 * answered that cap does not grant the range: a grant under the secret,
 * keyless of the mount, of another mount of its segment, from a master
 * since replaced or from before the owner re-mounted; a fresh grant may
 * pass; also for a WRITE whose sending broke as the owner closed after
 * refusing), or
 * LUNAR_ERR_TRANSFER_FAIL (refused out of bounds, timeout, short
 * transfer, a connection lost); the connection of a failed transfer is
 * dropped, never reused. If crc is not NULL, *crc is set to the CRC32C (lc_crc32c from
 * 0) of the bytes moved; a local transfer computes it in the same pass as the copy. Local copies of
 * 64 KiB and more use non-temporal stores (lc_copy, lc_copy_crc32c), except for ENG_READ_STAGED.
 * cap: the master's grant for the range, sent with a remote request (a
 * keyed remote transfer without one fails unsent; keyless, only its mount
 * goes, and NULL names mount 0, which only an owner no master mounted
 * takes); ignored for local copies. Only read.
 * Over RDMA, a transfer of more than LUNAR_IOV_MAX pieces (keyed: more
 * than ENG_RDMA_SGE_MAX) takes TCP instead.
 */
int eng_xfer(struct eng_engine *e, const char *endpoint, enum eng_dir dir, uint64_t off,
	     const struct iovec *iov, int iovcnt, const struct eng_cap *cap, uint32_t *crc);

/*
 * eng_xfer_disk - read the value of (tenant, key) from the disk tier of the
 * proxy serving endpoint into iov (total = capacity, > 0, at most
 * ENG_DISK_READ_MAX). The owner reads it from its SSD into a buffer of its
 * own (verifying its CRC32C there) and sends it on the data port. When
 * endpoint is ours, the disk_read callback runs on this thread instead.
 * Synchronous, bounded by io_timeout_ms; any thread. Returns the value's
 * length (bytes of iov written), or the owner's code (OBJECT_NOT_FOUND,
 * BUFFER_OVERFLOW, CHECKSUM_MISMATCH, FILE_READ_FAIL), UNAUTHORIZED (as
 * for eng_xfer) or LUNAR_ERR_TRANSFER_FAIL. If crc is not NULL, *crc is the CRC32C of the
 * bytes received (set on success only). cap: as for eng_xfer, a READ_DISK
 * grant whose subject is "tenant\0key".
 */
#define ENG_DISK_READ_MAX (1ull << 30)
int64_t eng_xfer_disk(struct eng_engine *e, const char *endpoint, const char *tenant,
		      const char *key, const struct iovec *iov, int iovcnt,
		      const struct eng_cap *cap, uint32_t *crc);

/*
 * Asynchronous transfers (STYLE "Asynchronous work": io_uring's sqe/cqe).
 * An eng_op is one transfer the caller owns: set its inputs, submit it
 * (eng_xfer_submit, alone or in a batch) against a completion queue, and
 * it comes back out of that queue (eng_cq_wait) once done, with result and
 * crc set. Between submit and completion the engine owns the op: it and
 * what it points at (endpoint, iov, cap) stay valid and unwritten by the
 * caller. A remote transfer runs on the engine's I/O threads (io_threads
 * of them, no thread per transfer), a large one cut into slices spread over
 * several pooled connections to the peer; a local one is a copy made at
 * submit. Nothing is retried by the engine beyond eng_xfer's rules.
 */
struct eng_cq;
struct eng_op {
	/* Inputs, as eng_xfer's. */
	const char *endpoint;
	enum eng_dir dir;
	uint64_t off;
	const struct iovec *iov;
	int iovcnt;
	const struct eng_cap *cap;
	int want_crc; /* set crc to the CRC32C of the bytes moved */
	/* WRITE: known_crc is the CRC32C of the bytes already (the caller's
	 * word, which a keyed owner checks them against); a transfer in one
	 * slice names it rather than reading the bytes for it first. */
	int crc_known;
	uint32_t known_crc;
	/* READ with want_crc: where to say how much has landed, or NULL;
	 * it holds landed_base when the op is submitted. The engine raises
	 * it (never lowers it) to landed_base + n (release) once the first
	 * n bytes of iov hold the transfer's bytes, as they land, where the
	 * transport can tell (TCP: every slice's bytes, once the slices
	 * before it landed); else it stores nothing. Not a result: a failed
	 * transfer may have raised it. The caller packs landed_base so that
	 * adding the bytes cannot carry into its own fields
	 * (lc_landed_pack). */
	uint64_t *landed;
	uint64_t landed_base;
	void *user; /* the caller's: never read or written by the engine */
	/* WRITE to this engine's own segment: the eng_engine_epoch() read
	 * before the master granted the range, so that the copy fails if a
	 * fence came between (the master may have placed another value
	 * there since); 0 copies whatever the epoch. Remote writes are
	 * fenced by their owner. */
	uint64_t epoch;
	/* Outputs, once completed: eng_xfer's return value, and the CRC. */
	int result;
	uint32_t crc;
	/* Engine-private from submit to completion. */
	struct {
		struct eng_op *next; /* the engine's queue, then the cq's list */
		struct eng_cq *cq;
		const void *ops; /* the transport */
		uint64_t total, chunk, deadline_ns;
		uint32_t scrc;		  /* another transport's CRC32C, when known */
		uint32_t slice_crc[4];	  /* TCP: each slice's own CRC32C (ENG_SLICE_MAX) */
		uint64_t slice_landed[4]; /* TCP: each slice's bytes landed (atomic) */
		uint8_t nslices, claimed, finished, ran, failed, refused, has_scrc;
	} priv;
};

/*
 * eng_cq_alloc - an empty completion queue: 0 and *out, or
 * LUNAR_ERR_INTERNAL. One engine's transfers only; any threads may wait
 * on it, and ops of several batches may be in it at once.
 * eng_cq_free - free cq (NULL ok). Nothing submitted against it may be
 * outstanding: every op came out of eng_cq_wait, or the engine was
 * destroyed and they sit in it (then freed with it, never touched).
 */
int eng_cq_alloc(struct eng_cq **out);
void eng_cq_free(struct eng_cq *cq);
/*
 * eng_xfer_submit - start the n transfers of ops[] (n >= 0); each completes
 * into cq, in any order, even before this returns (a local copy, a bad
 * argument, a keyed remote transfer without cap). Never blocks on I/O;
 * any thread. Returns 0, or LUNAR_ERR_INVALID_PARAMS (NULL e or cq, or cq
 * used with another engine) with nothing submitted.
 */
int eng_xfer_submit(struct eng_engine *e, struct eng_cq *cq, struct eng_op *ops, int n);
/*
 * eng_cq_wait - take up to max completed ops (at least 1) out of cq into
 * out[], waiting up to timeout_ms (ENG_WAIT_FOREVER: no limit) for the
 * first. With ENG_WAIT_FOREVER the waiting thread runs queued slices of
 * cq's own transfers itself rather than sleep (a slice is bounded by
 * io_timeout_ms; a shorter timeout only sleeps). Returns how many (0:
 * timed out).
 */
#define ENG_WAIT_FOREVER (~0u)
int eng_cq_wait(struct eng_cq *cq, struct eng_op **out, int max, unsigned timeout_ms);
/*
 * eng_xfer_batch - submit ops[0..n) and wait until every one completed
 * (results in each op), the calling thread running a share of the slices
 * itself: one remote transfer of one slice runs on the caller alone, with
 * no hand-off. Any thread; blocks up to io_timeout_ms past the call (each
 * op's deadline runs from its submission).
 */
void eng_xfer_batch(struct eng_engine *e, struct eng_op *ops, int n);

#endif /* LUNAR_ENGINE_ENGINE_H */
