/*
 * mac.c - per-message authentication on an established session: a keyed
 * BLAKE2b-128 over the message's counter and bytes, a receive window that
 * accepts each counter once, and secrets sealed for the peer.
 */
#include "auth.h"

#include <sodium.h>

#include "atomic.h"
#include "lunar.h"

uint64_t auth_tx_next(struct auth_session *s)
{
	return lc_fetch_add(&s->tx_next, 1);
}

void auth_mac(const unsigned char key[AUTH_KEY_BYTES], uint64_t ctr, const struct iovec *iov,
	      int iovcnt, unsigned char tag[AUTH_TAG_BYTES])
{
	crypto_generichash_state st;
	unsigned char c[8];

	for (int i = 0; i < 8; i++)
		c[i] = (unsigned char)(ctr >> (8 * i));
	crypto_generichash_init(&st, key, AUTH_KEY_BYTES, AUTH_TAG_BYTES);
	crypto_generichash_update(&st, c, sizeof(c));
	for (int i = 0; i < iovcnt; i++)
		crypto_generichash_update(&st, iov[i].iov_base, iov[i].iov_len);
	crypto_generichash_final(&st, tag, AUTH_TAG_BYTES);
}

int auth_mac_check(const unsigned char key[AUTH_KEY_BYTES], uint64_t ctr, const struct iovec *iov,
		   int iovcnt, const unsigned char tag[AUTH_TAG_BYTES])
{
	unsigned char want[AUTH_TAG_BYTES];

	auth_mac(key, ctr, iov, iovcnt, want);
	return sodium_memcmp(want, tag, AUTH_TAG_BYTES) ? LUNAR_ERR_UNAUTHORIZED : 0;
}

int auth_replay_accept(struct auth_session *s, uint64_t ctr)
{
	uint64_t shift, bit;

	if (ctr == UINT64_MAX)
		return LUNAR_ERR_UNAUTHORIZED; /* rx_top would wrap */
	if (ctr >= s->rx_top) {
		shift = ctr + 1 - s->rx_top;
		s->rx_seen = shift >= AUTH_REPLAY_WINDOW ? 0 : s->rx_seen << shift;
		s->rx_seen |= 1;
		s->rx_top = ctr + 1;
		return 0;
	}
	shift = s->rx_top - 1 - ctr;
	if (shift >= AUTH_REPLAY_WINDOW)
		return AUTH_REPLAY_STALE;
	bit = 1ull << shift;
	if (s->rx_seen & bit)
		return LUNAR_ERR_UNAUTHORIZED;
	s->rx_seen |= bit;
	return 0;
}

void auth_seal(const struct auth_session *s, const unsigned char secret[AUTH_KEY_BYTES],
	       unsigned char out[AUTH_SEALED_BYTES])
{
	randombytes_buf(out, crypto_secretbox_NONCEBYTES);
	crypto_secretbox_easy(out + crypto_secretbox_NONCEBYTES, secret, AUTH_KEY_BYTES, out,
			      s->box_key);
}

int auth_unseal(const struct auth_session *s, const unsigned char in[AUTH_SEALED_BYTES],
		unsigned char secret[AUTH_KEY_BYTES])
{
	if (crypto_secretbox_open_easy(secret, in + crypto_secretbox_NONCEBYTES,
				       AUTH_SEALED_BYTES - crypto_secretbox_NONCEBYTES, in,
				       s->box_key))
		return LUNAR_ERR_UNAUTHORIZED;
	return 0;
}
