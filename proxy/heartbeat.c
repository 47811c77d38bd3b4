/*
 * heartbeat.c - the proxy's liveness towards the master: a Ping every
 * --ping-interval, and a (re-)mount of our segment whenever the master does
 * not know us (first contact, master restarted, or we were declared dead).
 */
#include <errno.h>
#include <string.h>
#include <stdbool.h>
#include <time.h>

#include "clock.h"
#include "engine/engine.h"
#include "failpoint.h"
#include "log.h"
#include "lunar.h"
#include "px_int.h"

/* Give the engine the capability secret the master sent with a mount of
 * our segment (untrusted bytes; the RPC layer unsealed them). A keyed proxy
 * whose master sends none cannot serve its segment to peers: said once. */
static void take_secret(struct px_proxy *px, const ProtobufCBinaryData *secret)
{
	static atomic_int warned;

	if (!px->cfg.keyed)
		return;
	if (secret && secret->len == AUTH_KEY_BYTES && secret->data &&
	    !eng_engine_set_secret(px->engine, px->endpoint, secret->data))
		return;
	if (!atomic_exchange(&warned, 1))
		LC_WARN("proxy",
			"the master sent no capability secret for segment %s (a keyless "
			"master?): peers cannot read or write it",
			px->endpoint);
}

/* A ping's reading of the master's clock refreshes the estimate only when
 * its round trip was this short: the estimate is off by up to half of it,
 * and the owner tolerates ENG_CAP_SKEW_MS (2 s) of error in all. */
#define PX_CLOCK_RTT_MAX_MS 200

/*
 * Give the engine the master's capability clock, read master_ms during a
 * call that ran from t0 to t1 on our monotonic clock (SPEC §13: expiries are
 * on the master's clock; neither machine's wall clock is ever compared). A
 * mount's reading always counts: it comes with the secret its grants use.
 */
static void take_clock(struct px_proxy *px, uint64_t master_ms, uint64_t t0, uint64_t t1,
		       bool mount)
{
	if (!px->cfg.keyed || !master_ms || (!mount && t1 - t0 > PX_CLOCK_RTT_MAX_MS))
		return;
	eng_engine_set_clock(px->engine, master_ms, t0 + (t1 - t0) / 2);
}

/* The ReMountSegment of our one segment; its code. */
static int remount_call(struct px_proxy *px, Lunar__SegmentDesc *seg)
{
	Lunar__ReMountSegmentRequest rq = LUNAR__RE_MOUNT_SEGMENT_REQUEST__INIT;
	const Lunar__ReMountSegmentReply *codes;
	ProtobufCMessage *rep;
	uint64_t t0 = lc_now_ms();
	int rc;

	rq.client_id = px->client_id;
	rq.n_segments = 1;
	rq.segments = &seg;
	rc = px_mc_call(px->mc, LUNAR__METHOD__REMOUNT_SEGMENT, &rq.base, &rep);
	if (rc)
		return rc;
	codes = (const Lunar__ReMountSegmentReply *)rep;
	rc = px_mc_code(rep);
	if (!rc)
		rc = codes->n_codes == 1 ? codes->codes[0] : LUNAR_ERR_PROTOCOL;
	if (!rc) {
		take_clock(px, codes->clock_ms, t0, lc_now_ms(), true);
		take_secret(px, codes->n_segment_secrets == 1 ? &codes->segment_secrets[0] : NULL);
		eng_engine_set_mount(px->engine, codes->n_mounts == 1 ? codes->mounts[0] : 0);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* The MountSegment of our segment; its code. */
static int mount_call(struct px_proxy *px, Lunar__SegmentDesc *seg)
{
	Lunar__MountSegmentRequest rq = LUNAR__MOUNT_SEGMENT_REQUEST__INIT;
	const Lunar__MountSegmentReply *r;
	ProtobufCMessage *rep;
	uint64_t t0 = lc_now_ms();
	int rc;

	rq.client_id = px->client_id;
	rq.segment = seg;
	rc = px_mc_call(px->mc, LUNAR__METHOD__MOUNT_SEGMENT, &rq.base, &rep);
	if (rc)
		return rc;
	rc = px_mc_code(rep);
	r = (const Lunar__MountSegmentReply *)rep;
	if (!rc) {
		take_clock(px, r->clock_ms, t0, lc_now_ms(), true);
		take_secret(px, &r->segment_secret);
		eng_engine_set_mount(px->engine, r->mount);
	}
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* Mount our segment: MountSegment at first contact, ReMountSegment when the
 * master forgot us (it restarted, or declared us dead), as Mooncake's
 * clients do. A master that forgot us forgot the writes it granted here, and
 * the leader we mount with now may never have known them: the engine ends
 * every transfer in flight first (eng_engine_fence), so that the rest of one
 * cannot land on a value placed after the mount. */
static int mount_segment(struct px_proxy *px, bool again)
{
	Lunar__SegmentDesc seg = LUNAR__SEGMENT_DESC__INIT;
	int rc;

	seg.name = (char *)px->endpoint;
	seg.endpoint = (char *)px->endpoint;
	seg.size = px->cfg.segment_size;
	if (eng_engine_fence(px->engine)) {
		/* A transfer outlived its timeout (an RDMA flush the device
		 * never completes): the segment is not safe to place in yet. */
		if (atomic_exchange(&px->mount_err, LUNAR_ERR_BUSY) != LUNAR_ERR_BUSY)
			LC_WARN("proxy",
				"segment %s: a data transfer is still under way past its timeout: "
				"not mounting until it ends (trying again at each ping)",
				px->endpoint);
		return LUNAR_ERR_BUSY;
	}
	rc = again ? remount_call(px, &seg) : mount_call(px, &seg);
	/* Tried again at every ping: each reason is logged once. */
	if (rc && atomic_exchange(&px->mount_err, rc) != rc)
		LC_WARN("proxy", "mounting segment %s: %s (trying again at each ping)",
			px->endpoint, lunar_strerror(rc));
	else if (!rc)
		LC_INFO("proxy", "segment %s mounted (%llu bytes)", px->endpoint,
			(unsigned long long)px->cfg.segment_size);
	if (!rc)
		atomic_store(&px->mount_err, 0);
	return rc;
}

int px_segment_unmount(struct px_proxy *px, uint64_t grace_ms, uint64_t timeout_ms)
{
	Lunar__UnmountSegmentRequest rq = LUNAR__UNMOUNT_SEGMENT_REQUEST__INIT;
	ProtobufCMessage *rep;
	int rc;

	/* A re-mount would end the graceful unmount (the master takes it for
	 * one): after a lost Ping, or when the master restarted meanwhile. */
	atomic_store(&px->leaving, true);
	if (!atomic_load(&px->mounted))
		return 0;
	rq.client_id = px->client_id;
	rq.name = (char *)px->endpoint;
	rq.grace_ms = grace_ms;
	rc = px_mc_call_timed(px->mc, LUNAR__METHOD__UNMOUNT_SEGMENT, &rq.base, &rep, timeout_ms);
	if (rc)
		return rc;
	rc = px_mc_code(rep);
	protobuf_c_message_free_unpacked(rep, NULL);
	return rc;
}

/* The mount a Ping asked for (asked: in so many words), unless another
 * thread mounted since that Ping went (px->mount_seq was seq then). */
static void mount_for_ping(struct px_proxy *px, uint64_t seq, bool asked, int *mounted)
{
	pthread_mutex_lock(&px->mount_lock);
	if (atomic_load(&px->mount_seq) == seq) {
		bool again = atomic_exchange(&px->mounted, false);

		if (again && asked)
			LC_WARN("proxy", "master asks for a re-mount");
		else if (again)
			LC_WARN("proxy", "master answers again after a lost Ping: re-mounting");
		atomic_store(&px->ping_lost, false);
		/* The leases we hold were granted before the master forgot us
		 * (or may have been): they protect nothing now, and a key read
		 * through one may be gone from the master and its range
		 * given to a new value. */
		if (again)
			px_lease_cache_clear(px->leases, NULL);
		/* A failed mount is no failed ping: leases are still renewed,
		 * and /ready and health say the segment is not mounted. */
		*mounted = !mount_segment(px, again);
		if (*mounted) {
			atomic_store(&px->mounted, true);
			atomic_fetch_add(&px->mount_seq, 1);
		}
	}
	pthread_mutex_unlock(&px->mount_lock);
}

/*
 * A Ping, and a (re-)mount when the master asks, when our last mount failed,
 * or when a Ping went unanswered since we mounted; *mounted says a mount
 * succeeded. The master asks only once, in its answer to the first Ping it
 * gets from a client it does not know: after a stall (a master stopped, a
 * partition) that may be a Ping we gave up on, still queued on the
 * connection, whose answer nobody reads. The master may have declared us
 * dead meanwhile, and a ReMountSegment of a segment it still has is a no-op.
 * The Ping's code.
 */
static int ping_and_mount(struct px_proxy *px, int *mounted)
{
	Lunar__PingRequest rq = LUNAR__PING_REQUEST__INIT;
	ProtobufCMessage *rep;
	const Lunar__PingReply *r;
	uint64_t sent_ns;
	uint64_t seq = atomic_load(&px->mount_seq);
	bool asked, remount;
	int rc;

	rq.client_id = px->client_id;
	sent_ns = lc_now_ns();
	rc = px_mc_call(px->mc, LUNAR__METHOD__PING, &rq.base, &rep);
	if (rc == LUNAR_ERR_RPC_FAIL || rc == LUNAR_ERR_RPC_TIMEOUT)
		atomic_store(&px->ping_lost, true);
	if (rc)
		return rc;
	rc = px_mc_code(rep);
	r = (const Lunar__PingReply *)rep;
	asked = r->need_remount;
	remount = asked || (!rc && atomic_load(&px->ping_lost));
	/* Only the clock of the master our segment is mounted with (after a
	 * leader change the re-mount brings the new one's). */
	if (!rc && !remount && atomic_load(&px->mounted))
		take_clock(px, r->clock_ms, sent_ns / 1000000u, lc_now_ms(), false);
	*mounted = 0;
	if (remount) /* a master that forgot us forgot them too */
		px_resv_drop_before(px, sent_ns);
	if (!rc && r->n_forget)
		px_disk_forget(px, r->forget, r->n_forget);
	if (!rc && r->n_offload)
		px_disk_offload(px, r->offload, r->n_offload);
	protobuf_c_message_free_unpacked(rep, NULL);
	if (rc)
		return rc;
	if (px->cfg.segment_size && !atomic_load(&px->leaving) &&
	    (remount || !atomic_load(&px->mounted)))
		mount_for_ping(px, seq, asked, mounted);
	return 0;
}

/* The leader changed (follower's thread): mount there and report what we
 * hold, now rather than at the next beat. */
static void on_switch(void *arg)
{
	struct px_proxy *px = arg;

	atomic_store(&px->mounted, false);
	px_resv_drop_all(px); /* they lived in the old leader's memory */
	if (atomic_load(&px->hb_live))
		px_heartbeat_kick(px);
}

int px_master_client(struct px_proxy *px)
{
	uint32_t role = px->cfg.admin_calls ? AUTH_ROLE_ADMIN : AUTH_ROLE_NODE;
	const struct auth_key *key = px->cfg.keyed ? &px->cfg.cluster_key : NULL;

	if (px->master || strncmp(px->cfg.master_url, "etcd://", 7))
		return px_mc_create(px->master, px->cfg.master_url, px->cfg.rpc_timeout_ms, key,
				    role, &px->mc);
	if (!(px->objidx = px_objidx_create()))
		return LUNAR_ERR_INTERNAL;
	return px_mc_follow(px->cfg.master_url, px->cfg.rpc_timeout_ms, key, role, on_switch, px,
			    &px->mc);
}

/* After a mount in a view our objects were not reported in (or, without
 * a segment, once the view is known): report them (the new leader
 * rebuilds its metadata from every proxy's report, a writer's too: its
 * values live in peers' segments). One report at a time: the heartbeat, a
 * client's health check and /ready all ping, and one report's batches go
 * in order. */
static void report_objects(struct px_proxy *px)
{
	uint64_t view = px_mc_view(px->mc);
	int again = 0;

	if (!px->objidx || !view || atomic_exchange(&px->reporting, true))
		return;
	if (view != atomic_load(&px->reported_view) &&
	    (atomic_load(&px->mounted) || !px->cfg.segment_size)) {
		(void)LC_FAILPOINT("proxy-report"); /* tests: sleep, a slow report */
		if (!px_objidx_report(px, &again) && !again)
			atomic_store(&px->reported_view, view);
	}
	atomic_store(&px->reporting, false);
}

int px_master_ping(struct px_proxy *px)
{
	int mounted, rc = ping_and_mount(px, &mounted);

	if (rc) {
		bool lost = rc == LUNAR_ERR_RPC_FAIL || rc == LUNAR_ERR_RPC_TIMEOUT;

		if (lost && atomic_load(&px->hb_live) && !atomic_exchange(&px->ping_retried, true))
			px_heartbeat_kick(px);
		return rc;
	}
	atomic_store(&px->ping_retried, false);
	report_objects(px);
	px_resv_tell_landed(px);
	/* the master learns of our disk records after each (re)mount */
	return atomic_load(&px->mounted) ? px_disk_register(px, mounted) : 0;
}

void px_heartbeat_kick(struct px_proxy *px)
{
	pthread_mutex_lock(&px->hb_lock);
	atomic_store(&px->hb_kick, true);
	pthread_cond_broadcast(&px->hb_cond);
	pthread_mutex_unlock(&px->hb_lock);
}

/* One heartbeat: a Ping (which mounts when needed), then the takings back
 * still owed and lease renewal. */
static void beat(struct px_proxy *px, int *was_ok)
{
	int rc = px_master_ping(px);

	if (!rc) {
		px_uncommit_retry(px);
		px_lease_release_gone(px);
		px_lease_renew(px);
	}
	if (rc && *was_ok)
		LC_WARN("proxy", "master unreachable: %s", lunar_strerror(rc));
	else if (!rc && !*was_ok)
		LC_INFO("proxy", "master reachable again");
	*was_ok = !rc;
	atomic_store(&px->master_ok, !rc);
}

/* Wait on the heartbeat's condition (hb_lock held) for ms, or until a
 * kick when kickable, or until stop. */
/* Wait ms, or less when kickable and kicked; true when kicked. */
static bool hb_wait(struct px_proxy *px, uint64_t ms, bool kickable)
{
	struct timespec ts;
	uint64_t ns;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ns = (uint64_t)ts.tv_nsec + ms * 1000000ull;
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec = (long)(ns % 1000000000ull);
	while (!atomic_load(&px->stopping)) {
		if (kickable && atomic_exchange(&px->hb_kick, false))
			return true;
		if (pthread_cond_timedwait(&px->hb_cond, &px->hb_lock, &ts) == ETIMEDOUT)
			break;
	}
	return false;
}

/* SPEC §13: an --insecure node says so at start and once a minute. */
static void warn_insecure(const struct px_proxy *px, uint64_t *last_ms)
{
	uint64_t now = lc_now_ms();

	if (px->cfg.keyed || auth_host_is_loopback(px->cfg.host) ||
	    (*last_ms && now - *last_ms < 60000))
		return;
	*last_ms = now;
	LC_WARN("proxy",
		"--insecure: anyone who reaches %s can read and change this node's "
		"segment; give --cluster-key",
		px->cfg.host);
}

/* While the disk tier is busy, Pings come every PX_OFFLOAD_POLL_MS to
 * fetch offload tasks; the rest of a beat keeps its interval. */
static void *heartbeat_main(void *arg)
{
	struct px_proxy *px = arg;
	uint64_t warned_ms = 0, full_ms = 0;
	bool kicked = false;
	int was_ok = 1;

	pthread_mutex_lock(&px->hb_lock);
	if (px->cfg.debug_hb_delay_ms)
		hb_wait(px, px->cfg.debug_hb_delay_ms, false);
	while (!atomic_load(&px->stopping)) {
		uint64_t now = lc_now_ms();
		/* A kick (a new leader, a remount asked for) wants the whole beat. */
		int full = kicked || !full_ms || now - full_ms >= px->cfg.ping_interval_ms;

		pthread_mutex_unlock(&px->hb_lock);
		warn_insecure(px, &warned_ms);
		if (full || !was_ok) {
			beat(px, &was_ok);
			full_ms = now;
		} else {
			px_master_ping(px);
		}
		pthread_mutex_lock(&px->hb_lock);
		kicked = hb_wait(
		    px, px_disk_busy(px) ? PX_OFFLOAD_POLL_MS : px->cfg.ping_interval_ms, true);
	}
	pthread_mutex_unlock(&px->hb_lock);
	return NULL;
}

int px_heartbeat_start(struct px_proxy *px)
{
	int remount;

	pthread_mutex_init(&px->hb_lock, NULL);
	pthread_mutex_init(&px->mount_lock, NULL);
	lc_cond_init(&px->hb_cond);
	atomic_store(&px->hb_live, true);
	/* An embedded master always answers: mount before the first client
	 * is served, or a put racing the thread's first beat finds no segment.
	 * The disk tier registers on that beat, off the start-up path. A
	 * remote master may be down: its first contact is the thread's. */
	if (px->master)
		atomic_store(&px->master_ok, !ping_and_mount(px, &remount));
	return pthread_create(&px->heartbeat, NULL, heartbeat_main, px) ? LUNAR_ERR_INTERNAL : 0;
}

void px_heartbeat_stop(struct px_proxy *px)
{
	pthread_mutex_lock(&px->hb_lock);
	atomic_store(&px->stopping, true);
	pthread_cond_broadcast(&px->hb_cond);
	pthread_mutex_unlock(&px->hb_lock);
	pthread_join(px->heartbeat, NULL);
	/* hb_lock and hb_cond stay: the pool, wound down after this, may drop
	 * a session's last reference (px_lease_reader_gone takes hb_lock). */
}
