/*
 * handshake.c - the mutual challenge-response that opens a connection
 * (auth.h): each side proves the cluster key over both hellos and its role;
 * the session keys mix an ephemeral X25519 exchange with the cluster key and
 * the transcript, one MAC key per direction so a message cannot be
 * reflected back to its sender.
 */
#include "auth.h"

#include <string.h>

#include <sodium.h>

#include "lunar.h"

static const char proof_label[] = "lunar-auth-proof-v1";
static const char session_label[] = "lunar-auth-session-v1";

void auth_hs_start(struct auth_hs *hs, int is_client, unsigned char hello_out[AUTH_HELLO_BYTES])
{
	unsigned char *mine = hs->hello[is_client ? 0 : 1];

	memset(hs, 0, sizeof(*hs));
	hs->is_client = is_client;
	randombytes_buf(mine, 32);
	crypto_kx_keypair(mine + 32, hs->sk);
	memcpy(hello_out, mine, AUTH_HELLO_BYTES);
}

int auth_hs_peer(struct auth_hs *hs, const unsigned char hello[AUTH_HELLO_BYTES])
{
	unsigned char *peer = hs->hello[hs->is_client ? 1 : 0];
	const unsigned char *mine = hs->hello[hs->is_client ? 0 : 1];

	if (sodium_memcmp(hello, mine, AUTH_HELLO_BYTES) == 0)
		return LUNAR_ERR_UNAUTHORIZED;
	memcpy(peer, hello, AUTH_HELLO_BYTES);
	hs->have_peer = 1;
	return 0;
}

/* Keyed BLAKE2b-256 of label, role and both hellos (client's first). */
static void transcript_hash(const struct auth_hs *hs, const struct auth_key *key, const char *label,
			    uint32_t role, const unsigned char *extra, size_t extra_len,
			    unsigned char out[32])
{
	crypto_generichash_state st;
	unsigned char r[4] = {(unsigned char)role, (unsigned char)(role >> 8),
			      (unsigned char)(role >> 16), (unsigned char)(role >> 24)};

	crypto_generichash_init(&st, key->k, sizeof(key->k), 32);
	crypto_generichash_update(&st, (const unsigned char *)label, strlen(label) + 1);
	crypto_generichash_update(&st, r, sizeof(r));
	crypto_generichash_update(&st, hs->hello[0], AUTH_HELLO_BYTES);
	crypto_generichash_update(&st, hs->hello[1], AUTH_HELLO_BYTES);
	if (extra)
		crypto_generichash_update(&st, extra, extra_len);
	crypto_generichash_final(&st, out, 32);
}

void auth_hs_proof(const struct auth_hs *hs, const struct auth_key *key, uint32_t role,
		   unsigned char out[AUTH_PROOF_BYTES])
{
	transcript_hash(hs, key, proof_label, role, NULL, 0, out);
}

int auth_hs_verify(const struct auth_hs *hs, const struct auth_key *key, uint32_t role,
		   const unsigned char proof[AUTH_PROOF_BYTES])
{
	unsigned char want[AUTH_PROOF_BYTES];
	int ok;

	if (!hs->have_peer)
		return LUNAR_ERR_UNAUTHORIZED;
	auth_hs_proof(hs, key, role, want);
	ok = sodium_memcmp(want, proof, AUTH_PROOF_BYTES) == 0;
	sodium_memzero(want, sizeof(want));
	return ok ? 0 : LUNAR_ERR_UNAUTHORIZED;
}

int auth_role_valid(uint32_t role)
{
	return role == AUTH_ROLE_NODE || role == AUTH_ROLE_ADMIN;
}

int auth_hs_finish(struct auth_hs *hs, const struct auth_key *key, uint32_t role,
		   struct auth_session *s)
{
	/* kx_rx/kx_tx as libsodium names them for our side: the client's tx is
	 * the server's rx, so c2s is built from the same bytes on both ends. */
	unsigned char kx_rx[32], kx_tx[32], c2s[32], s2c[32];
	const unsigned char *mine = hs->hello[hs->is_client ? 0 : 1] + 32;
	const unsigned char *peer = hs->hello[hs->is_client ? 1 : 0] + 32;
	int rc;

	if (!hs->have_peer)
		return LUNAR_ERR_UNAUTHORIZED;
	if (hs->is_client)
		rc = crypto_kx_client_session_keys(kx_rx, kx_tx, mine, hs->sk, peer);
	else
		rc = crypto_kx_server_session_keys(kx_rx, kx_tx, mine, hs->sk, peer);
	if (rc) {
		sodium_memzero(hs, sizeof(*hs));
		return LUNAR_ERR_UNAUTHORIZED;
	}
	memset(s, 0, sizeof(*s));
	s->role = role;
	transcript_hash(hs, key, session_label, role, hs->is_client ? kx_tx : kx_rx, 32, c2s);
	transcript_hash(hs, key, session_label, role + 0x100, hs->is_client ? kx_rx : kx_tx, 32,
			s2c);
	/* The box key depends on both directions' secrets. */
	{
		unsigned char both[64];

		memcpy(both, c2s, 32);
		memcpy(both + 32, s2c, 32);
		transcript_hash(hs, key, session_label, role + 0x200, both, sizeof(both),
				s->box_key);
		sodium_memzero(both, sizeof(both));
	}
	memcpy(s->tx_key, hs->is_client ? c2s : s2c, 32);
	memcpy(s->rx_key, hs->is_client ? s2c : c2s, 32);
	sodium_memzero(kx_rx, sizeof(kx_rx));
	sodium_memzero(kx_tx, sizeof(kx_tx));
	sodium_memzero(c2s, sizeof(c2s));
	sodium_memzero(s2c, sizeof(s2c));
	sodium_memzero(hs, sizeof(*hs));
	return 0;
}
