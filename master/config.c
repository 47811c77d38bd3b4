/*
 * config.c - master flags: SPEC §10 defaults, parsing one flag by name, and
 * the help text. One table drives set and usage so they cannot disagree.
 */
#include "master.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "key.h"
#include "lunar.h"
#include "parse.h"

enum kind { DURATION, WAIT, RATIO, BOOL, STRATEGY, SIZE, QUOTA, SWITCH, OFFLOAD, COUNT };

struct flag {
	const char *name;
	enum kind kind;
	size_t off;
};

#define F(n, k, field)                                                                             \
	{                                                                                          \
		n, k, offsetof(struct mst_config, field)                                           \
	}
static const struct flag flags[] = {
    F("kv-lease-ttl", DURATION, kv_lease_ttl_ms),
    F("kv-soft-pin-ttl", DURATION, kv_soft_pin_ttl_ms),
    F("max-kv-soft-pin-ttl", DURATION, max_kv_soft_pin_ttl_ms),
    F("allow-evict-soft-pinned", BOOL, allow_evict_soft_pinned),
    F("eviction-ratio", RATIO, eviction_ratio),
    F("eviction-high-watermark-ratio", RATIO, eviction_high_watermark_ratio),
    F("client-ttl", DURATION, client_ttl_ms),
    F("put-start-discard-timeout", DURATION, put_start_discard_timeout_ms),
    F("put-start-release-timeout", DURATION, put_start_release_timeout_ms),
    F("allocation-strategy", STRATEGY, strategy),
    F("reserve-max", SIZE, reserve_max),
    F("reserve-ttl", DURATION, reserve_ttl_ms),
    F("debug-reserve-delay", DURATION, debug_reserve_delay_ms),
    F("default-tenant-quota", SIZE, default_tenant_quota),
    F("tenant-quota", QUOTA, tenant_quotas),
    F("enable-offload", SWITCH, enable_offload),
    F("offload", OFFLOAD, offload),
    F("offload-force-evict", SWITCH, offload_force_evict),
    F("offload-queue", COUNT, offload_queue),
    F("offload-queue-bytes", SIZE, offload_queue_bytes),
    F("offload-put-wait", DURATION, offload_put_wait_ms),
    F("report-wait", WAIT, report_wait_ms),
};

static const char *const strategies[] = {
    [MST_ALLOC_RANDOM] = "random",
    [MST_ALLOC_FREE_RATIO_FIRST] = "free_ratio_first",
    [MST_ALLOC_LOCAL_FIRST] = "local_first",
};

void mst_config_defaults(struct mst_config *cfg)
{
	*cfg = (struct mst_config){
	    .kv_lease_ttl_ms = 10000,
	    .kv_soft_pin_ttl_ms = 30 * 60000,
	    .max_kv_soft_pin_ttl_ms = 24 * 3600000ull,
	    .allow_evict_soft_pinned = 1,
	    .eviction_ratio = 0.01,
	    .eviction_high_watermark_ratio = 1.0,
	    .client_ttl_ms = 10000,
	    .put_start_discard_timeout_ms = 30000,
	    .put_start_release_timeout_ms = 600000,
	    .strategy = MST_ALLOC_RANDOM,
	    .reserve_max = 64ull << 20,
	    .reserve_ttl_ms = 10000,
	    .offload = MST_OFFLOAD_ON_EVICT,
	    .offload_queue = 65536,
	    .offload_queue_bytes = 64ull << 20,
	    .offload_put_wait_ms = 500,
	    .report_wait_ms = 30000,
	};
}

static int parse_bool(const char *s, int *v)
{
	if (!strcmp(s, "true")) {
		*v = 1;
		return 0;
	}
	if (!strcmp(s, "false")) {
		*v = 0;
		return 0;
	}
	return -EINVAL;
}

static int parse_strategy(const char *s, enum mst_alloc_strategy *v)
{
	for (size_t i = 0; i < sizeof(strategies) / sizeof(strategies[0]); i++) {
		if (!strcmp(s, strategies[i])) {
			*v = (enum mst_alloc_strategy)i;
			return 0;
		}
	}
	return -EINVAL;
}

/* --offload MODE; naming a mode turns offload on. */
static int parse_offload(struct mst_config *cfg, const char *s)
{
	if (!strcmp(s, "on_evict"))
		cfg->offload = MST_OFFLOAD_ON_EVICT;
	else if (!strcmp(s, "on_put"))
		cfg->offload = MST_OFFLOAD_ON_PUT;
	else
		return -EINVAL;
	cfg->enable_offload = 1;
	return 0;
}

/* A DURATION of 1s..24h: a wait that must happen, and end. */
static int parse_wait(const char *s, uint64_t *v)
{
	uint64_t ms;

	if (lc_parse_duration_ms(s, &ms) || ms < 1000 || ms > 24 * 3600000ull)
		return -EINVAL;
	*v = ms;
	return 0;
}

static int parse_count(const char *s, uint64_t *v)
{
	uint64_t x;

	if (lc_parse_u64(s, &x) || !x || x > (1u << 24))
		return -EINVAL;
	*v = x;
	return 0;
}

/* NAME=SIZE for --tenant-quota: add the tenant, or resize it. */
static int parse_quota(struct mst_config *cfg, const char *s)
{
	const char *eq = strchr(s, '=');
	size_t len = eq ? (size_t)(eq - s) : 0;
	unsigned i;
	uint64_t bytes;

	if (!len || len >= sizeof(cfg->tenant_quotas[0].name) || lc_tenant_check(s, len) ||
	    lc_parse_size(eq + 1, &bytes))
		return -EINVAL;
	for (i = 0; i < cfg->n_tenant_quotas; i++)
		if (strlen(cfg->tenant_quotas[i].name) == len &&
		    !memcmp(cfg->tenant_quotas[i].name, s, len))
			break;
	if (i == MST_TENANT_QUOTAS_MAX)
		return -EINVAL;
	memcpy(cfg->tenant_quotas[i].name, s, len);
	cfg->tenant_quotas[i].name[len] = 0;
	cfg->tenant_quotas[i].bytes = bytes;
	if (i == cfg->n_tenant_quotas)
		cfg->n_tenant_quotas++;
	return 0;
}

/* set - mst_config_set's work in -errno: -ENOENT unknown name, -EINVAL bad value. */
static int set(struct mst_config *cfg, const char *name, const char *value)
{
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
		void *p = (char *)cfg + flags[i].off;

		if (strcmp(name, flags[i].name))
			continue;
		if (!value)
			return -EINVAL;
		switch (flags[i].kind) {
		case DURATION: return lc_parse_duration_ms(value, p);
		case WAIT: return parse_wait(value, p);
		case RATIO: return lc_parse_ratio(value, p);
		case BOOL: return parse_bool(value, p);
		case STRATEGY: return parse_strategy(value, p);
		case SIZE: return lc_parse_size(value, p);
		case QUOTA: return parse_quota(cfg, value);
		case SWITCH: return parse_bool(value, p);
		case OFFLOAD: return parse_offload(cfg, value);
		case COUNT: return parse_count(value, p);
		}
	}
	return -ENOENT;
}

int mst_config_set(struct mst_config *cfg, const char *name, const char *value)
{
	int rc = set(cfg, name, value);

	return rc == -ENOENT ? MST_CONFIG_UNKNOWN : rc ? LUNAR_ERR_INVALID_PARAMS : 0;
}

int mst_config_has(const char *name)
{
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (!strcmp(name, flags[i].name))
			return 1;
	return 0;
}

int mst_config_is_switch(const char *name)
{
	for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (!strcmp(name, flags[i].name))
			return flags[i].kind == SWITCH;
	return 0;
}

const char *mst_config_usage(void)
{
	return "  --kv-lease-ttl DURATION          read lease granted by get/exists (10s)\n"
	       "  --kv-soft-pin-ttl DURATION       default soft pin TTL (30m)\n"
	       "  --max-kv-soft-pin-ttl DURATION   longest soft pin TTL (24h)\n"
	       "  --allow-evict-soft-pinned BOOL   evict soft-pinned objects last (true)\n"
	       "  --eviction-ratio RATIO           share of candidates evicted per round (0.01)\n"
	       "  --eviction-high-watermark-ratio RATIO  memory use that starts eviction\n"
	       "                                   (1.0: on demand)\n"
	       "  --client-ttl DURATION            a proxy silent this long is dead (10s)\n"
	       "  --put-start-discard-timeout DURATION  an unfinished put may be pre-empted (30s)\n"
	       "  --put-start-release-timeout DURATION  an unfinished put's space is freed (600s)\n"
	       "  --allocation-strategy NAME       random|free_ratio_first|local_first (random)\n"
	       "  --reserve-max SIZE               space a proxy may reserve ahead of its puts\n"
	       "                                   at once (64MiB; 0: no put-ahead)\n"
	       "  --reserve-ttl DURATION           a reservation's life (10s)\n"
	       "  --debug-reserve-delay DURATION   test hook: hold each grant between its\n"
	       "                                   placement and its insert (0)\n"
	       "  --tenant-quota NAME=SIZE         bytes tenant NAME may store (repeatable)\n"
	       "  --default-tenant-quota SIZE      bytes any other tenant may store (0: no "
	       "limit)\n"
	       "  --enable-offload [BOOL]          copy objects to the proxies' SSD tiers (false)\n"
	       "  --offload MODE                   on_evict|on_put; implies --enable-offload "
	       "(on_evict)\n"
	       "  --offload-force-evict [BOOL]     evict even when the offload queue is full "
	       "(false)\n"
	       "  --offload-queue N                offload tasks queued per proxy (65536)\n"
	       "  --offload-queue-bytes SIZE       bytes queued per proxy (64MiB; at most a\n"
	       "                                   quarter of the memory mounted)\n"
	       "  --offload-put-wait DURATION      a put finding memory full of objects waiting\n"
	       "                                   for their copy waits up to this long for "
	       "room\n"
	       "                                   (500ms),\n"
	       "                                   then the least recently used go uncopied\n"
	       "  --report-wait DURATION           with --etcd: the longest a new leader waits\n"
	       "                                   for the proxies' reports before it places\n"
	       "                                   anything (30s, 1s..24h; a report of 1M\n"
	       "                                   objects takes about 3 s)\n";
}
