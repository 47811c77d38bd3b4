/*
 * key.h - key and tenant validation shared by the library, proxy and master.
 */
#ifndef LUNAR_COMMON_KEY_H
#define LUNAR_COMMON_KEY_H

#include <stddef.h>

/* lc_key_check - 0 if key[0..len) is a valid key (1..LUNAR_KEY_MAX bytes of
 * well-formed UTF-8 without NUL or control characters), else
 * LUNAR_ERR_INVALID_KEY. */
int lc_key_check(const char *key, size_t len);
/* lc_tenant_check - 0 if a valid tenant name (1..63 bytes of [A-Za-z0-9_.-]),
 * else LUNAR_ERR_INVALID_PARAMS. */
int lc_tenant_check(const char *tenant, size_t len);

#endif /* LUNAR_COMMON_KEY_H */
