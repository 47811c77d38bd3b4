/*
 * request.c - build a request in the arena and run it. Every request takes
 * one arena range laid out as [lc_item x n][lc_seg ...][key bytes][staged
 * values]. A user buffer wholly inside registered memory (lunar_register,
 * lunar_alloc) shared with this session is referenced in place by region
 * and offset; any other buffer is staged: copied in for a put, copied back
 * out after a get. Every walk over the pieces places them alike: the
 * registration table stays read-locked from layout to copy-back, and the
 * scatter lists and preferred names are private copies, not the caller's.
 * An asynchronous request (one key, one piece) is built and sent the same
 * way, and keeps where its piece went for its copy-back instead.
 */
#include "shm_int.h"

#include <stdlib.h>
#include <string.h>

#include "atomic.h"
#include "clock.h"
#include "crc32c.h"
#include "copyout.h"

/* Where each staged piece of a value starts in the arena: on a cache line,
 * whatever the keys before it. The copies into and out of it (the
 * kernel's, to and from a peer's socket) run at half speed or worse on a
 * piece that is only 8-byte aligned (docs/shm-abi.md). */
#define SHM_STAGE_ALIGN LC_CACHELINE

/* Where the pieces of an item request go, as offsets from the range. */
struct shm_layout {
	uint64_t segs_at;
	uint64_t keys_at;
	uint64_t data_at;
	uint64_t pref_at; /* preferred segment names */
	uint64_t pref_len;
	uint64_t total;
	char pref[LC_PREF_BYTES]; /* the names, NUL-separated, read once from the caller */
};

uint64_t shm_deadline(const struct lunar_client *c)
{
	return lc_now_ns() + (uint64_t)c->timeout_ms * 1000000ull;
}

/* On success the request holds a session reference; req_end drops it. */
static int req_begin(struct lunar_client *c, struct shm_req *r)
{
	int rc = shm_call_begin(c, &r->cancel);

	if (rc)
		return rc;
	r->c = c;
	r->deadline_ns = shm_deadline(c);
	r->len = 0;
	rc = shm_client_acquire(c, r->deadline_ns, &r->cn);
	if (rc)
		shm_call_end(r->cancel);
	return rc;
}

/* len bytes of arena for r, waiting for space until by_ns (0: not at all). */
static int req_alloc(struct shm_req *r, uint64_t len, uint64_t by_ns)
{
	int rc = shm_arena_get(r->cn, len, by_ns, &r->off);

	if (!rc)
		r->len = len;
	return rc;
}

/* The descriptor of r's request: count items (or raw bytes) in arg_len
 * bytes at the start of its range. */
static struct lc_sqe req_sqe(const struct shm_req *r, const struct shm_op *op, uint32_t count,
			     uint64_t arg_len, const struct shm_layout *l)
{
	return (struct lc_sqe){
	    .op = op->op,
	    .flags = op->flags,
	    .count = count,
	    .replica_num = op->replica_num,
	    .arg_off = arg_len ? r->off : 0,
	    .arg_len = arg_len,
	    .soft_pin_ttl_ms = op->soft_pin_ttl_ms,
	    .pref_off = l && l->pref_len ? r->off + l->pref_at : 0,
	    .pref_len = l ? l->pref_len : 0,
	};
}

static int64_t req_send(struct shm_req *r, const struct shm_op *op, uint32_t count,
			uint64_t arg_len, const struct shm_layout *l, struct shm_copyout *d)
{
	struct lc_sqe sqe = req_sqe(r, op, count, arg_len, l);
	int64_t result;
	int rc = shm_submit(r->cn, &sqe, r->deadline_ns, &result, d);

	return rc ? rc : result;
}

static void req_end(struct shm_req *r)
{
	if (r->len)
		shm_arena_put(r->cn, r->off);
	shm_conn_put(r->cn);
	shm_call_end(r->cancel);
}

/*
 * The segment for one piece of a value: in place when inside registered
 * memory shared with this session, else region 0 at the next staging spot
 * at *cursor (advanced). Layout, filling and copy-back all walk pieces
 * through here so they agree.
 */
static struct lc_seg piece_place(const struct shm_req *r, const struct iovec *v, uint64_t *cursor,
				 int *staged)
{
	struct lc_seg s = {0, 0, 0, v->iov_len};

	*staged = !shm_regs_find(r->c, r->cn, v->iov_base, v->iov_len, &s.region, &s.off, NULL);
	if (*staged) {
		s.off = *cursor;
		*cursor += (v->iov_len + SHM_STAGE_ALIGN - 1) & ~(uint64_t)(SHM_STAGE_ALIGN - 1);
	}
	return s;
}

static uint32_t item_nseg(const struct shm_item *it)
{
	uint32_t k = 0;

	for (int j = 0; j < it->iovcnt; j++)
		k += it->iov[j].iov_len != 0;
	return k;
}

/*
 * Copy the preferred segment names into l->pref, one after the other with
 * their NULs: the caller may change them while the call runs, and the
 * block is sized and filled from this copy. Each strnlen bounds its memcpy,
 * so a name changed meanwhile can change bytes of the copy (which the proxy
 * checks), never its size.
 */
static int pref_snap(const struct shm_op *op, struct shm_layout *l)
{
	l->pref_len = 0;
	if (op->npref > LC_PREF_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	for (unsigned i = 0; i < op->npref; i++) {
		const char *name = op->pref[i];
		size_t room = LC_PREF_BYTES - l->pref_len, len;

		if (!name)
			return LUNAR_ERR_INVALID_PARAMS;
		len = strnlen(name, room);
		if (!len || len == room)
			return LUNAR_ERR_INVALID_PARAMS;
		memcpy(l->pref + l->pref_len, name, len);
		l->pref[l->pref_len + len] = '\0';
		l->pref_len += len + 1;
	}
	return 0;
}

static int items_layout(const struct shm_req *r, const struct shm_op *op,
			const struct shm_item *items, uint32_t n, struct shm_layout *l)
{
	const struct shm_conn *cn = r->cn;
	uint64_t nseg = 0, keys = 0, data = 0;
	int staged, rc;

	if (n > cn->max_batch)
		return LUNAR_ERR_INVALID_PARAMS;
	for (uint32_t i = 0; i < n; i++) {
		if (item_nseg(&items[i]) > cn->max_segs)
			return LUNAR_ERR_INVALID_PARAMS;
		nseg += item_nseg(&items[i]);
		keys += items[i].key_len;
		for (int j = 0; j < items[i].iovcnt; j++)
			if (items[i].iov[j].iov_len)
				piece_place(r, &items[i].iov[j], &data, &staged);
	}
	l->segs_at = (uint64_t)n * sizeof(struct lc_item);
	l->keys_at = l->segs_at + nseg * sizeof(struct lc_seg);
	l->data_at = (l->keys_at + keys + SHM_STAGE_ALIGN - 1) & ~(uint64_t)(SHM_STAGE_ALIGN - 1);
	l->pref_at = l->data_at + data;
	rc = pref_snap(op, l);
	l->total = l->pref_at + l->pref_len;
	return rc;
}

/* The preferred segment names, as items_layout copied them. */
static void pref_fill(const struct shm_req *r, const struct shm_layout *l)
{
	memcpy(r->cn->base + r->off + l->pref_at, l->pref, l->pref_len);
}

/*
 * Write items, segments and keys; stage put values, each piece's CRC32C
 * taken in the same pass when the proxy asked (LC_WELCOME_SEG_CRC: it then
 * need not read the bytes once more before it sends them). The descriptor
 * flags that go with it: LC_SQE_SEG_CRC when every piece of a put was
 * staged so, else 0.
 */
static uint16_t items_fill(const struct shm_req *r, const struct shm_layout *l,
			   const struct shm_item *items, uint32_t n, int is_get)
{
	uint8_t *base = r->cn->base;
	uint64_t seg = r->off + l->segs_at, key = r->off + l->keys_at, data = r->off + l->data_at;
	int staged, pieces = 0, all_staged = r->cn->seg_crc;

	for (uint32_t i = 0; i < n; i++) {
		const struct shm_item *it = &items[i];
		struct lc_item li = {key, (uint32_t)it->key_len, item_nseg(it), seg, 0};

		memcpy(base + r->off + i * sizeof(li), &li, sizeof(li));
		memcpy(base + key, it->key, it->key_len);
		key += it->key_len;
		for (int j = 0; j < it->iovcnt; j++) {
			const struct iovec *v = &it->iov[j];
			struct lc_seg ls;

			if (!v->iov_len)
				continue;
			ls = piece_place(r, v, &data, &staged);
			if (staged && !is_get && r->cn->seg_crc)
				ls.crc = lc_copy_crc32c_cached(base + ls.off, v->iov_base,
							       v->iov_len, 0);
			else if (staged && !is_get)
				memcpy(base + ls.off, v->iov_base, v->iov_len);
			all_staged = all_staged && staged;
			pieces++;
			memcpy(base + seg, &ls, sizeof(ls));
			seg += sizeof(ls);
		}
	}
	return !is_get && pieces && all_staged ? LC_SQE_SEG_CRC : 0;
}

/* Copy the first got bytes of a staged get result back to the user, but
 * for the first kept, which are there already (copyout.h). */
static void item_copy_back(const struct shm_req *r, const struct shm_item *it, uint64_t got,
			   uint64_t kept, uint64_t *data)
{
	int staged;

	for (int j = 0; j < it->iovcnt; j++) {
		const struct iovec *v = &it->iov[j];
		uint64_t piece = v->iov_len < got ? v->iov_len : got;
		uint64_t skip = kept < piece ? kept : piece;
		struct lc_seg ls;

		if (!v->iov_len)
			continue;
		ls = piece_place(r, v, data, &staged);
		if (staged && piece > skip)
			memcpy((uint8_t *)v->iov_base + skip, r->cn->base + ls.off + skip,
			       piece - skip);
		got -= piece;
		kept -= skip;
	}
}

/* d, set up to copy out a get of one value staged in one piece as it
 * lands (copyout.h); else NULL. */
static struct shm_copyout *copyout_of(const struct shm_req *r, const struct shm_layout *l,
				      const struct shm_item *items, uint32_t n, int is_get,
				      struct shm_copyout *d)
{
	uint64_t data = r->off + l->data_at;
	struct lc_seg ls;
	int staged;

	if (!is_get || n != 1 || items[0].iovcnt != 1)
		return NULL;
	ls = piece_place(r, &items[0].iov[0], &data, &staged);
	return staged ? shm_copyout_init(d, r->cn->base + ls.off, items[0].iov[0].iov_base,
					 items[0].iov[0].iov_len)
		      : NULL;
}

/* Item i's result as the proxy wrote it, read once: a get's size past the
 * destination's cap is the proxy's error, never a length to copy. */
static int64_t item_result(const struct shm_req *r, uint32_t i, uint64_t cap, int is_get)
{
	const struct lc_item *li = (const struct lc_item *)(r->cn->base + r->off);
	int64_t res = LC_READ_ONCE(li[i].result);

	return is_get && res > (int64_t)cap ? LUNAR_ERR_PROTOCOL : res;
}

/* Items' results, and staged get bytes copied back (the first item's
 * first kept are there already). */
static void items_collect(const struct shm_req *r, const struct shm_layout *l,
			  struct shm_item *items, uint32_t n, int is_get, uint64_t kept)
{
	uint64_t data = r->off + l->data_at;

	for (uint32_t i = 0; i < n; i++) {
		uint64_t cap = 0;
		int64_t res;

		for (int j = 0; j < items[i].iovcnt; j++)
			cap += items[i].iov[j].iov_len;
		res = item_result(r, i, cap, is_get);
		/* Walk every item, so staging offsets of later ones stay right. */
		item_copy_back(r, &items[i], is_get && res > 0 ? (uint64_t)res : 0, i ? 0 : kept,
			       &data);
		items[i].result = res;
	}
}

static int64_t items_fail(struct shm_item *items, uint32_t n, int64_t rc)
{
	for (uint32_t i = 0; i < n; i++)
		items[i].result = rc;
	return rc;
}

/* What run_items may do with a request too large for the arena. */
enum {
	SHM_RUN_REFIT = 1u << 0,  /* a get: learn the sizes, trim the destinations */
	SHM_RUN_BOUNCE = 1u << 1, /* one value: through lunar_alloc memory */
};

static int64_t run_items(struct lunar_client *c, const struct shm_op *op, struct shm_item *items,
			 uint32_t n, unsigned how);

/* Trim a destination to its first size bytes into out; the count of
 * iovecs, or 0 when size does not fit in it. */
static int iov_trim(const struct iovec *iov, int iovcnt, uint64_t size, struct iovec *out)
{
	uint64_t cap = 0;
	int k;

	for (k = 0; k < iovcnt; k++)
		cap += iov[k].iov_len;
	if (size > cap)
		return 0;
	for (k = 0; k < iovcnt && size > 0; k++) {
		out[k] = iov[k];
		if (out[k].iov_len > size)
			out[k].iov_len = (size_t)size;
		size -= out[k].iov_len;
	}
	return k;
}

/*
 * A get whose destinations are too large to stage at once (a big malloc'd
 * buffer for a small value): learn the sizes first, then get only the keys
 * that fit, staging only their size. A value that grows in between reports
 * BUFFER_OVERFLOW.
 */
static int64_t get_refit(struct lunar_client *c, const struct shm_op *op, struct shm_item *items,
			 uint32_t n)
{
	static const struct shm_op size_op = {.op = LC_OP_GET_SIZE};
	size_t nv = 0;
	struct shm_item *fit;
	struct iovec *v;
	uint32_t *idx, m = 0;
	int64_t rc;

	for (uint32_t i = 0; i < n; i++)
		nv += (size_t)items[i].iovcnt;
	fit = malloc(n * (sizeof(*fit) + sizeof(*idx)) + nv * sizeof(*v));
	if (!fit)
		return items_fail(items, n, LUNAR_ERR_INTERNAL);
	v = (struct iovec *)(fit + n);
	idx = (uint32_t *)(v + nv);
	for (uint32_t i = 0; i < n; i++)
		fit[i] = (struct shm_item){items[i].key, items[i].key_len, NULL, 0, 0};
	rc = run_items(c, &size_op, fit, n, 0);
	/* Compact in place: fit[m] is written only after fit[i >= m] is read. */
	for (uint32_t i = 0; i < n && rc >= 0; i++) {
		int64_t size = fit[i].result;
		int k = size > 0 ? iov_trim(items[i].iov, items[i].iovcnt, (uint64_t)size, v) : 0;

		items[i].result = size < 0 ? size : LUNAR_ERR_BUFFER_OVERFLOW;
		if (!k)
			continue;
		fit[m] = (struct shm_item){items[i].key, items[i].key_len, v, k, 0};
		idx[m++] = i;
		v += k;
	}
	if (rc >= 0 && m)
		rc = run_items(c, op, fit, m, SHM_RUN_BOUNCE);
	if (rc < 0)
		items_fail(items, n, rc);
	for (uint32_t k = 0; k < m && rc >= 0; k++)
		items[idx[k]].result = fit[k].result;
	free(fit);
	return rc;
}

/*
 * A batch too large to stage at once, though each value may fit: run it as
 * two requests, halving again as needed, so values are never refused for
 * their sum. The first whole-request failure ends the call and becomes the
 * result of the keys not yet sent. A prefix match stops after a half that
 * is not present throughout, and counts across the halves.
 */
static int64_t run_split(struct lunar_client *c, const struct shm_op *op, struct shm_item *items,
			 uint32_t n, unsigned how)
{
	uint32_t h = n / 2;
	int prefix = op->op == LC_OP_PREFIX_MATCH;
	int64_t rc, rc2;

	rc = run_items(c, op, items, h, how);
	if (rc < 0)
		return items_fail(items + h, n - h, rc);
	if (prefix && rc < h)
		return rc;
	rc2 = run_items(c, op, items + h, n - h, how);
	return rc2 < 0 || !prefix ? rc2 : rc + rc2;
}

/*
 * One value too large to stage (a put from, or a get into, memory the
 * proxy cannot reach): bounce it through lunar_alloc memory, which the
 * proxy reads or writes in place, so it costs the one copy staging would.
 * The block goes back after the call; its chunk stays to serve later
 * blocks, as lunar_alloc's chunks do.
 */
static int64_t run_bounce(struct lunar_client *c, const struct shm_op *op, struct shm_item *it)
{
	int is_get = op->op == LC_OP_GET;
	struct shm_item b = *it;
	uint64_t total = 0, off = 0;
	struct iovec v;
	uint8_t *p;
	int64_t rc;

	for (int j = 0; j < it->iovcnt; j++)
		total += it->iov[j].iov_len;
	p = lunar_alloc(c, total);
	if (!p)
		return items_fail(it, 1, LUNAR_ERR_INVALID_PARAMS);
	/* An empty piece may have a NULL base, which memcpy may not be given. */
	for (int j = 0; j < it->iovcnt && !is_get; j++) {
		if (it->iov[j].iov_len)
			memcpy(p + off, it->iov[j].iov_base, it->iov[j].iov_len);
		off += it->iov[j].iov_len;
	}
	v = (struct iovec){p, total};
	b.iov = &v;
	b.iovcnt = 1;
	rc = run_items(c, op, &b, 1, 0);
	it->result = b.result;
	for (int j = 0; j < it->iovcnt && is_get && b.result > 0 && off < (uint64_t)b.result; j++) {
		uint64_t piece = (uint64_t)b.result - off;

		if (piece > it->iov[j].iov_len)
			piece = it->iov[j].iov_len;
		if (piece)
			memcpy(it->iov[j].iov_base, p + off, piece);
		off += piece;
	}
	lunar_free(c, p);
	return rc;
}

static int64_t run_items(struct lunar_client *c, const struct shm_op *op, struct shm_item *items,
			 uint32_t n, unsigned how)
{
	int is_get = op->op == LC_OP_GET;
	struct shm_layout l;
	struct shm_req r;
	int64_t rc;

	rc = req_begin(c, &r);
	if (rc)
		return items_fail(items, n, rc);
	shm_regs_rdlock(c);
	rc = items_layout(&r, op, items, n, &l);
	if (!rc && l.total > r.cn->arena_max &&
	    ((is_get && (how & SHM_RUN_REFIT)) || n > 1 || (how & SHM_RUN_BOUNCE))) {
		shm_regs_unlock(c);
		req_end(&r);
		/* A get first learns the sizes: its destinations may be far larger. */
		if (is_get && (how & SHM_RUN_REFIT))
			return get_refit(c, op, items, n);
		return n > 1 ? run_split(c, op, items, n, how) : run_bounce(c, op, items);
	}
	if (!rc)
		rc = req_alloc(&r, l.total, r.deadline_ns);
	if (!rc) {
		struct shm_op o = *op;
		struct shm_copyout d, *dp;

		o.flags |= items_fill(&r, &l, items, n, is_get);
		pref_fill(&r, &l);
		dp = copyout_of(&r, &l, items, n, is_get, &d);
		rc = req_send(&r, &o, n, (uint64_t)n * sizeof(struct lc_item), &l, dp);
		if (rc >= 0)
			items_collect(&r, &l, items, n, is_get, dp ? dp->kept : 0);
	}
	shm_regs_unlock(c);
	req_end(&r);
	return rc >= 0 ? rc : items_fail(items, n, rc);
}

int64_t shm_run_items(struct lunar_client *c, const struct shm_op *op, struct shm_item *items,
		      uint32_t n)
{
	return run_items(c, op, items, n, SHM_RUN_REFIT | SHM_RUN_BOUNCE);
}

/* A single-key call's result: the whole request's code, else the key's. */
static int64_t one_result(int64_t rc, const struct shm_item *it)
{
	return rc < 0 ? rc : it->result;
}

/* p no longer references registered memory in place (its range's count,
 * which lunar_unregister waits on). */
static void in_place_done(struct lunar_pending *p)
{
	if (p->in_place)
		lc_fetch_add(p->in_place, (uint32_t)-1);
	p->in_place = NULL;
}

/* Neither a slot nor arena space is waited for: the caller's own pending
 * calls may hold them all, and only its lunar_wait frees them. */
int shm_start_one(struct lunar_client *c, const struct shm_op *op, struct lunar_pending *p)
{
	struct shm_req *r = &p->r;
	struct shm_layout l;
	struct lc_sqe sqe;
	uint64_t reg_off;
	uint32_t region;
	int rc;

	rc = req_begin(c, r);
	if (rc)
		return rc;
	shm_regs_rdlock(c);
	rc = items_layout(r, op, &p->it, 1, &l);
	if (!rc && l.total > r->cn->arena_max) {
		shm_regs_unlock(c);
		req_end(r);
		p->result = one_result(shm_run_items(c, op, &p->it, 1), &p->it);
		p->done = 1;
		return 0;
	}
	if (!rc)
		rc = req_alloc(r, l.total, 0);
	if (!rc) {
		uint16_t flags = items_fill(r, &l, &p->it, 1, op->op == LC_OP_GET);

		pref_fill(r, &l);
		p->staged = !shm_regs_find(c, r->cn, p->v.iov_base, p->v.iov_len, &region, &reg_off,
					   &p->in_place);
		p->stage_off = r->off + l.data_at;
		/* Counted before the table is let go: an unregister then waits. */
		if (p->in_place)
			lc_fetch_add(p->in_place, 1u);
		sqe = req_sqe(r, op, 1, sizeof(struct lc_item), &l);
		sqe.flags |= flags;
		rc = shm_send(r->cn, &sqe, 0, r->deadline_ns, &p->t);
	}
	shm_regs_unlock(c);
	if (rc) {
		in_place_done(p);
		req_end(r);
		return rc;
	}
	shm_call_end(r->cancel);
	return 0;
}

int shm_pending_ready(struct lunar_pending *p)
{
	int cancel, ready;

	if (p->done || shm_call_begin(p->r.c, &cancel))
		return 1; /* or a forked child's: lunar_wait says so at once */
	ready = shm_ticket_ready(p->r.cn, &p->t, p->r.deadline_ns);
	shm_call_end(cancel);
	return ready;
}

int64_t shm_finish_one(struct lunar_pending *p)
{
	struct shm_req *r = &p->r;
	int is_get = p->t.op == LC_OP_GET;
	struct shm_copyout d, *dp = NULL;
	int64_t rc, res;

	if (p->done)
		return p->result;
	rc = shm_call_begin(r->c, &r->cancel);
	if (rc)
		return rc; /* a forked child: the session is the parent's */
	if (is_get && p->staged)
		dp = shm_copyout_init(&d, r->cn->base + p->stage_off, p->v.iov_base, p->v.iov_len);
	/* On an error the proxy is done with our memory when this returns. */
	rc = shm_complete(r->cn, &p->t, r->deadline_ns, &res, dp);
	in_place_done(p);
	if (!rc && res < 0)
		rc = res;
	if (!rc) {
		uint64_t kept = dp ? dp->kept : 0;

		rc = item_result(r, 0, p->v.iov_len, is_get);
		if (is_get && rc > 0 && p->staged && (uint64_t)rc > kept)
			memcpy((uint8_t *)p->v.iov_base + kept, r->cn->base + p->stage_off + kept,
			       (size_t)rc - kept);
	}
	req_end(r);
	return rc;
}

int64_t shm_run_raw(struct lunar_client *c, const struct shm_op *op, const void *arg, size_t len)
{
	struct shm_req r;
	int64_t rc;

	rc = req_begin(c, &r);
	if (rc)
		return rc;
	if (len) {
		rc = req_alloc(&r, len, r.deadline_ns);
		if (!rc)
			memcpy(r.cn->base + r.off, arg, len);
	}
	if (!rc)
		rc = req_send(&r, op, 0, len, NULL, NULL);
	req_end(&r);
	return rc;
}
