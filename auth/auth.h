/*
 * auth.h - the cluster key and everything built from it (SPEC §13): key
 * files, the mutual handshake that opens every master-RPC and data-port
 * connection, per-message MACs numbered by a counter, data-port
 * capabilities, sealed secrets and the HTTP admin token. Every primitive is
 * libsodium's (keyed BLAKE2b, X25519 key exchange, XSalsa20-Poly1305,
 * randombytes); nothing cryptographic is written here.
 *
 * Functions return 0 (or a count) on success and a negative LUNAR_ERR_* code
 * on failure, except where a contract says -errno (file system calls).
 * All of them are thread-safe except on one auth_session's receive window,
 * which its owner serialises (auth_replay_accept).
 */
#ifndef LUNAR_AUTH_AUTH_H
#define LUNAR_AUTH_AUTH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define AUTH_KEY_BYTES	  32 /* the cluster key, session keys, segment secrets */
#define AUTH_HELLO_BYTES  64 /* a nonce and an X25519 public key */
#define AUTH_PROOF_BYTES  32 /* keyed BLAKE2b-256 over the transcript */
#define AUTH_TAG_BYTES	  16 /* per-message MAC: keyed BLAKE2b-128 */
#define AUTH_CAP_BYTES	  16 /* capability: keyed BLAKE2b-128 */
#define AUTH_SEALED_BYTES (24 + 16 + AUTH_KEY_BYTES) /* nonce, Poly1305 tag, secret */
#define AUTH_TOKEN_CHARS  64 /* hex of the HTTP admin token, without the NUL */

/* The file a daemon reads the cluster key from when no --cluster-key is given. */
#define AUTH_KEY_ENV "LUNAR_CLUSTER_KEY_FILE"

struct auth_key {
	unsigned char k[AUTH_KEY_BYTES];
};

/*
 * auth_init - initialise libsodium. Call once before any other auth_*
 * function (more calls are harmless). 0, or LUNAR_ERR_INTERNAL when no
 * randomness source could be opened.
 */
int auth_init(void);

/*
 * auth_keygen - write AUTH_KEY_BYTES random bytes to a new file at path,
 * mode 0600. Never overwrites: -EEXIST if path exists; other -errno from
 * open/write/fsync. Blocks on the file system.
 */
int auth_keygen(const char *path);

/*
 * auth_key_load - read the cluster key from path into *out. Refuses, with a
 * reason in why (cap bytes, always NUL-terminated), a file that group or
 * others may read or write (-EPERM, as ssh refuses a private key), one that
 * is not a regular file (-EINVAL) or not exactly AUTH_KEY_BYTES long
 * (-EINVAL); other -errno from open/read. Blocks on the file system.
 */
int auth_key_load(const char *path, struct auth_key *out, char *why, size_t cap);

/* auth_key_wipe - zero a key in a way the compiler keeps. NULL is a no-op. */
void auth_key_wipe(struct auth_key *k);

/*
 * Who proves the key in a handshake. The server always proves SERVER; the
 * client says which role it claims and proves it: a NODE (a proxy) acts only
 * for the client ids its session mounted, an ADMIN session may also make
 * cluster-wide calls. The role is bound into the proofs and the session keys,
 * so a recorded NODE handshake cannot be replayed as ADMIN.
 */
enum auth_role {
	AUTH_ROLE_SERVER = 1,
	AUTH_ROLE_NODE = 2,
	AUTH_ROLE_ADMIN = 3,
};

/* auth_role_valid - 1 for a role a client may claim (NODE, ADMIN), else 0. */
int auth_role_valid(uint32_t role);

/*
 * A session: a direction's MAC key each way, a key for sealed secrets, the
 * next counter to send and the receive window. Filled by auth_hs_finish.
 */
struct auth_session {
	unsigned char tx_key[AUTH_KEY_BYTES];
	unsigned char rx_key[AUTH_KEY_BYTES];
	unsigned char box_key[AUTH_KEY_BYTES];
	uint32_t role;	  /* the client's claimed and proven role */
	uint64_t tx_next; /* next counter to send; see auth_tx_next */
	uint64_t rx_top;  /* one above the highest counter accepted, 0: none yet */
	uint64_t rx_seen; /* bit i set: counter rx_top - 1 - i was accepted */
};

/*
 * A handshake in progress on one side. The exchange, in three messages:
 *   client -> server: client hello (AUTH_HELLO_BYTES) and the claimed role
 *   server -> client: server hello, server proof
 *   client -> server: client proof
 * Each side proves the cluster key with a keyed BLAKE2b over its role and
 * both hellos; the session keys come from an ephemeral X25519 exchange mixed
 * with the cluster key and both hellos, so a passive holder of the key who
 * recorded the hellos still cannot compute them.
 */
struct auth_hs {
	unsigned char hello[2][AUTH_HELLO_BYTES]; /* [0] the client's, [1] the server's */
	unsigned char sk[32];			  /* our ephemeral X25519 secret */
	int is_client;
	int have_peer;
};

/*
 * auth_hs_start - begin a handshake: fresh nonce and ephemeral key pair; our
 * hello into hello_out. is_client says which side we are.
 */
void auth_hs_start(struct auth_hs *hs, int is_client, unsigned char hello_out[AUTH_HELLO_BYTES]);
/*
 * auth_hs_peer - take the peer's hello (untrusted bytes). 0, or
 * LUNAR_ERR_UNAUTHORIZED for a hello equal to ours (a reflection).
 */
int auth_hs_peer(struct auth_hs *hs, const unsigned char hello[AUTH_HELLO_BYTES]);
/* auth_hs_proof - the proof of the key for role, after auth_hs_peer. */
void auth_hs_proof(const struct auth_hs *hs, const struct auth_key *key, uint32_t role,
		   unsigned char out[AUTH_PROOF_BYTES]);
/*
 * auth_hs_verify - check the peer's proof for role in constant time. 0, or
 * LUNAR_ERR_UNAUTHORIZED (wrong key, wrong role, or no peer hello yet).
 */
int auth_hs_verify(const struct auth_hs *hs, const struct auth_key *key, uint32_t role,
		   const unsigned char proof[AUTH_PROOF_BYTES]);
/*
 * auth_hs_finish - derive the session for the client's role into *s, then
 * wipe hs. Call only after both proofs were checked. 0, or
 * LUNAR_ERR_UNAUTHORIZED when the peer's public key is degenerate.
 */
int auth_hs_finish(struct auth_hs *hs, const struct auth_key *key, uint32_t role,
		   struct auth_session *s);

/*
 * auth_tx_next - the counter for the next message sent on s, starting at 0;
 * atomic, so threads sharing a session never send one counter twice.
 */
uint64_t auth_tx_next(struct auth_session *s);
/*
 * auth_mac - the tag of a message numbered ctr, made of the parts of iov in
 * order, under key (a session's tx_key to send, rx_key to check).
 */
void auth_mac(const unsigned char key[AUTH_KEY_BYTES], uint64_t ctr, const struct iovec *iov,
	      int iovcnt, unsigned char tag[AUTH_TAG_BYTES]);
/*
 * auth_mac_check - 0 when tag is auth_mac(key, ctr, iov) (constant-time
 * compare), else LUNAR_ERR_UNAUTHORIZED. Does not touch any window.
 */
int auth_mac_check(const unsigned char key[AUTH_KEY_BYTES], uint64_t ctr, const struct iovec *iov,
		   int iovcnt, const unsigned char tag[AUTH_TAG_BYTES]);
/*
 * auth_replay_accept - record counter ctr as received on s after its MAC
 * checked. Accepts each counter once: counters above every one seen, or one
 * of the AUTH_REPLAY_WINDOW below the highest that has not been seen
 * (requests on several connections may arrive out of order). 0 when
 * accepted; LUNAR_ERR_UNAUTHORIZED for a counter seen before (a replay) or
 * 2^64-1; AUTH_REPLAY_STALE for one below the window, which may be a replay
 * or a request overtaken by more than the window's worth of others: it is
 * not accepted, and a sender told so sends again with a new counter. Not
 * thread-safe on one s: the caller holds the session's lock.
 */
#define AUTH_REPLAY_WINDOW 64
#define AUTH_REPLAY_STALE  1
int auth_replay_accept(struct auth_session *s, uint64_t ctr);

/*
 * A data-port capability: what the master allows one peer to do to one
 * range of one segment, until expiry_ms (CLOCK_REALTIME milliseconds). For a
 * disk read, subject names the record ("tenant\0key") and offset/length are
 * 0 and the most bytes read.
 */
struct auth_cap {
	const void *segment; /* the segment's name */
	size_t segment_len;
	const void *subject; /* NULL for segment ranges */
	size_t subject_len;
	uint32_t op; /* the data port's op code */
	uint64_t offset;
	uint64_t length;
	uint64_t version; /* the object's version: a new value needs a new grant */
	uint64_t expiry_ms;
};

/* auth_cap_make - the capability tag for c under the segment's secret. */
void auth_cap_make(const unsigned char secret[AUTH_KEY_BYTES], const struct auth_cap *c,
		   unsigned char tag[AUTH_CAP_BYTES]);
/*
 * auth_cap_check - 0 when tag grants c under secret and c->expiry_ms is not
 * before now_ms; else LUNAR_ERR_UNAUTHORIZED. O(1), constant-time compare.
 */
int auth_cap_check(const unsigned char secret[AUTH_KEY_BYTES], const struct auth_cap *c,
		   const unsigned char tag[AUTH_CAP_BYTES], uint64_t now_ms);

/* auth_random - fill buf with len bytes from the system's CSPRNG. */
void auth_random(void *buf, size_t len);

/*
 * auth_seal - encrypt and authenticate a secret under s->box_key for the
 * peer (a segment's capability secret sent over an RPC whose bytes are only
 * MAC'd, not hidden). auth_unseal - the reverse: 0, or
 * LUNAR_ERR_UNAUTHORIZED when the box does not open.
 */
void auth_seal(const struct auth_session *s, const unsigned char secret[AUTH_KEY_BYTES],
	       unsigned char out[AUTH_SEALED_BYTES]);
int auth_unseal(const struct auth_session *s, const unsigned char in[AUTH_SEALED_BYTES],
		unsigned char secret[AUTH_KEY_BYTES]);

/*
 * auth_http_token - the bearer token that opens the /admin pages over HTTP: hex of a
 * keyed BLAKE2b of a fixed label under the cluster key, NUL-terminated in
 * out. auth_http_token_check - 0 when the NUL-terminated text equals it
 * (constant time), else LUNAR_ERR_UNAUTHORIZED.
 */
void auth_http_token(const struct auth_key *key, char out[AUTH_TOKEN_CHARS + 1]);
int auth_http_token_check(const struct auth_key *key, const char *text);

/*
 * auth_key_resolve - the daemon's cluster key: from path (--cluster-key),
 * else from the file $LUNAR_CLUSTER_KEY_FILE names. Returns 1 with *out
 * loaded, 0 when neither names a file (a keyless node), or the negative
 * result of auth_key_load with its reason in why.
 */
int auth_key_resolve(const char *path, struct auth_key *out, char *why, size_t cap);

/*
 * auth_host_is_loopback - 1 when host reaches only this machine (an IPv4
 * address in 127.0.0.0/8, ::1, or "localhost"), else 0 (a wildcard such as
 * 0.0.0.0 or ::, another address or name).
 */
int auth_host_is_loopback(const char *host);

/*
 * auth_bind_check - whether a daemon may listen on host (SPEC §13): always
 * on loopback; elsewhere only with a cluster key (keyed) or when the
 * operator said --insecure. 0, or LUNAR_ERR_UNAUTHORIZED with a sentence
 * for the operator in why.
 */
int auth_bind_check(const char *host, int keyed, int insecure, char *why, size_t cap);

#endif /* LUNAR_AUTH_AUTH_H */
