/*
 * test_rpc_stale.c - a keyed call overtaken by more calls than the
 * master's replay window holds (its thread held up between numbering and
 * sending it, as a loaded machine does): a real master and client, a
 * relay between them that holds one call's bytes while the client's other
 * thread makes AUTH_REPLAY_WINDOW + 6 calls. The master answers the late
 * one STALE without running it, and the client sends it again with a new
 * counter: the caller sees it succeed, and it ran once. A STALE the master
 * did not tag (forged by the relay) is not believed: the call fails and is
 * not sent again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <endian.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth.h"
#include "clock.h"
#include "lunar.h"
#include "master/master.h"
#include "master/rpc_server.h"
#include "rpc.h"
#include "rpc_auth.h"
#include "rpc_client.h"
#include "test_listen.h"

#define OVERTAKERS (AUTH_REPLAY_WINDOW + 6)
#define PUMPS_MAX  8
#define SP_HEAD	   12 /* a TCP frame's length (8) and request id (4) */
#define WAIT_MS	   5000

/* A TCP relay to the master; the first client bytes read after armed are
 * held until release (or answered with a forged STALE when forge). */
struct relay {
	int lfd;
	uint16_t port, mport;
	pthread_t acceptor, pumps[PUMPS_MAX];
	int npumps;
	atomic_bool stop, armed, held, release, forge;
};

struct pump {
	struct relay *r;
	int cfd, mfd;
};

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t k = write(fd, p, n);

		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Answer the held CALL (one whole frame in call) with a STALE of its
 * counter under a tag nobody computed. */
static int forge_stale(int cfd, const unsigned char *call, size_t n)
{
	unsigned char out[SP_HEAD + 64], tag[AUTH_TAG_BYTES] = {0};
	struct lp_env c, st = {.kind = LP_KIND_STALE, .tag = tag};
	uint64_t len_be;
	int k;

	if (n < SP_HEAD || lp_env_decode(call + SP_HEAD, n - SP_HEAD, &c))
		return -1;
	st.ctr = c.ctr;
	k = lp_env_encode(&st, out + SP_HEAD, sizeof(out) - SP_HEAD);
	if (k < 0)
		return -1;
	len_be = htobe64((uint64_t)k + 4);
	memcpy(out, &len_be, 8);
	memcpy(out + 8, call + 8, 4); /* the request id */
	return write_all(cfd, out, SP_HEAD + (size_t)k);
}

static void *pump_main(void *arg)
{
	struct pump *p = arg;
	struct relay *r = p->r;
	unsigned char buf[65536], held[4096];
	size_t nheld = 0;
	bool holding = false;

	while (!atomic_load(&r->stop)) {
		struct pollfd fds[2] = {{.fd = p->cfd, .events = holding ? 0 : POLLIN},
					{.fd = p->mfd, .events = POLLIN}};
		ssize_t n;

		if (holding && atomic_load(&r->release)) {
			if (atomic_load(&r->forge) ? forge_stale(p->cfd, held, nheld)
						   : write_all(p->mfd, held, nheld))
				break;
			holding = false;
		}
		if (poll(fds, 2, 20) < 0)
			break;
		if (!holding && (fds[0].revents & (POLLIN | POLLHUP))) {
			if ((n = read(p->cfd, buf, sizeof(buf))) <= 0)
				break;
			if ((size_t)n <= sizeof(held) && atomic_exchange(&r->armed, false)) {
				memcpy(held, buf, (size_t)n);
				nheld = (size_t)n;
				holding = true;
				atomic_store(&r->held, true);
			} else if (write_all(p->mfd, buf, (size_t)n)) {
				break;
			}
		}
		if (fds[1].revents & (POLLIN | POLLHUP)) {
			if ((n = read(p->mfd, buf, sizeof(buf))) <= 0 ||
			    write_all(p->cfd, buf, (size_t)n))
				break;
		}
	}
	close(p->cfd);
	close(p->mfd);
	free(p);
	return NULL;
}

static int dial_master(uint16_t port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void *accept_main(void *arg)
{
	struct relay *r = arg;

	while (!atomic_load(&r->stop)) {
		struct pollfd pf = {.fd = r->lfd, .events = POLLIN};
		struct pump *p;
		int cfd;

		if (poll(&pf, 1, 20) <= 0)
			continue;
		if ((cfd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC)) < 0)
			continue;
		p = calloc(1, sizeof(*p));
		if (!p || r->npumps == PUMPS_MAX || (p->mfd = dial_master(r->mport)) < 0) {
			close(cfd);
			free(p);
			continue;
		}
		p->r = r;
		p->cfd = cfd;
		if (pthread_create(&r->pumps[r->npumps], NULL, pump_main, p)) {
			close(cfd);
			close(p->mfd);
			free(p);
			continue;
		}
		r->npumps++;
	}
	return NULL;
}

static void relay_start(struct relay *r, uint16_t mport)
{
	memset(r, 0, sizeof(*r));
	r->mport = mport;
	r->lfd = test_listen_loopback(16, &r->port);
	assert_int_equal(pthread_create(&r->acceptor, NULL, accept_main, r), 0);
}

/* Stop the relay; every pump is joined (the master and client may still
 * hold their ends). */
static void relay_stop(struct relay *r)
{
	atomic_store(&r->stop, true);
	pthread_join(r->acceptor, NULL);
	for (int i = 0; i < r->npumps; i++)
		pthread_join(r->pumps[i], NULL);
	close(r->lfd);
}

struct fixture {
	struct mst_master *m;
	struct mst_server *s;
	struct relay relay;
	struct lp_client *c;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct mst_config cfg;
	struct auth_key key;
	char url[64];

	assert_non_null(f);
	assert_int_equal(auth_init(), 0);
	auth_random(key.k, sizeof(key.k));
	mst_config_defaults(&cfg);
	assert_int_equal(mst_master_create(&cfg, &f->m), 0);
	assert_int_equal(mst_server_start(f->m, "tcp://127.0.0.1:0", 4, &key, &f->s), 0);
	relay_start(&f->relay, mst_server_port(f->s));
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%u", (unsigned)f->relay.port);
	assert_int_equal(lp_client_create(url, &key, AUTH_ROLE_NODE, 0, &f->c), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	lp_client_close(f->c);
	relay_stop(&f->relay);
	lp_client_destroy(f->c);
	mst_server_stop(f->s);
	mst_master_destroy(f->m);
	free(f);
	return 0;
}

static int ping(struct lp_client *c)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	ProtobufCMessage *rep;
	int rc;

	rq.client_id = 0x5ca1ab1e;
	rc = lp_client_call(c, lp_method_find(LUNAR__METHOD__PING), &rq.base, &rep, WAIT_MS);
	if (!rc) {
		rc = ((const Lunar__PingReply *)rep)->status->code;
		protobuf_c_message_free_unpacked(rep, NULL);
	}
	return rc;
}

/* The sample of the master's /metrics line that starts with name, e.g.
 * "lunar_master_rpc_stale_total"; -1 when there is none. */
static long long metric(struct fixture *f, const char *name)
{
	char *text, *at, line[256];
	size_t len;
	long long v = -1;

	snprintf(line, sizeof(line), "\n%s ", name);
	assert_int_equal(mst_metrics_render(f->m, &text, &len), 0);
	if ((at = strstr(text, line)))
		v = strtoll(at + strlen(line), NULL, 10);
	free(text);
	return v;
}

struct late {
	pthread_t t;
	struct lp_client *c;
	int rc;
};

static void *late_main(void *arg)
{
	struct late *l = arg;

	l->rc = ping(l->c);
	return NULL;
}

/* Hold one ping in the relay, make OVERTAKERS others, let it go; its code. */
static int overtaken_ping(struct fixture *f)
{
	uint64_t end = lc_now_ms() + WAIT_MS;
	struct late l = {.c = f->c};

	assert_int_equal(ping(f->c), 0); /* the session opened, a connection pooled */
	atomic_store(&f->relay.armed, true);
	assert_int_equal(pthread_create(&l.t, NULL, late_main, &l), 0);
	while (!atomic_load(&f->relay.held) && lc_now_ms() < end)
		usleep(1000);
	assert_true(atomic_load(&f->relay.held));
	for (int i = 0; i < OVERTAKERS; i++)
		assert_int_equal(ping(f->c), 0);
	atomic_store(&f->relay.release, true);
	pthread_join(l.t, NULL);
	return l.rc;
}

static void test_rpc_stale_call_sent_again_and_run_once(void **state)
{
	struct fixture *f = *state;

	assert_int_equal(overtaken_ping(f), 0);
	assert_int_equal(metric(f, "lunar_master_rpc_stale_total"), 1);
	assert_int_equal(metric(f, "lunar_master_rpc_rejected_total{reason=\"replay\"}"), 0);
	assert_int_equal(metric(f, "lunar_master_calls_total{method=\"Ping\"}"), OVERTAKERS + 2);
}

static void test_rpc_stale_forged_not_believed(void **state)
{
	struct fixture *f = *state;

	atomic_store(&f->relay.forge, true);
	assert_int_equal(overtaken_ping(f), LUNAR_ERR_RPC_FAIL);
	assert_int_equal(metric(f, "lunar_master_calls_total{method=\"Ping\"}"), OVERTAKERS + 1);
	assert_int_equal(ping(f->c), 0); /* the client goes on */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_rpc_stale_call_sent_again_and_run_once, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_rpc_stale_forged_not_believed, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
