/*
 * resolve.c - name lookups bounded by a deadline (resolve.h). A lookup
 * that may block runs on a detached thread; the lookup's record is shared
 * by that thread and its caller, and whichever of the two is done with it
 * last frees it: the caller once it has the answer, or the thread once it
 * has answered a caller that left at its deadline.
 */
#include "resolve.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

struct lookup {
	pthread_mutex_t lock; /* all below */
	pthread_cond_t cond;  /* done */
	bool done, abandoned;
	int rc; /* getaddrinfo's */
	struct addrinfo *res;
	struct addrinfo hints;
	char *host, *port;
};

static void lookup_free(struct lookup *l)
{
	if (l->res)
		freeaddrinfo(l->res);
	pthread_cond_destroy(&l->cond);
	pthread_mutex_destroy(&l->lock);
	free(l->host);
	free(l->port);
	free(l);
}

static void *lookup_main(void *arg)
{
	struct lookup *l = arg;
	struct addrinfo *res = NULL;
	int rc = getaddrinfo(l->host, l->port, &l->hints, &res);
	bool alone;

	pthread_mutex_lock(&l->lock);
	l->rc = rc;
	l->res = rc ? NULL : res;
	l->done = true;
	alone = l->abandoned;
	pthread_cond_signal(&l->cond);
	pthread_mutex_unlock(&l->lock);
	if (alone)
		lookup_free(l);
	return NULL;
}

static int gai_code(int rc)
{
	return rc == EAI_MEMORY ? -ENOMEM : -EHOSTUNREACH;
}

static struct lookup *lookup_new(const char *host, const char *port, const struct addrinfo *hints)
{
	struct lookup *l = calloc(1, sizeof(*l));

	if (!l)
		return NULL;
	l->host = host ? strdup(host) : NULL;
	l->port = port ? strdup(port) : NULL;
	if ((host && !l->host) || (port && !l->port)) {
		free(l->host);
		free(l->port);
		free(l);
		return NULL;
	}
	l->hints = *hints;
	pthread_mutex_init(&l->lock, NULL);
	lc_cond_init(&l->cond);
	return l;
}

/* Start l's lookup on a detached thread: 0 or -ENOMEM. */
static int lookup_start(struct lookup *l)
{
	pthread_attr_t a;
	pthread_t t;
	int rc;

	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &a, lookup_main, l);
	pthread_attr_destroy(&a);
	return rc ? -ENOMEM : 0;
}

int lc_resolve(const char *host, const char *port, const struct addrinfo *hints,
	       uint64_t deadline_ms, struct addrinfo **out)
{
	struct addrinfo numeric = *hints;
	struct lookup *l;
	int rc;

	numeric.ai_flags |= AI_NUMERICHOST;
	rc = getaddrinfo(host, port, &numeric, out);
	if (rc != EAI_NONAME || !host) /* numeric, or wrong whatever the name */
		return rc ? gai_code(rc) : 0;
	if (deadline_ms == LC_NO_DEADLINE) {
		rc = getaddrinfo(host, port, hints, out);
		return rc ? gai_code(rc) : 0;
	}
	if (!(l = lookup_new(host, port, hints)))
		return -ENOMEM;
	if ((rc = lookup_start(l))) {
		lookup_free(l);
		return rc;
	}
	pthread_mutex_lock(&l->lock);
	while (!l->done) {
		uint64_t now = lc_now_ms();
		struct timespec ts;

		if (now >= deadline_ms)
			break;
		lc_monotonic_after(&ts, deadline_ms - now);
		pthread_cond_timedwait(&l->cond, &l->lock, &ts);
	}
	if (!l->done) {
		l->abandoned = true; /* the thread frees l */
		pthread_mutex_unlock(&l->lock);
		return -ETIMEDOUT;
	}
	pthread_mutex_unlock(&l->lock);
	rc = l->rc;
	*out = l->res;
	l->res = NULL;
	lookup_free(l);
	return rc ? gai_code(rc) : 0;
}
