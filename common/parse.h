/*
 * parse.h - parsing of flag values: sizes ("4GiB", "64MB", "512") and
 * durations ("10s", "30m", "250ms"; a bare number is seconds).
 */
#ifndef LUNAR_COMMON_PARSE_H
#define LUNAR_COMMON_PARSE_H

#include <stdint.h>

/* lc_parse_size - bytes; KiB/MiB/GiB/TiB are 1024-based, KB/MB/GB/TB too
 * (as Mooncake and the SPEC use them), B or no suffix bytes.
 * Returns 0 or -EINVAL (bad text, overflow). */
int lc_parse_size(const char *s, uint64_t *bytes);
/* lc_parse_duration_ms - milliseconds from ms/s/m/h; -EINVAL on bad text. */
int lc_parse_duration_ms(const char *s, uint64_t *ms);
/* lc_parse_u64 - a plain decimal number; -EINVAL on bad text or overflow. */
int lc_parse_u64(const char *s, uint64_t *v);
/* lc_parse_ratio - a number in [0, 1]; -EINVAL otherwise. */
int lc_parse_ratio(const char *s, double *v);

/* The master addresses lunar-proxy --master and lunar-bench --master take. */
#define LC_RPC_URL_FORMS "tcp://HOST:PORT, ipc://PATH or etcd://HOST:PORT[,HOST:PORT...]/CLUSTER"
/* lc_parse_rpc_url - 0 when s has one of LC_RPC_URL_FORMS' shapes (a
 * nonempty host and a port 1..65535, a nonempty path, or etcd endpoints and
 * a cluster id after the last '/'), else -EINVAL. It
 * checks the shape only: nothing is resolved or dialled. */
int lc_parse_rpc_url(const char *s);

#endif /* LUNAR_COMMON_PARSE_H */
