/*
 * main.c - lunar-master: parse flags, create the master, serve it on nng's
 * wire (rpc_server.h) until SIGTERM or SIGINT, then stop cleanly.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "log.h"
#include "lunar.h"
#include "ha.h"
#include "http.h"
#include "http_gate.h"
#include "master.h"
#include "parse.h"
#include "conf.h"
#include "rpc_server.h"
#include "sdnotify.h"

#define VERSION		 "0.1.0"
#define MST_STOP_BOUND_S 10 /* after this long stopping, SIGALRM ends the process */

struct opts {
	uint64_t port;
	uint64_t http_port;
	const char *listen;
	uint64_t workers;
	const char *key_path; /* --cluster-key */
	int insecure;	      /* --insecure: a non-loopback bind without a key */
	struct auth_key key;
	int keyed;
	struct mst_config cfg;
	struct mst_ha_config ha; /* --etcd and friends (ha.h) */
	struct lc_conf conf;	 /* --config's settings; cfg may point into them */
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: lunar-master [flags]\n"
	    "  --port PORT                      RPC port, 0 picks a free one (50051)\n"
	    "  --listen ADDR                    address to listen on (127.0.0.1); any other needs\n"
	    "                                   --cluster-key or --insecure\n"
	    "  --http-port PORT                 /metrics, /health, /ready, /admin (9003; 0 picks)\n"
	    "  --workers N                      parallel RPC workers (8)\n"
	    "  --cluster-key FILE               the cluster key (lunarctl keygen; env\n"
	    "                                   LUNAR_CLUSTER_KEY_FILE): every caller must prove "
	    "it\n"
	    "  --insecure                       allow a non-loopback --listen without a key "
	    "(warns)\n"
	    "%s%s"
	    "  --config FILE                    settings from FILE, one 'name = value' a line,\n"
	    "                                   under the command line's\n"
	    "  --help                           this text\n"
	    "  --version                        print the version\n"
	    "Flags take --name value or --name=value. DURATION: 250ms, 10s, 30m, 1h.\n",
	    mst_config_usage(), mst_ha_usage());
}

static int known(const char *name)
{
	static const char *const own[] = {"listen",	 "port",     "http-port", "workers",
					  "cluster-key", "insecure", "config"};

	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (!strcmp(name, own[i]))
			return 1;
	return mst_config_has(name) || mst_ha_flag_has(name);
}

/* One flag and its value; 0, or 2 after printing why. */
static int set_flag(struct opts *o, const char *name, const char *val)
{
	int rc;

	if (!strcmp(name, "config"))
		return 0; /* read before the command line */
	if (!strcmp(name, "listen"))
		rc = *(o->listen = val) ? 0 : -EINVAL; /* empty is no address */
	else if (!strcmp(name, "port"))
		rc = lc_parse_u64(val, &o->port) || o->port > 65535 ? -EINVAL : 0;
	else if (!strcmp(name, "http-port"))
		rc = lc_parse_u64(val, &o->http_port) || o->http_port > 65535 ? -EINVAL : 0;
	else if (!strcmp(name, "cluster-key"))
		rc = *(o->key_path = val) ? 0 : -EINVAL;
	else if (!strcmp(name, "insecure"))
		rc = strcmp(val, "true") ? -EINVAL : (o->insecure = 1, 0);
	else if (!strcmp(name, "workers"))
		rc = lc_parse_u64(val, &o->workers) || !o->workers || o->workers > 1024 ? -EINVAL
											: 0;
	else if (mst_ha_flag_has(name))
		rc = mst_ha_config_set(&o->ha, name, val);
	else
		rc = mst_config_set(&o->cfg, name, val);
	if (rc)
		fprintf(stderr, "lunar-master: bad value '%s' for --%s\n", val, name);
	return rc ? 2 : 0;
}

/* The flag at argv[*i] (its value may be the next argument: *i moves on);
 * 0, or 2 after printing why. */
static int parse_one(struct opts *o, int argc, char **argv, int *i)
{
	const char *arg = argv[*i], *eq = strchr(arg, '='), *val;
	size_t len = (size_t)((eq ? eq : arg + strlen(arg)) - arg);
	char name[64];

	if (strncmp(arg, "--", 2) || len >= sizeof(name)) {
		fprintf(stderr, "lunar-master: unexpected argument '%s' (see --help)\n", arg);
		return 2;
	}
	snprintf(name, sizeof(name), "%.*s", (int)len - 2, arg + 2);
	val = eq ? eq + 1 : NULL;
	if (!known(name)) {
		fprintf(stderr, "lunar-master: unknown flag --%s (see --help)\n", name);
		return 2;
	}
	if (!val && (mst_config_is_switch(name) || !strcmp(name, "insecure")) &&
	    (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2)))
		val = "true";
	if (!val && *i + 1 >= argc) {
		fprintf(stderr, "lunar-master: --%s needs a value\n", name);
		return 2;
	}
	if (!val)
		val = argv[++*i];
	return set_flag(o, name, val);
}

/* --config's settings, taken before the command line so that it wins. */
static int parse_file(struct opts *o, int argc, char **argv)
{
	const char *why, *path = lc_conf_path(argc, argv, &why);
	char err[512];

	if (why) {
		fprintf(stderr, "lunar-master: %s\n", why);
		return 2;
	}
	if (!path)
		return 0;
	if (lc_conf_read(path, &o->conf, err, sizeof(err))) {
		fprintf(stderr, "lunar-master: %s\n", err);
		return 2;
	}
	for (size_t k = 0; k < o->conf.n; k++) {
		char **arg = &o->conf.args[k];
		int i = 0, nested = !strcmp(*arg, "--config") || !strncmp(*arg, "--config=", 9);

		if (nested)
			fprintf(stderr, "lunar-master: config files do not nest\n");
		if (nested || parse_one(o, 1, arg, &i)) {
			fprintf(stderr, "lunar-master: (config file %s, line %u)\n", path,
				o->conf.lines[k]);
			return 2;
		}
	}
	return 0;
}

/* The cluster key, and whether --listen is allowed with what we have;
 * 0, or 2 after printing why. */
static int check_security(struct opts *o)
{
	char why[512];
	int rc = auth_init();

	if (!rc)
		rc = auth_key_resolve(o->key_path, &o->key, why, sizeof(why));
	if (rc < 0) {
		fprintf(stderr, "lunar-master: cluster key: %s\n", why);
		return 2;
	}
	o->keyed = rc;
	o->cfg.keyed = rc; /* segment secrets and capabilities */
	if (auth_bind_check(o->listen, o->keyed, o->insecure, why, sizeof(why)) ||
	    mst_ha_config_check(&o->ha, why, sizeof(why))) {
		fprintf(stderr, "lunar-master: %s\n", why);
		return 2;
	}
	return 0;
}

/* Parse argv; 0 to run, 1 to exit 0 (--help, --version), 2 on bad usage. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 1;
		}
		if (!strcmp(argv[i], "--version")) {
			printf("lunar-master %s\n", VERSION);
			return 1;
		}
	}
	if (parse_file(o, argc, argv))
		return 2;
	for (int i = 1; i < argc; i++)
		if (parse_one(o, argc, argv, &i))
			return 2;
	return check_security(o);
}

static void warn_insecure(const struct opts *o)
{
	if (!o->keyed && !auth_host_is_loopback(o->listen))
		LC_WARN("lunar-master",
			"--insecure: anyone who reaches %s can read and change "
			"the cache; give --cluster-key",
			o->listen);
}

/* SIGTERM or SIGINT; an insecure master repeats its warning once a minute. */
static int wait_signal(const struct opts *o, const sigset_t *sigs)
{
	const struct timespec minute = {60, 0};
	int sig;

	warn_insecure(o);
	while ((sig = sigtimedwait(sigs, NULL, &minute)) < 0)
		warn_insecure(o);
	return sig;
}

/* A leader that lost its term asks to be restarted (ha.h): main's signal
 * wait sees SIGUSR1. */
static void on_deposed(void *arg)
{
	(void)arg;
	kill(getpid(), SIGUSR1);
}

/* The election, with the HTTP address lunarctl finds in the leader key:
 * --advertise-http, else the --advertise host and --http-port. */
static int ha_start(const struct opts *o, struct mst_master *m, struct mst_ha **ha)
{
	struct mst_ha_config c = o->ha;
	char http[300];
	const char *host = c.advertise + 6; /* mst_ha_config_check: tcp://HOST:PORT */

	if (!c.advertise_http && o->http_port) {
		snprintf(http, sizeof(http), "http://%.*s:%u", (int)(strrchr(host, ':') - host),
			 host, (unsigned)o->http_port);
		c.advertise_http = http;
	}
	return mst_ha_start(m, &c, on_deposed, NULL, ha);
}

static int serve(const struct opts *o, const sigset_t *sigs)
{
	struct mst_master *m;
	struct mst_ha *ha = NULL;
	struct mst_server *s;
	struct lc_http *http;
	struct auth_http_gate gate;
	struct mst_http face = {.gate = &gate};
	char url[300];
	int sig, rc;

	if (mst_master_create(&o->cfg, &m))
		return 1; /* logged */
	face.m = m;
	if (o->ha.etcd && (rc = ha_start(o, m, &ha))) {
		LC_ERROR("master", "cannot start the etcd election: %s", strerror(-rc));
		mst_master_destroy(m);
		return 1;
	}
	snprintf(url, sizeof(url), "tcp://%s:%u", o->listen, (unsigned)o->port);
	rc = mst_server_start(m, url, (unsigned)o->workers, o->keyed ? &o->key : NULL, &s);
	if (rc) {
		LC_ERROR("master", "cannot listen on %s: %s", url, lunar_strerror(rc));
		mst_ha_free(ha);
		mst_master_destroy(m);
		return 1;
	}
	/* /admin answers loopback callers, and others with the key's token */
	auth_http_gate_init(&gate, o->keyed ? &o->key : NULL, "master");
	rc = lc_http_start(o->listen, (uint16_t)o->http_port, mst_http_handle, &face, &http);
	if (rc) {
		LC_ERROR("master", "cannot serve HTTP on %s:%u: %s", o->listen,
			 (unsigned)o->http_port, strerror(-rc));
		mst_server_stop(s);
		mst_ha_free(ha);
		mst_master_destroy(m);
		return 1;
	}
	LC_INFO("lunar-master", "listening on tcp://%s:%u; HTTP on http://%s:%u", o->listen,
		(unsigned)mst_server_port(s), o->listen, (unsigned)lc_http_port(http));
	lc_sd_notify("READY=1");
	sig = wait_signal(o, sigs);
	LC_INFO("lunar-master", "signal %d: stopping", sig);
	lc_sd_notify("STOPPING=1");
	/* Never hang on the way out: a handler stuck on a lock would hold
	 * the server's stop. */
	alarm(MST_STOP_BOUND_S);
	mst_ha_stop(ha); /* step down first: a standby takes over at once */
	lc_http_stop(http);
	mst_server_stop(s);
	mst_ha_free(ha);
	mst_master_destroy(m);
	return sig == SIGUSR1 ? 75 : 0; /* deposed: EX_TEMPFAIL, restart me */
}

int main(int argc, char **argv)
{
	struct opts o = {.port = 50051, .http_port = 9003, .listen = "127.0.0.1", .workers = 8};
	sigset_t sigs;
	int rc;

	mst_config_defaults(&o.cfg);
	mst_ha_config_defaults(&o.ha);
	rc = parse_args(argc, argv, &o);
	if (rc) {
		lc_conf_free(&o.conf);
		return rc == 1 ? 0 : 2;
	}
	/* block before any thread starts so every thread inherits the mask */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1); /* on_deposed */
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	rc = serve(&o, &sigs);
	auth_key_wipe(&o.key);
	lc_conf_free(&o.conf);
	return rc;
}
