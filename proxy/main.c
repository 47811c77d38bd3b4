/*
 * main.c - lunar-proxy: wires the parts together (segment, engine, master
 * client or embedded master, workers, heartbeat, client socket), runs the
 * event loop until SIGTERM/SIGINT, then takes everything down in reverse.
 */
#include <errno.h>
#include <libgen.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "cpus.h"
#include "engine/engine.h"
#include "http.h"
#include "log.h"
#include "lunar.h"
#include "prefault.h"
#include "px_int.h"
#include "sdnotify.h"
#include "sp_req.h"
#include "uds.h"

#ifdef __SANITIZE_THREAD__
/*
 * Segment bytes pass from one thread to the next through orderings TSan
 * cannot see: a data-port thread sends a range to a peer, the peer's reads
 * end, the master (another process) gives the range to a new value, and a
 * worker copies that in. TSan would report those bytes as a race; so, as in
 * tests/unit/test_engine.c, it does not track the memory that socket calls
 * read and write. Everything else it still checks. The hook's name is TSan's.
 */
const char *__tsan_default_options(void);
const char *__tsan_default_options(void)
{
	return "ignore_interceptors_accesses=1";
}
#endif

/*
 * The socket's directory, made when missing: mode 0750, and search for
 * others too when --socket-mode lets them at the socket; --socket-group's
 * group. A directory that exists is left as it is (it may be /tmp, or one
 * that a kubelet or systemd made for us).
 */
static int make_socket_dir(const struct px_config *cfg)
{
	char buf[sizeof(cfg->socket_path)];
	mode_t mode = 0750 | (cfg->socket_mode & 0007 ? 0001 : 0);
	char *dir;

	strcpy(buf, cfg->socket_path);
	dir = dirname(buf);
	if (mkdir(dir, mode) < 0)
		return errno == EEXIST ? 0 : -errno;
	/* mkdir's mode went through the umask; and group before mode, so the
	 * group's access never applies to the wrong group. */
	if ((cfg->socket_group_set && chown(dir, (uid_t)-1, cfg->socket_gid) < 0) ||
	    chmod(dir, mode) < 0)
		return -errno;
	return 0;
}

/*
 * Make the segment resident, in huge pages where the kernel gives them: a
 * first-touch fault per 4 KiB page on the put path costs more than the copy.
 * Runs beside the proxy, which serves at once, at a lower priority than the
 * threads that serve; lc_prefault holds no lock an mmap elsewhere waits for.
 */
static void *segment_prefault(void *arg)
{
	struct px_proxy *px = arg;
	uint64_t t0 = lc_now_ms();

	/* This thread only (Linux: a tid is a PRIO_PROCESS target). */
	if (setpriority(PRIO_PROCESS, (id_t)gettid(), 10))
		LC_DEBUG("proxy", "prefault: cannot lower its priority: %s", strerror(errno));
	if (!lc_prefault(px->segment, px->cfg.segment_size, &px->stopping))
		LC_INFO("proxy", "segment resident (%llu ms)",
			(unsigned long long)(lc_now_ms() - t0));
	return NULL;
}

static int start_data_plane(struct px_proxy *px)
{
	struct eng_config ec = {.host = px->cfg.host, .port = px->cfg.data_port};
	int rc;

	if (px->cfg.segment_size) {
		px->segment = mmap(NULL, px->cfg.segment_size, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (px->segment == MAP_FAILED) {
			px->segment = NULL;
			LC_ERROR("proxy", "cannot map a %llu-byte segment: %s",
				 (unsigned long long)px->cfg.segment_size, strerror(errno));
			return LUNAR_ERR_INTERNAL;
		}
	}
	if (px->segment) {
		madvise(px->segment, px->cfg.segment_size, MADV_HUGEPAGE);
		px->prefault_started = !pthread_create(&px->prefault, NULL, segment_prefault, px);
	}
	/* The address lets an operator (or a test) inspect the segment. */
	if (px->segment)
		LC_INFO("proxy", "segment of %llu bytes at %p",
			(unsigned long long)px->cfg.segment_size, px->segment);
	ec.seg_base = px->segment;
	ec.seg_size = px->cfg.segment_size;
	ec.disk_read = px_disk_read;
	ec.disk_length = px_disk_length;
	ec.disk_arg = px;
	ec.cluster_key = px->cfg.keyed ? &px->cfg.cluster_key : NULL;
	ec.rdma_devices = px->cfg.rdma_devices;
	eng_busy_poll_set(px->cfg.busy_poll_us);
	lp_spreq_busy_poll_set(px->cfg.busy_poll_us); /* the master's replies */
	rc = px_disk_open(px);
	if (rc)
		return rc;
	rc = eng_engine_create(&ec, &px->engine);
	if (rc) {
		LC_ERROR("proxy", "data port %s:%u: %s", px->cfg.host, px->cfg.data_port,
			 lunar_strerror(rc));
		return rc;
	}
	px->endpoint = eng_engine_endpoint(px->engine);
	return 0;
}

static int start_control_plane(struct px_proxy *px)
{
	int rc;

	if (getrandom(&px->client_id, sizeof(px->client_id), 0) != sizeof(px->client_id))
		return LUNAR_ERR_INTERNAL;
	if (px->cfg.embedded) {
		rc = mst_master_create(&px->cfg.mcfg, &px->master);
		if (rc)
			return rc;
	}
	px->leases = px_lease_cache_create(px->cfg.lease_cache_keys);
	if (!px->leases)
		return LUNAR_ERR_INTERNAL;
	rc = px_master_client(px);
	if (rc)
		return rc;
	rc = px_closer_create(&px->closer);
	if (rc)
		return rc;
	rc = px_pool_create(px, px->cfg.workers, &px->pool);
	if (rc)
		return rc;
	/* The pool before the heartbeat, which drops reservations at a
	 * re-mount; the pool's thread asks for none until a beat says the
	 * master answers (master_ok). */
	rc = px_resv_start(px);
	if (rc)
		return rc;
	rc = px_uncommits_create(px);
	if (rc)
		return rc;
	rc = px_heartbeat_start(px);
	if (rc)
		return rc;
	return px_http_start(px);
}

#define PX_FDS_PER_CLIENT 4   /* socket, region memfd, eventfd, one in passing */
#define PX_FDS_OWN	  256 /* the proxy's own: data port, master, disk, ... */

/*
 * Every client holds a few of the proxy's descriptors, so the usual soft
 * limit of 1024 serves fewer clients than --max-clients allows: take the
 * hard limit, and say so when even that is short.
 */
static void raise_open_files(const struct px_proxy *px)
{
	rlim_t need = (rlim_t)px->cfg.max_clients * PX_FDS_PER_CLIENT + PX_FDS_OWN;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < need)
		LC_WARN("proxy",
			"open files limited to %llu: %u clients need about %llu "
			"(raise LimitNOFILE or ulimit -n, or lower --max-clients)",
			(unsigned long long)rl.rlim_cur, px->cfg.max_clients,
			(unsigned long long)need);
}

/* CPUs its clients may busy beside the loop (the crowding hint): the
 * proxy's own but the loop's; for a proxy confined to one CPU, the
 * machine's others online, where its clients then run. Clients that share
 * that one CPU (a one-CPU container) never spin, whatever the hint says:
 * they have no CPU beside the loop (shm_spare_cpus). */
static unsigned spare_cpus(void)
{
	unsigned ours = lc_usable_cpus();

	return (ours > 1 ? ours : lc_online_cpus()) - 1;
}

static int start_clients(struct px_proxy *px)
{
	sigset_t sigs;
	int rc;

	raise_open_files(px);
	rc = make_socket_dir(&px->cfg);
	if (rc == 0)
		rc = px->listen_fd =
		    lc_uds_listen_file(px->cfg.socket_path, px->cfg.socket_mode, &px->sock_file);
	/* Nobody is served before the loop runs, so the group may come after
	 * the bind; who is served is still the allow-list's (peer_allowed). */
	if (rc >= 0 && px->cfg.socket_group_set &&
	    chown(px->cfg.socket_path, (uid_t)-1, px->cfg.socket_gid) < 0) {
		rc = -errno;
		lc_uds_unlink_file(px->cfg.socket_path, &px->sock_file);
		close(px->listen_fd);
		px->listen_fd = -1;
	}
	if (rc == -EADDRINUSE) {
		LC_ERROR("proxy", "socket %s: another proxy serves it; not taking it over",
			 px->cfg.socket_path);
		return LUNAR_ERR_INTERNAL;
	}
	if (rc < 0) {
		LC_ERROR("proxy", "socket %s: %s", px->cfg.socket_path, strerror(-rc));
		return LUNAR_ERR_INTERNAL;
	}
	px->spare_cpus = spare_cpus();
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	px->stop_efd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	px->epfd = epoll_create1(EPOLL_CLOEXEC);
	return px->stop_efd < 0 || px->epfd < 0 ? LUNAR_ERR_INTERNAL : 0;
}

static void stop(struct px_proxy *px)
{
	atomic_store(&px->stopping, true);
	lc_http_stop(px->http);
	if (px->listen_fd > 0) {
		/* Only the file we bound: a proxy that took the path over since
		 * (ours had been removed) keeps it. Before the close, which
		 * could free our inode for the new file to reuse. */
		if (lc_uds_unlink_file(px->cfg.socket_path, &px->sock_file) == -EEXIST)
			LC_WARN("proxy", "socket %s now names another file; left in place",
				px->cfg.socket_path);
		close(px->listen_fd);
	}
	/* Say goodbye while the master answers, then cut the line: nothing
	 * below may wait out an RPC timeout on a master that is gone, the
	 * put-ahead thread's calls included (waited for up to PX_GOODBYE_MS,
	 * joined after the cut; what one still under way is granted, the
	 * master holds until --client-ttl declares us dead). */
	px_resv_quit(px);
	if (px->mc && atomic_load(&px->master_ok)) {
		px_resv_release_all(px);
		px_segment_unmount(px, 0, PX_GOODBYE_MS);
	}
	px_mc_close(px->mc);
	px_resv_stop(px);
	if (px->heartbeat)
		px_heartbeat_stop(px);
	px_disk_stop(px);
	px_pool_destroy(px->pool);
	px_closer_destroy(px->closer); /* after the pool: its requests hold sessions */
	px_resv_destroy(px);	       /* and pieces */
	px_uncommits_destroy(px);
	px_mc_destroy(px->mc);
	px_objidx_destroy(px->objidx);
	px_lease_cache_destroy(px->leases);
	free(px->gone); /* ids no beat took: stopping, their leases run out */
	if (px->prefault_started)
		pthread_join(px->prefault, NULL);
	eng_engine_destroy(px->engine);
	px_disk_close(px);
	mst_master_destroy(px->master);
	free(px->reg_owners);
	if (px->segment)
		munmap(px->segment, px->cfg.segment_size);
	if (px->epfd > 0)
		close(px->epfd);
	if (px->stop_efd > 0)
		close(px->stop_efd);
}

/*
 * Clients of our uid could otherwise open /proc/<proxy>/mem, or another
 * client's memfd through /proc/<proxy>/fd, and read or write every client's
 * memory. Not dumpable, /proc/<proxy> is root's and ptrace needs
 * CAP_SYS_PTRACE. It also means no core dump: --dumpable for debugging.
 */
static int keep_out_peers(const struct px_config *cfg)
{
	if (cfg->dumpable) {
		LC_WARN("proxy",
			"--dumpable: processes of uid %u can read and write every "
			"client's memory through this proxy",
			(unsigned)geteuid());
		return 0;
	}
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) {
		LC_ERROR("proxy", "cannot make the proxy non-dumpable: %s", strerror(errno));
		return LUNAR_ERR_INTERNAL;
	}
	return 0;
}

/*
 * Metadata churns: every put allocates (the master's object with an
 * embedded master, lease cache entries, requests) and every remove or
 * eviction frees. glibc gives the freed top of a heap back to the kernel
 * above 128 KiB, so each fill after a drain faults it back a page at a time
 * on the put path (6k faults a 100k-object refill). Trimming only above
 * PX_HEAP_KEEP, and then down to PX_HEAP_KEEP (the pad), keeps that much.
 * Setting the threshold also fixes glibc's mmap threshold at 128 KiB,
 * above any per-request allocation.
 */
#define PX_HEAP_KEEP (64 << 20)

int main(int argc, char **argv)
{
	static struct px_proxy px;
	sigset_t sigs;
	int rc;

	rc = px_config_parse(&px.cfg, argc, argv);
	if (rc)
		return rc == 1 ? 0 : 2;
	/* Block the stop signals everywhere; the loop reads them from a signalfd. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	mallopt(M_TRIM_THRESHOLD, PX_HEAP_KEEP);
	mallopt(M_TOP_PAD, PX_HEAP_KEEP);
	rc = keep_out_peers(&px.cfg);
	if (!rc)
		rc = start_data_plane(&px);
	if (!rc)
		rc = start_clients(&px);
	if (!rc)
		rc = start_control_plane(&px);
	if (!rc) {
		LC_INFO("proxy", "serving %s; data port %s; segment %llu bytes; master %s",
			px.cfg.socket_path, px.endpoint, (unsigned long long)px.cfg.segment_size,
			px.cfg.embedded ? "embedded" : px.cfg.master_url);
		LC_INFO("proxy",
			"up to %u clients, %u registered ranges (%u a uid), %u leased keys",
			px.cfg.max_clients, px.cfg.max_registrations,
			(px.cfg.max_registrations + 1) / 2, px.cfg.lease_cache_keys);
		lc_sd_notify("READY=1");
		rc = px_loop_run(&px);
		if (rc)
			LC_ERROR("proxy", "event loop: %s", strerror(-rc));
	}
	lc_sd_notify("STOPPING=1");
	stop(&px);
	lc_conf_free(&px.cfg.conf);
	LC_INFO("proxy", "stopped");
	return rc ? 1 : 0;
}
