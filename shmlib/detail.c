/*
 * detail.c - lunar_error_detail: what the proxy said about the calling
 * thread's last completed call beyond its code, kept per thread as errno
 * and dlerror are. The proxy's words are untrusted: an unknown reason
 * reads as none.
 */
#include <stdio.h>

#include "shm_abi.h"
#include "shm_int.h"
#include "lunar.h"

static __thread uint32_t last_reason;
static __thread uint64_t last_arg;
static __thread char text[128];

void shm_detail_set(uint32_t reason, uint64_t arg)
{
	last_reason = reason;
	last_arg = arg;
}

const char *lunar_error_detail(void)
{
	switch (last_reason) {
	case LC_REASON_TOO_LARGE:
		snprintf(text, sizeof(text),
			 "the value is larger than every segment of the cluster (the largest "
			 "holds %llu bytes): no eviction can make room for it",
			 (unsigned long long)last_arg);
		return text;
	default: return "";
	}
}
