/*
 * ha.c - lunarctl and high availability (SPEC §14): --master
 * etcd://h1:2379,h2:2379/C finds the leader's HTTP address in its etcd key
 * (etcd/leader.h) for the admin verbs, and "master status" prints what the
 * master says of the election on /admin/ha: role, leader, view, standbys.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl.h"
#include "etcd/etcd.h"
#include "etcd/leader.h"
#include "http_get.h"
#include "json.h"

#define ETCD_TIMEOUT_MS 3000 /* per etcd endpoint tried */

int ctl_master_url(struct ctl *x, const char *v)
{
	int rc = etcd_master_url_parse(v, x->etcd_urls, sizeof(x->etcd_urls), x->cluster);

	if (rc < 0) {
		fprintf(
		    stderr,
		    "lunarctl: bad --master %s (want etcd://HOST:PORT[,HOST:PORT...]/CLUSTER)\n",
		    v);
		x->etcd_urls[0] = '\0';
		return -1;
	}
	if (rc == 0)
		x->etcd_urls[0] = '\0';
	return rc;
}

int ctl_master_resolve(struct ctl *x)
{
	struct etcd_client *e = NULL;
	struct etcd_leader l;
	int rc = etcd_alloc(x->etcd_urls, ETCD_TIMEOUT_MS, NULL, &e);

	if (!rc)
		rc = etcd_leader_read(e, x->cluster, &l);
	etcd_free(e);
	if (rc == -ENOENT) {
		fprintf(stderr, "lunarctl: %s: no leader in cluster %s now (etcd %s)\n", x->verb,
			x->cluster, x->etcd_urls);
		return EXIT_FAIL;
	}
	if (rc) {
		fprintf(stderr, "lunarctl: %s: cannot read the leader of %s from etcd %s: %s\n",
			x->verb, x->cluster, x->etcd_urls, strerror(-rc));
		return rc == -EIO ? EXIT_NOCONN : EXIT_FAIL;
	}
	if (!l.http[0]) {
		fprintf(stderr,
			"lunarctl: %s: the leader %s of %s names no HTTP address (start it with "
			"--advertise-http or --http-port)\n",
			x->verb, l.rpc, x->cluster);
		return EXIT_FAIL;
	}
	snprintf(x->master_found, sizeof(x->master_found), "%s", l.http);
	x->master = x->master_found;
	return EXIT_OK;
}

/* The strings of array a, comma-separated, or "none known". */
static void print_list(const struct cj *a)
{
	size_t k = 0;

	for (size_t i = 0; a && a->type == CJ_ARRAY && i < a->n; i++)
		if (a->kid[i].type == CJ_STRING)
			printf("%s%s", k++ ? ", " : "", cj_str(&a->kid[i], "?"));
	printf("%s\n", k ? "" : "none known");
}

static void print_status(const struct ctl *x, const struct cj *root)
{
	uint64_t view = 0;

	cj_u64(cj_get(root, "view"), &view);
	if (cj_truth(cj_get(root, "ha")) != 1) {
		printf("ha: off (a single master)\nrole: leader\nview: 0\n");
		return;
	}
	printf("cluster: %s\n", cj_str(cj_get(root, "cluster_id"), "?"));
	printf("leader: %s", cj_str(cj_get(root, "leader"), ""));
	if (x->master_found[0])
		printf(" (%s)", x->master_found);
	printf("\nview: %" PRIu64 "\n", view);
	printf("role: %s (%s)%s\n", cj_str(cj_get(root, "role"), "?"),
	       cj_str(cj_get(root, "self"), "?"),
	       cj_truth(cj_get(root, "fenced")) == 1 ? ", fenced" : "");
	printf("standbys: ");
	print_list(cj_get(root, "standbys"));
}

int ctl_master_status(struct ctl *x)
{
	struct ctl_http_resp r;
	struct cj *root = NULL;
	int rc = ctl_admin_get(x, "/admin/ha", &r);

	if (rc)
		goto out;
	if (r.status != 200 || cj_parse(r.body, r.len, &root) || !cj_get(root, "role")) {
		fprintf(stderr, "lunarctl: %s: %s: HTTP %d, not a master's /admin/ha%s\n", x->verb,
			r.peer, r.status,
			r.status == 404 ? " (give --master HOST:PORT or etcd://HOSTS/CLUSTER)"
					: "");
		rc = EXIT_FAIL;
		goto out;
	}
	if (x->json)
		fwrite(r.body, 1, r.len, stdout);
	else
		print_status(x, root);
out:
	cj_free(root);
	ctl_http_resp_fini(&r);
	return rc;
}
