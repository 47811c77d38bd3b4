/*
 * failpoint.h - fault injection for tests, in the style of etcd's gofail:
 * LC_FAILPOINT(name) marks a place where a test may make the code fail. In
 * a release build (the default) it is the constant 0 and the compiler drops
 * the branch: no failpoint code, name or lookup is in lunar-proxy,
 * lunar-master or liblunar. Only a build with -DLUNAR_FAILPOINTS has them:
 * `make failpoints` (a dependency of `make test`) builds such a lunar-proxy
 * and lunar-master into $(BUILD)/failpoints/bin/, beside the release ones,
 * for the integration tests that arm them.
 *
 * In that build the failpoints are read from $LUNAR_FAILPOINTS at the first
 * evaluation, and from the file $LUNAR_FAILPOINTS_FILE whenever it changes
 * (looked at most every 20 ms), so a test can arm one while the daemon runs.
 * Both hold "name=term;name=term...", a term being
 *	return		LC_FAILPOINT(name) is 1: the site fails as it says
 *	N*return	the next N evaluations are 1, then 0
 *	sleep(MS)	the evaluation sleeps MS milliseconds, then is 0
 *	crash		the process dies at once (SIGKILL), as on a power cut
 *	off		0 (the same as leaving the name out)
 * Each firing is logged (warn, component "failpoint").
 */
#ifndef LUNAR_COMMON_FAILPOINT_H
#define LUNAR_COMMON_FAILPOINT_H

#ifdef LUNAR_FAILPOINTS
/*
 * lc_failpoint_eval - what failpoint name says now: 1 when the site must
 * fail, else 0 (after a sleep term's sleep). Does not return for crash.
 * Any thread; takes a mutex of its own; may block (sleep, file read).
 */
int lc_failpoint_eval(const char *name);
/* lc_failpoint_crash - die at once (SIGKILL), for sites that fail halfway. */
void lc_failpoint_crash(const char *name) __attribute__((noreturn));
#define LC_FAILPOINT(name) lc_failpoint_eval(name)
#else
#define LC_FAILPOINT(name) 0
#endif

#endif /* LUNAR_COMMON_FAILPOINT_H */
