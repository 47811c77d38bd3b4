/*
 * admin.c - lunarctl's admin verbs (keys, segment list, client list, stat,
 * metrics, disk status): one HTTP GET to the master's address (--master) or
 * to the proxy's HTTP port (--http), whose embedded master answers /admin/.
 * -o json passes the master's JSON through; text mode reads it with
 * tools/ctl/json.h and prints lines and tables for people.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "ctl.h"
#include "http_get.h"
#include "json.h"

#define MSG_MAX 1024

/* Where an answer comes from, for the request and for messages. */
struct src {
	const char *addr;
	unsigned port; /* when addr names none */
	const char *what;
};

static int complain(const struct ctl *x, const struct src *s, int code, const char *msg);

/*
 * The HTTP address of the proxy behind --socket, as it tells it in its
 * handshake, into x->http_told: EXIT_OK (x->http_told "" when the proxy is
 * older than that, or when no socket was named and none answers: then the
 * default port), or EXIT_NOCONN after saying that the named socket is dead.
 */
static int proxy_http_ask(struct ctl *x)
{
	const char *env = getenv("LUNAR_SOCKET");
	int named = x->opts.socket_path || (env && *env), rc;
	struct src s = {x->socket_shown, 0, "proxy"};
	char msg[MSG_MAX];

	x->http_told[0] = '\0';
	if (!x->c) {
		x->opts.arena_bytes = 1 << 20; /* the smallest: we only ask */
		rc = lunar_connect(&x->opts, &x->c);
		if (rc && !named)
			return EXIT_OK;
		if (rc) {
			x->c = NULL;
			snprintf(msg, sizeof(msg), "cannot connect to the proxy at %.900s: %s (%d)",
				 x->socket_shown, lunar_strerror(rc), rc);
			return complain(x, &s,
					rc == LUNAR_ERR_PROXY_UNAVAILABLE ? EXIT_NOCONN : EXIT_FAIL,
					msg);
		}
	}
	rc = lunar_proxy_http_addr(x->c, x->http_told, sizeof(x->http_told));
	if (rc < 0)
		x->http_told[0] = '\0';
	return EXIT_OK;
}

/* The endpoint to ask: --master, else --http, else what the proxy behind
 * --socket tells, else the default proxy port. */
static int src_pick(struct ctl *x, int proxy_only, struct src *s)
{
	int rc;

	if (x->etcd_urls[0] && !x->master && !proxy_only && (rc = ctl_master_resolve(x)))
		return rc;
	if (x->master && !proxy_only) {
		*s = (struct src){x->master, CTL_MASTER_HTTP_PORT, "master"};
		return EXIT_OK;
	}
	if (!x->http && (rc = proxy_http_ask(x)))
		return rc;
	*s = (struct src){x->http	    ? x->http
			  : x->http_told[0] ? x->http_told
					    : CTL_PROXY_HTTP,
			  CTL_PROXY_HTTP_PORT, "proxy's HTTP port"};
	return EXIT_OK;
}

static unsigned timeout_ms(const struct ctl *x)
{
	const char *env = getenv("LUNAR_TIMEOUT_MS");
	char *end;
	unsigned long v;

	if (x->opts.timeout_ms)
		return x->opts.timeout_ms;
	if (env && *env) {
		v = strtoul(env, &end, 10);
		if (!*end && v > 0 && v <= UINT32_MAX)
			return (unsigned)v;
	}
	return CTL_TIMEOUT_MS;
}

/* Columns s takes on a terminal: UTF-8 continuation bytes take none. */
static size_t text_width(const char *s)
{
	size_t w = 0;

	for (; *s; s++)
		w += ((unsigned char)*s & 0xc0) != 0x80;
	return w;
}

/* Text from the network on a terminal: control bytes shown as '?'. */
static void put_text(const char *s)
{
	for (; *s; s++)
		putchar((unsigned char)*s < 0x20 || *s == 0x7f ? '?' : *s);
}

/* A failure as words on stderr and, with -o json, one object on stdout. */
static int complain(const struct ctl *x, const struct src *s, int code, const char *msg)
{
	fprintf(stderr, "lunarctl: %s: %s\n", x->verb, msg);
	if (x->json) {
		fputs("{\"error\":", stdout);
		cj_write_str(stdout, msg);
		fputs(",\"address\":", stdout);
		cj_write_str(stdout, s->addr);
		fputs("}\n", stdout);
	}
	return code;
}

/*
 * The bearer token for the /admin pages into tok when --cluster-key or
 * $LUNAR_CLUSTER_KEY_FILE names a key: 1, 0 without one, or -1 after
 * saying why the key could not be read.
 */
static int bearer_token(const struct ctl *x, const struct src *s, char tok[AUTH_TOKEN_CHARS + 1])
{
	struct auth_key key;
	char why[512] = "cannot initialise libsodium", msg[MSG_MAX];
	int rc = auth_init();

	if (!rc)
		rc = auth_key_resolve(x->key_path, &key, why, sizeof(why));
	if (rc < 0) {
		snprintf(msg, sizeof(msg), "cluster key: %s", why);
		complain(x, s, EXIT_FAIL, msg);
		return -1;
	}
	if (rc == 1)
		auth_http_token(&key, tok);
	auth_key_wipe(&key);
	return rc;
}

/* GET target from s into r, with the cluster key's token when there is one;
 * transport failures become exit codes. */
static int fetch(const struct ctl *x, const struct src *s, const char *target,
		 struct ctl_http_resp *r)
{
	char msg[MSG_MAX], tok[AUTH_TOKEN_CHARS + 1];
	int keyed = bearer_token(x, s, tok), rc;

	memset(r, 0, sizeof(*r)); /* fini-able on every path */
	if (keyed < 0)
		return EXIT_FAIL;
	rc = ctl_http_get(s->addr, s->port, target, keyed ? tok : NULL, timeout_ms(x), r);
	explicit_bzero(tok, sizeof(tok));
	if (rc == 0 && r->status == 403 && !strncmp(target, "/admin", 6)) {
		snprintf(msg, sizeof(msg),
			 "%.200s from the %s at %s: refused (HTTP 403): /admin answers loopback "
			 "callers, and others with the cluster key (%s)",
			 target, s->what, r->peer,
			 keyed ? "this one is not the daemon's" : "give --cluster-key FILE");
		return complain(x, s, EXIT_FAIL, msg);
	}
	if (rc == 0)
		return EXIT_OK;
	/* A daemon that accepts (in its kernel) but never says a word, as a
	 * stopped or wedged one, cannot be reached either. */
	if (!r->connected || (rc == -ETIMEDOUT && !r->answered)) {
		snprintf(msg, sizeof(msg), "cannot connect to the %s at %s: %s", s->what,
			 r->peer[0] ? r->peer : s->addr, r->err);
		return complain(x, s, EXIT_NOCONN, msg);
	}
	snprintf(msg, sizeof(msg), "%.200s from the %s at %s: %s", target, s->what, r->peer,
		 r->err);
	return complain(x, s, EXIT_FAIL, msg);
}

int ctl_admin_get(struct ctl *x, const char *target, struct ctl_http_resp *r)
{
	struct src s;
	int rc;

	memset(r, 0, sizeof(*r));
	rc = src_pick(x, 0, &s);
	return rc ? rc : fetch(x, &s, target, r);
}

/* The first line of a body, for messages. */
static void first_line(const struct ctl_http_resp *r, char *buf, size_t cap)
{
	size_t n = strcspn(r->body, "\r\n");

	snprintf(buf, cap, "%.*s", (int)(n > 120 ? 120 : n), r->body);
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/*
 * GET an /admin/ query and read it: EXIT_OK and *out (free with cj_free)
 * when the master answered status 0. Otherwise the failure is reported (in
 * json mode a master's answer passes through as it is) and returned.
 */
static int admin_query(struct ctl *x, const char *target, struct cj **out)
{
	struct ctl_http_resp r;
	const struct cj *status;
	struct cj *root = NULL;
	char msg[MSG_MAX], line[128];
	int64_t code = 0;
	struct src s;
	int rc;

	memset(&r, 0, sizeof(r));
	rc = src_pick(x, 0, &s);
	if (!rc)
		rc = fetch(x, &s, target, &r);
	if (rc)
		goto out;
	status = cj_parse(r.body, r.len, &root) ? NULL : cj_get(root, "status");
	if (!status || cj_i64(cj_get(status, "code"), &code)) {
		first_line(&r, line, sizeof(line));
		if (r.status == 404)
			snprintf(
			    msg, sizeof(msg),
			    "%s (the %s): this endpoint has no master (give --master HOST:PORT)",
			    r.peer, s.what);
		else
			snprintf(msg, sizeof(msg),
				 "%.200s from %s (the %s): HTTP %d, not a master's answer: %s",
				 target, r.peer, s.what, r.status, line);
		rc = complain(x, &s, EXIT_FAIL, msg);
		goto out;
	}
	if (code != 0 || r.status != 200) {
		if (x->json)
			fwrite(r.body, 1, r.len, stdout);
		if (code == 0) /* a 200's status with another HTTP code: name the HTTP code */
			fprintf(stderr, "lunarctl: %s: %s (the %s): HTTP %d\n", x->verb, r.peer,
				s.what, r.status);
		else
			fprintf(stderr, "lunarctl: %s%s%s: %s (%" PRId64 ")\n", x->verb,
				x->nargs ? ": " : "", x->nargs ? x->args[0] : "",
				cj_str(cj_get(status, "message"), lunar_strerror((int)code)), code);
		rc = EXIT_FAIL;
		goto out;
	}
	if (x->json)
		fwrite(r.body, 1, r.len, stdout);
	*out = root;
	root = NULL;
out:
	cj_free(root);
	ctl_http_resp_fini(&r);
	return rc;
}

static uint64_t u64_of(const struct cj *obj, const char *name)
{
	uint64_t v = 0;

	cj_u64(cj_get(obj, name), &v);
	return v;
}

static const char *yes_no(const struct cj *obj, const char *name)
{
	int t = cj_truth(cj_get(obj, name));

	return t == 1 ? "yes" : t == 0 ? "no" : "?";
}

/* The elements of obj's array member name, or NULL (with *n 0). */
static const struct cj *array_of(const struct cj *obj, const char *name, size_t *n)
{
	const struct cj *a = cj_get(obj, name);

	*n = a && a->type == CJ_ARRAY ? a->n : 0;
	return *n ? a->kid : NULL;
}

static void fmt_bytes(char *buf, size_t cap, uint64_t b)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)b;
	int u = -1;

	if (b < 1024) {
		snprintf(buf, cap, "%" PRIu64 "B", b);
		return;
	}
	while (v >= 1024 && u < 5) {
		v /= 1024;
		u++;
	}
	snprintf(buf, cap, "%.1f%s", v, unit[u]);
}

static void fmt_ms(char *buf, size_t cap, uint64_t ms)
{
	if (ms < 1000)
		snprintf(buf, cap, "%" PRIu64 "ms", ms);
	else if (ms < 120000)
		snprintf(buf, cap, "%.1fs", (double)ms / 1000);
	else if (ms < 7200000)
		snprintf(buf, cap, "%.1fm", (double)ms / 60000);
	else
		snprintf(buf, cap, "%.1fh", (double)ms / 3600000);
}

/* --- tables: two passes over the rows, widths first ---------------------- */

#define TBL_COLS 8
#define TBL_CELL 256

typedef void (*row_fn)(const struct cj *item, char cell[][TBL_CELL]);

/* Spaces after a cell of used columns, to a column width wide plus 2. */
static void pad(size_t used, size_t wide)
{
	printf("%*s", (int)(used < wide ? wide - used + 2 : 2), "");
}

static void print_table(const char *const *head, int ncols, const struct cj *rows, size_t n,
			row_fn fill)
{
	char cell[TBL_COLS][TBL_CELL];
	size_t w[TBL_COLS];

	for (int c = 0; c < ncols; c++)
		w[c] = strlen(head[c]);
	for (size_t i = 0; i < n; i++) {
		fill(&rows[i], cell);
		for (int c = 0; c < ncols; c++)
			w[c] = text_width(cell[c]) > w[c] ? text_width(cell[c]) : w[c];
	}
	for (int c = 0; c < ncols; c++) {
		fputs(head[c], stdout);
		if (c + 1 < ncols)
			pad(strlen(head[c]), w[c]);
	}
	putchar('\n');
	for (size_t i = 0; i < n; i++) {
		fill(&rows[i], cell);
		for (int c = 0; c < ncols; c++) {
			put_text(cell[c]);
			if (c + 1 < ncols)
				pad(text_width(cell[c]), w[c]);
		}
		putchar('\n');
	}
}

static void segment_row(const struct cj *s, char cell[][TBL_CELL])
{
	uint64_t size = u64_of(s, "size"), used = u64_of(s, "used");

	snprintf(cell[0], TBL_CELL, "%s", cj_str(cj_get(s, "name"), "?"));
	snprintf(cell[1], TBL_CELL, "%s", cj_str(cj_get(s, "endpoint"), "?"));
	fmt_bytes(cell[2], TBL_CELL, size);
	snprintf(cell[3], TBL_CELL, "%.1f", size ? 100.0 * (double)used / (double)size : 0.0);
	snprintf(cell[4], TBL_CELL, "%s", yes_no(s, "draining"));
}

static void client_row(const struct cj *c, char cell[][TBL_CELL])
{
	snprintf(cell[0], TBL_CELL, "%016" PRIx64, u64_of(c, "client_id"));
	fmt_ms(cell[1], TBL_CELL, u64_of(c, "last_ping_ms_ago"));
	snprintf(cell[2], TBL_CELL, "%s", yes_no(c, "alive"));
	snprintf(cell[3], TBL_CELL, "%" PRIu64, u64_of(c, "segments"));
}

int ctl_segment_list(struct ctl *x)
{
	static const char *const head[] = {"NAME", "ENDPOINT", "SIZE", "USED%", "DRAINING"};
	const struct cj *rows;
	struct cj *root = NULL;
	size_t n;
	int rc = admin_query(x, "/admin/segments", &root);

	if (rc || x->json)
		goto out;
	rows = array_of(root, "segments", &n);
	print_table(head, 5, rows, n, segment_row);
out:
	cj_free(root);
	return rc;
}

int ctl_client_list(struct ctl *x)
{
	static const char *const head[] = {"ID", "LAST_PING", "ALIVE", "SEGMENTS"};
	const struct cj *rows;
	struct cj *root = NULL;
	size_t n;
	int rc = admin_query(x, "/admin/clients", &root);

	if (rc || x->json)
		goto out;
	rows = array_of(root, "clients", &n);
	print_table(head, 4, rows, n, client_row);
out:
	cj_free(root);
	return rc;
}

/* --- keys and stat ------------------------------------------------------- */

static const char *tenant_of(const struct ctl *x)
{
	return x->opts.tenant && *x->opts.tenant ? x->opts.tenant : "default";
}

static void print_keys(const struct ctl *x, const struct cj *root)
{
	const struct cj *k;
	size_t n, w = 0, tw = 0;

	k = array_of(root, "keys", &n);
	for (size_t i = 0; i < n; i++) {
		size_t kw = text_width(cj_str(cj_get(&k[i], "key"), "?")),
		       tl = text_width(cj_str(cj_get(&k[i], "tenant"), "?"));

		w = kw > w ? kw : w;
		tw = tl > tw ? tl : tw;
	}
	w = w > 64 ? 64 : w; /* one very long key should not push every size away */
	for (size_t i = 0; i < n; i++) {
		const char *key = cj_str(cj_get(&k[i], "key"), "?");
		const char *tenant = cj_str(cj_get(&k[i], "tenant"), "?");
		const char *state = cj_str(cj_get(&k[i], "state"), "COMPLETE");

		if (x->all_tenants) {
			put_text(tenant);
			pad(text_width(tenant), tw);
		}
		put_text(key);
		pad(text_width(key), w);
		printf("%" PRIu64, u64_of(&k[i], "size"));
		if (strcmp(state, "COMPLETE")) {
			fputs("  ", stdout);
			put_text(state);
		}
		putchar('\n');
	}
	if (cj_truth(cj_get(root, "truncated")) == 1)
		fprintf(stderr,
			"lunarctl: keys: showing the first %zu; more match (raise --limit)\n", n);
}

int ctl_keys(struct ctl *x)
{
	char *tenant = ctl_url_encode(x->all_tenants ? "" : tenant_of(x));
	char *pattern = ctl_url_encode(x->nargs ? x->args[0] : "");
	char *target = NULL;
	struct cj *root = NULL;
	int rc = EXIT_FAIL;

	if (!tenant || !pattern ||
	    asprintf(&target, "/admin/keys?tenant=%s&pattern=%s&limit=%u", tenant, pattern,
		     x->limit) < 0) {
		target = NULL;
		fprintf(stderr, "lunarctl: keys: out of memory\n");
		goto out;
	}
	rc = admin_query(x, target, &root);
	if (!rc && !x->json)
		print_keys(x, root);
out:
	cj_free(root);
	free(target);
	free(pattern);
	free(tenant);
	return rc;
}

static void print_replica(size_t i, const struct cj *r)
{
	printf("replica[%zu]:  ", i);
	put_text(cj_str(cj_get(r, "type"), "?"));
	putchar(' ');
	put_text(cj_str(cj_get(r, "state"), "?"));
	fputs(" segment=", stdout);
	put_text(cj_str(cj_get(r, "segment"), "?"));
	fputs(" endpoint=", stdout);
	put_text(cj_str(cj_get(r, "endpoint"), "?"));
	printf(" offset=%" PRIu64 " length=%" PRIu64 "\n", u64_of(r, "offset"),
	       u64_of(r, "length"));
}

static void print_stat(const struct ctl *x, const struct cj *root)
{
	const struct cj *reps;
	size_t n;

	fputs("key:          ", stdout);
	put_text(x->args[0]);
	fputs("\ntenant:       ", stdout);
	put_text(tenant_of(x));
	printf("\nsize:         %" PRIu64 "\n", u64_of(root, "size"));
	fputs("state:        ", stdout);
	put_text(cj_str(cj_get(root, "state"), "?"));
	printf("\ncrc32c:       0x%08" PRIx64 "\n", u64_of(root, "crc32c"));
	printf("writer:       %016" PRIx64 "\n", u64_of(root, "writer"));
	printf("lease:        %" PRIu64 " ms left\n", u64_of(root, "lease_remaining_ms"));
	printf("hard_pin:     %s\n", yes_no(root, "hard_pin"));
	printf("soft_pin:     %" PRIu64 " ms left\n", u64_of(root, "soft_pin_remaining_ms"));
	reps = array_of(root, "replicas", &n);
	printf("replicas:     %zu\n", n);
	for (size_t i = 0; i < n; i++)
		print_replica(i, &reps[i]);
}

int ctl_stat(struct ctl *x)
{
	char *tenant = ctl_url_encode(tenant_of(x)), *key = ctl_url_encode(x->args[0]);
	char *target = NULL;
	struct cj *root = NULL;
	int rc = EXIT_FAIL;

	if (!tenant || !key || asprintf(&target, "/admin/stat?tenant=%s&key=%s", tenant, key) < 0) {
		target = NULL;
		fprintf(stderr, "lunarctl: stat: out of memory\n");
		goto out;
	}
	rc = admin_query(x, target, &root);
	if (!rc && !x->json)
		print_stat(x, root);
out:
	cj_free(root);
	free(target);
	free(key);
	free(tenant);
	return rc;
}

/* --- metrics and disk status -------------------------------------------- */

/* One Prometheus sample line as a JSON member: "series": value. The series
 * runs to its closing '}' (label values may hold spaces) or first blank. */
static void metric_member(const char *line, size_t len, int *first)
{
	size_t i = 0, s_end, v, v_end;
	int quoted = 0;

	while (i < len && line[i] != ' ' && line[i] != '\t' && line[i] != '{')
		i++;
	if (i < len && line[i] == '{')
		for (; i < len && (quoted || line[i] != '}'); i++)
			if (line[i] == '"' && (i == 0 || line[i - 1] != '\\'))
				quoted = !quoted;
	if (i < len && line[i] == '}')
		i++;
	s_end = i;
	for (v = i; v < len && (line[v] == ' ' || line[v] == '\t'); v++)
		;
	for (v_end = v; v_end < len && line[v_end] != ' ' && line[v_end] != '\t'; v_end++)
		;
	if (s_end == 0 || v == v_end)
		return;
	fputs(*first ? "" : ",", stdout);
	*first = 0;
	cj_write_strn(stdout, line, s_end);
	fputc(':', stdout);
	if (cj_is_number(line + v, v_end - v))
		fwrite(line + v, 1, v_end - v, stdout);
	else
		cj_write_strn(stdout, line + v, v_end - v); /* NaN, +Inf */
}

static void metrics_json(const struct src *s, const struct ctl_http_resp *r)
{
	const char *p = r->body, *end = r->body + r->len, *nl;
	int first = 1;

	fputs("{\"source\":", stdout);
	cj_write_str(stdout, s->addr);
	fputs(",\"metrics\":{", stdout);
	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		nl = nl ? nl : end;
		if (nl > p && p[0] != '#')
			metric_member(p, (size_t)(nl - p - (nl[-1] == '\r')), &first);
	}
	fputs("}}\n", stdout);
}

int ctl_metrics(struct ctl *x)
{
	struct ctl_http_resp r;
	char msg[MSG_MAX], line[128];
	struct src s;
	int rc;

	memset(&r, 0, sizeof(r));
	rc = src_pick(x, 0, &s);
	if (!rc)
		rc = fetch(x, &s, "/metrics", &r);
	if (!rc && r.status != 200) {
		first_line(&r, line, sizeof(line));
		snprintf(msg, sizeof(msg), "/metrics from %s (the %s): HTTP %d: %s", r.peer, s.what,
			 r.status, line);
		rc = complain(x, &s, EXIT_FAIL, msg);
	} else if (!rc && x->json) {
		metrics_json(&s, &r);
	} else if (!rc) {
		fwrite(r.body, 1, r.len, stdout);
	}
	ctl_http_resp_fini(&r);
	return rc;
}

/* Every scalar of v as "path: value" lines, nested names joined by dots. */
static void flatten(const struct cj *v, char *path, size_t plen, size_t cap)
{
	size_t n;

	if (v->type == CJ_OBJECT || v->type == CJ_ARRAY) {
		for (size_t i = 0; i < v->n; i++) {
			if (v->type == CJ_OBJECT)
				n = (size_t)snprintf(path + plen, cap - plen, "%s%s",
						     plen ? "." : "", v->kid[i].name);
			else
				n = (size_t)snprintf(path + plen, cap - plen, "[%zu]", i);
			flatten(&v->kid[i], path, plen + n < cap ? plen + n : cap - 1, cap);
		}
		path[plen] = '\0';
		return;
	}
	put_text(plen ? path : "value");
	fputs(": ", stdout);
	if (v->type == CJ_STRING || v->type == CJ_NUMBER)
		put_text(v->str);
	else
		fputs(v->type == CJ_TRUE ? "true" : v->type == CJ_FALSE ? "false" : "null", stdout);
	putchar('\n');
}

int ctl_disk_status(struct ctl *x)
{
	struct ctl_http_resp r;
	struct cj *root = NULL;
	char msg[MSG_MAX], line[128], path[512] = "";
	struct src s;
	int rc;

	memset(&r, 0, sizeof(r));
	rc = src_pick(x, 1, &s);
	if (!rc)
		rc = fetch(x, &s, "/disk/status", &r);
	if (rc)
		goto out;
	if (r.status == 404) {
		rc = complain(x, &s, EXIT_FAIL, "no disk tier on this proxy");
		goto out;
	}
	if (r.status != 200 || cj_parse(r.body, r.len, &root)) {
		first_line(&r, line, sizeof(line));
		snprintf(msg, sizeof(msg), "/disk/status from %s (the %s): HTTP %d: %s", r.peer,
			 s.what, r.status, line);
		rc = complain(x, &s, EXIT_FAIL, msg);
		goto out;
	}
	if (x->json) {
		fwrite(r.body, 1, r.len, stdout);
		if (r.len && r.body[r.len - 1] != '\n')
			putchar('\n');
	} else {
		flatten(root, path, 0, sizeof(path));
	}
out:
	cj_free(root);
	ctl_http_resp_fini(&r);
	return rc;
}
