/*
 * disk.c - reads of a peer's disk tier over the data port (READ_DISK, wire
 * format in eng_int.h). The owner looks up the value's length, reads the
 * value through its disk_read callback into a buffer of that size, then
 * sends it; the client receives it straight into the caller's iovecs on a
 * pooled connection. A "not found" or a checksum failure is an answer,
 * not a broken connection.
 */
#include "eng_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "lunar.h"

/* Split the NUL-terminated name "tenant\0key" of len bytes (untrusted):
 * 0 and *key, or -EPROTO for a malformed one. */
static int split_name(const char *name, uint64_t len, const char **key)
{
	size_t tlen = strnlen(name, (size_t)len);

	if (!tlen || tlen + 1 >= len || strlen(name + tlen + 1) != len - tlen - 1)
		return -EPROTO;
	*key = name + tlen + 1;
	return 0;
}

/* Receive the name of a READ_DISK request into name (len bytes + NUL) and
 * split it; 0, or -EPROTO for a malformed one. */
static int recv_name(int fd, char *name, uint64_t len, uint64_t deadline, const char **key)
{
	int rc = eng_io_recv_buf(fd, name, (size_t)len, deadline);

	if (rc)
		return rc;
	name[len] = '\0';
	return split_name(name, len, key);
}

/* The value into a heap buffer of its own length (a peer's capacity, up to
 * ENG_DISK_READ_MAX, is only a bound); its length or a code. A value that
 * grew since its length was looked up is BUFFER_OVERFLOW, as is one
 * longer than cap. */
static int64_t read_value(struct eng_engine *e, const char *tenant, const char *key, uint64_t cap,
			  void **buf)
{
	struct iovec v;
	int64_t len, n;

	if (!e->cfg.disk_read || !e->cfg.disk_length)
		return LUNAR_ERR_OBJECT_NOT_FOUND;
	len = e->cfg.disk_length(e->cfg.disk_arg, tenant, key);
	if (len <= 0)
		return len;
	if ((uint64_t)len > cap)
		return LUNAR_ERR_BUFFER_OVERFLOW;
	*buf = malloc((size_t)len);
	if (!*buf)
		return LUNAR_ERR_INTERNAL;
	v.iov_base = *buf;
	v.iov_len = (size_t)len;
	n = e->cfg.disk_read(e->cfg.disk_arg, tenant, key, &v, 1);
	return n > len ? LUNAR_ERR_INTERNAL : n;
}

/* The request's name: read here (keyless), or already read and MAC'd
 * (keyed, into name); split at its NUL. 0, or < 0 to close. */
static int disk_name(const struct eng_srv_req *q, const struct eng_wire_req *req, const char *given,
		     char *name, const char **key, uint64_t deadline_ns)
{
	int rc = 0;

	if (req->offset < 3 || req->offset > ENG_DISK_NAME_MAX || !req->length ||
	    req->length > ENG_DISK_READ_MAX) {
		eng_send_rep(q, LUNAR_ERR_INVALID_PARAMS, 0, 0, deadline_ns);
		return -EPROTO;
	}
	if (given) {
		memcpy(name, given, (size_t)req->offset);
		name[req->offset] = '\0';
		if (split_name(name, req->offset, key))
			rc = -EPROTO;
	} else {
		rc = recv_name(q->fd, name, req->offset, deadline_ns, key);
	}
	if (rc == -EPROTO)
		eng_send_rep(q, LUNAR_ERR_INVALID_KEY, 0, 0, deadline_ns);
	return rc;
}

int eng_disk_serve(struct eng_engine *e, const struct eng_srv_req *q,
		   const struct eng_wire_req *req, const char *given, uint64_t deadline_ns)
{
	char name[ENG_DISK_NAME_MAX + 1];
	const char *key;
	void *buf = NULL;
	int64_t n;
	int rc;

	rc = disk_name(q, req, given, name, &key, deadline_ns);
	if (rc)
		return rc;
	n = read_value(e, name, key, req->length, &buf);
	if (n <= 0) {
		free(buf);
		return eng_send_rep(q, n < 0 ? (int32_t)n : LUNAR_ERR_INTERNAL, 0, 0, deadline_ns);
	}
	rc = eng_send_rep(q, 0, (uint64_t)n, MSG_MORE, deadline_ns);
	if (!rc)
		rc = eng_io_send_buf(q->fd, buf, (size_t)n, deadline_ns);
	free(buf);
	return rc;
}

/* One READ_DISK exchange, for eng_tcp_run. */
struct disk_call {
	uint64_t id;
	const char *name;
	uint64_t nlen, cap;
	const struct iovec *iov;
	int iovcnt;
	const struct eng_cap *grant;
	uint64_t deadline_ns;
	int64_t result;
};

/* Whether status is an answer an owner gives to a good READ_DISK (after
 * which the connection stays usable): a disk miss, a value longer than the
 * capacity, a bad record or read, or the owner's own failure. */
static int disk_answer(int32_t status)
{
	return status == LUNAR_ERR_OBJECT_NOT_FOUND || status == LUNAR_ERR_BUFFER_OVERFLOW ||
	       status == LUNAR_ERR_CHECKSUM_MISMATCH || status == LUNAR_ERR_FILE_READ_FAIL ||
	       status == LUNAR_ERR_INTERNAL;
}

static int disk_conn(void *arg, struct eng_cconn *conn, int *replied)
{
	struct disk_call *d = arg;
	struct eng_wire_req req = {
	    .magic = ENG_WIRE_REQ_MAGIC,
	    .op = ENG_OP_READ_DISK,
	    .offset = d->nlen,
	    .length = d->cap,
	    .id = d->id,
	};
	struct eng_wire_rep rep;
	struct eng_iovc c;
	uint64_t ctr;
	int rc;

	*replied = 0;
	rc = eng_send_req(conn, &req, d->grant, 0, d->name, d->nlen, 0, d->deadline_ns, &ctr);
	if (!rc)
		rc = eng_recv_rep(conn, ctr, &rep, d->deadline_ns, replied);
	if (rc)
		return rc;
	if (rep.magic != ENG_WIRE_REP_MAGIC || rep.id != d->id || rep.length > d->cap ||
	    rep.status > 0 || (rep.status && rep.length))
		return -EPROTO;
	if (rep.status && !disk_answer(rep.status))
		return eng_refusal(rep.status); /* a refusal: the peer closes */
	d->result = rep.status ? rep.status : (int64_t)rep.length;
	if (rep.status || !rep.length)
		return rep.status ? 0 : -EPROTO;
	eng_iovc_init(&c, d->iov, d->iovcnt, 0, rep.length);
	return eng_io_recv(conn->fd, &c, d->deadline_ns);
}

/* The capacity of iov, 0 when the list is unusable. */
static uint64_t iov_total(const struct iovec *iov, int iovcnt)
{
	uint64_t total = 0;

	if (!iov || iovcnt <= 0)
		return 0;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > ENG_DISK_READ_MAX - total)
			return ENG_DISK_READ_MAX;
		total += iov[i].iov_len;
	}
	return total;
}

static int64_t remote_read(struct eng_engine *e, const char *endpoint, const char *tenant,
			   const char *key, const struct iovec *iov, int iovcnt, uint64_t cap,
			   const struct eng_cap *grant)
{
	size_t tl = strlen(tenant), kl = strlen(key);
	struct disk_call d = {
	    .nlen = tl + 1 + kl, .cap = cap, .iov = iov, .iovcnt = iovcnt, .grant = grant};
	char *name;
	int rc;

	if (!tl || !kl || d.nlen > ENG_DISK_NAME_MAX)
		return LUNAR_ERR_INVALID_PARAMS;
	if (e->keyed && !grant)
		return LUNAR_ERR_TRANSFER_FAIL; /* the owner would refuse it */
	name = malloc(d.nlen);
	if (!name)
		return LUNAR_ERR_INTERNAL;
	memcpy(name, tenant, tl + 1);
	memcpy(name + tl + 1, key, kl);
	d.name = name;
	d.id = atomic_fetch_add(&e->next_id, 1);
	d.deadline_ns = lc_now_ns() + e->timeout_ns;
	rc = eng_tcp_run(e, endpoint, d.deadline_ns, disk_conn, &d, NULL, NULL);
	free(name);
	if (rc) {
		LC_DEBUG(ENG_LOG, "disk read of %s from %s failed: %s", key, endpoint,
			 strerror(-rc));
		return eng_xfer_failed(rc, 1);
	}
	return d.result;
}

int64_t eng_xfer_disk(struct eng_engine *e, const char *endpoint, const char *tenant,
		      const char *key, const struct iovec *iov, int iovcnt,
		      const struct eng_cap *grant, uint32_t *crc)
{
	uint64_t cap = iov_total(iov, iovcnt);
	int64_t n;

	if (!e || !endpoint || !tenant || !key || !cap)
		return LUNAR_ERR_TRANSFER_FAIL;
	if (!strcmp(endpoint, e->endpoint))
		n = e->cfg.disk_read ? e->cfg.disk_read(e->cfg.disk_arg, tenant, key, iov, iovcnt)
				     : LUNAR_ERR_OBJECT_NOT_FOUND;
	else
		n = remote_read(e, endpoint, tenant, key, iov, iovcnt, cap, grant);
	if (n > 0 && crc)
		*crc = eng_iov_crc(iov, iovcnt, 0, (uint64_t)n);
	return n;
}
