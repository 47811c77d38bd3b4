/*
 * parse.c - sizes and durations from flag text; see parse.h.
 */
#include "parse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int lc_parse_u64(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long x;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*v = x;
	return 0;
}

/* Split s into a decimal number and a suffix; multiply by the suffix's scale. */
static int scaled(const char *s, const char *const *names, const uint64_t *scales, size_t n,
		  uint64_t *out)
{
	char *end;
	unsigned long long x;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	x = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (strcasecmp(end, names[i]))
			continue;
		if (scales[i] && x > UINT64_MAX / scales[i])
			return -EINVAL;
		*out = x * scales[i];
		return 0;
	}
	return -EINVAL;
}

int lc_parse_size(const char *s, uint64_t *bytes)
{
	static const char *const names[] = {"",	   "B", "K",  "KB",  "KiB", "M",  "MB",
					    "MiB", "G", "GB", "GiB", "T",   "TB", "TiB"};
	static const uint64_t scales[] = {
	    1,		1,	    1ull << 10, 1ull << 10, 1ull << 10, 1ull << 20, 1ull << 20,
	    1ull << 20, 1ull << 30, 1ull << 30, 1ull << 30, 1ull << 40, 1ull << 40, 1ull << 40};

	return scaled(s, names, scales, sizeof(scales) / sizeof(scales[0]), bytes);
}

int lc_parse_duration_ms(const char *s, uint64_t *ms)
{
	static const char *const names[] = {"", "ms", "s", "m", "h"};
	static const uint64_t scales[] = {1000, 1, 1000, 60000, 3600000};

	return scaled(s, names, scales, sizeof(scales) / sizeof(scales[0]), ms);
}

int lc_parse_ratio(const char *s, double *v)
{
	char *end;
	double x;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	x = strtod(s, &end);
	if (errno || *end || !(x >= 0.0 && x <= 1.0))
		return -EINVAL;
	*v = x;
	return 0;
}

int lc_parse_rpc_url(const char *s)
{
	const char *colon;
	uint64_t port;

	if (!s)
		return -EINVAL;
	if (!strncmp(s, "ipc://", 6))
		return s[6] ? 0 : -EINVAL;
	if (!strncmp(s, "etcd://", 7)) {
		/* "etcd://h1:2379,h2:2379/C": endpoints, then the cluster id */
		const char *slash = strrchr(s + 7, '/');

		return slash && slash > s + 7 && slash[1] ? 0 : -EINVAL;
	}
	if (strncmp(s, "tcp://", 6))
		return -EINVAL;
	s += 6;
	colon = strrchr(s, ':');
	/* "[::1]:50051": the port follows the last colon, after the brackets. */
	if (!colon || colon == s || (strchr(s, ']') && strchr(s, ']') > colon))
		return -EINVAL;
	if (lc_parse_u64(colon + 1, &port) || port == 0 || port > 65535)
		return -EINVAL;
	return 0;
}
