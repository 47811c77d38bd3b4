/*
 * admin_http.h - the master's HTTP face (SPEC §11): Prometheus /metrics,
 * /health, /ready and JSON admin queries under /admin/. Served by
 * lunar-master on --http-port, and by lunar-proxy --embedded-master on its
 * own HTTP port.
 */
#ifndef LUNAR_MASTER_ADMIN_HTTP_H
#define LUNAR_MASTER_ADMIN_HTTP_H

struct lc_http_reply;
struct mst_master;

/*
 * mst_http_handle - an lc_http handler; arg is the struct mst_master.
 *   /metrics                          Prometheus text
 *   /health                           200 "ok" while the process serves
 *   /ready                            200 once a segment is mounted, else 503
 *   /admin/keys?tenant=&pattern=&limit=   ListKeys as JSON
 *   /admin/segments, /admin/clients       ListSegments, ListClients
 *   /admin/stat?tenant=&key=              StatKey
 *   /admin/ha                             role, leader, view (JSON; SPEC §14)
 * Returns 1 when path is not one of these (the caller may serve it or 404),
 * 0 when rep holds the answer.
 */
int mst_http_handle(void *arg, const char *method, const char *path, const char *query,
		    struct lc_http_reply *rep);

#endif /* LUNAR_MASTER_ADMIN_HTTP_H */
