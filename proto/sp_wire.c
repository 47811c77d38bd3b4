/*
 * sp_wire.c - what both sides of the SP wire parse the same way (sp_wire.h).
 */
#include "sp_wire.h"

#include <errno.h>
#include <string.h>

#include "parse.h"

int sp_tcp_split(const char *url, unsigned min_port, char *host, size_t hmax, char *port,
		 size_t pmax)
{
	const char *hp = url + 6, *colon, *h = hp;
	uint64_t num;
	size_t hlen;

	if (strncmp(url, "tcp://", 6) || !(colon = strrchr(hp, ':')) ||
	    (strchr(hp, ']') && strchr(hp, ']') > colon))
		return -EINVAL;
	if (lc_parse_u64(colon + 1, &num) || num < min_port || num > 65535)
		return -EINVAL;
	hlen = (size_t)(colon - hp);
	if (hlen >= 2 && hp[0] == '[' && hp[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (!hlen || hlen >= hmax || strlen(colon + 1) >= pmax)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	strcpy(port, colon + 1);
	return 0;
}
