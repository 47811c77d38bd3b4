/*
 * policy.c - where a daemon finds its cluster key, and where it may listen
 * without one: loopback binds are always allowed, any other needs the key
 * or an explicit --insecure (SPEC §13, safe defaults).
 */
#include "auth.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lunar.h"

int auth_key_resolve(const char *path, struct auth_key *out, char *why, size_t cap)
{
	int rc;

	if (!path || !*path)
		path = getenv(AUTH_KEY_ENV);
	if (!path || !*path) {
		snprintf(why, cap, "no cluster key");
		return 0;
	}
	rc = auth_key_load(path, out, why, cap);
	return rc ? rc : 1;
}

int auth_host_is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!host)
		return 0;
	if (!strcmp(host, "localhost"))
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return 0;
}

int auth_bind_check(const char *host, int keyed, int insecure, char *why, size_t cap)
{
	snprintf(why, cap, "ok");
	if (keyed || insecure || auth_host_is_loopback(host))
		return 0;
	snprintf(why, cap,
		 "refusing to listen on %s without a cluster key: anyone who reaches it could "
		 "read and change the cache. Give --cluster-key FILE (make one with 'lunarctl "
		 "keygen FILE'), listen on 127.0.0.1, or say --insecure",
		 host && *host ? host : "every address");
	return LUNAR_ERR_UNAUTHORIZED;
}
