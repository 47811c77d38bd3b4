/*
 * fork.c - a handle belongs to the process that opened it. After fork() the
 * child shares the parent's sessions (ring, slots, arena, lunar_alloc
 * chunks) but holds only private copies of the indexes that hand them out,
 * so the two would take the same slots and cells and overwrite each other's
 * requests. A handler that runs in every child therefore closes the child's
 * copies of the session descriptors (the proxy notices a client's death by
 * its socket's hang-up, which an idle child's copy would otherwise hold
 * off) and advances the fork generation, which makes every call on an
 * inherited handle fail with ILLEGAL_CLIENT before it touches shared memory.
 * The child connects afresh.
 */
#include "shm_int.h"

#include <unistd.h>

#include "atomic.h"
#include "uds.h"

static pthread_once_t watch_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shm_conn *open_conns; /* under open_lock */
static uint32_t generation;	    /* atomic; bumped in each child */

static void close_fds(struct shm_conn *cn)
{
	if (cn->sock >= 0)
		close(cn->sock);
	if (cn->evfd >= 0)
		close(cn->evfd);
	cn->sock = cn->evfd = -1;
}

static void before_fork(void)
{
	pthread_mutex_lock(&open_lock);
}

static void in_parent(void)
{
	pthread_mutex_unlock(&open_lock);
}

/* The forking thread is the child's only one, and holds open_lock. */
static void in_child(void)
{
	for (struct shm_conn *cn = open_conns; cn; cn = cn->open_next)
		close_fds(cn);
	open_conns = NULL;
	lc_fetch_add(&generation, 1u);
	pthread_mutex_unlock(&open_lock);
}

static void watch(void)
{
	pthread_atfork(before_fork, in_parent, in_child);
}

uint32_t shm_fork_generation(void)
{
	pthread_once(&watch_once, watch);
	return lc_load_acquire(&generation);
}

int shm_forked(const struct lunar_client *c)
{
	return c->fork_gen != lc_load_acquire(&generation);
}

int shm_fork_socket(struct shm_conn *cn)
{
	int fd;

	pthread_mutex_lock(&open_lock);
	fd = lc_uds_socket();
	if (fd < 0) {
		pthread_mutex_unlock(&open_lock);
		return fd;
	}
	cn->sock = fd;
	cn->open_prev = NULL;
	cn->open_next = open_conns;
	if (open_conns)
		open_conns->open_prev = cn;
	open_conns = cn;
	cn->open_gen = lc_load_acquire(&generation) + 1;
	pthread_mutex_unlock(&open_lock);
	return 0;
}

void shm_fork_close(struct shm_conn *cn)
{
	pthread_mutex_lock(&open_lock);
	/* A child emptied the list it inherited: only a session tracked in
	 * this process is on it. */
	if (cn->open_gen == lc_load_acquire(&generation) + 1) {
		if (cn->open_prev)
			cn->open_prev->open_next = cn->open_next;
		else
			open_conns = cn->open_next;
		if (cn->open_next)
			cn->open_next->open_prev = cn->open_prev;
	}
	cn->open_gen = 0;
	close_fds(cn); /* under the lock: no child inherits them unlisted */
	pthread_mutex_unlock(&open_lock);
}
