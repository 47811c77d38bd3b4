/*
 * sdnotify.h - systemd's service notification protocol, without libsystemd:
 * what Type=notify units wait for.
 */
#ifndef LUNAR_COMMON_SDNOTIFY_H
#define LUNAR_COMMON_SDNOTIFY_H

/*
 * lc_sd_notify - send state ("READY=1", "STOPPING=1") as one datagram to
 * the AF_UNIX socket $NOTIFY_SOCKET names (a path, or "@name" in the
 * abstract namespace). 0 when sent or when the variable is unset (not
 * started by systemd), else -errno (-EINVAL for a malformed name), logged
 * at warn. Never blocks: the datagram goes or fails at once.
 */
int lc_sd_notify(const char *state);

#endif /* LUNAR_COMMON_SDNOTIFY_H */
