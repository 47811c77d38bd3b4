/*
 * keyed.c - what a cluster key adds to the data port (SPEC §13): the auth
 * handshake that opens every connection (the dialler proves the key as a
 * NODE, the owner as the SERVER), the segment's capability secret the
 * owner checks grants with, and the count and rate-limited log of every
 * refusal. Frame MACs and counters are in wire.c.
 */
#include "eng_int.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"

#define HS_HEAD	       8 /* magic, version, role */
#define HS_CLIENT_SIZE (HS_HEAD + AUTH_HELLO_BYTES)
#define HS_SERVER_SIZE (HS_HEAD + AUTH_HELLO_BYTES + AUTH_PROOF_BYTES)

static const char *const reject_names[ENG_REJ_COUNT] = {
    [ENG_REJ_HANDSHAKE] = "handshake",	 [ENG_REJ_MAC] = "mac", [ENG_REJ_REPLAY] = "replay",
    [ENG_REJ_CAPABILITY] = "capability", [ENG_REJ_CRC] = "crc",
};

const char *eng_reject_name(enum eng_reject r)
{
	return (unsigned)r < ENG_REJ_COUNT ? reject_names[r] : "?";
}

uint64_t eng_engine_rejected(const struct eng_engine *e, enum eng_reject r)
{
	if (!e || (unsigned)r >= ENG_REJ_COUNT)
		return 0;
	return atomic_load_explicit(&e->rejected[r], memory_order_relaxed);
}

/* The peer's address of fd as text, "?" when unknown. */
static void peer_text(int fd, char *buf, size_t cap)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	const void *a = NULL;

	snprintf(buf, cap, "?");
	if (getpeername(fd, (struct sockaddr *)&ss, &len))
		return;
	if (ss.ss_family == AF_INET)
		a = &((struct sockaddr_in *)&ss)->sin_addr;
	else if (ss.ss_family == AF_INET6)
		a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
	if (a)
		inet_ntop(ss.ss_family, a, buf, (socklen_t)cap);
}

void eng_reject(struct eng_engine *e, enum eng_reject r, int fd, const char *why)
{
	uint64_t now = lc_now_ns(), last = atomic_load(&e->reject_logged_ns);
	char peer[64];

	atomic_fetch_add_explicit(&e->rejected[r], 1, memory_order_relaxed);
	/* One line a second at most: a flood of refusals must not flood the log. */
	if (now - last < 1000000000ull ||
	    !atomic_compare_exchange_strong(&e->reject_logged_ns, &last, now))
		return;
	peer_text(fd, peer, sizeof(peer));
	LC_WARN(ENG_LOG, "data port: refused %s (%s): %s; %llu refused so far for that reason",
		peer, eng_reject_name(r), why, (unsigned long long)atomic_load(&e->rejected[r]));
}

static void hs_head(unsigned char *b, uint16_t role)
{
	uint32_t magic = htole32(ENG_WIRE_HS_MAGIC);
	uint16_t ver = htole16(ENG_WIRE_VERSION_KEYED);

	role = htole16(role);
	memcpy(b, &magic, 4);
	memcpy(b + 4, &ver, 2);
	memcpy(b + 6, &role, 2);
}

/* Whether b starts a handshake message of role (untrusted bytes). */
static int hs_head_ok(const unsigned char *b, uint16_t role)
{
	unsigned char want[HS_HEAD];

	hs_head(want, role);
	return !memcmp(b, want, HS_HEAD);
}

int eng_hs_server(struct eng_engine *e, int fd, struct auth_session *s, uint64_t deadline_ns,
		  const char **why)
{
	unsigned char in[HS_CLIENT_SIZE], out[HS_SERVER_SIZE], proof[AUTH_PROOF_BYTES];
	struct auth_hs hs;
	int rc;

	/* The head alone first: a keyless frame is refused at once. */
	*why = "no handshake";
	rc = eng_io_recv_buf(fd, in, HS_HEAD, deadline_ns);
	if (rc)
		return rc;
	*why = "not a handshake";
	if (!hs_head_ok(in, AUTH_ROLE_NODE))
		return -EACCES;
	*why = "handshake cut short";
	rc = eng_io_recv_buf(fd, in + HS_HEAD, AUTH_HELLO_BYTES, deadline_ns);
	if (rc)
		return rc;
	auth_hs_start(&hs, 0, out + HS_HEAD);
	*why = "reflected hello";
	rc = auth_hs_peer(&hs, in + HS_HEAD) ? -EACCES : 0;
	if (!rc) {
		hs_head(out, 0);
		auth_hs_proof(&hs, &e->key, AUTH_ROLE_SERVER, out + HS_HEAD + AUTH_HELLO_BYTES);
		*why = "handshake cut short";
		rc = eng_io_send_buf(fd, out, sizeof(out), deadline_ns)
			 ?: eng_io_recv_buf(fd, proof, sizeof(proof), deadline_ns);
	}
	if (!rc) {
		*why = "wrong key";
		if (auth_hs_verify(&hs, &e->key, AUTH_ROLE_NODE, proof) ||
		    auth_hs_finish(&hs, &e->key, AUTH_ROLE_NODE, s))
			rc = -EACCES;
	}
	if (rc)
		memset(&hs, 0, sizeof(hs)); /* auth_hs_finish wipes it on success */
	return rc;
}

int eng_hs_client(struct eng_engine *e, int fd, struct auth_session *s, uint64_t deadline_ns)
{
	unsigned char out[HS_CLIENT_SIZE], in[HS_SERVER_SIZE], proof[AUTH_PROOF_BYTES];
	struct auth_hs hs;
	int rc;

	hs_head(out, AUTH_ROLE_NODE);
	auth_hs_start(&hs, 1, out + HS_HEAD);
	rc = eng_io_send_buf(fd, out, sizeof(out), deadline_ns);
	if (!rc)
		rc = eng_io_recv_buf(fd, in, sizeof(in), deadline_ns);
	if (rc)
		goto out_wipe;
	rc = -EACCES;
	if (!hs_head_ok(in, 0) || auth_hs_peer(&hs, in + HS_HEAD) ||
	    auth_hs_verify(&hs, &e->key, AUTH_ROLE_SERVER, in + HS_HEAD + AUTH_HELLO_BYTES)) {
		LC_WARN(ENG_LOG, "data port handshake: the peer does not prove the cluster key");
		goto out_wipe;
	}
	auth_hs_proof(&hs, &e->key, AUTH_ROLE_NODE, proof);
	rc = eng_io_send_buf(fd, proof, sizeof(proof), deadline_ns);
	if (!rc && auth_hs_finish(&hs, &e->key, AUTH_ROLE_NODE, s))
		rc = -EACCES;
	if (!rc)
		return 0;
out_wipe:
	memset(&hs, 0, sizeof(hs));
	return rc;
}

int eng_engine_set_secret(struct eng_engine *e, const char *segment, const unsigned char *secret)
{
	if (!e || !e->keyed || !segment || !secret || strlen(segment) >= sizeof(e->seg_name))
		return LUNAR_ERR_INVALID_PARAMS;
	pthread_rwlock_wrlock(&e->secret_lock);
	memcpy(e->secret, secret, AUTH_KEY_BYTES);
	strcpy(e->seg_name, segment);
	e->have_secret = 1;
	pthread_rwlock_unlock(&e->secret_lock);
	return 0;
}

void eng_engine_set_clock(struct eng_engine *e, uint64_t master_ms, uint64_t local_ms)
{
	if (!e)
		return;
	pthread_rwlock_wrlock(&e->secret_lock);
	e->clock_off_ms = (int64_t)(master_ms - local_ms);
	pthread_rwlock_unlock(&e->secret_lock);
}

int eng_secret_check(struct eng_engine *e, const struct eng_wire_kreq *r, const void *subject,
		     size_t subject_len)
{
	uint64_t now = lc_now_ms();
	int rc = LUNAR_ERR_UNAUTHORIZED;

	/* Held for one keyed BLAKE2b of a few dozen bytes; only a re-mount
	 * and the master's clock readings write. */
	pthread_rwlock_rdlock(&e->secret_lock);
	if (e->have_secret)
		rc = eng_wire_cap_check(r, e->secret, e->seg_name, subject, subject_len,
					now + (uint64_t)e->clock_off_ms);
	pthread_rwlock_unlock(&e->secret_lock);
	return rc;
}
