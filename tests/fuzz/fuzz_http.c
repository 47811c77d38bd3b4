/*
 * fuzz_http.c - libFuzzer target for the embedded HTTP server's request
 * parsing (common/http.c, included for its static serve()). Each input is
 * what a peer sends on one connection: it is written into a socket pair,
 * the sending side shut down, and serve() runs on the other end exactly as
 * a connection thread would - head, request line, Authorization header,
 * the handler (which reads query parameters the way /admin does) and the
 * answer. The head buffer is the connection's own, so ASan sees any read
 * past it; the reply must be a whole HTTP/1.x status line.
 */
#include "../../common/http.c"

#include <sys/socket.h>
#include "fuzz_check.h"

static struct lc_http server;

/* What an /admin page does with a request: its parameters, then a body. */
static int handler(void *arg, const struct lc_http_req *req, struct lc_http_reply *rep)
{
	static const char *const names[] = {"tenant", "key", "pattern", "limit", ""};
	char val[512];

	(void)arg;
	FZ_CHECK(req->path && req->path[0] == '/' && req->query && req->method);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int n = lc_http_query_get(req->query, names[i], val, sizeof(val));

		FZ_CHECK(n < 0 || ((size_t)n < sizeof(val) && strlen(val) <= (size_t)n));
	}
	if (!strcmp(req->path, "/404"))
		return 1;
	return lc_http_reply_printf(rep, "path %s\nquery %s\n", req->path, req->query);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	signal(SIGPIPE, SIG_IGN);
	server.fn = handler;
	if (pipe(server.wake))
		abort();
	pthread_mutex_init(&server.lock, NULL);
	pthread_cond_init(&server.done, NULL);
	pthread_mutex_init(&server.fn_lock, NULL);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct http_conn *c;
	struct sockaddr_in *peer;
	char reply[512];
	int sv[2], sndbuf = 1 << 20;
	ssize_t n;

	/* More than a head holds is answered 431 after LC_HTTP_MAX_HEAD bytes. */
	if (size > 2 * LC_HTTP_MAX_HEAD)
		return 0;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
		abort();
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	if (size && send(sv[0], data, size, MSG_NOSIGNAL) != (ssize_t)size)
		abort();
	shutdown(sv[0], SHUT_WR);
	c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->h = &server;
	c->fd = sv[1];
	peer = (struct sockaddr_in *)&c->peer;
	peer->sin_family = AF_INET;
	peer->sin_addr.s_addr = htonl(size % 2 ? 0x7f000001u : 0x0a000001u);
	serve(c); /* closes sv[1] */
	free(c);
	n = recv(sv[0], reply, sizeof(reply) - 1, MSG_DONTWAIT);
	if (n > 0) {
		reply[n] = '\0';
		FZ_CHECK(!strncmp(reply, "HTTP/1.", 7) && strstr(reply, "\r\n"));
	}
	close(sv[0]);
	return 0;
}
