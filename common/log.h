/*
 * log.h - one line per event to stderr: "<time> <LEVEL> <component>: message".
 * The level comes from $LUNAR_LOG (error|warn|info|debug), default info.
 * No per-operation logging at info level.
 */
#ifndef LUNAR_COMMON_LOG_H
#define LUNAR_COMMON_LOG_H

enum lc_log_level { LC_LOG_ERROR, LC_LOG_WARN, LC_LOG_INFO, LC_LOG_DEBUG };

/* lc_log - format and write one line atomically (one write(2)). Any thread. */
void lc_log(enum lc_log_level level, const char *comp, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* lc_log_enabled - whether level would be written. */
int lc_log_enabled(enum lc_log_level level);

#define LC_ERROR(comp, ...) lc_log(LC_LOG_ERROR, comp, __VA_ARGS__)
#define LC_WARN(comp, ...)  lc_log(LC_LOG_WARN, comp, __VA_ARGS__)
#define LC_INFO(comp, ...)  lc_log(LC_LOG_INFO, comp, __VA_ARGS__)
#define LC_DEBUG(comp, ...)                                                                        \
	do {                                                                                       \
		if (lc_log_enabled(LC_LOG_DEBUG))                                                  \
			lc_log(LC_LOG_DEBUG, comp, __VA_ARGS__);                                   \
	} while (0)

/* LC_ASSERT - for states that cannot happen; never for bad input. */
#define LC_ASSERT(cond)                                                                            \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			lc_log(LC_LOG_ERROR, "assert", "%s:%d: %s", __FILE__, __LINE__, #cond);    \
			__builtin_trap();                                                          \
		}                                                                                  \
	} while (0)

#endif /* LUNAR_COMMON_LOG_H */
