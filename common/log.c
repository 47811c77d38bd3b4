/*
 * log.c - stderr logging with a level read once from $LUNAR_LOG.
 */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_level = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void)
{
	const char *s = getenv("LUNAR_LOG");

	log_level = LC_LOG_INFO;
	if (!s)
		return;
	if (!strcmp(s, "error"))
		log_level = LC_LOG_ERROR;
	else if (!strcmp(s, "warn"))
		log_level = LC_LOG_WARN;
	else if (!strcmp(s, "debug"))
		log_level = LC_LOG_DEBUG;
}

int lc_log_enabled(enum lc_log_level level)
{
	pthread_once(&log_once, log_init);
	return (int)level <= log_level;
}

void lc_log(enum lc_log_level level, const char *comp, const char *fmt, ...)
{
	static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
	char line[1024];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n;

	if (!lc_log_enabled(level))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %s %s: ", tm.tm_hour, tm.tm_min,
		     tm.tm_sec, ts.tv_nsec / 1000000, names[level], comp);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write so lines from many threads and processes never interleave. */
	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}
