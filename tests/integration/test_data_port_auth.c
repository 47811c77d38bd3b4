/*
 * test_data_port_auth.c - the attack on the data port, replayed against a
 * keyed cluster (SPEC §13): a master and proxies A and B with one cluster
 * key, values put through A stored on B's segment. A script that connects
 * to B's data port and sends READ or WRITE frames at a value's offset, or
 * the same-CRC forgery, gets no byte and a closed connection; so does one
 * that completes the handshake with the key but has no grant, and a
 * recorded or altered keyed frame. The values still read byte-exact through
 * A and B, legitimate puts and gets between the nodes work, and B counts
 * each refusal in lunar_proxy_data_rejected_total{reason}. Beside an RDMA
 * device (tests/vm/), A's writes and reads go by RDMA.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "crc32c.h"
#include "harness.h"
#include "http_get.h"
#include "tests/cmocka_main.h"

#define SECRET_LEN 34
#define BIG_LEN	   (1u << 20)
#define REQ_MAGIC  0x51524e4cu
#define HS_MAGIC   0x53484e4cu
#define OP_READ	   1
#define OP_WRITE   2

static char sock_a[PATH_MAX], sock_b[PATH_MAX], seg_b[H_SEG_NAME], keyfile[PATH_MAX];
static struct h_proc *master, *proxy_a, *proxy_b;
static struct lunar_client *ca, *cb;
static struct auth_key ckey;
static uint8_t secret_val[SECRET_LEN];
static uint64_t secret_off;

static int data_port_b(void)
{
	return atoi(strrchr(seg_b, ':') + 1);
}

/* The offset of key's replica in the master's /admin/stat, or -1. */
static int64_t stat_offset(const char *key)
{
	static char text[65536];
	char path[256], want[H_SEG_NAME + 16];
	const char *p;

	snprintf(path, sizeof(path), "/admin/stat?tenant=default&key=%s", key);
	snprintf(want, sizeof(want), "\"segment\":\"%s\"", seg_b);
	if (hg_get(hg_log_http_port(master->log), path, text, sizeof(text)) != 200 ||
	    !strstr(text, want) || !(p = strstr(text, "\"offset\"")))
		return -1;
	p += strlen("\"offset\"");
	while (*p && (*p < '0' || *p > '9'))
		p++;
	return strtoll(p, NULL, 10);
}

/* Put buf under key through A with its one replica on B; its offset. */
static uint64_t put_on_b(const char *key, const void *buf, size_t len)
{
	const char *pref[1] = {seg_b};
	const struct lunar_put_cfg on_b = {
	    .replica_num = 1, .preferred_segments = pref, .preferred_count = 1};
	int64_t off = -1;

	for (int tries = 0; tries < 4 && off < 0; tries++) {
		H_ASSERT_EQ(lunar_put(ca, key, buf, len, &on_b), 0);
		off = stat_offset(key);
		if (off < 0)
			H_ASSERT_EQ(lunar_remove(ca, key, 1), 0);
	}
	H_ASSERT(off >= 0);
	return (uint64_t)off;
}

static int setup(void **state)
{
	char why[256];
	int port;

	(void)state;
	h_keyless(); /* this test makes and hands out its keys itself */
	if (h_init() || auth_init())
		return -1;
	snprintf(keyfile, sizeof(keyfile), "%s", h_path("cluster.key"));
	if (auth_keygen(keyfile) || auth_key_load(keyfile, &ckey, why, sizeof(why)))
		return -1;
	if (!(master = h_cluster_master(&port, "--cluster-key", keyfile, NULL)))
		return -1;
	snprintf(sock_a, sizeof(sock_a), "%s", h_path("a.sock"));
	snprintf(sock_b, sizeof(sock_b), "%s", h_path("b.sock"));
	proxy_a = h_start_proxy("proxyA", sock_a, port, "--cluster-key", keyfile, "--segment-size",
				"16MiB", NULL);
	proxy_b = h_start_peer("proxyB", sock_b, port, seg_b, "--cluster-key", keyfile,
			       "--segment-size", "16MiB", NULL);
	if (!proxy_a || !proxy_b)
		return -1;
	ca = h_client(sock_a);
	cb = h_client(sock_b);
	memcpy(secret_val, "the launch code is 0000-1111-2222!", SECRET_LEN);
	secret_off = put_on_b("dpa/secret", secret_val, SECRET_LEN);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	lunar_close(ca);
	lunar_close(cb);
	h_stop_all();
	h_cleanup();
	return 0;
}

/* The secret still reads byte-exact through both proxies. */
static void secret_intact(void)
{
	uint8_t got[SECRET_LEN + 8];

	H_ASSERT_EQ(lunar_get_into(ca, "dpa/secret", got, sizeof(got)), SECRET_LEN);
	H_ASSERT(!memcmp(got, secret_val, SECRET_LEN));
	H_ASSERT_EQ(lunar_get_into(cb, "dpa/secret", got, sizeof(got)), SECRET_LEN);
	H_ASSERT(!memcmp(got, secret_val, SECRET_LEN));
}

static int dial_b(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)data_port_b())};
	struct timeval tv = {.tv_sec = 8};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	H_ASSERT(fd >= 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	H_ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Everything the peer sends until it closes; fails on a timeout (the
 * connection must be closed, not left hanging). */
static size_t drain(int fd, uint8_t *buf, size_t cap)
{
	size_t got = 0;
	ssize_t n;

	while (got < cap && (n = recv(fd, buf + got, cap - got, 0)) > 0)
		got += (size_t)n;
	H_ASSERT(got < cap);
	n = recv(fd, buf, 1, 0);
	H_ASSERT_MSG(n == 0 || (n < 0 && errno == ECONNRESET), "connection left open");
	close(fd);
	return got;
}

/* A keyless (wire version 5) request frame: the header, a mount, then
 * zeros. */
static void plain_req(uint8_t out[128], uint16_t op, uint64_t off, uint64_t len)
{
	uint32_t magic = htole32(REQ_MAGIC);
	uint16_t ver = htole16(5), o = htole16(op);
	uint64_t f[4] = {htole64(off), htole64(len), htole64(42), htole64(1)};

	memset(out, 0, 128);
	memcpy(out, &magic, 4);
	memcpy(out + 4, &ver, 2);
	memcpy(out + 6, &o, 2);
	memcpy(out + 8, f, sizeof(f));
}

static void test_data_port_auth_keyless_frames_refused(void **state)
{
	uint8_t req[128], buf[4096], junk[SECRET_LEN] = {0};
	int fd;

	(void)state;
	plain_req(req, OP_READ, secret_off, SECRET_LEN);
	fd = dial_b();
	H_ASSERT_EQ(send(fd, req, sizeof(req), 0), (ssize_t)sizeof(req));
	H_ASSERT_EQ(drain(fd, buf, sizeof(buf)), 0);
	plain_req(req, OP_WRITE, secret_off, SECRET_LEN);
	fd = dial_b();
	H_ASSERT_EQ(send(fd, req, sizeof(req), MSG_MORE), (ssize_t)sizeof(req));
	(void)!send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
	H_ASSERT_EQ(drain(fd, buf, sizeof(buf)), 0);
	secret_intact();
}

/* Four bytes that make crc32c(prefix || them) == want (CRC-32C is linear:
 * run the register back from the wanted one through four zero bytes). */
static void crc_force(const uint8_t *prefix, size_t len, uint32_t want, uint8_t out[4])
{
	uint32_t r = ~lc_crc32c(0, prefix, len), t = ~want;

	for (int i = 0; i < 32; i++)
		t = t & 0x80000000u ? ((t ^ 0x82F63B78u) << 1) | 1 : t << 1;
	t ^= r;
	for (int i = 0; i < 4; i++)
		out[i] = (uint8_t)(t >> (8 * i));
}

/* Complete the handshake on fd as a NODE with key k; the session. */
static int handshake(int fd, const struct auth_key *k, struct auth_session *s)
{
	uint8_t out[72], in[104], proof[AUTH_PROOF_BYTES];
	uint32_t magic = htole32(HS_MAGIC);
	uint16_t ver = htole16(4), role = htole16(AUTH_ROLE_NODE);
	struct auth_hs hs;

	memcpy(out, &magic, 4);
	memcpy(out + 4, &ver, 2);
	memcpy(out + 6, &role, 2);
	auth_hs_start(&hs, 1, out + 8);
	if (send(fd, out, sizeof(out), 0) != (ssize_t)sizeof(out) ||
	    recv(fd, in, sizeof(in), MSG_WAITALL) != (ssize_t)sizeof(in) ||
	    auth_hs_peer(&hs, in + 8) || auth_hs_verify(&hs, k, AUTH_ROLE_SERVER, in + 72))
		return -1;
	auth_hs_proof(&hs, k, AUTH_ROLE_NODE, proof);
	if (send(fd, proof, sizeof(proof), 0) != (ssize_t)sizeof(proof))
		return -1;
	return auth_hs_finish(&hs, k, AUTH_ROLE_NODE, s);
}

/* A keyed (version 4) request: header, counter, crc, a made-up grant
 * (tag), MAC under s, zeros. */
static void keyed_req(uint8_t out[128], struct auth_session *s, uint16_t op, uint64_t off,
		      uint64_t len, uint32_t crc, const uint8_t tag[16])
{
	uint64_t ctr = auth_tx_next(s);
	uint64_t f[5] = {htole64(ctr), 0, htole64(off), htole64(len), htole64(1)};
	uint64_t expiry = htole64(UINT64_MAX / 2);
	uint32_t c = htole32(crc);
	struct iovec v = {out, 96};

	plain_req(out, op, off, len);
	out[4] = 4; /* version */
	memcpy(out + 32, f, sizeof(f));
	memcpy(out + 40, &c, 4);
	memset(out + 44, 0, 4);
	memcpy(out + 72, &expiry, 8);
	memcpy(out + 80, tag, 16);
	auth_mac(s->tx_key, ctr, &v, 1, out + 96);
}

/* One keyed request on a fresh handshaken connection, payload after it;
 * the bytes that came back until the close. */
static size_t keyed_try(const uint8_t *frame, const void *payload, size_t plen, uint8_t *buf,
			size_t cap, struct auth_session *s)
{
	int fd = dial_b();

	H_ASSERT_EQ(handshake(fd, &ckey, s), 0);
	H_ASSERT_EQ(send(fd, frame, 128, plen ? MSG_MORE : 0), 128);
	if (plen)
		(void)!send(fd, payload, plen, MSG_NOSIGNAL);
	return drain(fd, buf, cap);
}

/* The status of a 64-byte keyed reply whose MAC checks under s. */
static int32_t keyed_status(const uint8_t *rep, const struct auth_session *s, uint64_t ctr)
{
	struct iovec v = {(void *)rep, 32};
	int32_t status;

	H_ASSERT_EQ(auth_mac_check(s->rx_key, ctr, &v, 1, rep + 32), 0);
	memcpy(&status, rep + 4, 4);
	return (int32_t)le32toh((uint32_t)status);
}

static void test_data_port_auth_crc_forgery_refused(void **state)
{
	uint8_t forged[SECRET_LEN], req[128], buf[4096], tag[16] = {0};
	uint32_t want = lc_crc32c(0, secret_val, SECRET_LEN);
	struct auth_session s;
	int fd;

	(void)state;
	memcpy(forged, "the launch code is 6666-6666-", SECRET_LEN - 4);
	crc_force(forged, SECRET_LEN - 4, want, forged + SECRET_LEN - 4);
	H_ASSERT_EQ(lc_crc32c(0, forged, SECRET_LEN), want);
	H_ASSERT(memcmp(forged, secret_val, SECRET_LEN));
	/* Keyless, as the original script did. */
	plain_req(req, OP_WRITE, secret_off, SECRET_LEN);
	fd = dial_b();
	H_ASSERT_EQ(send(fd, req, 128, MSG_MORE), 128);
	(void)!send(fd, forged, SECRET_LEN, MSG_NOSIGNAL);
	H_ASSERT_EQ(drain(fd, buf, sizeof(buf)), 0);
	/* With the key but no grant: UNAUTHORIZED, the payload never read. */
	memset(&s, 0, sizeof(s));
	keyed_req(req, &s, OP_WRITE, secret_off, SECRET_LEN, want, tag);
	{
		struct auth_session live;
		size_t n = keyed_try(req, forged, SECRET_LEN, buf, sizeof(buf), &live);

		(void)n; /* sealed under a zero session: the owner sees a bad MAC */
		H_ASSERT_EQ(n, 0);
		fd = dial_b();
		H_ASSERT_EQ(handshake(fd, &ckey, &live), 0);
		keyed_req(req, &live, OP_WRITE, secret_off, SECRET_LEN, want, tag);
		H_ASSERT_EQ(send(fd, req, 128, MSG_MORE), 128);
		(void)!send(fd, forged, SECRET_LEN, MSG_NOSIGNAL);
		H_ASSERT_EQ(drain(fd, buf, sizeof(buf)), 64);
		H_ASSERT_EQ(keyed_status(buf, &live, 0), LUNAR_ERR_UNAUTHORIZED);
	}
	secret_intact();
}

static void test_data_port_auth_key_without_grant(void **state)
{
	uint8_t req[128], buf[4096], tag[16] = {0};
	struct auth_session s;
	int fd;

	(void)state;
	for (int variant = 0; variant < 2; variant++) {
		fd = dial_b();
		H_ASSERT_EQ(handshake(fd, &ckey, &s), 0);
		if (variant)
			auth_random(tag, sizeof(tag)); /* a made-up grant */
		keyed_req(req, &s, OP_READ, secret_off, SECRET_LEN, 0, tag);
		H_ASSERT_EQ(send(fd, req, sizeof(req), 0), (ssize_t)sizeof(req));
		/* A 64-byte UNAUTHORIZED reply, then the close: no byte of the value. */
		H_ASSERT_EQ(drain(fd, buf, sizeof(buf)), 64);
		H_ASSERT_EQ(keyed_status(buf, &s, 0), LUNAR_ERR_UNAUTHORIZED);
	}
	/* A handshake with another key fails: closed, nothing served. */
	{
		struct auth_key other;

		auth_random(other.k, sizeof(other.k));
		fd = dial_b();
		H_ASSERT(handshake(fd, &other, &s) != 0);
		close(fd);
	}
	secret_intact();
}

static void test_data_port_auth_replay_and_bitflip(void **state)
{
	uint8_t req[128], buf[4096], tag[16] = {0};
	struct auth_session s1, s2;
	int fd;

	(void)state;
	/* Recorded on one connection, replayed on another: a bad MAC there. */
	fd = dial_b();
	H_ASSERT_EQ(handshake(fd, &ckey, &s1), 0);
	keyed_req(req, &s1, OP_READ, secret_off, SECRET_LEN, 0, tag);
	close(fd);
	H_ASSERT_EQ(keyed_try(req, NULL, 0, buf, sizeof(buf), &s2), 0);
	/* A frame of this session with one bit flipped (the length). */
	fd = dial_b();
	H_ASSERT_EQ(handshake(fd, &ckey, &s2), 0);
	keyed_req(req, &s2, OP_READ, secret_off, SECRET_LEN, 0, tag);
	req[16] ^= 0x40;
	H_ASSERT_EQ(send(fd, req, sizeof(req), 0), (ssize_t)sizeof(req));
	H_ASSERT_EQ(drain(fd, buf, sizeof(buf)), 0);
	secret_intact();
}

/* B's figure of the series name{label="value"}, or -1. */
static long long b_metric(const char *name, const char *label, const char *value)
{
	static char text[1 << 16];
	char want[128];
	const char *p;

	snprintf(want, sizeof(want), "%s{%s=\"%s\"} ", name, label, value);
	if (hg_get(hg_log_http_port(proxy_b->log), "/metrics", text, sizeof(text)) != 200 ||
	    !(p = strstr(text, want)))
		return -1;
	return atoll(p + strlen(want));
}

/* B's lunar_proxy_data_rejected_total{reason="..."}, or -1. */
static long long rejected(const char *reason)
{
	return b_metric("lunar_proxy_data_rejected_total", "reason", reason);
}

static void test_data_port_auth_cluster_works_and_counts(void **state)
{
	uint8_t *w = malloc(BIG_LEN), *r = malloc(BIG_LEN);
	int64_t mark = h_rdma_mark(proxy_a);
	char key_name[64];

	(void)state;
	H_ASSERT(w && r);
	for (int i = 0; i < 4; i++) {
		snprintf(key_name, sizeof(key_name), "dpa/big-%d", i);
		h_fill(w, BIG_LEN - (size_t)i * 999, h_seed(key_name));
		put_on_b(key_name, w, BIG_LEN - (size_t)i * 999);
		H_ASSERT_EQ(lunar_get_into(ca, key_name, r, BIG_LEN), BIG_LEN - i * 999);
		H_ASSERT_EQ(h_verify(r, BIG_LEN - (size_t)i * 999, h_seed(key_name)), -1);
		H_ASSERT_EQ(lunar_get_into(cb, key_name, r, BIG_LEN), BIG_LEN - i * 999);
		H_ASSERT_EQ(h_verify(r, BIG_LEN - (size_t)i * 999, h_seed(key_name)), -1);
	}
	h_rdma_check(proxy_a, mark, 8); /* A's four writes to B and four reads */
	/* An upsert through A of a value on B: a new version, new grants (A
	 * holds no lease of the key, so it reads the new value). */
	h_fill(w, 8192, 76);
	put_on_b("dpa/up", w, 8192);
	h_fill(w, 4096, 77);
	H_ASSERT_EQ(lunar_upsert(ca, "dpa/up", w, 4096, NULL), 0);
	H_ASSERT_EQ(lunar_get_into(cb, "dpa/up", r, BIG_LEN), 4096);
	H_ASSERT_EQ(h_verify(r, 4096, 77), -1);
	H_ASSERT_EQ(lunar_get_into(ca, "dpa/up", r, BIG_LEN), 4096);
	H_ASSERT_EQ(h_verify(r, 4096, 77), -1);
	secret_intact();
	print_message("B refused: handshake %lld, mac %lld, replay %lld, capability %lld\n",
		      rejected("handshake"), rejected("mac"), rejected("replay"),
		      rejected("capability"));
	H_ASSERT(rejected("handshake") >= 4); /* keyless frames, a wrong key */
	H_ASSERT(rejected("mac") >= 3);	      /* zero session, replay elsewhere, bit flip */
	H_ASSERT(rejected("capability") >= 3);
	H_ASSERT_EQ(rejected("crc"), 0);
	/* No slot was short: nothing taken back, and both series are there. */
	H_ASSERT_EQ(b_metric("lunar_proxy_data_evicted_total", "state", "handshake"), 0);
	H_ASSERT_EQ(b_metric("lunar_proxy_data_evicted_total", "state", "idle"), 0);
	free(w);
	free(r);
}

LUNAR_TEST_MAIN(setup, teardown, test_data_port_auth_keyless_frames_refused,
		test_data_port_auth_crc_forgery_refused, test_data_port_auth_key_without_grant,
		test_data_port_auth_replay_and_bitflip,
		test_data_port_auth_cluster_works_and_counts)
