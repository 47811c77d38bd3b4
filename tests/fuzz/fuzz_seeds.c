/*
 * fuzz_seeds.c - writes a starting corpus for fuzz_decode: well-formed
 * requests of every operation, batches, keys and segments at the arena's
 * edges, and ring indexes about to wrap. Random bytes seldom get past the
 * first range check; these give the fuzzer the deep paths to mutate, and
 * lengths that end exactly at the arena's end, one mutation from a bug.
 * Usage: fuzz_seeds DIR (existing files are overwritten).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "lunar.h"

struct seed {
	struct fz_input in;
	uint8_t arena[FZ_ARENA_MAX];
	uint64_t used;	/* bump allocator, arena-relative */
	uint64_t top;	/* end of the highest arena byte written */
	uint64_t asize; /* arena size; 0: the fewest pages holding top */
	int nsqe;
};

/* Copy n bytes into the arena (at rel, or the next free 8-byte boundary when
 * rel is UINT64_MAX); returns the region offset. */
static uint64_t put_at(struct seed *s, uint64_t rel, const void *p, size_t n)
{
	if (rel == UINT64_MAX) {
		rel = s->used;
		s->used = (rel + n + 7) & ~7ull;
	}
	memcpy(s->arena + rel, p, n);
	if (rel + n > s->top)
		s->top = rel + n;
	return FZ_ARENA_OFF + rel;
}

static uint64_t put_bytes(struct seed *s, const void *p, size_t n)
{
	return put_at(s, UINT64_MAX, p, n);
}

static struct lc_sqe *next_sqe(struct seed *s, uint16_t op)
{
	struct lc_sqe *q = &s->in.sqe[s->nsqe];

	q->op = op;
	q->slot = (uint32_t)s->nsqe * 7u + 1u;
	q->seq = 100u + (uint64_t)s->nsqe;
	s->nsqe++;
	s->in.mode = (uint8_t)((s->nsqe - 1) << 1);
	return q;
}

/* n items with keys "<stem><i>" and nseg segments of seglen bytes each. */
static void items(struct seed *s, uint16_t op, uint32_t n, const char *stem, uint32_t nseg,
		  uint64_t seglen)
{
	struct lc_item *it = calloc(n, sizeof(*it));
	struct lc_sqe *q = next_sqe(s, op);
	char key[64];

	for (uint32_t i = 0; i < n; i++) {
		struct lc_seg segs[LUNAR_IOV_MAX];

		snprintf(key, sizeof(key), "%s%u", stem, i);
		it[i].key_len = (uint32_t)strlen(key);
		it[i].key_off = put_bytes(s, key, it[i].key_len);
		it[i].nseg = nseg;
		for (uint32_t k = 0; k < nseg; k++) {
			segs[k] = (struct lc_seg){0, 0, 0, seglen};
			segs[k].off = s->used + FZ_ARENA_OFF;
			s->used += (seglen + 7) & ~7ull;
		}
		if (nseg)
			it[i].seg_off = put_bytes(s, segs, nseg * sizeof(struct lc_seg));
	}
	q->count = n;
	q->arg_len = (uint64_t)n * sizeof(*it);
	q->arg_off = put_bytes(s, it, q->arg_len);
	free(it);
}

static void write_seed(const char *dir, const char *name, const struct seed *s)
{
	char path[4096];
	FILE *f;
	struct fz_input in = s->in;
	uint64_t pages = s->asize ? s->asize / 4096 : (s->top + 4095) / 4096;

	in.arena_pages = (uint8_t)(pages ? pages - 1 : 0);
	snprintf(path, sizeof(path), "%s/seed-%s", dir, name);
	f = fopen(path, "wb");
	if (!f) {
		perror(path);
		exit(1);
	}
	fwrite(&in, sizeof(in), 1, f);
	fwrite(s->arena, 1, s->top, f);
	fclose(f);
}

static struct seed *fresh(void)
{
	static struct seed s;

	memset(&s, 0, sizeof(s));
	return &s;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	struct seed *s;
	struct lc_sqe *q;
	struct lc_item it = {0};
	struct lc_seg seg = {0};
	static char big[LUNAR_KEY_MAX];

	s = fresh();
	items(s, LC_OP_PUT, 1, "put-", 1, 100);
	write_seed(dir, "put", s);

	s = fresh();
	items(s, LC_OP_GET, 2, "get-", 2, 64);
	items(s, LC_OP_EXISTS, 3, "exists-", 0, 0);
	items(s, LC_OP_GET_SIZE, 1, "size-", 0, 0);
	q = next_sqe(s, LC_OP_HEALTH);
	write_seed(dir, "batch4", s);

	s = fresh();
	items(s, LC_OP_UPSERT, 1, "up-", LUNAR_IOV_MAX, 8);
	items(s, LC_OP_PREFIX_MATCH, 4, "pm/", 0, 0);
	items(s, LC_OP_REMOVE, 2, "rm-", 0, 0);
	write_seed(dir, "mixed", s);

	s = fresh();
	q = next_sqe(s, LC_OP_REMOVE_REGEX);
	q->arg_off = put_bytes(s, "^pre.*[0-9]+$", 13);
	q->arg_len = 13;
	q = next_sqe(s, LC_OP_REMOVE_ALL);
	q->flags = LC_SQE_FORCE;
	write_seed(dir, "regex", s);

	/* The longest key, ending at the arena's last byte; a value segment, a
	 * segment list and the item array each ending there too. */
	s = fresh();
	s->asize = 2 * 4096;
	memset(big, 'k', sizeof(big));
	it.key_len = LUNAR_KEY_MAX;
	it.key_off = put_at(s, s->asize - LUNAR_KEY_MAX, big, sizeof(big));
	it.nseg = 1;
	seg.off = FZ_ARENA_OFF + 64;
	seg.len = 8;
	it.seg_off = put_at(s, 32, &seg, sizeof(seg));
	q = next_sqe(s, LC_OP_PUT);
	q->count = 1;
	q->arg_len = sizeof(it);
	q->arg_off = put_at(s, 0, &it, sizeof(it));
	write_seed(dir, "edge-key", s);

	s = fresh();
	s->asize = 4096;
	it = (struct lc_item){.key_len = 3, .nseg = 1};
	it.key_off = put_at(s, 0, "abc", 3);
	seg.off = FZ_ARENA_OFF + 256;
	seg.len = s->asize - 256;
	it.seg_off = put_at(s, 64, &seg, sizeof(seg));
	q = next_sqe(s, LC_OP_GET);
	q->count = 1;
	q->arg_len = sizeof(it);
	q->arg_off = put_at(s, 128, &it, sizeof(it));
	write_seed(dir, "edge-value", s);

	s = fresh();
	s->asize = 4096;
	it = (struct lc_item){.key_len = 3, .nseg = 1};
	it.key_off = put_at(s, 0, "seg", 3);
	seg.off = FZ_ARENA_OFF + 8;
	seg.len = 8;
	it.seg_off = put_at(s, s->asize - sizeof(seg), &seg, sizeof(seg));
	q = next_sqe(s, LC_OP_PUT);
	q->count = 1;
	q->arg_len = sizeof(it);
	q->arg_off = put_at(s, s->asize - sizeof(seg) - sizeof(it), &it, sizeof(it));
	write_seed(dir, "edge-segs", s);

	s = fresh();
	s->asize = 4096;
	it = (struct lc_item){.key_len = 3};
	it.key_off = put_at(s, 0, "xyz", 3);
	q = next_sqe(s, LC_OP_EXISTS);
	q->count = 1;
	q->arg_len = sizeof(it);
	q->arg_off = put_at(s, s->asize - sizeof(it), &it, sizeof(it));
	write_seed(dir, "edge-items", s);

	s = fresh();
	s->asize = 4096;
	q = next_sqe(s, LC_OP_REMOVE_REGEX);
	q->arg_len = 5;
	q->arg_off = put_at(s, s->asize - 5, "^x.*$", 5);
	write_seed(dir, "edge-pattern", s);

	/* Registered ranges: segments ending exactly at their ends, the same
	 * range twice in one item, region ids 1 and LC_MAX_REGIONS. */
	s = fresh();
	s->in.mreg_id[0] = 1;
	s->in.mreg_len[0] = 1000;
	s->in.mreg_id[1] = LC_MAX_REGIONS;
	s->in.mreg_len[1] = 4096;
	{
		struct lc_seg segs[4] = {
		    {.region = 1, .off = 0, .len = 1000},
		    {.region = LC_MAX_REGIONS, .off = 4000, .len = 96},
		    {.region = 1, .off = 999, .len = 1},
		    {.region = 0, .off = FZ_ARENA_OFF + 512, .len = 16},
		};

		it = (struct lc_item){.key_len = 4, .nseg = 4};
		it.key_off = put_bytes(s, "mreg", 4);
		it.seg_off = put_bytes(s, segs, sizeof(segs));
		q = next_sqe(s, LC_OP_PUT);
		q->count = 1;
		q->arg_len = sizeof(it);
		q->arg_off = put_bytes(s, &it, sizeof(it));
		s->used = 528; /* past the arena bytes at 512 */
	}
	write_seed(dir, "mreg", s);

	/* The smallest: one 16-byte range, one segment ending at its end. */
	s = fresh();
	s->in.mreg_id[0] = 5;
	s->in.mreg_len[0] = 16;
	seg = (struct lc_seg){.region = 5, .off = 0, .len = 16};
	it = (struct lc_item){.key_len = 1, .nseg = 1};
	it.key_off = put_bytes(s, "m", 1);
	it.seg_off = put_bytes(s, &seg, sizeof(seg));
	q = next_sqe(s, LC_OP_GET);
	q->count = 1;
	q->arg_len = sizeof(it);
	q->arg_off = put_bytes(s, &it, sizeof(it));
	write_seed(dir, "mreg-edge", s);

	/* A full batch of one-byte keys. */
	s = fresh();
	items(s, LC_OP_EXISTS, LUNAR_BATCH_MAX, "", 0, 0);
	write_seed(dir, "batchmax", s);

	/* Indexes about to wrap: cons = 2^32 - 2, two entries published. */
	s = fresh();
	s->in.cons = UINT32_MAX - 1;
	s->in.tail = 0;
	items(s, LC_OP_GET_SIZE, 1, "wrap", 0, 0);
	next_sqe(s, LC_OP_HEALTH);
	s->in.mode = FZ_RAW_TAIL;
	s->in.slot_state = LC_SLOT_WAITING;
	write_seed(dir, "wrap", s);

	/* A key that is not valid UTF-8: a per-item result, not a violation. */
	s = fresh();
	items(s, LC_OP_REMOVE, 1, "bad\xc3\x28", 0, 0);
	write_seed(dir, "badkey", s);
	return 0;
}
