/*
 * aio.c - transfers as objects (engine.h: eng_op, eng_cq): submitted in
 * batches, run by a fixed set of I/O threads one slice at a time (a large
 * transfer's slices spread over several pooled connections at once), and
 * completed into the submitter's queue by whichever thread finished the
 * last slice. A waiter runs queued slices of its own queue instead of
 * sleeping, so a synchronous transfer of one slice never changes thread.
 * At shutdown, queued slices are cancelled and running ones cut short.
 */
#include "eng_int.h"
#include "rdma_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "atomic.h"
#include "clock.h"
#include "lunar.h"

int eng_cq_init(struct eng_cq *cq)
{
	int rc;

	memset(cq, 0, sizeof(*cq));
	if (pthread_mutex_init(&cq->lock, NULL))
		return -ENOMEM;
	/* Timed waits count on lc_now_ns()'s clock. */
	rc = lc_cond_init(&cq->cond);
	if (rc) {
		pthread_mutex_destroy(&cq->lock);
		return -ENOMEM;
	}
	return 0;
}

void eng_cq_fini(struct eng_cq *cq)
{
	pthread_cond_destroy(&cq->cond);
	pthread_mutex_destroy(&cq->lock);
}

int eng_cq_alloc(struct eng_cq **out)
{
	struct eng_cq *cq = malloc(sizeof(*cq));

	if (!cq || eng_cq_init(cq)) {
		free(cq);
		return LUNAR_ERR_INTERNAL;
	}
	*out = cq;
	return 0;
}

void eng_cq_free(struct eng_cq *cq)
{
	if (!cq)
		return;
	eng_cq_fini(cq);
	free(cq);
}

/* Hand op (all of it done) to its queue; a waiter wakes. No lock held. */
static void op_post(struct eng_op *op, int result)
{
	struct eng_cq *cq = op->priv.cq;

	op->result = result;
	pthread_mutex_lock(&cq->lock);
	op->priv.next = NULL;
	if (cq->tail)
		cq->tail->priv.next = op;
	else
		cq->head = op;
	cq->tail = op;
	pthread_cond_broadcast(&cq->cond);
	pthread_mutex_unlock(&cq->lock);
}

/*
 * One slice of op ended (rc: 0 or -errno; ran: bytes may have gone out);
 * the last one completes op. The counters are the cq's lock's.
 */
static void slice_done(struct eng_engine *e, struct eng_op *op, int rc, int ran)
{
	struct eng_cq *cq = op->priv.cq;
	int last, result = 0;

	pthread_mutex_lock(&cq->lock);
	op->priv.ran |= ran != 0;
	op->priv.failed |= rc != 0;
	op->priv.refused |= rc == -EKEYREJECTED;
	last = ++op->priv.finished == op->priv.nslices;
	pthread_mutex_unlock(&cq->lock);
	if (!last)
		return;
	if (op->priv.failed)
		result = eng_xfer_failed(op->priv.refused ? -EKEYREJECTED : -EIO, op->priv.ran);
	else if (op->want_crc)
		op->crc = eng_tcp_crc(op);
	if (op->priv.ops == &eng_tcp_ops) /* another transport counts itself */
		eng_xfer_count(e, ENG_TR_TCP, op->priv.total, result);
	op_post(op, result);
}

/* Run slice idx of op here; live: the socket slot to publish, or NULL. */
static void slice_exec(struct eng_engine *e, struct eng_op *op, unsigned idx, int *live)
{
	const struct eng_transport_ops *ops = op->priv.ops;
	uint32_t crc = 0;
	int ran = 1, rc;

	if (ops == &eng_tcp_ops) {
		rc = eng_tcp_slice(e, op, idx, &ran, live);
	} else {
		/* Another transport moves the whole transfer in one call. */
		rc = ops->xfer(e, op->endpoint, op->dir, op->off, op->iov, op->iovcnt,
			       op->priv.total, op->cap, op->want_crc ? &crc : NULL,
			       op->priv.deadline_ns, live);
		ran = rc != ENG_XFER_UNSENT;
		if (rc == LUNAR_ERR_UNAUTHORIZED)
			rc = -EKEYREJECTED; /* as a TCP slice says it */
		op->priv.scrc = crc;
		op->priv.has_scrc = 1;
	}
	slice_done(e, op, rc, ran);
}

/*
 * Claim the next slice of the first queued op (of cq only, when cq is not
 * NULL): the op and *idx, or NULL. Exec lock held.
 */
static struct eng_op *claim_locked(struct eng_exec *x, const struct eng_cq *cq, unsigned *idx)
{
	struct eng_op **pp = &x->head, *op, *prev = NULL;

	while ((op = *pp) && cq && op->priv.cq != cq) {
		prev = op;
		pp = &op->priv.next;
	}
	if (!op)
		return NULL;
	*idx = op->priv.claimed++;
	if (op->priv.claimed == op->priv.nslices) {
		*pp = op->priv.next;
		if (x->tail == op)
			x->tail = prev;
	}
	return op;
}

static void *io_main(void *arg)
{
	struct eng_engine *e = arg;
	struct eng_exec *x = &e->exec;
	struct eng_op *op = NULL;
	unsigned self, idx;

	pthread_mutex_lock(&x->lock);
	for (self = 0; !pthread_equal(x->threads[self], pthread_self()); self++)
		;
	for (;;) {
		while (!x->stopping && !(op = claim_locked(x, NULL, &idx)))
			pthread_cond_wait(&x->cond, &x->lock);
		if (x->stopping)
			break;
		pthread_mutex_unlock(&x->lock);
		slice_exec(e, op, idx, &x->live[self]);
		pthread_mutex_lock(&x->lock);
	}
	pthread_mutex_unlock(&x->lock);
	return NULL;
}

int eng_exec_start(struct eng_engine *e)
{
	struct eng_exec *x = &e->exec;
	unsigned n = e->cfg.io_threads;
	int rc = 0;

	memset(x, 0, sizeof(*x));
	x->threads = calloc(n, sizeof(*x->threads));
	x->live = malloc(n * sizeof(*x->live));
	if (!x->threads || !x->live)
		goto err_free;
	for (unsigned i = 0; i < n; i++)
		x->live[i] = -1;
	pthread_mutex_init(&x->lock, NULL);
	pthread_cond_init(&x->cond, NULL);
	/* Under the lock: a thread finds its own index in threads[] first. */
	pthread_mutex_lock(&x->lock);
	for (; x->nthreads < n; x->nthreads++) {
		rc = pthread_create(&x->threads[x->nthreads], NULL, io_main, e);
		if (rc)
			break;
	}
	pthread_mutex_unlock(&x->lock);
	if (x->nthreads == n)
		return 0;
	eng_exec_stop(e);
	return -rc;

err_free:
	free(x->threads);
	free(x->live);
	return -ENOMEM;
}

int eng_exec_live(struct eng_engine *e, int *live, int fd)
{
	int stopping;

	/* eng_exec_stop shuts sockets down under the lock: once a clearing
	 * is through, it is done with ours, and its number may be reused;
	 * one published after it looked is shut down here. */
	pthread_mutex_lock(&e->exec.lock);
	lc_store_release(live, fd);
	stopping = e->exec.stopping;
	if (fd >= 0 && stopping)
		shutdown(fd, SHUT_RDWR);
	pthread_mutex_unlock(&e->exec.lock);
	return stopping;
}

void eng_exec_stop(struct eng_engine *e)
{
	struct eng_exec *x = &e->exec;
	struct eng_op *op;
	unsigned idx;

	pthread_mutex_lock(&x->lock);
	x->stopping = 1;
	pthread_cond_broadcast(&x->cond);
	/* Running slices fail at once rather than at their deadline. */
	for (unsigned i = 0; i < x->nthreads; i++) {
		int fd = lc_load_acquire(&x->live[i]);

		if (fd >= 0)
			shutdown(fd, SHUT_RDWR);
	}
	pthread_mutex_unlock(&x->lock);
	for (unsigned i = 0; i < x->nthreads; i++)
		pthread_join(x->threads[i], NULL);
	/* What nobody claimed is cancelled: unsent, unless a sibling ran. */
	while ((op = claim_locked(x, NULL, &idx)))
		slice_done(e, op, -ECANCELED, 0);
	pthread_mutex_destroy(&x->lock);
	pthread_cond_destroy(&x->cond);
	free(x->threads);
	free(x->live);
}

/*
 * Get op ready to run against cq: 0 when it has slices to run, 1 when it
 * completed already (a local copy, bad arguments, refused unsent).
 */
static int op_prepare(struct eng_engine *e, struct eng_cq *cq, struct eng_op *op)
{
	uint64_t total = 0;
	int rc = 0;

	memset(&op->priv, 0, sizeof(op->priv));
	op->priv.cq = cq;
	op->crc = 0;
	if (!op->endpoint || !op->iov || op->iovcnt <= 0 || (unsigned)op->dir > ENG_READ_STAGED)
		rc = LUNAR_ERR_TRANSFER_FAIL;
	for (int i = 0; !rc && i < op->iovcnt; i++) {
		if (op->iov[i].iov_len > UINT64_MAX - total)
			rc = LUNAR_ERR_TRANSFER_FAIL;
		total += op->iov[i].iov_len;
	}
	if (!rc && !total)
		rc = LUNAR_ERR_TRANSFER_FAIL;
	op->priv.total = total;
	op->priv.ops = rc ? NULL : eng_transport(e, op->endpoint);
	/* A remote op's one deadline runs from submission, whatever its
	 * transport and its wait; a local copy, on the hot path, needs none. */
	if (!rc && op->priv.ops != &eng_local_ops)
		op->priv.deadline_ns = lc_now_ns() + e->timeout_ns;
	if (!rc && op->priv.ops == &eng_local_ops) {
		rc = eng_local_run(e, op, total);
		eng_xfer_count(e, ENG_TR_LOCAL, total, rc);
	} else if (!rc && op->priv.ops == &eng_tcp_ops)
		rc = eng_tcp_plan(e, op);
	else if (!rc)
		op->priv.nslices = 1;
	if (rc || op->priv.ops == &eng_local_ops) {
		op_post(op, rc);
		return 1;
	}
	return 0;
}

/* Queue ops[] (those with slices to run), except skip; wake threads for
 * them. Returns how many slices were queued. */
static unsigned queue_ops(struct eng_engine *e, struct eng_op *ops, const int *run, int n,
			  const struct eng_op *skip)
{
	struct eng_exec *x = &e->exec;
	unsigned slices = 0;

	pthread_mutex_lock(&x->lock);
	for (int i = 0; i < n; i++) {
		struct eng_op *op = &ops[i];

		if (!run[i] || (op == skip && op->priv.nslices == 1))
			continue;
		if (op == skip)
			op->priv.claimed = 1; /* slice 0 runs on the caller */
		slices += op->priv.nslices - op->priv.claimed;
		op->priv.next = NULL;
		if (x->tail)
			x->tail->priv.next = op;
		else
			x->head = op;
		x->tail = op;
	}
	pthread_mutex_unlock(&x->lock);
	/* Woken after the unlock, a thread finds the lock free, not taken by
	 * us: no second sleep on it (x and its cond live as the engine does). */
	if (slices >= x->nthreads)
		pthread_cond_broadcast(&x->cond);
	else
		for (unsigned i = 0; i < slices; i++)
			pthread_cond_signal(&x->cond);
	return slices;
}

/* Prepare ops[]; run[i] says whether ops[i] still has slices. A stopping
 * engine cancels them all. Returns how many have. */
static int prepare_all(struct eng_engine *e, struct eng_cq *cq, struct eng_op *ops, int n, int *run)
{
	int stopping, left = 0;

	pthread_mutex_lock(&e->exec.lock);
	stopping = e->exec.stopping;
	pthread_mutex_unlock(&e->exec.lock);
	for (int i = 0; i < n; i++) {
		run[i] = !stopping && !op_prepare(e, cq, &ops[i]);
		if (stopping) {
			ops[i].priv.cq = cq;
			op_post(&ops[i], ENG_XFER_UNSENT);
		}
		left += run[i];
	}
	return left;
}

int eng_xfer_submit(struct eng_engine *e, struct eng_cq *cq, struct eng_op *ops, int n)
{
	int run_in[16], *run = run_in;

	if (!e || !cq || n < 0 || (n && !ops) || (cq->e && cq->e != e))
		return LUNAR_ERR_INVALID_PARAMS;
	cq->e = e;
	if (n > 16 && !(run = malloc((size_t)n * sizeof(*run))))
		return LUNAR_ERR_INTERNAL;
	if (prepare_all(e, cq, ops, n, run))
		queue_ops(e, ops, run, n, NULL);
	if (run != run_in)
		free(run);
	return 0;
}

/* Take up to max completed ops of cq into out[]. cq lock held. */
static int cq_take_locked(struct eng_cq *cq, struct eng_op **out, int max)
{
	int n = 0;

	while (cq->head && n < max) {
		out[n++] = cq->head;
		cq->head = cq->head->priv.next;
	}
	if (!cq->head)
		cq->tail = NULL;
	return n;
}

/* Run one queued slice of cq's own transfers here: 1, or 0 if none. */
static int cq_help(struct eng_cq *cq)
{
	struct eng_exec *x;
	struct eng_op *op;
	unsigned idx;

	if (!cq->e)
		return 0;
	x = &cq->e->exec;
	pthread_mutex_lock(&x->lock);
	op = x->stopping ? NULL : claim_locked(x, cq, &idx);
	pthread_mutex_unlock(&x->lock);
	if (!op)
		return 0;
	slice_exec(cq->e, op, idx, NULL);
	return 1;
}

/* Sleep on cq until something completes or deadline (lc_now_ns clock). */
static void cq_sleep_locked(struct eng_cq *cq, uint64_t deadline)
{
	struct timespec ts;

	lc_monotonic_at(&ts, deadline);
	while (!cq->head && lc_now_ns() < deadline) {
		if (deadline == ENG_NO_DEADLINE)
			pthread_cond_wait(&cq->cond, &cq->lock);
		else
			pthread_cond_timedwait(&cq->cond, &cq->lock, &ts);
	}
}

int eng_cq_wait(struct eng_cq *cq, struct eng_op **out, int max, unsigned timeout_ms)
{
	uint64_t deadline = timeout_ms == ENG_WAIT_FOREVER ? ENG_NO_DEADLINE
							   : lc_now_ns() + timeout_ms * 1000000ull;
	int n;

	if (!cq || !out || max <= 0)
		return 0;
	for (;;) {
		pthread_mutex_lock(&cq->lock);
		n = cq_take_locked(cq, out, max);
		pthread_mutex_unlock(&cq->lock);
		if (n)
			return n;
		/* A slice may take up to the I/O timeout: only a waiter with no
		 * limit of its own runs one. */
		if (timeout_ms == ENG_WAIT_FOREVER && cq_help(cq))
			continue;
		pthread_mutex_lock(&cq->lock);
		cq_sleep_locked(cq, deadline);
		n = cq_take_locked(cq, out, max);
		pthread_mutex_unlock(&cq->lock);
		if (n || lc_now_ns() >= deadline)
			return n;
	}
}

void eng_xfer_batch(struct eng_engine *e, struct eng_op *ops, int n)
{
	struct eng_op *done[16];
	int run_in[16], *run = run_in, first = -1;
	struct eng_cq cq;

	if (n <= 0)
		return;
	if ((n > 16 && !(run = malloc((size_t)n * sizeof(*run)))) || eng_cq_init(&cq)) {
		for (int i = 0; i < n; i++)
			ops[i].result = ENG_XFER_UNSENT; /* out of memory: nothing went */
		if (run != run_in)
			free(run);
		return;
	}
	cq.e = e;
	if (prepare_all(e, &cq, ops, n, run)) {
		while (!run[++first])
			;
		/* The first slice is ours: no hand-off for a lone transfer. */
		queue_ops(e, ops, run, n, &ops[first]);
		slice_exec(e, &ops[first], 0, NULL);
	}
	for (int got = 0; got < n;)
		got += eng_cq_wait(&cq, done, 16, ENG_WAIT_FOREVER);
	eng_cq_fini(&cq);
	if (run != run_in)
		free(run);
}
