/*
 * config.c - lunar-proxy's command line (SPEC §10). With --embedded-master
 * the proxy also takes every master flag, parsed by the master's own table.
 */
#include <errno.h>
#include <grp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "parse.h"
#include "px_int.h"
#include "uds.h"

enum kind {
	K_STR,
	K_SIZE,
	K_MS,
	K_U16,
	K_UINT,
	K_KEYS,
	K_BOOL,
	K_UIDS,
	K_GIDS,
	K_POLICY,
	K_MODE,
	K_GROUP,
	K_US
};

struct flag {
	const char *name;
	enum kind kind;
	size_t off;
	const char *help;
};

#define F(n, k, field, h)                                                                          \
	{                                                                                          \
		n, k, offsetof(struct px_config, field), h                                         \
	}
static const struct flag flags[] = {
    F("socket", K_STR, socket_path,
      "PATH  client socket (/run/lunar/proxy.sock as root, else\n"
      "                             $XDG_RUNTIME_DIR/lunar/proxy.sock or "
      "/tmp/lunar-UID/proxy.sock)"),
    F("master", K_STR, master_url, "URL   master to use: tcp://HOST:PORT or ipc://PATH"),
    F("embedded-master", K_BOOL, embedded, "      run the master inside this proxy (single node)"),
    F("host", K_STR, host,
      "ADDR  address of the data and HTTP ports, advertised to peers\n"
      "                             (127.0.0.1; at most 65 bytes)"),
    F("data-port", K_U16, data_port, "N     data port for peers (12345; 0 picks a free one)"),
    F("segment-size", K_SIZE, segment_size,
      "SIZE  DRAM contributed to the cluster (4GiB; 0 = none)"),
    F("arena-size", K_SIZE, arena_size, "SIZE  default shared arena per client (64MiB)"),
    F("max-clients", K_UINT, max_clients, "N     most clients at once (1024)"),
    F("max-inflight", K_UINT, max_inflight,
      "N     requests in flight per client; more get BUSY (256)"),
    F("max-registrations", K_UINT, max_registrations,
      "N     registered memory ranges of all clients, of one uid half\n"
      "                             (what vm.max_map_count leaves the clients)"),
    F("lease-cache-keys", K_KEYS, lease_cache_keys,
      "N     replica lists kept while their leases hold, 64..4194304\n"
      "                             (one per 16KiB of segment, at least 65536)"),
    F("max-client-leases", K_KEYS, max_client_leases,
      "N     keys one client may hold read leases on, 64..4194304; reads\n"
      "                             of more get BUSY until its leases run out (262144)"),
    F("allow-uid", K_UIDS, allow_uid, "UIDS  comma-separated uids allowed besides ours and root"),
    F("allow-gid", K_GIDS, allow_gid, "GIDS  comma-separated gids allowed besides our group"),
    F("socket-mode", K_MODE, socket_mode,
      "MODE  octal mode of the socket file (0660); its directory, when we\n"
      "                             create it, lets the same classes search it"),
    F("socket-group", K_GROUP, socket_gid,
      "GROUP gid or name owning the socket and the directory we create\n"
      "                             (ours); --allow-uid/--allow-gid still decide who is served"),
    F("workers", K_UINT, workers, "N     request worker threads (8)"),
    F("rpc-timeout", K_MS, rpc_timeout_ms, "DUR   master call timeout (5s)"),
    F("ping-interval", K_MS, ping_interval_ms, "DUR   heartbeat to the master (1s)"),
    F("grace", K_MS, grace_ms, "DUR   on SIGTERM: segment readable, no new data, this long (0)"),
    F("http-port", K_U16, http_port, "N     metrics/health/admin HTTP port (9300; 0 picks one)"),
    F("reserve-size", K_SIZE, reserve_size,
      "SIZE  space to keep reserved at the master for puts ahead (16MiB;\n"
      "                             0: every put makes two master calls)"),
    F("reserve-value-max", K_SIZE, reserve_value_max,
      "SIZE  largest value put into reserved space (1MiB)"),
    F("commit-after-write", K_BOOL, commit_after_write,
      "      a put ahead commits once its bytes landed, not while they travel"),
    F("debug-put-delay", K_MS, debug_put_delay_ms,
      "DUR   test hook: delay before committing a put (0)"),
    F("debug-get-delay", K_MS, debug_get_delay_ms,
      "DUR   test hook: delay a get, exists or prefix match before its reads (0)"),
    F("debug-disk-read-delay", K_MS, debug_disk_read_delay_ms,
      "DUR   test hook: delay each read from the SSD tier (0)"),
    F("debug-heartbeat-delay", K_MS, debug_hb_delay_ms,
      "DUR   test hook: hold the heartbeat thread's first beat (0)"),
    F("busy-poll-us", K_US, busy_poll_us,
      "N     microseconds a thread waiting for a peer's bytes (a reply,\n"
      "                             a peer's next request) polls before it sleeps,\n"
      "                             0..1000 (50; 0: sleep at once)"),
    F("rdma-devices", K_STR, rdma_devices,
      "LIST  RDMA devices for peer transfers: auto (the first active port),\n"
      "                             none, or names like mlx5_0,mlx5_1:2 (auto); TCP otherwise"),
    F("disk-dir", K_STR, disk_dir, "DIR   SSD tier directory (none: no SSD tier)"),
    F("disk-capacity", K_SIZE, disk_capacity, "SIZE  bytes of the SSD tier (16GiB)"),
    F("disk-eviction", K_POLICY, disk_policy,
      "NAME  SSD eviction by bucket: fifo|lru|clock (clock)"),
    F("dumpable", K_BOOL, dumpable,
      "      let processes of our uid ptrace us and read our memory, and\n"
      "                             dump core (off: a client could reach the others' memory)"),
    F("cluster-key", K_STR, key_path,
      "FILE  the cluster key (lunarctl keygen; env LUNAR_CLUSTER_KEY_FILE):\n"
      "                             master and peers must prove it, and so must we"),
    F("admin-calls", K_BOOL, admin_calls,
      "      open our master session as ADMIN (needs --cluster-key): this\n"
      "                             node's apps may then remove all or force removes"),
    F("insecure", K_BOOL, insecure,
      "      allow a --host other than loopback without a cluster key (warns)"),
    F("config", K_STR, config_path,
      "FILE  settings from FILE, one 'name = value' a line, under the command line's"),
};
#undef F

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: lunar-proxy [--embedded-master | --master URL] [flags]\n\n"
	    "The per-node Lunar daemon: serves applications over shared memory,\n"
	    "contributes a DRAM segment and moves bytes to and from its peers.\n\n"
	    "Flags (--name VALUE or --name=VALUE; sizes take KiB/MiB/GiB, durations ms/s/m/h):\n");
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		fprintf(out, "  --%-18s %s\n", flags[i].name, flags[i].help);
	fprintf(out,
		"  --%-18s       this text\n  --%-18s       print the version\n\n"
		"With --embedded-master, master flags too:\n%s",
		"help", "version", mst_config_usage());
}

static void defaults(struct px_config *c)
{
	memset(c, 0, sizeof(*c));
	lc_uds_default_path(c->socket_path, sizeof(c->socket_path));
	mst_config_defaults(&c->mcfg);
	c->host = "127.0.0.1";
	c->data_port = 12345;
	c->http_port = 9300;
	c->segment_size = 4ull << 30;
	c->arena_size = 64ull << 20;
	c->max_clients = 1024;
	c->socket_mode = 0660;
	c->max_inflight = 256;
	c->workers = 8;
	c->busy_poll_us = 50;
	c->rpc_timeout_ms = 5000;
	c->ping_interval_ms = 1000;
	c->reserve_size = 16ull << 20;
	c->reserve_value_max = 1ull << 20;
	c->disk_capacity = 16ull << 30;
	c->rdma_devices = "auto";
	c->disk_policy = 2; /* DSK_CLOCK */
}

/* "1000,1001" into ids[]; at most 16. */
static int parse_ids(const char *v, uint32_t *ids, unsigned *n)
{
	char buf[256], *save, *tok;
	uint64_t x;

	if (strlen(v) >= sizeof(buf))
		return -EINVAL;
	strcpy(buf, v);
	*n = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		if (*n == 16 || lc_parse_u64(tok, &x) || x >= UINT32_MAX)
			return -EINVAL;
		ids[(*n)++] = (uint32_t)x;
	}
	return *n ? 0 : -EINVAL;
}

/* An octal mode the owner can still use: 0600..0777, no setuid, setgid or
 * sticky bit. */
static int parse_mode(const char *v, unsigned *mode)
{
	char *end;
	unsigned long m;

	errno = 0;
	m = strtoul(v, &end, 8);
	if (errno || end == v || *end || *v == '-' || m > 0777 || (m & 0600) != 0600)
		return -EINVAL;
	*mode = (unsigned)m;
	return 0;
}

/* A gid, or a group's name looked up in the group database. */
static int parse_group(const char *v, gid_t *gid)
{
	struct group gr, *res = NULL;
	char buf[4096];
	uint64_t x;

	if (!lc_parse_u64(v, &x))
		return x < UINT32_MAX ? (*gid = (gid_t)x, 0) : -EINVAL;
	if (getgrnam_r(v, &gr, buf, sizeof(buf), &res) || !res)
		return -EINVAL;
	*gid = res->gr_gid;
	return 0;
}

static int set_flag(struct px_config *c, const struct flag *f, const char *v)
{
	char *p = (char *)c + f->off;
	uint64_t x;

	switch (f->kind) {
	case K_STR:
		if (!*v)
			return -EINVAL; /* no flag names an empty path or address */
		if (f->off == offsetof(struct px_config, socket_path)) {
			if (strlen(v) >= sizeof(c->socket_path))
				return -EINVAL;
			strcpy(c->socket_path, v);
		} else {
			*(const char **)p = v;
		}
		return 0;
	case K_SIZE: return lc_parse_size(v, (uint64_t *)p);
	case K_MS: return lc_parse_duration_ms(v, (uint64_t *)p);
	case K_U16:
		if (lc_parse_u64(v, &x) || x > 65535)
			return -EINVAL;
		*(uint16_t *)p = (uint16_t)x;
		return 0;
	case K_UINT:
		if (lc_parse_u64(v, &x) || x == 0 || x > 65536)
			return -EINVAL;
		*(unsigned *)p = (unsigned)x;
		return 0;
	case K_US:
		if (lc_parse_u64(v, &x) || x > ENG_BUSY_POLL_MAX_US)
			return -EINVAL;
		*(unsigned *)p = (unsigned)x;
		return 0;
	case K_KEYS:
		if (lc_parse_u64(v, &x) || x < 64 || x > PX_LEASE_KEYS_MAX)
			return -EINVAL;
		*(unsigned *)p = (unsigned)x;
		return 0;
	case K_BOOL: *(int *)p = 1; return 0;
	case K_UIDS: return parse_ids(v, (uint32_t *)c->allow_uid, &c->n_allow_uid);
	case K_GIDS: return parse_ids(v, (uint32_t *)c->allow_gid, &c->n_allow_gid);
	case K_MODE: return parse_mode(v, &c->socket_mode);
	case K_GROUP: c->socket_group_set = 1; return parse_group(v, &c->socket_gid);
	case K_POLICY: /* enum dsk_policy */
		if (strcmp(v, "fifo") && strcmp(v, "lru") && strcmp(v, "clock"))
			return -EINVAL;
		*(int *)p = !strcmp(v, "lru") ? 1 : !strcmp(v, "clock") ? 2 : 0;
		return 0;
	}
	return -EINVAL;
}

static const struct flag *find_flag(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (strlen(flags[i].name) == len && !strncmp(flags[i].name, name, len))
			return &flags[i];
	return NULL;
}

static int bad(const char *fmt, const char *a)
{
	fprintf(stderr, "lunar-proxy: ");
	fprintf(stderr, fmt, a);
	fprintf(stderr, "\nTry 'lunar-proxy --help'.\n");
	return 2;
}

/* One "--name[=value]" at argv[*i]; advances *i past a separate value. */
static int parse_one(struct px_config *c, int argc, char **argv, int *i, const char **mflag)
{
	const char *arg = argv[*i] + 2, *eq = strchr(arg, '='), *v;
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
	const struct flag *f = find_flag(arg, len);
	char name[64];
	int at = *i;

	if (f && f->kind == K_BOOL)
		return eq ? bad("--%s takes no value", f->name) : set_flag(c, f, "");
	if (len >= sizeof(name))
		return bad("unknown flag '%s'", argv[*i]);
	memcpy(name, arg, len);
	name[len] = '\0';
	if (!f && !mst_config_has(name))
		return bad("unknown flag '--%s'", name);
	if (eq)
		v = eq + 1;
	else if (!f && mst_config_is_switch(name) &&
		 (*i + 1 == argc || !strncmp(argv[*i + 1], "--", 2)))
		v = "true";
	else if (*i + 1 < argc)
		v = argv[++*i];
	else
		return bad("--%s needs a value", name);
	if (f)
		return set_flag(c, f, v) ? bad("bad value for --%s", name) : 0;
	switch (mst_config_set(&c->mcfg, name, v)) {
	case 0: *mflag = argv[at]; return 0;
	default: return bad("bad value for --%s", name);
	}
}

/* --config's settings, taken before the command line so that it wins. */
static int parse_file(struct px_config *c, int argc, char **argv, const char **mflag)
{
	const char *why, *path = lc_conf_path(argc, argv, &why);
	char err[512];

	if (why)
		return bad("%s", why);
	if (!path)
		return 0;
	if (lc_conf_read(path, &c->conf, err, sizeof(err)))
		return bad("%s", err);
	for (size_t k = 0; k < c->conf.n; k++) {
		char **arg = &c->conf.args[k];
		int i = 0, nested = !strcmp(*arg, "--config") || !strncmp(*arg, "--config=", 9);

		if (nested)
			fprintf(stderr, "lunar-proxy: config files do not nest\n");
		if (nested || parse_one(c, 1, arg, &i, mflag)) {
			fprintf(stderr, "lunar-proxy: (config file %s, line %u)\n", path,
				c->conf.lines[k]);
			return 2;
		}
	}
	return 0;
}

/* The cluster key, and whether --host may be bound with what we have. */
static int check_security(struct px_config *c)
{
	char why[512];
	int rc = auth_init();

	if (!rc)
		rc = auth_key_resolve(c->key_path, &c->cluster_key, why, sizeof(why));
	if (rc < 0)
		return bad("cluster key: %s", why);
	c->keyed = rc;
	c->mcfg.keyed = rc; /* an embedded master grants capabilities too */
	if (c->admin_calls && !c->keyed)
		return bad("%s", "--admin-calls needs --cluster-key (keyless, there are no roles)");
	if (auth_bind_check(c->host, c->keyed, c->insecure, why, sizeof(why)))
		return bad("%s", why);
	return 0;
}

int px_config_parse(struct px_config *c, int argc, char **argv)
{
	const char *mflag = NULL;

	defaults(c);
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 1;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("lunar-proxy 0.1.0 (shm protocol %d)\n", LC_PROTO_VERSION);
			return 1;
		}
	}
	if (parse_file(c, argc, argv, &mflag))
		return 2;
	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--", 2))
			return bad("unexpected argument '%s'", argv[i]);
		if (parse_one(c, argc, argv, &i, &mflag))
			return 2;
	}
	if (c->embedded == !!c->master_url)
		return bad("%s", "give exactly one of --embedded-master and --master URL");
	if (mflag && !c->embedded)
		return bad("'%s' is a master flag: it needs --embedded-master", mflag);
	if (c->master_url && lc_parse_rpc_url(c->master_url))
		return bad("bad --master '%s': want " LC_RPC_URL_FORMS
			   " (e.g. tcp://127.0.0.1:50051)",
			   c->master_url);
	if (c->disk_dir && (!c->segment_size || !c->disk_capacity))
		return bad("%s", "--disk-dir needs a --segment-size and a --disk-capacity above 0");
	/* Peers keep our endpoint, "host:port", in their lease caches. */
	_Static_assert(PX_ENDPOINT_MAX - sizeof(":65535") == 65, "--help says 65");
	if (strlen(c->host) + sizeof(":65535") > PX_ENDPOINT_MAX)
		return bad("--host '%s': longer than peers can keep (65 bytes at most)", c->host);
	if (check_security(c))
		return 2;
	/* Before what scales with the segment: its size may shrink here. */
	if (px_mem_fit(c))
		return 2;
	if (!c->lease_cache_keys)
		c->lease_cache_keys = px_lease_cache_default_keys(c->segment_size);
	/* A reader of 26,000 new keys a second for a 10 s lease; its set of
	 * hashes takes 2 MiB at most. */
	if (!c->max_client_leases)
		c->max_client_leases = 262144;
	if (!c->max_registrations)
		c->max_registrations = px_mreg_default_max(c->max_clients);
	return 0;
}
