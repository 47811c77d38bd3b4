/*
 * conf.h - the daemons' optional config file (SPEC §10: the flags' names,
 * in a file). One setting a line:
 *
 *     # a comment
 *     segment-size = 4GiB
 *     master tcp://10.0.0.2:50051
 *     embedded-master
 *
 * a flag's name without its dashes, then its value after '=' or blanks (a
 * value in double quotes keeps its blanks); a name alone is a switch. Each
 * setting becomes the command-line argument "--name=value" (or "--name"),
 * which the daemon parses as it parses its command line.
 */
#ifndef LUNAR_COMMON_CONF_H
#define LUNAR_COMMON_CONF_H

#include <stddef.h>

#define LC_CONF_MAX_BYTES (1u << 20) /* a larger file is refused */

struct lc_conf {
	char **args;	 /* "--name=value" or "--name", heap copies */
	unsigned *lines; /* args[i] came from line lines[i] */
	size_t n;
};

/*
 * lc_conf_read - read path into *c. 0, or -1 with a message naming the file
 * (and the line, for a malformed one) in err. The arguments live until
 * lc_conf_free: flags may point into them.
 */
int lc_conf_read(const char *path, struct lc_conf *c, char *err, size_t errlen);
void lc_conf_free(struct lc_conf *c);
/*
 * lc_conf_path - the value of "--config PATH" or "--config=PATH" in
 * argv[1..argc), or NULL. *why is set (and NULL returned) when --config is
 * last without its value, or given twice.
 */
const char *lc_conf_path(int argc, char **argv, const char **why);

#endif /* LUNAR_COMMON_CONF_H */
