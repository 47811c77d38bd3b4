/*
 * cap.c - data-port capabilities (a keyed BLAKE2b-128 of what the master
 * granted, under the segment's secret) and the HTTP admin token.
 */
#include "auth.h"

#include <string.h>

#include <sodium.h>

#include "lunar.h"

static const char cap_label[] = "lunar-cap-v1";
static const char token_label[] = "lunar-http-admin-v1";

static void put64(crypto_generichash_state *st, uint64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(v >> (8 * i));
	crypto_generichash_update(st, b, sizeof(b));
}

void auth_cap_make(const unsigned char secret[AUTH_KEY_BYTES], const struct auth_cap *c,
		   unsigned char tag[AUTH_CAP_BYTES])
{
	crypto_generichash_state st;

	crypto_generichash_init(&st, secret, AUTH_KEY_BYTES, AUTH_CAP_BYTES);
	crypto_generichash_update(&st, (const unsigned char *)cap_label, sizeof(cap_label));
	/* Lengths first, so no two field lists hash the same bytes. */
	put64(&st, c->segment_len);
	crypto_generichash_update(&st, c->segment, c->segment_len);
	put64(&st, c->subject ? c->subject_len : UINT64_MAX);
	if (c->subject)
		crypto_generichash_update(&st, c->subject, c->subject_len);
	put64(&st, c->op);
	put64(&st, c->offset);
	put64(&st, c->length);
	put64(&st, c->version);
	put64(&st, c->expiry_ms);
	crypto_generichash_final(&st, tag, AUTH_CAP_BYTES);
}

int auth_cap_check(const unsigned char secret[AUTH_KEY_BYTES], const struct auth_cap *c,
		   const unsigned char tag[AUTH_CAP_BYTES], uint64_t now_ms)
{
	unsigned char want[AUTH_CAP_BYTES];

	auth_cap_make(secret, c, want);
	if (sodium_memcmp(want, tag, AUTH_CAP_BYTES))
		return LUNAR_ERR_UNAUTHORIZED;
	return c->expiry_ms < now_ms ? LUNAR_ERR_UNAUTHORIZED : 0;
}

void auth_http_token(const struct auth_key *key, char out[AUTH_TOKEN_CHARS + 1])
{
	unsigned char t[AUTH_TOKEN_CHARS / 2];

	crypto_generichash(t, sizeof(t), (const unsigned char *)token_label, sizeof(token_label),
			   key->k, sizeof(key->k));
	sodium_bin2hex(out, AUTH_TOKEN_CHARS + 1, t, sizeof(t));
	sodium_memzero(t, sizeof(t));
}

int auth_http_token_check(const struct auth_key *key, const char *text)
{
	char want[AUTH_TOKEN_CHARS + 1];
	int ok;

	if (strnlen(text, AUTH_TOKEN_CHARS + 1) != AUTH_TOKEN_CHARS)
		return LUNAR_ERR_UNAUTHORIZED;
	auth_http_token(key, want);
	ok = sodium_memcmp(want, text, AUTH_TOKEN_CHARS) == 0;
	sodium_memzero(want, sizeof(want));
	return ok ? 0 : LUNAR_ERR_UNAUTHORIZED;
}
