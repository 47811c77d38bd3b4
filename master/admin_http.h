/*
 * admin_http.h - the master's HTTP face (SPEC §11): Prometheus /metrics,
 * /health, /ready and JSON admin queries under /admin/. Served by
 * lunar-master on --http-port, and by lunar-proxy --embedded-master on its
 * own HTTP port.
 */
#ifndef LUNAR_MASTER_ADMIN_HTTP_H
#define LUNAR_MASTER_ADMIN_HTTP_H

struct auth_http_gate;
struct lc_http_reply;
struct lc_http_req;
struct mst_master;

/* What mst_http_handle serves: a master, and the gate of its /admin pages. */
struct mst_http {
	struct mst_master *m;
	struct auth_http_gate *gate;
};

/*
 * mst_http_handle - an lc_http handler; arg is a struct mst_http whose
 * master and gate outlive the server.
 *   /metrics                          Prometheus text, with the gate's counter
 *   /health                           200 "ok" while the process serves
 *   /ready                            200 once a segment is mounted, else 503
 *   /admin/keys?tenant=&pattern=&limit=   ListKeys as JSON
 *   /admin/segments, /admin/clients       ListSegments, ListClients
 *   /admin/stat?tenant=&key=              StatKey
 * Every path under /admin is first put to the gate (auth_http_gate_admit):
 * a refused caller gets 403 whether or not the page exists.
 * Returns 1 when path is not one of these (the caller may serve it or 404),
 * 0 when rep holds the answer.
 */
int mst_http_handle(void *arg, const struct lc_http_req *req, struct lc_http_reply *rep);

#endif /* LUNAR_MASTER_ADMIN_HTTP_H */
