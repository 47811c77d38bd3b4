/*
 * leader.c - the leader key's name and value and the etcd:// form of
 * --master (leader.h). The value is read by every node and may be written
 * by anyone with etcd access: decoded with the bounded extractor, addresses
 * kept only when they are plain printable ASCII.
 */
#include "etcd/leader.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Printable ASCII without quotes, backslashes or spaces. */
static int addr_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] <= 0x20 || s[i] >= 0x7f || s[i] == '"' || s[i] == '\\')
			return 0;
	return 1;
}

static int cluster_ok(const char *c)
{
	size_t n = strlen(c);

	return n && n < ETCD_CLUSTER_MAX && !strchr(c, '/') && addr_ok(c, n);
}

int etcd_master_url_parse(const char *s, char *urls, size_t n, char *cluster)
{
	const char *p, *slash;
	size_t used = 0;

	if (strncmp(s, "etcd://", 7))
		return 0;
	p = s + 7;
	slash = strchr(p, '/');
	if (!slash || slash == p || !cluster_ok(slash + 1))
		return -EINVAL;
	snprintf(cluster, ETCD_CLUSTER_MAX, "%s", slash + 1);
	while (p < slash) {
		size_t len = strcspn(p, ",/");
		int w;

		if (!len || !addr_ok(p, len))
			return -EINVAL;
		w = snprintf(urls + used, n - used, "%shttp://%.*s", used ? "," : "", (int)len, p);
		if (w < 0 || (size_t)w >= n - used)
			return -EINVAL;
		used += (size_t)w;
		p += len;
		p += *p == ',';
	}
	return used ? 1 : -EINVAL;
}

int etcd_leader_key(const char *cluster, char *buf, size_t n)
{
	int w = snprintf(buf, n, "/lunar/%s/leader", cluster);

	return w < 0 || (size_t)w >= n ? -ENOSPC : 0;
}

int etcd_leader_encode(const char *rpc, const char *http, char *buf, size_t n)
{
	int w;

	if (!http)
		http = "";
	if (!addr_ok(rpc, strlen(rpc)) || !addr_ok(http, strlen(http)))
		return -EINVAL;
	w = snprintf(buf, n, "{\"rpc\":\"%s\",\"http\":\"%s\"}", rpc, http);
	return w < 0 || (size_t)w >= n ? -ENOSPC : w;
}

/* The string member name of the JSON object s into dst; "" when absent. */
static int member(const char *s, size_t n, const char *name, char *dst)
{
	const char *path[] = {name}, *v;
	size_t vl;
	int rc = etcd_json_find(s, n, path, 1, &v, &vl);

	dst[0] = '\0';
	if (rc == -ENOENT)
		return 0;
	if (rc || vl < 2 || v[0] != '"' || vl - 2 >= ETCD_ADDR_MAX || !addr_ok(v + 1, vl - 2))
		return -EPROTO;
	memcpy(dst, v + 1, vl - 2);
	dst[vl - 2] = '\0';
	return 0;
}

int etcd_leader_decode(const char *value, size_t len, struct etcd_leader *out)
{
	out->rpc[0] = out->http[0] = '\0';
	if (len && value[0] == '{')
		return member(value, len, "rpc", out->rpc) || member(value, len, "http", out->http)
			   ? -EPROTO
			   : 0;
	if (len >= ETCD_ADDR_MAX || !addr_ok(value, len))
		return -EPROTO;
	memcpy(out->rpc, value, len);
	out->rpc[len] = '\0';
	return 0;
}

int etcd_leader_read(struct etcd_client *e, const char *cluster, struct etcd_leader *out)
{
	struct etcd_kv kv;
	char key[ETCD_CLUSTER_MAX + 32];
	int rc;

	if (etcd_leader_key(cluster, key, sizeof(key)))
		return -EINVAL;
	if ((rc = etcd_get(e, key, &kv)))
		return rc;
	if ((rc = etcd_leader_decode(kv.value, kv.value_len, out)))
		return rc;
	out->view = (uint64_t)kv.create_rev;
	return 0;
}

int etcd_member_key(const char *cluster, const char *rpc, char *buf, size_t n)
{
	int w;

	if (!addr_ok(rpc, strlen(rpc)))
		return -EINVAL;
	w = snprintf(buf, n, "/lunar/%s/members/%s", cluster, rpc);
	return w < 0 || (size_t)w >= n ? -ENOSPC : 0;
}

int etcd_members_read(struct etcd_client *e, const char *cluster, struct etcd_leader *out,
		      size_t max)
{
	struct etcd_kv *kvs;
	char prefix[ETCD_CLUSTER_MAX + 32];
	size_t k = 0;
	int n;

	if (!max ||
	    snprintf(prefix, sizeof(prefix), "/lunar/%s/members/", cluster) >= (int)sizeof(prefix))
		return -EINVAL;
	if (!(kvs = calloc(max, sizeof(*kvs))))
		return -ENOMEM;
	n = etcd_list(e, prefix, kvs, max);
	for (int i = 0; i < n; i++) /* a value that does not parse is skipped */
		if (!etcd_leader_decode(kvs[i].value, kvs[i].value_len, &out[k]) && out[k].rpc[0]) {
			out[k].view = 0;
			k++;
		}
	free(kvs);
	return n < 0 ? n : (int)k;
}
