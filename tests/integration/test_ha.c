/*
 * test_ha.c - lunar-master's leader election through a real etcd (SPEC
 * §14): of two masters exactly one leads and the other refuses calls naming
 * it; a killed leader is replaced within the lease TTL + 2 s in a larger
 * view; a leader frozen past its lease is fenced when it wakes (it refuses
 * calls and exits to be restarted); with three etcd members the leader
 * survives the loss of etcd's leader, and loses the right to mutate (a
 * typed error, in bounded time) while quorum is lost, until it returns;
 * behind an etcd slow to answer (600 ms, against a 1 s renewal period),
 * the leader is never fenced; a leader whose key is deleted ends its term
 * at once. Skips (77) without etcd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "etcd_util.h"
#include "harness.h"
#include "http_get.h"
#include "lunar.h"
#include "rpc.h"
#include "slow_link.h"

#define TTL_S	   3
#define TTL_ARG	   "3s"
#define ELECT_MS   (TTL_S * 1000 + 2000) /* a new leader within TTL + 2 s */
#define RECOVER_MS 20000		 /* etcd re-elects, the master renews */
#define SLOW_MS	   600 /* etcd's answer time in test_ha_slow_etcd_keeps_the_lead */

struct node {
	struct h_proc *p;
	int port, http;
	char adv[64];
};

static char *text;
static struct slow_link sl; /* stopped by the teardown when a case fails */

static int case_setup(void **state)
{
	(void)state;
	text = malloc(1 << 16);
	h_keyless(); /* the test speaks the plain RPC to its masters */
	return text && !h_init() ? 0 : -1;
}

static int case_teardown(void **state)
{
	(void)state;
	sl_stop(&sl);
	free(text);
	h_cleanup();
	return 0;
}

/* A master of the election with an etcd lease of ttl (e.g. "3s"). */
static void start_node_ttl(struct node *n, const char *name, const char *urls, const char *ttl)
{
	char http[16];

	n->port = h_free_port();
	n->http = h_free_port();
	snprintf(http, sizeof(http), "%d", n->http);
	snprintf(n->adv, sizeof(n->adv), "tcp://127.0.0.1:%d", n->port);
	n->p = h_start_master(name, n->port, "--http-port", http, "--etcd", urls, "--cluster-id",
			      "t", "--advertise", n->adv, "--etcd-lease-ttl", ttl, NULL);
	H_ASSERT(n->p != NULL);
}

static void start_node(struct node *n, const char *name, const char *urls)
{
	start_node_ttl(n, name, urls, TTL_ARG);
}

/* A metric of n's /metrics, or -1 when it does not answer. */
static int64_t metric(const struct node *n, const char *name)
{
	if (hg_get(n->http, "/metrics", text, 1 << 16) != 200)
		return -1;
	return hg_metric(text, name);
}

/*
 * RemoveAll (a mutation) on n: the status code, or 1 when n does not
 * answer. *view and msg get the reply's view and message.
 */
static int remove_all(const struct node *n, uint64_t *view, char *msg, size_t cap)
{
	Lunar__RemoveAllRequest rq = LUNAR__REMOVE_ALL_REQUEST__INIT;
	ProtobufCMessage *rep = NULL;
	nng_socket s;
	char url[64];
	void *buf = NULL, *in = NULL;
	size_t len, inlen;
	int code = 1;

	rq.tenant = "";
	rq.force = 1;
	snprintf(url, sizeof(url), "tcp://127.0.0.1:%d", n->port);
	if (nng_req0_open(&s))
		return 1;
	nng_socket_set_ms(s, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
	nng_socket_set_ms(s, NNG_OPT_RECVTIMEO, 3000);
	nng_socket_set_ms(s, NNG_OPT_SENDTIMEO, 3000);
	if (!nng_dial(s, url, NULL, 0) &&
	    !lp_request_pack(LUNAR__METHOD__REMOVE_ALL, &rq.base, &buf, &len) &&
	    !nng_send(s, buf, len, 0) && !nng_recv(s, &in, &inlen, NNG_FLAG_ALLOC)) {
		rep = protobuf_c_message_unpack(lp_method_find(LUNAR__METHOD__REMOVE_ALL)->rep,
						NULL, inlen, in);
		nng_free(in, inlen);
	}
	if (rep && lp_status(rep)) {
		code = lp_status(rep)->code;
		*view = lp_status(rep)->view;
		snprintf(msg, cap, "%s", lp_status(rep)->message ? lp_status(rep)->message : "");
	}
	if (rep)
		protobuf_c_message_free_unpacked(rep, NULL);
	free(buf);
	nng_close(s);
	return code;
}

/* Wait until n leads (is_leader 1 and a mutation passes): its view, or 0. */
static uint64_t wait_leads(const struct node *n, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms, view = 0;
	char msg[256];

	while (h_now_ms() < end) {
		if (metric(n, "lunar_master_is_leader") == 1 && remove_all(n, &view, msg, 256) == 0)
			return view;
		h_sleep_ms(50);
	}
	return 0;
}

/* Of a and b, the one that leads within timeout_ms (the other must not). */
static struct node *which_leads(struct node *a, struct node *b, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	while (h_now_ms() < end) {
		int la = metric(a, "lunar_master_is_leader") == 1;
		int lb = metric(b, "lunar_master_is_leader") == 1;

		H_ASSERT_MSG(!(la && lb), "both masters lead");
		if (la || lb)
			return la ? a : b;
		h_sleep_ms(50);
	}
	return NULL;
}

static void assert_refuses(const struct node *n, const char *leader)
{
	uint64_t view = 0;
	char msg[256];

	H_ASSERT_EQ(remove_all(n, &view, msg, sizeof(msg)),
		    LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS);
	H_ASSERT_MSG(!leader || strstr(msg, leader), "refusal '%s' does not name %s", msg, leader);
}

/* 1 when n refuses a mutation with a message naming leader. */
static int refusal_names(const struct node *n, const char *leader)
{
	uint64_t view;
	char msg[256];

	return remove_all(n, &view, msg, sizeof(msg)) == LUNAR_ERR_UNAVAILABLE_IN_CURRENT_STATUS &&
	       strstr(msg, leader);
}

/*
 * Masters "masterA" (a) and "masterB" (b) on a new one-member etcd cluster
 * ec: the one elected is *lead, the standby *other; the leader's view.
 */
static uint64_t elect_pair(struct e_cluster *ec, struct node *a, struct node *b, struct node **lead,
			   struct node **other)
{
	uint64_t view;

	H_ASSERT_EQ(e_start(ec, 1), 0);
	start_node(a, "masterA", ec->urls);
	start_node(b, "masterB", ec->urls);
	*lead = which_leads(a, b, ELECT_MS);
	H_ASSERT(*lead != NULL);
	*other = *lead == a ? b : a;
	view = wait_leads(*lead, ELECT_MS);
	H_ASSERT(view > 0);
	return view;
}

static void test_ha_one_of_two_leads(void **state)
{
	struct e_cluster ec;
	struct node a, b, *lead, *other;
	uint64_t view;

	(void)state;
	view = elect_pair(&ec, &a, &b, &lead, &other);
	H_ASSERT_EQ(metric(lead, "lunar_master_view"), (int64_t)view);
	h_sleep_ms(500); /* the standby has read the key by now */
	H_ASSERT_EQ(metric(other, "lunar_master_is_leader"), 0);
	H_ASSERT_EQ(metric(other, "lunar_master_view"), (int64_t)view);
	assert_refuses(other, lead->adv);
	H_ASSERT(hg_get(other->http, "/admin/ha", text, 1 << 16) == 200 &&
		 strstr(text, "\"role\":\"standby\"") && strstr(text, lead->adv));
}

/* Run lunarctl with args (a shell word list, no quotes needed) into out:
 * its exit code, or -1. */
static int ctl(char *out, size_t cap, const char *args)
{
	char cmd[1024];
	size_t len = 0, n;
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", h_bin("lunarctl"), args);
	if (!(f = popen(cmd, "r")))
		return -1;
	while (len < cap - 1 && (n = fread(out + len, 1, cap - 1 - len, f)) > 0)
		len += n;
	out[len] = '\0';
	st = pclose(f);
	printf("# lunarctl %s -> %d\n%s", args, WIFEXITED(st) ? WEXITSTATUS(st) : -1, out);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_ha_lunarctl_finds_leader_and_standbys(void **state)
{
	struct e_cluster ec;
	struct node a, b, *lead, *other;
	char args[512], want[256];
	uint64_t view, t0;

	(void)state;
	H_ASSERT_EQ(e_start(&ec, 1), 0);
	start_node(&a, "masterA", ec.urls);
	start_node(&b, "masterB", ec.urls);
	H_ASSERT((lead = which_leads(&a, &b, ELECT_MS)) != NULL);
	other = lead == &a ? &b : &a;
	H_ASSERT((view = wait_leads(lead, ELECT_MS)) > 0);
	/* Masters register themselves: the leader lists the other as standby */
	snprintf(want, sizeof(want), "\"standbys\":[\"%s\"]", other->adv);
	t0 = h_now_ms();
	while (!(hg_get(lead->http, "/admin/ha", text, 1 << 16) == 200 && strstr(text, want)) &&
	       h_now_ms() - t0 < 3000)
		h_sleep_ms(100);
	H_ASSERT_MSG(strstr(text, want), "/admin/ha: %s", text);
	/* lunarctl --master etcd:// asks the leader it finds in etcd */
	snprintf(args, sizeof(args), "--master etcd://%.56s/t master status", ec.m[0].url + 7);
	H_ASSERT_EQ(ctl(text, 1 << 16, args), 0);
	snprintf(want, sizeof(want), "leader: %s (http://127.0.0.1:%d)", lead->adv, lead->http);
	H_ASSERT_MSG(strstr(text, want), "no '%s'", want);
	snprintf(want, sizeof(want), "view: %llu\n", (unsigned long long)view);
	H_ASSERT(strstr(text, want) && strstr(text, "role: leader"));
	snprintf(want, sizeof(want), "standbys: %s\n", other->adv);
	H_ASSERT_MSG(strstr(text, want), "no '%s'", want);
	snprintf(args, sizeof(args), "--master etcd://%.56s/t -o json master status",
		 ec.m[0].url + 7);
	H_ASSERT_EQ(ctl(text, 1 << 16, args), 0);
	snprintf(want, sizeof(want), "\"view\":%llu", (unsigned long long)view);
	H_ASSERT(strstr(text, want) && strstr(text, "\"role\":\"leader\"") &&
		 strstr(text, other->adv));
	/* Admin verbs go to the leader */
	snprintf(args, sizeof(args), "--master etcd://%.56s/t segment list", ec.m[0].url + 7);
	H_ASSERT_EQ(ctl(text, 1 << 16, args), 0);
	/* A standby asked directly says so */
	snprintf(args, sizeof(args), "--master 127.0.0.1:%d master status", other->http);
	H_ASSERT_EQ(ctl(text, 1 << 16, args), 0);
	H_ASSERT(strstr(text, "role: standby"));
	/* No leader in a cluster: a plain failure */
	snprintf(args, sizeof(args), "--master etcd://%.56s/none master status", ec.m[0].url + 7);
	H_ASSERT_EQ(ctl(text, 1 << 16, args), 1);
	H_ASSERT(strstr(text, "no leader"));
}

static void test_ha_killed_leader_is_replaced(void **state)
{
	struct e_cluster ec;
	struct node a, b, *lead, *other;
	uint64_t view, view2, t0;

	(void)state;
	view = elect_pair(&ec, &a, &b, &lead, &other);
	t0 = h_now_ms();
	h_kill(lead->p);
	view2 = wait_leads(other, ELECT_MS);
	printf("# failover after SIGKILL: %llu ms (lease TTL %d s)\n",
	       (unsigned long long)(h_now_ms() - t0), TTL_S);
	H_ASSERT(view2 > view);
	H_ASSERT_EQ(metric(other, "lunar_master_failovers_total"), 1);
}

static void test_ha_frozen_leader_is_fenced(void **state)
{
	struct e_cluster ec;
	struct node a, b, *lead, *other;
	uint64_t view, t0;
	int st;

	(void)state;
	view = elect_pair(&ec, &a, &b, &lead, &other);
	/* When the leader freezes past its lease, the standby takes over */
	kill(lead->p->pid, SIGSTOP);
	t0 = h_now_ms();
	H_ASSERT(wait_leads(other, ELECT_MS) > view);
	printf("# failover after SIGSTOP: %llu ms\n", (unsigned long long)(h_now_ms() - t0));
	/* Then the old leader, woken, refuses at once and does not lead */
	kill(lead->p->pid, SIGCONT);
	assert_refuses(lead, NULL);
	H_ASSERT_EQ(metric(lead, "lunar_master_is_leader"), 0);
	t0 = h_now_ms(); /* once it has read the key, it names the new leader */
	while (!refusal_names(lead, other->adv) && h_now_ms() - t0 < 2000)
		h_sleep_ms(50);
	assert_refuses(lead, other->adv);
	/* And it asks to be restarted: exit 75 after one TTL */
	st = h_wait_exit(lead->p, TTL_S * 1000 + 3000);
	H_ASSERT_MSG(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 75, "status %d", st);
	H_ASSERT(metric(other, "lunar_master_is_leader") == 1);
}

static void test_ha_survives_etcd_leader_loss(void **state)
{
	struct e_cluster ec;
	struct node a;
	uint64_t view, view2, t0;
	int el;

	(void)state;
	H_ASSERT_EQ(e_start(&ec, 3), 0);
	/* A lease longer than etcd's hang, its re-election (1-2 s election
	 * timeout) and the master's move to a survivor, with room for a
	 * loaded machine: the lease is to outlive them, not to race them. */
	start_node_ttl(&a, "masterA", ec.urls, "8s");
	H_ASSERT((view = wait_leads(&a, ELECT_MS)) > 0);
	H_ASSERT((el = e_leader(&ec)) >= 0);
	/* When etcd's leader hangs, then dies */
	kill(ec.m[el].p->pid, SIGSTOP);
	t0 = h_now_ms();
	h_sleep_ms(2000);
	h_kill(ec.m[el].p);
	/* Then the master leads again, in the same term: its lease survived */
	view2 = wait_leads(&a, RECOVER_MS);
	printf("# leading %llu ms after etcd's leader hung, then died (view %llu -> %llu)\n",
	       (unsigned long long)(h_now_ms() - t0), (unsigned long long)view,
	       (unsigned long long)view2);
	H_ASSERT(view2 == view);
}

static void test_ha_quorum_loss_fences_until_it_returns(void **state)
{
	struct e_cluster ec;
	struct node a;
	uint64_t view, v = 0, t0;
	char msg[256];

	(void)state;
	H_ASSERT_EQ(e_start(&ec, 3), 0);
	start_node(&a, "masterA", ec.urls);
	H_ASSERT((view = wait_leads(&a, ELECT_MS)) > 0);
	/* When two of three members hang */
	kill(ec.m[0].p->pid, SIGSTOP);
	kill(ec.m[1].p->pid, SIGSTOP);
	t0 = h_now_ms();
	/* Then within half the TTL plus a renewal, mutations fail, typed */
	while (remove_all(&a, &v, msg, sizeof(msg)) == 0 && h_now_ms() - t0 < 10000)
		h_sleep_ms(50);
	printf("# fenced %llu ms after quorum loss\n", (unsigned long long)(h_now_ms() - t0));
	H_ASSERT(h_now_ms() - t0 < TTL_S * 1000 / 2 + 2500);
	assert_refuses(&a, NULL);
	H_ASSERT_EQ(metric(&a, "lunar_master_is_leader"), 0);
	/* And when quorum returns, the same leader resumes in the same view */
	kill(ec.m[0].p->pid, SIGCONT);
	kill(ec.m[1].p->pid, SIGCONT);
	t0 = h_now_ms();
	H_ASSERT_EQ(wait_leads(&a, RECOVER_MS), view);
	printf("# resumed %llu ms after quorum returned\n", (unsigned long long)(h_now_ms() - t0));
}

/* With a 5 s lease the leader renews every second, and each renewal must
 * be confirmed within 2.5 s of the last one's sending: an etcd answering
 * each request in SLOW_MS leaves room for one renewal a period, not for
 * the leader key check and the members calls in front of it (2.4 s). */
static void test_ha_slow_etcd_keeps_the_lead(void **state)
{
	struct e_cluster ec;
	struct node a;
	char url[64], msg[256];
	uint64_t v, t0;
	int calls = 0, refused = 0, fenced;

	(void)state;
	H_ASSERT_EQ(e_start(&ec, 1), 0);
	H_ASSERT_EQ(sl_start(&sl, ec.m[0].client, SLOW_MS), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", sl.port);
	start_node_ttl(&a, "masterA", url, "5s");
	H_ASSERT(wait_leads(&a, RECOVER_MS) > 0);
	for (t0 = h_now_ms(); h_now_ms() - t0 < 10000; calls++) {
		refused += remove_all(&a, &v, msg, sizeof(msg)) != 0;
		h_sleep_ms(50);
	}
	fenced = h_log_has(a.p, "fenced:"); /* before the link goes */
	sl_stop(&sl);
	printf("# behind an etcd answering in %d ms: %d of %d mutations refused\n", SLOW_MS,
	       refused, calls);
	H_ASSERT_MSG(!refused && !fenced, "the leader was fenced behind a slow etcd (%d refused)",
		     refused);
}

/* The leader key deleted under a live lease (by an operator, or etcd
 * restored from an older backup): the term ends within a check's period,
 * though every renewal still succeeds. (Not asserted: that the watch's
 * wake-up spares the election thread's wait for its next period, at most
 * one period more, 600 ms here.) */
static void test_ha_deleted_key_ends_the_term(void **state)
{
	struct e_cluster ec;
	struct node a;
	char body[512];
	uint64_t t0, v;

	(void)state;
	H_ASSERT_EQ(e_start(&ec, 1), 0);
	start_node(&a, "masterA", ec.urls);
	H_ASSERT(wait_leads(&a, ELECT_MS) > 0);
	/* "/lunar/t/leader" in base64, as the gateway takes keys */
	H_ASSERT_EQ(hg_post(ec.m[0].client, "/v3/kv/deleterange",
			    "{\"key\":\"L2x1bmFyL3QvbGVhZGVy\"}", body, sizeof(body)),
		    200);
	t0 = h_now_ms();
	while (remove_all(&a, &v, body, sizeof(body)) == 0 && h_now_ms() - t0 < 10000)
		h_sleep_ms(20);
	printf("# term ended %llu ms after its key was deleted\n",
	       (unsigned long long)(h_now_ms() - t0));
	H_ASSERT(h_now_ms() - t0 < 3000);
	assert_refuses(&a, NULL);
	H_ASSERT(h_log_has(a.p, "lost the lead"));
	H_ASSERT_EQ(metric(&a, "lunar_master_is_leader"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_ha_one_of_two_leads, case_setup, case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_lunarctl_finds_leader_and_standbys, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_killed_leader_is_replaced, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_frozen_leader_is_fenced, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_survives_etcd_leader_loss, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_quorum_loss_fences_until_it_returns, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_slow_etcd_keeps_the_lead, case_setup,
					    case_teardown),
	    cmocka_unit_test_setup_teardown(test_ha_deleted_key_ends_the_term, case_setup,
					    case_teardown),
	};
	int failed;

	e_skip_without_etcd();
	failed = cmocka_run_group_tests(tests, NULL, NULL);

	nng_fini(); /* nng's threads and what they free late: leak checkers see a clean exit */
	return failed;
}
