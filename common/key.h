/*
 * key.h - key and tenant names, shared by the library, proxy and master:
 * their validation, and the hash the proxy's and the master's tables use.
 */
#ifndef LUNAR_COMMON_KEY_H
#define LUNAR_COMMON_KEY_H

#include <stddef.h>
#include <stdint.h>

/* lc_key_check - 0 if key[0..len) is a valid key (1..LUNAR_KEY_MAX bytes of
 * well-formed UTF-8 without NUL or control characters), else
 * LUNAR_ERR_INVALID_KEY. */
int lc_key_check(const char *key, size_t len);
/* lc_tenant_check - 0 if a valid tenant name (1..63 bytes of [A-Za-z0-9_.-]),
 * else LUNAR_ERR_INVALID_PARAMS. */
int lc_tenant_check(const char *tenant, size_t len);
/* lc_name_hash - a well-mixed 64-bit hash of the object name (tenant[0..tlen),
 * key[0..klen)), seeded at random per process: for in-memory tables only,
 * never kept or sent. Thread-safe. */
uint64_t lc_name_hash(const char *tenant, size_t tlen, const char *key, size_t klen);

#endif /* LUNAR_COMMON_KEY_H */
