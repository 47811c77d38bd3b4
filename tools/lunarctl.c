/*
 * lunarctl.c - the admin CLI (SPEC §11). status, put, get, exists and rm go
 * to the node's lunar-proxy through liblunar like any application; keys,
 * stat, segment list, client list, metrics and disk status ask HTTP
 * endpoints (tools/ctl/admin.c). Exit codes: 0 ok, 1 operation failed,
 * 2 usage, 3 cannot connect. With -o json every verb prints one JSON object.
 */
#include "lunar.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "ctl/ctl.h"
#include "ctl/http_get.h"
#include "ctl/json.h"

/* A value travels through the shared arena; give it room for two in flight. */
#define CTL_MIN_ARENA	(64ull << 20)
#define CTL_ARENA_ROUND (1ull << 20)
/* get_size then get_into races an upsert that grows the value; retry that. */
#define CTL_GET_TRIES 3

static const char usage_short[] =
    "usage: lunarctl [--socket PATH] [--master HOST:PORT|etcd://HOSTS/CLUSTER | --http HOST:PORT]\n"
    "                [-o text|json]\n"
    "                [--timeout-ms N] [--tenant NAME] VERB ...\n"
    "verbs: status | put KEY FILE|- [--replicas N] | get KEY [FILE|-] | exists KEY |\n"
    "       rm [--force] KEY | rm --regex PATTERN --yes | rm --all --yes |\n"
    "       keys [PATTERN] [--limit N] [--all-tenants] | stat KEY | segment list |\n"
    "       client list | metrics | disk status | master status | keygen FILE | help\n"
    "Try 'lunarctl --help' for details.\n";

static const char usage_long[] =
    "lunarctl - admin CLI for the Lunar KV-cache store\n"
    "\n"
    "usage: lunarctl [OPTIONS] VERB [ARGS...]\n"
    "\n"
    "Data verbs (through the node's lunar-proxy socket, --socket):\n"
    "  status                     is the proxy reachable, and through it the master?\n"
    "                             exit 0 both reachable, 1 master unreachable,\n"
    "                             3 proxy unreachable\n"
    "  put KEY FILE|-             store the whole of FILE (or stdin for -) under KEY;\n"
    "                             an existing KEY keeps its first value\n"
    "      --replicas N           ask for N replicas (default 1)\n"
    "  get KEY [FILE|-]           read KEY's value into FILE (created or truncated\n"
    "                             only once the read succeeded), or to stdout\n"
    "  exists KEY                 print 1 and exit 0 if KEY holds a value,\n"
    "                             else print 0 and exit 1\n"
    "  rm [--force] KEY           remove KEY; --force removes it even while it is\n"
    "                             leased by a reader\n"
    "  rm --regex PATTERN --yes   remove every key of the tenant matching PATTERN\n"
    "                             (POSIX extended regex); prints how many\n"
    "  rm --all --yes             remove every key of the tenant; prints how many\n"
    "                             (without --yes both refuse, exit 2; --force also\n"
    "                             takes leased keys)\n"
    "\n"
    "Admin verbs (HTTP: the master's address with --master, else the proxy's HTTP\n"
    "port --http, else the HTTP port the proxy behind --socket tells; a proxy\n"
    "answers /admin/ when it runs an embedded master; /admin/ answers loopback\n"
    "callers, and others that prove the key with --cluster-key):\n"
    "  keys [PATTERN]             list keys (matching the POSIX extended regex\n"
    "                             PATTERN) of the tenant, one per line with its size\n"
    "      --limit N              at most N keys (default: the master's, 1000)\n"
    "      --all-tenants          every tenant's keys, tenant first on each line\n"
    "  stat KEY                   size, state, checksum, pins and replicas of KEY\n"
    "  segment list               NAME ENDPOINT SIZE USED% DRAINING of every segment\n"
    "  client list                ID LAST_PING ALIVE SEGMENTS of every proxy\n"
    "  metrics                    the Prometheus text of /metrics (the proxy's, with\n"
    "                             its embedded master's; the master's with --master)\n"
    "  disk status                the proxy's disk tier (/disk/status on --http,\n"
    "                             never --master); exit 1 when it has none\n"
    "  master status              the election (/admin/ha): the leader, its view, the\n"
    "                             role of the master asked, the standbys registered\n"
    "                             in etcd (with --master etcd://, the leader's)\n"
    "\n"
    "Cluster key:\n"
    "  keygen FILE                write a new random cluster key to FILE (mode 0600;\n"
    "                             never overwrites). Give the same file to every\n"
    "                             lunar-master, lunar-proxy and tool with --cluster-key\n"
    "  help                       this text\n"
    "\n"
    "Options (before or after the verb):\n"
    "  --socket PATH              proxy socket (default: $LUNAR_SOCKET, then\n"
    "                             /run/lunar/proxy.sock as root, else\n"
    "                             $XDG_RUNTIME_DIR/lunar/proxy.sock, else\n"
    "                             /tmp/lunar-$UID/proxy.sock)\n"
    "  --master HOST:PORT         the master's HTTP address (lunar-master\n"
    "                             --http-port; port default 9003) for admin verbs\n"
    "  --master etcd://H1:2379[,H2:2379...]/CLUSTER\n"
    "                             the leader of CLUSTER: its HTTP address read from\n"
    "                             its etcd key (/lunar/CLUSTER/leader)\n"
    "  --http HOST:PORT           the proxy's HTTP address (lunar-proxy --http-port)\n"
    "                             for admin verbs; default: the one the proxy behind\n"
    "                             --socket tells (127.0.0.1:9300 if it tells none)\n"
    "  --cluster-key FILE         the cluster key (env LUNAR_CLUSTER_KEY_FILE): admin\n"
    "                             verbs send its token (Authorization: Bearer), which\n"
    "                             a keyed daemon's /admin pages need from any address\n"
    "                             but loopback\n"
    "  -o, --output text|json     output format; json prints one object per line\n"
    "                             (admin verbs pass the master's JSON through; for\n"
    "                             get to stdout the JSON line goes to stderr)\n"
    "  --timeout-ms N             per-call timeout (default $LUNAR_TIMEOUT_MS, then 30000)\n"
    "  --tenant NAME              tenant the keys belong to (default \"default\")\n"
    "  -y, --yes                  confirm rm --regex / rm --all\n"
    "  -h, --help                 this text\n"
    "  --                         end of options (for keys starting with '-')\n"
    "\n"
    "Exit codes: 0 ok, 1 operation failed, 2 usage error, 3 cannot connect (to the\n"
    "proxy's socket, or to the HTTP address).\n";

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("lunarctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fputs(usage_short, stderr);
	return EXIT_USAGE;
}

static const char *key_arg(const struct ctl *x)
{
	return x->nargs > 0 ? x->args[0] : NULL;
}

/* Report a failed call: text on stderr, and in json mode an object on stdout.
 * A proxy that went away mid-call is "cannot connect", not a failed op. */
static int fail(const struct ctl *x, int code)
{
	fprintf(stderr, "lunarctl: %s: %s (%d)\n", x->verb, lunar_strerror(code), code);
	if (code == LUNAR_ERR_OBJECT_HAS_LEASE && !strcmp(x->verb, "rm"))
		fprintf(stderr, "lunarctl: the object is being read; 'rm --force' removes it\n");
	if (x->json) {
		fputs("{", stdout);
		if (key_arg(x)) {
			fputs("\"key\":", stdout);
			cj_write_str(stdout, key_arg(x));
			fputs(",", stdout);
		}
		printf("\"error\":\"%s\",\"code\":%d}\n", lunar_strerror(code), code);
	}
	return code == LUNAR_ERR_PROXY_UNAVAILABLE ? EXIT_NOCONN : EXIT_FAIL;
}

/* A failure of the tool itself (file I/O, memory), named in words. */
static int fail_sys(const struct ctl *x, const char *what, const char *name, int err)
{
	fprintf(stderr, "lunarctl: %s: %s %s: %s\n", x->verb, what, name, strerror(err));
	if (x->json) {
		fputs("{\"error\":", stdout);
		cj_write_str(stdout, strerror(err));
		fputs(",\"file\":", stdout);
		cj_write_str(stdout, name);
		fputs("}\n", stdout);
	}
	return EXIT_FAIL;
}

/* The path the library will use, for messages only (SPEC §2 defaults). */
static void socket_describe(struct ctl *x)
{
	const char *env = getenv("LUNAR_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	size_t n = sizeof(x->socket_shown);

	if (x->opts.socket_path)
		snprintf(x->socket_shown, n, "%s", x->opts.socket_path);
	else if (env && *env)
		snprintf(x->socket_shown, n, "%s", env);
	else if (geteuid() == 0)
		snprintf(x->socket_shown, n, "/run/lunar/proxy.sock");
	else if (xdg && *xdg)
		snprintf(x->socket_shown, n, "%s/lunar/proxy.sock", xdg);
	else
		snprintf(x->socket_shown, n, "/tmp/lunar-%u/proxy.sock", (unsigned)getuid());
}

static size_t arena_for(uint64_t value_bytes)
{
	uint64_t want = value_bytes * 2;

	if (value_bytes > UINT64_MAX / 2 - CTL_ARENA_ROUND)
		return SIZE_MAX;
	want = (want + CTL_ARENA_ROUND - 1) / CTL_ARENA_ROUND * CTL_ARENA_ROUND;
	return want < CTL_MIN_ARENA ? CTL_MIN_ARENA : (size_t)want;
}

/* Connect with an arena of arena bytes (0: the proxy's default). */
static int ctl_connect(struct ctl *x, size_t arena)
{
	int rc;

	lunar_close(x->c);
	x->c = NULL;
	x->opts.arena_bytes = arena;
	rc = lunar_connect(&x->opts, &x->c);
	if (rc == 0)
		return EXIT_OK;
	x->c = NULL;
	fprintf(stderr, "lunarctl: cannot connect to the proxy at %s: %s (%d)\n", x->socket_shown,
		lunar_strerror(rc), rc);
	if (x->json) {
		fputs("{\"socket\":", stdout);
		cj_write_str(stdout, x->socket_shown);
		printf(",\"error\":\"%s\",\"code\":%d}\n", lunar_strerror(rc), rc);
	}
	return EXIT_NOCONN;
}

static int cmd_status(struct ctl *x)
{
	int rc, h;

	x->opts.arena_bytes = 0;
	rc = lunar_connect(&x->opts, &x->c);
	/* health: 0 ok, 1 proxy unreachable, 2 master unreachable */
	h = rc ? 1 : lunar_health(x->c);
	if (h < 0)
		return fail(x, h);
	if (x->json) {
		fputs("{\"socket\":", stdout);
		cj_write_str(stdout, x->socket_shown);
		printf(",\"proxy_reachable\":%s,\"master_reachable\":%s", h == 1 ? "false" : "true",
		       h == 0 ? "true" : "false");
		if (rc)
			printf(",\"error\":\"%s\",\"code\":%d", lunar_strerror(rc), rc);
		fputs("}\n", stdout);
	} else {
		printf("socket: %s\n", x->socket_shown);
		if (rc)
			printf("proxy: unreachable (%s (%d))\nmaster: unknown\n",
			       lunar_strerror(rc), rc);
		else
			printf("proxy: reachable\nmaster: %s\n", h == 0	  ? "reachable"
								 : h == 2 ? "unreachable"
									  : "unknown");
	}
	return h == 0 ? EXIT_OK : h == 2 ? EXIT_FAIL : EXIT_NOCONN;
}

/* Read all of fd into a fresh heap buffer; *hint is the expected size. */
static int read_all(int fd, size_t hint, unsigned char **out, size_t *len)
{
	size_t cap = hint ? hint + 1 : 1 << 20, n = 0;
	unsigned char *buf = malloc(cap), *nb;
	ssize_t r;

	if (!buf)
		return ENOMEM;
	for (;;) {
		if (n == cap) {
			nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				return ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n);
		if (r == 0)
			break;
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			free(buf);
			return errno;
		}
		n += (size_t)r;
	}
	*out = buf;
	*len = n;
	return 0;
}

static int load_input(const struct ctl *x, const char *path, unsigned char **buf, size_t *len)
{
	int fd = 0, err;
	struct stat st;
	size_t hint = 0;

	if (strcmp(path, "-")) {
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return fail_sys(x, "open", path, errno);
	}
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
		hint = (size_t)st.st_size;
	err = read_all(fd, hint, buf, len);
	if (fd != 0)
		close(fd);
	if (err)
		return fail_sys(x, "read", strcmp(path, "-") ? path : "stdin", err);
	return EXIT_OK;
}

static int cmd_put(struct ctl *x)
{
	struct lunar_put_cfg cfg = {.replica_num = x->replicas};
	unsigned char *buf = NULL;
	size_t len = 0;
	int rc;

	rc = load_input(x, x->args[1], &buf, &len);
	if (rc)
		return rc;
	if (len == 0) {
		free(buf);
		fprintf(stderr, "lunarctl: put: %s is empty; a value is 1 byte or more\n",
			strcmp(x->args[1], "-") ? x->args[1] : "stdin");
		return fail(x, LUNAR_ERR_INVALID_PARAMS);
	}
	rc = ctl_connect(x, arena_for(len));
	if (rc) {
		free(buf);
		return rc;
	}
	rc = lunar_put(x->c, x->args[0], buf, len, &cfg);
	free(buf);
	if (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE && *lunar_error_detail())
		fprintf(stderr, "lunarctl: put: %zu bytes: %s\n", len, lunar_error_detail());
	else if (rc == LUNAR_ERR_NO_AVAILABLE_HANDLE)
		fprintf(stderr,
			"lunarctl: put: no segment had room for %zu bytes now: they are full of "
			"leased or pinned values; try again later\n",
			len);
	if (rc < 0)
		return fail(x, rc);
	if (x->json) {
		fputs("{\"key\":", stdout);
		cj_write_str(stdout, x->args[0]);
		printf(",\"bytes\":%zu,\"replicas\":%u,\"ok\":true}\n", len, x->replicas);
	} else {
		printf("put %s: %zu bytes\n", x->args[0], len);
	}
	return EXIT_OK;
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Read the value into a heap buffer sized by get_size; *out owns it. */
static int fetch(struct ctl *x, unsigned char **out, size_t *len)
{
	const char *key = x->args[0];
	int64_t size, got = LUNAR_ERR_BUFFER_OVERFLOW;
	unsigned char *buf = NULL;
	int rc;

	for (int i = 0; i < CTL_GET_TRIES && got == LUNAR_ERR_BUFFER_OVERFLOW; i++) {
		size = lunar_get_size(x->c, key);
		if (size < 0)
			return fail(x, (int)size);
		if ((uint64_t)size > SIZE_MAX / 2)
			return fail(x, LUNAR_ERR_BUFFER_OVERFLOW);
		if (arena_for((uint64_t)size) > x->opts.arena_bytes) {
			rc = ctl_connect(x, arena_for((uint64_t)size));
			if (rc)
				return rc;
		}
		free(buf);
		buf = malloc(size ? (size_t)size : 1);
		if (!buf)
			return fail_sys(x, "allocate", "value buffer", ENOMEM);
		got = lunar_get_into(x->c, key, buf, (size_t)size);
	}
	if (got < 0) {
		free(buf);
		return fail(x, (int)got);
	}
	*out = buf;
	*len = (size_t)got;
	return EXIT_OK;
}

static int cmd_get(struct ctl *x)
{
	const char *path = x->nargs > 1 ? x->args[1] : "-";
	int to_stdout = !strcmp(path, "-"), fd = 1, rc, err;
	unsigned char *buf = NULL;
	size_t len = 0;
	FILE *meta;

	rc = ctl_connect(x, arena_for(0));
	if (rc)
		return rc;
	rc = fetch(x, &buf, &len);
	if (rc)
		return rc;
	if (!to_stdout) {
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
		if (fd < 0) {
			free(buf);
			return fail_sys(x, "open", path, errno);
		}
	}
	err = write_all(fd, buf, len);
	free(buf);
	if (!to_stdout && close(fd) && !err)
		err = errno;
	if (err)
		return fail_sys(x, "write", to_stdout ? "stdout" : path, err);
	/* The value owns stdout when it goes there; the summary then goes to stderr. */
	meta = to_stdout ? stderr : stdout;
	if (x->json) {
		fputs("{\"key\":", meta);
		cj_write_str(meta, x->args[0]);
		fprintf(meta, ",\"bytes\":%zu,\"file\":", len);
		cj_write_str(meta, path);
		fputs("}\n", meta);
	} else if (!to_stdout) {
		printf("get %s: %zu bytes -> %s\n", x->args[0], len, path);
	}
	return EXIT_OK;
}

static int cmd_exists(struct ctl *x)
{
	int rc = ctl_connect(x, 0);

	if (rc)
		return rc;
	rc = lunar_exists(x->c, x->args[0]);
	if (rc < 0)
		return fail(x, rc);
	if (x->json) {
		fputs("{\"key\":", stdout);
		cj_write_str(stdout, x->args[0]);
		printf(",\"exists\":%s}\n", rc ? "true" : "false");
	} else {
		printf("%d\n", rc ? 1 : 0);
	}
	return rc ? EXIT_OK : EXIT_FAIL;
}

/* rm --regex PATTERN / rm --all: check_args made sure --yes was given. */
static int cmd_rm_many(struct ctl *x)
{
	const char *tenant = x->opts.tenant && *x->opts.tenant ? x->opts.tenant : "default";
	int64_t n;
	int rc = ctl_connect(x, 0);

	if (rc)
		return rc;
	n = x->regex ? lunar_remove_by_regex(x->c, x->regex, x->force)
		     : lunar_remove_all(x->c, x->force);
	if (n < 0)
		return fail(x, (int)n);
	if (x->json) {
		fputs("{\"tenant\":", stdout);
		cj_write_str(stdout, tenant);
		if (x->regex) {
			fputs(",\"regex\":", stdout);
			cj_write_str(stdout, x->regex);
		}
		printf(",\"all\":%s,\"removed\":%lld,\"force\":%s}\n", x->regex ? "false" : "true",
		       (long long)n, x->force ? "true" : "false");
	} else if (x->regex) {
		printf("removed %lld key%s matching '%s'\n", (long long)n, n == 1 ? "" : "s",
		       x->regex);
	} else {
		printf("removed %lld key%s (all of tenant '%s')\n", (long long)n, n == 1 ? "" : "s",
		       tenant);
	}
	return EXIT_OK;
}

static int cmd_rm(struct ctl *x)
{
	int rc;

	if (x->regex || x->all)
		return cmd_rm_many(x);
	rc = ctl_connect(x, 0);
	if (rc)
		return rc;
	rc = lunar_remove(x->c, x->args[0], x->force);
	if (rc < 0)
		return fail(x, rc);
	if (x->json) {
		fputs("{\"key\":", stdout);
		cj_write_str(stdout, x->args[0]);
		printf(",\"removed\":true,\"force\":%s}\n", x->force ? "true" : "false");
	} else {
		printf("removed %s\n", x->args[0]);
	}
	return EXIT_OK;
}

static int cmd_keygen(struct ctl *x)
{
	const char *path = x->args[0];
	int rc = auth_init();

	if (!rc)
		rc = auth_keygen(path);
	if (rc == -EEXIST)
		fprintf(stderr, "lunarctl: %s exists; a cluster key is never overwritten\n", path);
	else if (rc)
		fprintf(stderr, "lunarctl: cannot write a key to %s: %s\n", path,
			rc < 0 && rc > -4096 ? strerror(-rc) : lunar_strerror(rc));
	if (rc)
		return EXIT_FAIL;
	if (x->json) {
		fputs("{\"key_file\":", stdout);
		cj_write_str(stdout, path);
		puts(",\"mode\":\"0600\"}");
	} else {
		printf("wrote a cluster key to %s (mode 0600)\n", path);
	}
	return EXIT_OK;
}

/* A verb is a word, or a noun and a verb ("segment list"), named by phrase. */
struct verb {
	const char *name, *sub, *phrase;
	int min_args, max_args;
	int (*run)(struct ctl *x);
};

static const struct verb verbs[] = {
    {"status", NULL, "status", 0, 0, cmd_status},
    {"put", NULL, "put", 2, 2, cmd_put},
    {"get", NULL, "get", 1, 2, cmd_get},
    {"exists", NULL, "exists", 1, 1, cmd_exists},
    {"rm", NULL, "rm", 0, 1, cmd_rm},
    {"keys", NULL, "keys", 0, 1, ctl_keys},
    {"stat", NULL, "stat", 1, 1, ctl_stat},
    {"metrics", NULL, "metrics", 0, 0, ctl_metrics},
    {"segment", "list", "segment list", 0, 0, ctl_segment_list},
    {"client", "list", "client list", 0, 0, ctl_client_list},
    {"disk", "status", "disk status", 0, 0, ctl_disk_status},
    {"master", "status", "master status", 0, 0, ctl_master_status},
    {"keygen", NULL, "keygen", 1, 1, cmd_keygen},
};

/* The value of --name VALUE or --name=VALUE; NULL when argv[*i] is not it. */
static const char *opt_value(int argc, char **argv, int *i, const char *name, int *missing)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n))
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = 1;
		return NULL;
	}
	return argv[++*i];
}

static int parse_uint(const char *s, const char *flag, unsigned min, unsigned *out)
{
	uint64_t v;

	if (lc_parse_u64(s, &v) || v < min || v > UINT_MAX) {
		fprintf(stderr, "lunarctl: bad value '%s' for %s (want a whole number >= %u)\n", s,
			flag, min);
		fputs(usage_short, stderr);
		return EXIT_USAGE;
	}
	*out = (unsigned)v;
	return EXIT_OK;
}

static int parse_addr(const char *v, const char *flag, const char **out)
{
	char err[200];

	if (ctl_http_addr_ok(v, err, sizeof(err)))
		return usage_error("bad %s address %s", flag, err);
	*out = v;
	return EXIT_OK;
}

/* One option at argv[*i]; returns EXIT_OK, EXIT_USAGE, or -1 for "not an option". */
static int parse_opt(struct ctl *x, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	int missing = 0, rc;

	if ((v = opt_value(argc, argv, i, "--socket", &missing)))
		x->opts.socket_path = v;
	else if ((v = opt_value(argc, argv, i, "--tenant", &missing)))
		x->opts.tenant = v;
	else if ((v = opt_value(argc, argv, i, "--timeout-ms", &missing)))
		return parse_uint(v, "--timeout-ms", 0, &x->opts.timeout_ms);
	else if ((v = opt_value(argc, argv, i, "--replicas", &missing)))
		return parse_uint(v, "--replicas", 1, &x->replicas);
	else if ((v = opt_value(argc, argv, i, "--output", &missing)) ||
		 (v = opt_value(argc, argv, i, "-o", &missing)) ||
		 (!strncmp(a, "-o", 2) && a[2] && (v = a + 2))) {
		if (strcmp(v, "text") && strcmp(v, "json"))
			return usage_error("bad output format '%s' (want text or json)", v);
		x->json = !strcmp(v, "json");
	} else if ((v = opt_value(argc, argv, i, "--master", &missing))) {
		rc = ctl_master_url(x, v);
		if (rc)
			return rc < 0 ? EXIT_USAGE : EXIT_OK;
		return parse_addr(v, "--master", &x->master);
	} else if ((v = opt_value(argc, argv, i, "--cluster-key", &missing)))
		x->key_path = v;
	else if ((v = opt_value(argc, argv, i, "--http", &missing)))
		return parse_addr(v, "--http", &x->http);
	else if ((v = opt_value(argc, argv, i, "--limit", &missing))) {
		x->limit_set = 1;
		return parse_uint(v, "--limit", 0, &x->limit);
	} else if ((v = opt_value(argc, argv, i, "--regex", &missing)))
		x->regex = v;
	else if (!strcmp(a, "--force") || !strcmp(a, "-f"))
		x->force = 1;
	else if (!strcmp(a, "--all"))
		x->all = 1;
	else if (!strcmp(a, "--all-tenants"))
		x->all_tenants = 1;
	else if (!strcmp(a, "--yes") || !strcmp(a, "-y"))
		x->yes = 1;
	else if (missing)
		return usage_error("option %s needs a value", a);
	else
		return -1;
	return EXIT_OK;
}

static int parse_args(struct ctl *x, int argc, char **argv)
{
	int rc, opts_done = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!opts_done && !strcmp(a, "--")) {
			opts_done = 1;
			continue;
		}
		if (!opts_done && a[0] == '-' && a[1] != '\0') {
			rc = parse_opt(x, argc, argv, &i);
			if (rc < 0)
				return usage_error("unknown option '%s'", a);
			if (rc)
				return rc;
			continue;
		}
		if (!x->verb)
			x->verb = a;
		else if (x->nargs < CTL_MAX_ARGS)
			x->args[x->nargs++] = a;
		else
			return usage_error("too many arguments (at '%s')", a);
	}
	return EXIT_OK;
}

/* Find the verb (a noun and its verb take the first argument). */
static int find_verb(struct ctl *x, const struct verb **out)
{
	const struct verb *v = NULL;

	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (!strcmp(x->verb, verbs[i].name))
			v = &verbs[i];
	if (!v)
		return usage_error("unknown verb '%s'", x->verb);
	if (v->sub) {
		if (x->nargs == 0 || strcmp(x->args[0], v->sub))
			return usage_error("%s: unknown or missing verb%s%s (want '%s')", v->name,
					   x->nargs ? " " : "", x->nargs ? x->args[0] : "",
					   v->phrase);
		for (int i = 1; i < x->nargs; i++)
			x->args[i - 1] = x->args[i];
		x->nargs--;
	}
	x->verb = v->phrase;
	*out = v;
	return EXIT_OK;
}

/* Options that belong to other verbs, and rm's many-keys forms. */
static int check_rm(const struct ctl *x)
{
	if (x->regex && x->all)
		return usage_error("rm: --regex and --all are exclusive");
	if (!x->regex && !x->all)
		return x->nargs == 1 ? EXIT_OK : usage_error("rm: missing argument");
	if (x->nargs)
		return usage_error("rm: give KEY, or --regex PATTERN, or --all; not both");
	if (x->yes)
		return EXIT_OK;
	if (x->regex)
		fprintf(stderr,
			"lunarctl: rm --regex removes every key of the tenant matching '%s'; "
			"add --yes to do it\n",
			x->regex);
	else
		fprintf(stderr, "lunarctl: rm --all removes every key of the tenant; "
				"add --yes to do it\n");
	return EXIT_USAGE;
}

static int check_args(struct ctl *x, const struct verb **out)
{
	const struct verb *v = NULL;
	int rc = find_verb(x, &v);

	if (rc)
		return rc;
	if (x->nargs < v->min_args)
		return usage_error("%s: missing argument", v->phrase);
	if (x->nargs > v->max_args)
		return usage_error("%s: too many arguments", v->phrase);
	if (x->replicas && v->run != cmd_put)
		return usage_error("--replicas applies to put only, not %s", v->phrase);
	if ((x->force || x->regex || x->all || x->yes) && v->run != cmd_rm)
		return usage_error("--force, --regex, --all and --yes apply to rm only, not %s",
				   v->phrase);
	if ((x->limit_set || x->all_tenants) && v->run != ctl_keys)
		return usage_error("--limit and --all-tenants apply to keys only, not %s",
				   v->phrase);
	if (v->run == cmd_rm && (rc = check_rm(x)))
		return rc;
	*out = v;
	return EXIT_OK;
}

static int has_help(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return 1;
	return 0;
}

int main(int argc, char **argv)
{
	struct ctl x = {.opts = {0}};
	const struct verb *v = NULL;
	int rc;

	if (has_help(argc, argv)) {
		fputs(usage_long, stdout);
		return EXIT_OK;
	}
	rc = parse_args(&x, argc, argv);
	if (rc)
		return rc;
	if (!x.verb)
		return usage_error("no verb given");
	if (!strcmp(x.verb, "help")) {
		fputs(usage_long, stdout);
		return EXIT_OK;
	}
	rc = check_args(&x, &v);
	if (rc)
		return rc;
	if (!x.replicas)
		x.replicas = 1;
	socket_describe(&x);
	rc = v->run(&x);
	lunar_close(x.c);
	if (fflush(stdout) && rc == EXIT_OK)
		rc = EXIT_FAIL;
	return rc;
}
