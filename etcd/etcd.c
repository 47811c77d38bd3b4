/*
 * etcd.c - the etcd v3 client of etcd.h: one libcurl easy handle (its
 * connections reused), JSON POSTs to the gateway's /v3/lease/grant,
 * /v3/lease/keepalive, /v3/lease/revoke, /v3/kv/txn, /v3/kv/put and
 * /v3/kv/range, and
 * an endpoint list walked from the last one that answered.
 */
#include "etcd/etcd.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "atomic.h"
#include "log.h"

#define KEY_MAX 512 /* bytes of a key this client writes */

struct etcd_client {
	CURL *curl;
	struct curl_slist *hdrs;
	char *urls[ETCD_ENDPOINTS_MAX];
	unsigned n, cur;
	unsigned timeout_ms;
	const int *cancel;
	char *buf; /* the last reply, NUL terminated */
	size_t len;
	int overflow;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_init_once(void)
{
	curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
	struct etcd_client *e = arg;
	size_t n = size * nmemb;

	if (n > ETCD_REPLY_MAX - e->len) {
		e->overflow = 1;
		return 0; /* curl aborts the transfer */
	}
	memcpy(e->buf + e->len, p, n);
	e->len += n;
	e->buf[e->len] = '\0';
	return n;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	const struct etcd_client *e = arg;

	return e->cancel && lc_load_acquire(e->cancel);
}

/* Split urls into e->urls; each must be http:// or https:// and not empty. */
static int split_urls(struct etcd_client *e, const char *urls)
{
	const char *p = urls;

	while (*p) {
		size_t len = strcspn(p, ",");

		while (len && p[len - 1] == '/')
			len--; /* "http://h:2379/" and "http://h:2379" alike */
		if (e->n == ETCD_ENDPOINTS_MAX || len < 8 || len > 1024 ||
		    (strncmp(p, "http://", 7) && strncmp(p, "https://", 8)))
			return -EINVAL;
		if (!(e->urls[e->n++] = strndup(p, len)))
			return -ENOMEM;
		p += strcspn(p, ",");
		p += *p == ',';
	}
	return e->n ? 0 : -EINVAL;
}

int etcd_alloc(const char *urls, unsigned timeout_ms, const int *cancel, struct etcd_client **out)
{
	struct etcd_client *e = calloc(1, sizeof(*e));
	int rc = -ENOMEM;

	pthread_once(&curl_once, curl_init_once);
	if (!e || !curl_ok)
		goto err;
	e->timeout_ms = timeout_ms ? timeout_ms : 1000;
	e->cancel = cancel;
	if ((rc = split_urls(e, urls)))
		goto err;
	rc = -ENOMEM;
	e->buf = malloc(ETCD_REPLY_MAX + 1);
	e->curl = curl_easy_init();
	e->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (!e->buf || !e->curl || !e->hdrs)
		goto err;
	*out = e;
	return 0;
err:
	etcd_free(e);
	return rc;
}

void etcd_free(struct etcd_client *e)
{
	if (!e)
		return;
	if (e->curl)
		curl_easy_cleanup(e->curl);
	curl_slist_free_all(e->hdrs);
	for (unsigned i = 0; i < e->n; i++)
		free(e->urls[i]);
	free(e->buf);
	free(e);
}

const char *etcd_endpoint(const struct etcd_client *e)
{
	return e->urls[e->cur];
}

static void setup(struct etcd_client *e, const char *url, const char *body)
{
	CURL *c = e->curl;

	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->hdrs);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, e);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
}

/* POST body to one endpoint. 0 with a 200 reply in e->buf; -ENOENT for the
 * gateway's NotFound (gRPC code 5); -EIO for anything else; -ECANCELED. */
static int post_one(struct etcd_client *e, const char *base, const char *path, const char *body)
{
	static const char *const code[] = {"code"};
	char url[1100];
	long http = 0;
	int64_t grpc = 0;
	CURLcode cc;

	snprintf(url, sizeof(url), "%s%s", base, path);
	e->len = 0;
	e->buf[0] = '\0';
	e->overflow = 0;
	setup(e, url, body);
	cc = curl_easy_perform(e->curl);
	if (cc == CURLE_ABORTED_BY_CALLBACK)
		return -ECANCELED;
	if (cc != CURLE_OK) {
		LC_DEBUG("etcd", "%s: %s%s", url, curl_easy_strerror(cc),
			 e->overflow ? " (reply too long)" : "");
		return -EIO;
	}
	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &http);
	if (http == 200)
		return 0;
	if (!etcd_json_int(e->buf, e->len, code, 1, &grpc) && grpc == 5)
		return -ENOENT;
	LC_DEBUG("etcd", "%s: HTTP %ld: %.200s", url, http, e->buf);
	return -EIO;
}

/* POST to the endpoints in turn, from the last one that answered. */
static int post(struct etcd_client *e, const char *path, const char *body)
{
	for (unsigned k = 0; k < e->n; k++) {
		unsigned i = (e->cur + k) % e->n;
		int rc;

		if (e->cancel && lc_load_acquire(e->cancel))
			return -ECANCELED;
		rc = post_one(e, e->urls[i], path, body);

		if (rc == -EIO)
			continue;
		e->cur = i;
		return rc;
	}
	e->cur = (e->cur + 1) % e->n; /* next time, start with another one */
	return -EIO;
}

int etcd_lease_grant(struct etcd_client *e, int64_t ttl_s, int64_t *id, int64_t *granted_s)
{
	static const char *const pid[] = {"ID"}, *const pttl[] = {"TTL"}, *const perr[] = {"error"};
	const char *v;
	size_t vl;
	char body[64];
	int rc;

	snprintf(body, sizeof(body), "{\"TTL\":%lld}", (long long)ttl_s);
	if ((rc = post(e, "/v3/lease/grant", body)))
		return rc == -ENOENT ? -EIO : rc;
	if (!etcd_json_find(e->buf, e->len, perr, 1, &v, &vl) && vl > 2)
		return -EIO; /* LeaseGrantResponse.error: etcd refused */
	if (etcd_json_int(e->buf, e->len, pid, 1, id) ||
	    etcd_json_int(e->buf, e->len, pttl, 1, granted_s) || *id == 0 || *granted_s <= 0)
		return -EPROTO;
	return 0;
}

int etcd_lease_keepalive(struct etcd_client *e, int64_t id, int64_t *ttl_s)
{
	static const char *const pttl[] = {"result", "TTL"}, *const pres[] = {"result"};
	const char *v;
	size_t vl;
	char body[64];
	int rc;

	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)id);
	if ((rc = post(e, "/v3/lease/keepalive", body)))
		return rc == -ENOENT ? -EIO : rc;
	/* A stream of one message; an error inside it is {"error": ...}. */
	if (etcd_json_find(e->buf, e->len, pres, 1, &v, &vl))
		return -EIO;
	rc = etcd_json_int(e->buf, e->len, pttl, 2, ttl_s);
	if (rc == -ENOENT) { /* no TTL: etcd does not know the lease any more */
		*ttl_s = 0;
		return 0;
	}
	return rc || *ttl_s < 0 ? -EPROTO : 0;
}

int etcd_lease_revoke(struct etcd_client *e, int64_t id)
{
	char body[64];

	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)id);
	return post(e, "/v3/lease/revoke", body);
}

int etcd_create(struct etcd_client *e, const char *key, const char *value, int64_t lease,
		int64_t *create_rev)
{
	static const char *const pok[] = {"succeeded"}, *const prev[] = {"header", "revision"};
	char k64[KEY_MAX * 4 / 3 + 8], v64[ETCD_VALUE_MAX * 4 / 3 + 8], *body;
	int rc, ok;

	if (etcd_b64_encode(key, strlen(key), k64, sizeof(k64)) < 0 ||
	    etcd_b64_encode(value, strlen(value), v64, sizeof(v64)) < 0)
		return -EINVAL;
	if (asprintf(&body,
		     "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"result\":\"EQUAL\","
		     "\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"%s\","
		     "\"value\":\"%s\",\"lease\":\"%lld\"}}]}",
		     k64, k64, v64, (long long)lease) < 0)
		return -ENOMEM;
	rc = post(e, "/v3/kv/txn", body);
	free(body);
	if (rc)
		return rc == -ENOENT ? -EIO : rc;
	if ((ok = etcd_json_bool(e->buf, e->len, pok, 1)) < 0)
		return -EPROTO;
	if (!ok)
		return -EEXIST;
	/* The put is the transaction's only write: the key was created at the
	 * revision the transaction made. */
	return etcd_json_int(e->buf, e->len, prev, 2, create_rev) || *create_rev <= 0 ? -EPROTO : 0;
}

/* Read kvs[i] of a range reply into kv. */
static int read_kv(const struct etcd_client *e, size_t i, struct etcd_kv *kv)
{
	char idx[24];
	const char *const pval[] = {"kvs", idx, "value"};
	const char *const pcr[] = {"kvs", idx, "create_revision"};
	const char *const pmr[] = {"kvs", idx, "mod_revision"};
	const char *const plea[] = {"kvs", idx, "lease"};
	const char *v;
	size_t vl;
	int n, rc;

	snprintf(idx, sizeof(idx), "#%zu", i);
	if ((rc = etcd_json_int(e->buf, e->len, pcr, 3, &kv->create_rev)))
		return rc; /* -ENOENT: no kvs, no key */
	if (etcd_json_int(e->buf, e->len, pmr, 3, &kv->mod_rev))
		return -EPROTO;
	if ((rc = etcd_json_int(e->buf, e->len, plea, 3, &kv->lease)) == -ENOENT)
		kv->lease = 0;
	else if (rc)
		return -EPROTO;
	kv->value_len = 0;
	rc = etcd_json_find(e->buf, e->len, pval, 3, &v, &vl);
	if (rc == -ENOENT) { /* an empty value is left out */
		kv->value[0] = '\0';
		return 0;
	}
	if (rc || vl < 2 || v[0] != '"')
		return -EPROTO;
	n = etcd_b64_decode(v + 1, vl - 2, kv->value, ETCD_VALUE_MAX);
	if (n < 0)
		return -EPROTO;
	kv->value[n] = '\0';
	kv->value_len = (size_t)n;
	return 0;
}

int etcd_get(struct etcd_client *e, const char *key, struct etcd_kv *kv)
{
	char k64[KEY_MAX * 4 / 3 + 8], body[sizeof(k64) + 16];
	int rc;

	if (etcd_b64_encode(key, strlen(key), k64, sizeof(k64)) < 0)
		return -EINVAL;
	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k64);
	if ((rc = post(e, "/v3/kv/range", body)))
		return rc == -ENOENT ? -EIO : rc;
	return read_kv(e, 0, kv);
}

int etcd_put(struct etcd_client *e, const char *key, const char *value, int64_t lease)
{
	char k64[KEY_MAX * 4 / 3 + 8], v64[ETCD_VALUE_MAX * 4 / 3 + 8], *body;
	int rc;

	if (etcd_b64_encode(key, strlen(key), k64, sizeof(k64)) < 0 ||
	    etcd_b64_encode(value, strlen(value), v64, sizeof(v64)) < 0)
		return -EINVAL;
	if (asprintf(&body, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%lld\"}", k64, v64,
		     (long long)lease) < 0)
		return -ENOMEM;
	rc = post(e, "/v3/kv/put", body);
	free(body);
	/* A put to a lease etcd does not know is an error status: -EIO. */
	return rc == -ENOENT ? -EIO : rc;
}

int etcd_list(struct etcd_client *e, const char *prefix, struct etcd_kv *kvs, size_t max)
{
	char end[KEY_MAX], k64[KEY_MAX * 4 / 3 + 8], e64[sizeof(k64)], body[2 * sizeof(k64) + 64];
	size_t n = strlen(prefix), i;
	int rc;

	if (!n || n >= KEY_MAX || (unsigned char)prefix[n - 1] == 0xff || !max || max > 1024)
		return -EINVAL;
	memcpy(end, prefix, n + 1);
	end[n - 1]++; /* every key that starts with prefix sorts below end */
	if (etcd_b64_encode(prefix, n, k64, sizeof(k64)) < 0 ||
	    etcd_b64_encode(end, n, e64, sizeof(e64)) < 0)
		return -EINVAL;
	snprintf(body, sizeof(body), "{\"key\":\"%s\",\"range_end\":\"%s\",\"limit\":%zu}", k64,
		 e64, max);
	if ((rc = post(e, "/v3/kv/range", body)))
		return rc == -ENOENT ? -EIO : rc;
	for (i = 0; i < max; i++) {
		rc = read_kv(e, i, &kvs[i]);
		if (rc == -ENOENT)
			break;
		if (rc)
			return rc;
	}
	return (int)i;
}
