/*
 * key.c - the cluster key file: made with auth_keygen (32 random bytes,
 * mode 0600, never over an existing file), read with auth_key_load, which
 * refuses a file others may read, as ssh refuses a private key. Also the
 * library's start-up and its source of randomness.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "lunar.h"

int auth_init(void)
{
	return sodium_init() < 0 ? LUNAR_ERR_INTERNAL : 0;
}

void auth_random(void *buf, size_t len)
{
	randombytes_buf(buf, len);
}

void auth_key_wipe(struct auth_key *k)
{
	if (k)
		sodium_memzero(k, sizeof(*k));
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int auth_keygen(const char *path)
{
	struct auth_key k;
	int fd, rc;

	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	auth_random(k.k, sizeof(k.k));
	rc = write_all(fd, k.k, sizeof(k.k));
	auth_key_wipe(&k);
	if (!rc && fsync(fd))
		rc = -errno;
	close(fd);
	if (rc)
		unlink(path); /* never leave a short key behind */
	return rc;
}

int auth_key_load(const char *path, struct auth_key *out, char *why, size_t cap)
{
	struct stat st;
	ssize_t n;
	int fd, rc = 0;

	snprintf(why, cap, "ok");
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		rc = -errno;
		snprintf(why, cap, "cannot open %s: %m", path);
		return rc;
	}
	if (fstat(fd, &st)) {
		rc = -errno;
		snprintf(why, cap, "cannot stat %s: %m", path);
	} else if (!S_ISREG(st.st_mode)) {
		rc = -EINVAL;
		snprintf(why, cap, "%s is not a regular file", path);
	} else if (st.st_mode & 077) {
		rc = -EPERM;
		snprintf(why, cap, "%s is accessible by group or others (mode %04o); chmod 600 it",
			 path, (unsigned)(st.st_mode & 07777));
	} else if (st.st_size != AUTH_KEY_BYTES) {
		rc = -EINVAL;
		snprintf(why, cap, "%s holds %lld bytes, a cluster key is %d (lunarctl keygen)",
			 path, (long long)st.st_size, AUTH_KEY_BYTES);
	}
	if (!rc) {
		n = read(fd, out->k, sizeof(out->k));
		if (n != (ssize_t)sizeof(out->k)) {
			rc = n < 0 ? -errno : -EIO;
			snprintf(why, cap, "cannot read %s", path);
			auth_key_wipe(out);
		}
	}
	close(fd);
	return rc;
}
