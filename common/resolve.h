/*
 * resolve.h - name lookups bounded by a deadline. getaddrinfo() waits as
 * long as the resolver likes (a DNS server that never answers: 5 s an
 * attempt by resolv.conf's defaults), which a call with a deadline of
 * milliseconds cannot afford. A numeric host is converted at once, on the
 * caller's thread; a name is looked up on a thread of its own, which the
 * caller waits for until its deadline and then leaves to finish, and free
 * what it found, alone.
 */
#ifndef LUNAR_COMMON_RESOLVE_H
#define LUNAR_COMMON_RESOLVE_H

#include <netdb.h>
#include <stdint.h>

#define LC_NO_DEADLINE UINT64_MAX /* lc_resolve: wait as getaddrinfo does */

/*
 * lc_resolve - getaddrinfo(host, port, hints) by deadline_ms (lc_now_ms's
 * clock; LC_NO_DEADLINE: on the caller's thread, as long as it takes).
 * hints as getaddrinfo's (AI_NUMERICSERV is the caller's to set). 0 and
 * *out (freeaddrinfo it); -ETIMEDOUT (not answered by then: the lookup
 * goes on and its answer is dropped); -EHOSTUNREACH (the name does not
 * resolve); -ENOMEM (no memory, or no thread, for the lookup). Any
 * thread.
 */
int lc_resolve(const char *host, const char *port, const struct addrinfo *hints,
	       uint64_t deadline_ms, struct addrinfo **out);

#endif /* LUNAR_COMMON_RESOLVE_H */
