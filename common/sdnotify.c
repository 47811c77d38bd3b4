/*
 * sdnotify.c - see sdnotify.h. The protocol is sd_notify(3)'s: a datagram of
 * newline-separated assignments to the socket in $NOTIFY_SOCKET.
 */
#include "sdnotify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

/* One datagram of state to the socket called name; 0 or -errno. */
static int send_state(const char *name, const char *state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	int fd, rc = 0;

	if ((name[0] != '/' && name[0] != '@') || len < 2 || len >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, name, len);
	if (name[0] == '@')
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (const struct sockaddr *)&sa,
		   (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)) < 0)
		rc = -errno;
	close(fd);
	return rc;
}

int lc_sd_notify(const char *state)
{
	const char *name = getenv("NOTIFY_SOCKET");
	int rc = name && *name ? send_state(name, state) : 0;

	if (rc)
		LC_WARN("systemd", "cannot send %s to $NOTIFY_SOCKET %s: %s", state, name,
			strerror(-rc));
	return rc;
}
