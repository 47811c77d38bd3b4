/*
 * failpoint.c - the failpoints of a -DLUNAR_FAILPOINTS build (see
 * failpoint.h): a small table parsed from $LUNAR_FAILPOINTS and from the
 * file $LUNAR_FAILPOINTS_FILE, consulted under one mutex. A release build
 * compiles this file to nothing.
 */
#ifdef LUNAR_FAILPOINTS

#include "failpoint.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

#define FP_MAX	    32
#define FP_NAME_MAX 64
#define FP_SPEC_MAX 4096
#define FP_CHECK_MS 20

enum fp_action { FP_OFF, FP_RETURN, FP_SLEEP, FP_CRASH };

struct fp {
	char name[FP_NAME_MAX];
	enum fp_action action;
	long arg;   /* sleep: milliseconds */
	long count; /* evaluations left that fire; -1: every one */
};

static pthread_mutex_t fp_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fp fps[FP_MAX];
static int nfp;
static int fp_loaded;
static uint64_t fp_next_check_ms;
static struct timespec fp_mtime;

/* One "name=term"; a malformed one is logged and ignored. */
static void parse_one(char *item)
{
	char *eq = strchr(item, '='), *term;
	struct fp f = {.count = -1};

	if (!eq || eq == item || eq - item >= FP_NAME_MAX || nfp == FP_MAX)
		goto bad;
	memcpy(f.name, item, (size_t)(eq - item));
	term = eq + 1;
	if (strchr(term, '*')) {
		f.count = strtol(term, &term, 10);
		if (*term != '*' || f.count < 0)
			goto bad;
		term++;
	}
	if (!strcmp(term, "return"))
		f.action = FP_RETURN;
	else if (!strcmp(term, "crash"))
		f.action = FP_CRASH;
	else if (!strcmp(term, "off"))
		f.action = FP_OFF;
	else if (sscanf(term, "sleep(%ld)", &f.arg) == 1 && f.arg >= 0)
		f.action = FP_SLEEP;
	else
		goto bad;
	fps[nfp++] = f;
	return;
bad:
	LC_WARN("failpoint", "ignored: \"%s\"", item);
}

static void parse(const char *spec)
{
	char buf[FP_SPEC_MAX], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *it = strtok_r(buf, ";\n", &save); it; it = strtok_r(NULL, ";\n", &save))
		if (*it)
			parse_one(it);
}

/* Re-read $LUNAR_FAILPOINTS_FILE when it changed; fp_lock held. */
static void refresh(void)
{
	const char *path = getenv("LUNAR_FAILPOINTS_FILE");
	char buf[FP_SPEC_MAX];
	uint64_t now = lc_now_ms();
	struct stat st;
	size_t n;
	FILE *f;

	if (!fp_loaded) {
		fp_loaded = 1;
		if (getenv("LUNAR_FAILPOINTS"))
			parse(getenv("LUNAR_FAILPOINTS"));
	}
	if (!path || now < fp_next_check_ms)
		return;
	fp_next_check_ms = now + FP_CHECK_MS;
	if (stat(path, &st) ||
	    (st.st_mtim.tv_sec == fp_mtime.tv_sec && st.st_mtim.tv_nsec == fp_mtime.tv_nsec))
		return;
	fp_mtime = st.st_mtim;
	f = fopen(path, "re");
	if (!f)
		return;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	nfp = 0;
	parse(buf);
	LC_WARN("failpoint", "armed from %s: %s", path, buf);
}

void lc_failpoint_crash(const char *name)
{
	LC_WARN("failpoint", "%s: crashing", name);
	raise(SIGKILL);
	_exit(137);
}

int lc_failpoint_eval(const char *name)
{
	enum fp_action act = FP_OFF;
	long arg = 0;

	pthread_mutex_lock(&fp_lock);
	refresh();
	for (int i = 0; i < nfp; i++) {
		if (strcmp(fps[i].name, name) || !fps[i].count)
			continue;
		if (fps[i].count > 0)
			fps[i].count--;
		act = fps[i].action;
		arg = fps[i].arg;
		break;
	}
	pthread_mutex_unlock(&fp_lock);
	if (act != FP_OFF)
		LC_WARN("failpoint", "%s fired", name);
	if (act == FP_CRASH)
		lc_failpoint_crash(name);
	if (act == FP_SLEEP) {
		struct timespec ts = {arg / 1000, (arg % 1000) * 1000000};

		nanosleep(&ts, NULL);
	}
	return act == FP_RETURN;
}

#else
/* ISO C wants a translation unit to declare something. */
typedef int lc_failpoint_unused;
#endif /* LUNAR_FAILPOINTS */
