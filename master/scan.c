/*
 * scan.c - calls that visit every object: remove_all, remove by regex, list
 * keys, and the drop of a lost segment's replicas or a dead client's puts.
 * Shards are taken one at a time, never two, so writers on other shards run
 * on while a scan goes.
 */
#include <ctype.h>
#include <errno.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "key.h"
#include "lunar.h"
#include "mst_int.h"
#include "mst_obj.h"

#define LIST_DEFAULT_LIMIT 1000
#define LIST_MAX_LIMIT	   10000 /* a larger limit is taken as this */
#define PATTERN_COST_MAX   256	 /* automaton nodes a key pattern may need */
#define PATTERN_DEPTH_MAX  32	 /* groups a key pattern may nest */

struct remove_arg {
	const char *tenant; /* with its "\0" */
	size_t tlen;
	int force;
	uint64_t now;
	regex_t *re; /* NULL: every key */
};

/* 1 when o is the tenant's (or any tenant's when a->tenant is NULL) and
 * matches the pattern. */
static int obj_matches(const struct remove_arg *a, const struct mst_object *o)
{
	if (a->tenant && (o->tlen != a->tlen || memcmp(o->kbuf, a->tenant, a->tlen)))
		return 0;
	return !a->re || !regexec(a->re, mst_obj_key(o), 0, NULL, 0);
}

static int visit_remove(struct mst_master *m, struct mst_object *o, void *arg)
{
	const struct remove_arg *a = arg;

	return obj_matches(a, o) && o->state == MST_ST_COMPLETE && !mst_obj_busy(o) &&
	       (a->force || o->lease_ms <= a->now);
}

static int remove_arg_init(struct remove_arg *a, const char *tenant, int force)
{
	int rc;

	*a = (struct remove_arg){.force = force, .now = lc_now_ms()};
	a->tenant = mst_tenant_name(tenant);
	a->tlen = strnlen(a->tenant, MST_TENANT_MAX + 1);
	rc = lc_tenant_check(a->tenant, a->tlen);
	a->tlen++;
	return rc;
}

static int64_t sweep_all(struct mst_master *m, mst_visit_fn fn, void *arg)
{
	int64_t n = 0;

	for (size_t i = 0; i < MST_SHARDS; i++)
		n += mst_shard_sweep(m, i, fn, arg);
	return n;
}

int64_t mst_obj_remove_all(struct mst_master *m, const char *tenant, int force)
{
	struct remove_arg a;
	int rc = remove_arg_init(&a, tenant, force);

	return rc ? rc : sweep_all(m, visit_remove, &a);
}

/* The end of the bracket expression opening at p ('['), or NULL. */
static const char *bracket_end(const char *p)
{
	p++;
	if (*p == '^')
		p++;
	if (*p == ']')
		p++; /* a leading ']' is a member */
	for (; *p && *p != ']'; p++) {
		if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
			const char *e = p + 2;

			while (*e && !(e[0] == p[1] && e[1] == ']'))
				e++;
			if (!*e)
				return NULL;
			p = e + 1;
		}
	}
	return *p ? p : NULL;
}

/* The end of the interval opening at p, its largest count in *max: "{m}",
 * "{m,}", "{m,n}", and glibc's "{,n}" (as "{0,n}") and "{,}". NULL when p
 * opens none: a literal '{'. */
static const char *interval_end(const char *p, unsigned long *max)
{
	const char *q = p + 1;
	unsigned long m = 0, n;
	char *e;

	if (isdigit((unsigned char)*q)) {
		m = strtoul(q, &e, 10);
		q = e;
	} else if (*q != ',') {
		return NULL;
	}
	n = m;
	if (*q == ',' && isdigit((unsigned char)*++q)) {
		n = strtoul(q, &e, 10);
		q = e;
	}
	if (*q != '}')
		return NULL;
	*max = m > n ? m : n;
	return q;
}

/*
 * 1 when pattern's automaton stays within PATTERN_COST_MAX nodes. regcomp
 * copies a repeated expression once per allowed repetition, so nested
 * intervals multiply, and regexec works through those nodes for every byte
 * of a key: "(a{0,64}){0,64}x" took 15 s on one 4000-byte key. The count is
 * a close upper bound (an atom, an anchor or a group is a node; a
 * repetition multiplies what it repeats by its count, plus one). A pattern
 * it cannot follow (an open bracket, a trailing backslash) is one regcomp
 * refuses.
 */
static int pattern_cost_ok(const char *p)
{
	uint64_t sum[PATTERN_DEPTH_MAX + 1] = {0}, last = 0, times;
	unsigned depth = 0;
	unsigned long max;
	const char *e;

	for (; *p; p++) {
		times = 0;
		switch (*p) {
		case '(':
			if (depth == PATTERN_DEPTH_MAX)
				return 0;
			sum[++depth] = 0;
			last = 0;
			continue;
		case ')':
			if (!depth) {
				sum[0] += last = 1; /* unmatched: an ordinary character */
				break;
			}
			last = sum[depth--] + 1;
			sum[depth] += last;
			break;
		case '*':
		case '+':
		case '?': times = 2; break;
		case '{':
			if ((e = interval_end(p, &max))) {
				if (max >= PATTERN_COST_MAX)
					return 0; /* also a count strtoul clamped */
				times = (uint64_t)max + 1;
				p = e;
			} else {
				sum[depth] += last = 1;
			}
			break;
		case '[':
			if (!(e = bracket_end(p)))
				return 1;
			p = e;
			sum[depth] += last = 1;
			break;
		case '\\':
			if (!p[1])
				return 1;
			p++;
			/* fall through */
		default: sum[depth] += last = 1; break;
		}
		if (times) {
			sum[depth] += last * (times - 1);
			last *= times;
		}
		if (sum[depth] > PATTERN_COST_MAX)
			return 0;
	}
	return 1;
}

/*
 * Compile a key pattern (POSIX extended, no subexpression reports). Refused:
 * back-references, whose matching can take time exponential in the key's
 * length, and patterns whose automaton is too large (pattern_cost_ok): a
 * remove matches outside the shard locks, but a listing under them.
 */
static int pattern_compile(regex_t *re, const char *pattern)
{
	for (const char *p = pattern; p && *p; p++) {
		if (*p != '\\')
			continue;
		if (p[1] >= '1' && p[1] <= '9')
			return LUNAR_ERR_INVALID_PARAMS;
		if (p[1])
			p++; /* an escaped character, a backslash included */
	}
	if (!pattern || !pattern[0] || !pattern_cost_ok(pattern) ||
	    regcomp(re, pattern, REG_EXTENDED | REG_NOSUB))
		return LUNAR_ERR_INVALID_PARAMS;
	return 0;
}

/* A key one shard could remove, copied out so that it is matched without
 * the shard's lock; the object is re-found by (pointer, id). */
struct candidate {
	const void *o; /* compared only: it may be gone by then */
	uint64_t id, hash;
	char *key;
};

struct collect_arg {
	const struct remove_arg *match; /* no pattern: it is matched later */
	struct candidate *v;
	size_t n, cap;
	int nomem;
};

static int visit_collect(struct mst_master *m, struct mst_object *o, void *arg)
{
	struct collect_arg *c = arg;
	struct candidate *v;

	if (!visit_remove(m, o, (void *)c->match))
		return 0;
	if (c->n == c->cap) {
		c->cap = c->cap ? c->cap * 2 : 64;
		if (!(v = realloc(c->v, c->cap * sizeof(*v)))) {
			c->nomem = 1;
			return -1;
		}
		c->v = v;
	}
	c->v[c->n] = (struct candidate){.o = o, .id = o->id, .hash = o->hash};
	if (!(c->v[c->n].key = strdup(mst_obj_key(o)))) {
		c->nomem = 1;
		return -1;
	}
	c->n++;
	return 0;
}

/* Remove shard i's keys that match re, matching outside the shard's lock (a
 * pattern may cost ~10 ms on a long key); the count or INTERNAL. */
static int64_t shard_remove_matching(struct mst_master *m, size_t i, const struct remove_arg *a,
				     const regex_t *re)
{
	struct collect_arg c = {.match = a};
	struct mst_shard *s = &m->shards[i];
	struct mst_object **pp;
	int64_t n = 0;

	mst_shard_sweep(m, i, visit_collect, &c);
	for (size_t k = 0; k < c.n; k++)
		if (regexec(re, c.v[k].key, 0, NULL, 0))
			c.v[k].o = NULL;
	pthread_mutex_lock(&s->lock);
	for (size_t k = 0; k < c.n && !c.nomem; k++) {
		if (c.v[k].o && (pp = mst_obj_find_id(s, c.v[k].hash, c.v[k].o, c.v[k].id)) &&
		    visit_remove(m, *pp, (void *)a)) {
			mst_obj_erase(m, s, pp);
			n++;
		}
	}
	pthread_mutex_unlock(&s->lock);
	for (size_t k = 0; k < c.n; k++)
		free(c.v[k].key);
	free(c.v);
	return c.nomem ? LUNAR_ERR_INTERNAL : n;
}

int64_t mst_obj_remove_regex(struct mst_master *m, const char *tenant, const char *pattern,
			     int force)
{
	struct remove_arg a;
	regex_t re;
	int64_t n = 0, got = 0;
	int rc = remove_arg_init(&a, tenant, force);

	if (rc)
		return rc;
	if ((rc = pattern_compile(&re, pattern)))
		return rc;
	for (size_t i = 0; i < MST_SHARDS && got >= 0; i++)
		if ((got = shard_remove_matching(m, i, &a, &re)) >= 0)
			n += got;
	regfree(&re);
	return got < 0 ? got : n;
}

struct list_arg {
	struct remove_arg match;
	Lunar__ListKeysReply *r;
	size_t limit;
	int nomem;
};

static Lunar__KeyInfo *key_info(const struct mst_object *o)
{
	Lunar__KeyInfo *ki = malloc(sizeof(*ki));

	if (!ki)
		return NULL;
	lunar__key_info__init(ki);
	ki->tenant = strdup(o->kbuf);
	ki->key = strdup(mst_obj_key(o));
	ki->size = o->size;
	ki->state = o->state == MST_ST_COMPLETE ? LUNAR__REPLICA_STATE__COMPLETE
						: LUNAR__REPLICA_STATE__PROCESSING;
	if (!ki->tenant || !ki->key) {
		protobuf_c_message_free_unpacked(&ki->base, NULL);
		return NULL;
	}
	return ki;
}

static int visit_list(struct mst_master *m, struct mst_object *o, void *arg)
{
	struct list_arg *a = arg;
	Lunar__KeyInfo *ki;

	if (!obj_matches(&a->match, o))
		return 0;
	if (a->r->n_keys == a->limit) {
		a->r->truncated = 1;
		return -1;
	}
	ki = key_info(o);
	if (!ki) {
		a->nomem = 1;
		return -1;
	}
	a->r->keys[a->r->n_keys++] = ki;
	return 0;
}

int mst_obj_list(struct mst_master *m, const Lunar__ListKeysRequest *rq, Lunar__ListKeysReply *r)
{
	struct list_arg a = {.r = r,
			     .limit = !rq->limit		   ? LIST_DEFAULT_LIMIT
				      : rq->limit > LIST_MAX_LIMIT ? LIST_MAX_LIMIT
								   : rq->limit};
	regex_t re;
	int rc = 0;

	if (rq->tenant && rq->tenant[0] && (rc = remove_arg_init(&a.match, rq->tenant, 1)))
		return rc;
	if (rq->pattern && rq->pattern[0]) {
		if ((rc = pattern_compile(&re, rq->pattern)))
			return rc;
		a.match.re = &re;
	}
	r->keys = calloc(a.limit, sizeof(*r->keys));
	if (!r->keys)
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < MST_SHARDS && !r->truncated && !a.nomem; i++)
		mst_shard_sweep(m, i, visit_list, &a);
	if (a.match.re)
		regfree(&re);
	return a.nomem ? -ENOMEM : rc;
}

struct drop_arg {
	const struct mst_segment *seg;
	const uint64_t *dead; /* sorted */
	size_t n;
	uint64_t before_ms;
};

static int cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int is_dead(const struct drop_arg *a, uint64_t client)
{
	return a->n && bsearch(&client, a->dead, a->n, sizeof(*a->dead), cmp_id);
}

/* Forget the SSD replicas of dead owners, and a task queued for one. */
static int forget_dead(const struct drop_arg *a, struct mst_object *o)
{
	int dropped = 0;

	if (o->offload_to && is_dead(a, o->offload_to))
		dropped |= mst_disk_forget_client(o, o->offload_to);
	for (unsigned i = 0; i < o->ndisk;)
		if (is_dead(a, o->disk[i].owner) && mst_disk_forget_client(o, o->disk[i].owner))
			dropped = 1; /* entry i is gone: look at i again */
		else
			i++;
	return dropped;
}

/* Keep the replicas of v[0..*n) not on seg; 1 if any went. */
static int drop_on(struct mst_replica *v, unsigned *n, const struct mst_segment *seg)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < *n; i++)
		if (v[i].seg != seg)
			v[kept++] = v[i];
	if (kept == *n)
		return 0;
	*n = kept;
	return 1;
}

static int visit_drop(struct mst_master *m, struct mst_object *o, void *arg)
{
	const struct drop_arg *a = arg;
	int dropped = 0;

	/* A writer declared dead may only be asleep (SIGSTOP, a hung host) and
	 * send the rest of its bytes when it wakes: its ranges go back late,
	 * like a discarded put's, not to the next writer at once. */
	if (o->state == MST_ST_PROCESSING && o->put_start_ms <= a->before_ms &&
	    is_dead(a, o->writer)) {
		mst_obj_release_late(m, o);
		return 1;
	}
	if (o->up && o->up->start_ms <= a->before_ms && is_dead(a, o->up->writer))
		mst_upsert_abandon(m, o);
	if (a->n)
		dropped = forget_dead(a, o); /* their SSD tiers are gone too */
	if (a->seg) {
		if (o->up && drop_on(o->up->reps, &o->up->nrep, a->seg) && !o->up->nrep)
			mst_upsert_cancel(m, o);
		dropped |= drop_on(o->reps, &o->nrep, a->seg);
		/* disk replicas name their owner's segment: they go with it */
		dropped |= mst_disk_forget_client(o, a->seg->owner);
	}
	return dropped && o->nrep == 0 && o->ndisk == 0;
}

void mst_objects_drop(struct mst_master *m, const struct mst_segment *seg, uint64_t *dead, size_t n,
		      uint64_t before_ms)
{
	struct drop_arg a = {.seg = seg, .dead = dead, .n = n, .before_ms = before_ms};

	if (n)
		qsort(dead, n, sizeof(*dead), cmp_id);
	sweep_all(m, visit_drop, &a);
}
