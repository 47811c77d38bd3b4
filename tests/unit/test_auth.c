/*
 * test_auth.c - the cluster key and what is built from it: key files (mode,
 * size, no overwrite), the handshake (both sides agree; a wrong key, a wrong
 * role or a reflected hello fails), per-message MACs (any changed bit or
 * counter fails), the receive window (each counter once), capabilities (any
 * changed field, another secret or a past expiry fails), sealed secrets and
 * the HTTP token.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth.h"
#include "lunar.h"
#include "tests/cmocka_main.h"

static char dir[64];

static int setup(void **state)
{
	strcpy(dir, "/tmp/lunar-auth-XXXXXX");
	assert_non_null(mkdtemp(dir));
	assert_int_equal(auth_init(), 0);
	return 0;
}

static int teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	return system(cmd);
}

static void path_of(char *buf, size_t cap, const char *name)
{
	snprintf(buf, cap, "%s/%s", dir, name);
}

static void test_auth_keygen_and_load(void **state)
{
	struct auth_key a, b;
	struct stat st;
	char p[128], why[256];

	path_of(p, sizeof(p), "k1");
	assert_int_equal(auth_keygen(p), 0);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(st.st_size, AUTH_KEY_BYTES);
	assert_int_equal(auth_keygen(p), -EEXIST); /* never overwrites */
	assert_int_equal(auth_key_load(p, &a, why, sizeof(why)), 0);
	assert_int_equal(auth_key_load(p, &b, why, sizeof(why)), 0);
	assert_memory_equal(a.k, b.k, AUTH_KEY_BYTES);
	path_of(p, sizeof(p), "k2");
	assert_int_equal(auth_keygen(p), 0);
	assert_int_equal(auth_key_load(p, &b, why, sizeof(why)), 0);
	assert_memory_not_equal(a.k, b.k, AUTH_KEY_BYTES);
}

static void test_auth_key_load_refuses_open_modes_and_bad_sizes(void **state)
{
	struct auth_key k;
	char p[128], why[256];
	FILE *f;

	path_of(p, sizeof(p), "k3");
	assert_int_equal(auth_keygen(p), 0);
	assert_int_equal(chmod(p, 0644), 0);
	assert_int_equal(auth_key_load(p, &k, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "group or others"));
	assert_int_equal(chmod(p, 0640), 0);
	assert_int_equal(auth_key_load(p, &k, why, sizeof(why)), -EPERM);
	assert_int_equal(chmod(p, 0400), 0);
	assert_int_equal(auth_key_load(p, &k, why, sizeof(why)), 0);

	path_of(p, sizeof(p), "short");
	f = fopen(p, "w");
	assert_non_null(f);
	fputs("0123456789", f);
	fclose(f);
	assert_int_equal(chmod(p, 0600), 0);
	assert_int_equal(auth_key_load(p, &k, why, sizeof(why)), -EINVAL);
	path_of(p, sizeof(p), "missing");
	assert_int_equal(auth_key_load(p, &k, why, sizeof(why)), -ENOENT);
	assert_int_equal(auth_key_load(dir, &k, why, sizeof(why)), -EINVAL);
}

struct pair {
	struct auth_session c, s;
};

/* Run a whole handshake; the client claims role; keys may differ. */
static int handshake(const struct auth_key *ck, const struct auth_key *sk, uint32_t role,
		     uint32_t server_checks_role, struct pair *p)
{
	struct auth_hs c, s;
	unsigned char ch[AUTH_HELLO_BYTES], sh[AUTH_HELLO_BYTES];
	unsigned char sproof[AUTH_PROOF_BYTES], cproof[AUTH_PROOF_BYTES];
	int rc;

	auth_hs_start(&c, 1, ch);
	auth_hs_start(&s, 0, sh);
	if ((rc = auth_hs_peer(&s, ch)) || (rc = auth_hs_peer(&c, sh)))
		return rc;
	auth_hs_proof(&s, sk, AUTH_ROLE_SERVER, sproof);
	if ((rc = auth_hs_verify(&c, ck, AUTH_ROLE_SERVER, sproof)))
		return rc;
	auth_hs_proof(&c, ck, role, cproof);
	if ((rc = auth_hs_verify(&s, sk, server_checks_role, cproof)))
		return rc;
	if ((rc = auth_hs_finish(&c, ck, role, &p->c)))
		return rc;
	return auth_hs_finish(&s, sk, server_checks_role, &p->s);
}

static void test_auth_handshake_agrees_and_refuses(void **state)
{
	struct auth_key k, other;
	struct pair p;
	struct auth_hs hs;
	unsigned char h[AUTH_HELLO_BYTES];

	auth_random(k.k, sizeof(k.k));
	auth_random(other.k, sizeof(other.k));
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &p), 0);
	assert_memory_equal(p.c.tx_key, p.s.rx_key, AUTH_KEY_BYTES);
	assert_memory_equal(p.c.rx_key, p.s.tx_key, AUTH_KEY_BYTES);
	assert_memory_equal(p.c.box_key, p.s.box_key, AUTH_KEY_BYTES);
	assert_memory_not_equal(p.c.tx_key, p.c.rx_key, AUTH_KEY_BYTES);
	assert_int_equal(p.s.role, AUTH_ROLE_NODE);

	/* Wrong key on either side; a role the client did not prove. */
	assert_int_equal(handshake(&other, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &p),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(handshake(&k, &other, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &p),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_ADMIN, &p),
			 LUNAR_ERR_UNAUTHORIZED);

	/* Our own hello sent back is refused; no proof checks before a hello. */
	auth_hs_start(&hs, 0, h);
	assert_int_equal(auth_hs_verify(&hs, &k, AUTH_ROLE_NODE, h), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(auth_hs_peer(&hs, h), LUNAR_ERR_UNAUTHORIZED);
	assert_true(auth_role_valid(AUTH_ROLE_NODE) && auth_role_valid(AUTH_ROLE_ADMIN));
	assert_false(auth_role_valid(AUTH_ROLE_SERVER) || auth_role_valid(0) ||
		     auth_role_valid(77));
}

static void test_auth_sessions_differ(void **state)
{
	struct auth_key k;
	struct pair a, b;

	auth_random(k.k, sizeof(k.k));
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &a), 0);
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &b), 0);
	assert_memory_not_equal(a.c.tx_key, b.c.tx_key, AUTH_KEY_BYTES);
}

static void test_auth_mac_detects_any_change(void **state)
{
	struct auth_key k;
	struct pair p;
	unsigned char msg[40], tag[AUTH_TAG_BYTES];
	struct iovec iov[2] = {{msg, 10}, {msg + 10, 30}};
	uint64_t ctr;

	auth_random(k.k, sizeof(k.k));
	auth_random(msg, sizeof(msg));
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &p), 0);
	ctr = auth_tx_next(&p.c);
	assert_int_equal(ctr, 0);
	assert_int_equal(auth_tx_next(&p.c), 1);
	auth_mac(p.c.tx_key, ctr, iov, 2, tag);
	assert_int_equal(auth_mac_check(p.s.rx_key, ctr, iov, 2, tag), 0);
	assert_int_equal(auth_mac_check(p.s.rx_key, ctr + 1, iov, 2, tag), LUNAR_ERR_UNAUTHORIZED);
	/* The reverse direction's key does not check it (no reflection). */
	assert_int_equal(auth_mac_check(p.c.rx_key, ctr, iov, 2, tag), LUNAR_ERR_UNAUTHORIZED);
	for (size_t bit = 0; bit < sizeof(msg) * 8; bit += 7) {
		msg[bit / 8] ^= (unsigned char)(1u << (bit % 8));
		assert_int_equal(auth_mac_check(p.s.rx_key, ctr, iov, 2, tag),
				 LUNAR_ERR_UNAUTHORIZED);
		msg[bit / 8] ^= (unsigned char)(1u << (bit % 8));
	}
	tag[3] ^= 0x40;
	assert_int_equal(auth_mac_check(p.s.rx_key, ctr, iov, 2, tag), LUNAR_ERR_UNAUTHORIZED);
}

static void test_auth_replay_window(void **state)
{
	struct auth_session s;

	memset(&s, 0, sizeof(s));
	assert_int_equal(auth_replay_accept(&s, 0), 0);
	assert_int_equal(auth_replay_accept(&s, 0), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(auth_replay_accept(&s, 5), 0);
	assert_int_equal(auth_replay_accept(&s, 3), 0); /* late, unseen: taken */
	assert_int_equal(auth_replay_accept(&s, 3), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(auth_replay_accept(&s, 5), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(auth_replay_accept(&s, 100), 0);
	assert_int_equal(auth_replay_accept(&s, 37), 0);		 /* 63 below the top */
	assert_int_equal(auth_replay_accept(&s, 36), AUTH_REPLAY_STALE); /* 64 below */
	assert_int_equal(auth_replay_accept(&s, 36), AUTH_REPLAY_STALE); /* still not taken */
	assert_int_equal(auth_replay_accept(&s, 4), AUTH_REPLAY_STALE);
	assert_int_equal(auth_replay_accept(&s, UINT64_MAX), LUNAR_ERR_UNAUTHORIZED);
	for (uint64_t c = 101; c < 1000; c++)
		assert_int_equal(auth_replay_accept(&s, c), 0);
	assert_int_equal(auth_replay_accept(&s, 999), LUNAR_ERR_UNAUTHORIZED);
}

static void test_auth_capability_binds_every_field(void **state)
{
	unsigned char secret[AUTH_KEY_BYTES], other[AUTH_KEY_BYTES], tag[AUTH_CAP_BYTES];
	const char seg[] = "node-a/seg0", subj[] = "default\0key";
	struct auth_cap c = {seg, sizeof(seg) - 1, NULL, 0, 1, 4096, 65536, 7, 1000};
	struct auth_cap d;

	auth_random(secret, sizeof(secret));
	auth_random(other, sizeof(other));
	auth_cap_make(secret, &c, tag);
	assert_int_equal(auth_cap_check(secret, &c, tag, 999), 0);
	assert_int_equal(auth_cap_check(secret, &c, tag, 1000), 0);
	assert_int_equal(auth_cap_check(secret, &c, tag, 1001), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(auth_cap_check(other, &c, tag, 0), LUNAR_ERR_UNAUTHORIZED);
#define CHANGED(field, value)                                                                      \
	do {                                                                                       \
		d = c;                                                                             \
		d.field = value;                                                                   \
		assert_int_equal(auth_cap_check(secret, &d, tag, 0), LUNAR_ERR_UNAUTHORIZED);      \
	} while (0)
	CHANGED(op, 2);
	CHANGED(offset, 0);
	CHANGED(length, 65537);
	CHANGED(version, 8);
	CHANGED(expiry_ms, 100000);
	CHANGED(segment_len, 10);
	CHANGED(segment, "node-b/seg0");
	CHANGED(subject, subj);
#undef CHANGED
	/* A subject of 0 bytes is not the same grant as no subject. */
	d = c;
	d.subject = subj;
	d.subject_len = 0;
	assert_int_equal(auth_cap_check(secret, &d, tag, 0), LUNAR_ERR_UNAUTHORIZED);
}

static void test_auth_sealed_secret(void **state)
{
	struct auth_key k;
	struct pair p, q;
	unsigned char secret[AUTH_KEY_BYTES], got[AUTH_KEY_BYTES], box[AUTH_SEALED_BYTES];

	auth_random(k.k, sizeof(k.k));
	auth_random(secret, sizeof(secret));
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &p), 0);
	assert_int_equal(handshake(&k, &k, AUTH_ROLE_NODE, AUTH_ROLE_NODE, &q), 0);
	auth_seal(&p.s, secret, box);
	assert_null(memmem(box, sizeof(box), secret, 8));
	assert_int_equal(auth_unseal(&p.c, box, got), 0);
	assert_memory_equal(got, secret, sizeof(secret));
	/* Another session (another node holding the same key) cannot open it. */
	assert_int_equal(auth_unseal(&q.c, box, got), LUNAR_ERR_UNAUTHORIZED);
	box[30] ^= 1;
	assert_int_equal(auth_unseal(&p.c, box, got), LUNAR_ERR_UNAUTHORIZED);
}

static void test_auth_http_token(void **state)
{
	struct auth_key k, other;
	char t[AUTH_TOKEN_CHARS + 1], u[AUTH_TOKEN_CHARS + 1];

	auth_random(k.k, sizeof(k.k));
	auth_random(other.k, sizeof(other.k));
	auth_http_token(&k, t);
	assert_int_equal(strlen(t), AUTH_TOKEN_CHARS);
	assert_int_equal(auth_http_token_check(&k, t), 0);
	auth_http_token(&other, u);
	assert_string_not_equal(t, u);
	assert_int_equal(auth_http_token_check(&k, u), LUNAR_ERR_UNAUTHORIZED);
	t[AUTH_TOKEN_CHARS - 1] = 'x';
	assert_int_equal(auth_http_token_check(&k, t), LUNAR_ERR_UNAUTHORIZED);
	assert_int_equal(auth_http_token_check(&k, ""), LUNAR_ERR_UNAUTHORIZED);
}

static void test_auth_bind_policy(void **state)
{
	char why[512], p[128];
	struct auth_key k;

	assert_true(auth_host_is_loopback("127.0.0.1"));
	assert_true(auth_host_is_loopback("127.3.2.1"));
	assert_true(auth_host_is_loopback("::1"));
	assert_true(auth_host_is_loopback("localhost"));
	assert_false(auth_host_is_loopback("0.0.0.0"));
	assert_false(auth_host_is_loopback("::"));
	assert_false(auth_host_is_loopback("10.1.2.3"));
	assert_false(auth_host_is_loopback("128.0.0.1"));
	assert_false(auth_host_is_loopback(""));
	assert_false(auth_host_is_loopback(NULL));
	assert_int_equal(auth_bind_check("127.0.0.1", 0, 0, why, sizeof(why)), 0);
	assert_int_equal(auth_bind_check("0.0.0.0", 0, 0, why, sizeof(why)),
			 LUNAR_ERR_UNAUTHORIZED);
	assert_non_null(strstr(why, "--cluster-key"));
	assert_int_equal(auth_bind_check("0.0.0.0", 1, 0, why, sizeof(why)), 0);
	assert_int_equal(auth_bind_check("0.0.0.0", 0, 1, why, sizeof(why)), 0);

	unsetenv(AUTH_KEY_ENV);
	assert_int_equal(auth_key_resolve(NULL, &k, why, sizeof(why)), 0);
	path_of(p, sizeof(p), "env-key");
	assert_int_equal(auth_keygen(p), 0);
	setenv(AUTH_KEY_ENV, p, 1);
	assert_int_equal(auth_key_resolve(NULL, &k, why, sizeof(why)), 1);
	assert_int_equal(chmod(p, 0604), 0);
	assert_int_equal(auth_key_resolve(NULL, &k, why, sizeof(why)), -EPERM);
	unsetenv(AUTH_KEY_ENV);
}

LUNAR_TEST_MAIN(setup, teardown, test_auth_keygen_and_load,
		test_auth_key_load_refuses_open_modes_and_bad_sizes,
		test_auth_handshake_agrees_and_refuses, test_auth_sessions_differ,
		test_auth_mac_detects_any_change, test_auth_replay_window,
		test_auth_capability_binds_every_field, test_auth_sealed_secret,
		test_auth_http_token, test_auth_bind_policy)
