/*
 * fuzz_meta.c - libFuzzer target for the SSD tier's bucket metadata decoder
 * (disk/scan.c's dsk_scan_parse, reached by including the file: it is
 * static, and a restart scan must survive any metadata file). Each input is
 * a whole metadata file; the target checks what the parser promises the
 * scan: every entry's names lie inside the input and inside their record,
 * are a tenant and a key a client could have stored, and its extent is in
 * range. With FUZZ_SEEDS_DIR set it writes a starting corpus there (valid
 * PUT and DEL records, a torn one, padding) and exits.
 */
#include "../../disk/scan.c"

#include <stdio.h>
#include "fuzz_check.h"

/* Append one record to buf at *len. */
static void seed_rec(char *buf, size_t *len, enum dsk_meta_type t, uint32_t idx, const char *key)
{
	uint32_t n = dsk_meta_size(7, strlen(key));

	dsk_meta_encode(buf + *len, t, idx, (uint64_t)idx * DSK_ALIGN, 1000 + idx, 0x1234u + idx,
			"default", 7, key, strlen(key));
	*len += n;
}

static void seed_write(const char *dir, const char *name, const char *buf, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f || fwrite(buf, 1, len, f) != len || fclose(f))
		exit(1);
}

static void seeds(const char *dir)
{
	static char buf[16 * DSK_META_ALIGN];
	size_t len = 0;

	seed_rec(buf, &len, DSK_META_PUT, 0, "seed/a");
	seed_write(dir, "one-put", buf, len);
	seed_rec(buf, &len, DSK_META_PUT, 1, "seed/b");
	seed_rec(buf, &len, DSK_META_DEL, 0, "seed/a");
	seed_rec(buf, &len, DSK_META_PUT, 0, "seed/a");
	seed_write(dir, "put-del-put", buf, len);
	seed_write(dir, "torn", buf, len - DSK_META_ALIGN + 100);
	memset(buf + len, 0, DSK_META_ALIGN);
	len += DSK_META_ALIGN;
	seed_rec(buf, &len, DSK_META_PUT, 2, "seed/after-a-hole");
	seed_write(dir, "hole", buf, len);
	exit(0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("FUZZ_SEEDS_DIR");

	(void)argc;
	(void)argv;
	if (dir)
		seeds(dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dsk_scan_meta m = {0};
	/* A copy of exactly size bytes: ASan reports any read past it. */
	char *buf = malloc(size ? size : 1);
	uint32_t max_idx = 64;

	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (dsk_scan_parse(buf, size, max_idx, &m) == 0) {
		for (size_t i = 0; i < m.n; i++) {
			const struct dsk_scan_ent *e = &m.v[i];
			const char *end = e->tenant + e->tlen + e->klen;

			FZ_CHECK(e->tenant >= buf + sizeof(struct dsk_meta_hdr));
			FZ_CHECK(end <= buf + size);
			FZ_CHECK(e->idx < max_idx);
			FZ_CHECK(e->len && e->off % DSK_ALIGN == 0 && e->off + e->len > e->off);
			FZ_CHECK(!lc_tenant_check(e->tenant, e->tlen));
			FZ_CHECK(!lc_key_check(e->tenant + e->tlen, e->klen));
		}
	}
	free(m.v);
	free(buf);
	return 0;
}
