/*
 * conf.c - see conf.h.
 */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *trim(char *s)
{
	char *end;

	while (isspace((unsigned char)*s))
		s++;
	end = s + strlen(s);
	while (end > s && isspace((unsigned char)end[-1]))
		*--end = '\0';
	return s;
}

/* One line, comments and blank ones skipped: its argument in *arg (NULL
 * for none), or a reason it is malformed. */
static const char *line_arg(char *line, char **arg)
{
	char *s = trim(line), *name = s, *v;
	int valued = 0;
	size_t n;

	*arg = NULL;
	if (!*s || *s == '#')
		return NULL;
	if (!islower((unsigned char)*s))
		return "a setting starts with a flag's name (lower case, no dashes)";
	while (islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '-')
		s++;
	n = (size_t)(s - name);
	v = trim(s);
	if (*v == '=') {
		v = trim(v + 1);
		valued = 1; /* "name =" sets an empty value, refused as such */
	} else if (v == s && *s) {
		return "a flag's name is letters, digits and dashes";
	}
	if (*v == '"') {
		size_t len = strlen(v);

		if (len < 2 || v[len - 1] != '"')
			return "a quoted value needs its closing quote";
		v[len - 1] = '\0';
		v++;
		valued = 1;
	}
	if (asprintf(arg, *v || valued ? "--%.*s=%s" : "--%.*s", (int)n, name, v) < 0) {
		*arg = NULL;
		return "out of memory";
	}
	return NULL;
}

static int add(struct lc_conf *c, char *arg, unsigned line)
{
	char **a = realloc(c->args, (c->n + 1) * sizeof(*a));
	unsigned *l;

	if (a)
		c->args = a;
	l = a ? realloc(c->lines, (c->n + 1) * sizeof(*l)) : NULL;
	if (!l)
		return -1;
	c->lines = l;
	c->args[c->n] = arg;
	c->lines[c->n++] = line;
	return 0;
}

/* The reason path (open as f) cannot be a config file, or NULL. */
static const char *file_refused(FILE *f)
{
	struct stat st;

	if (fstat(fileno(f), &st))
		return strerror(errno);
	if (!S_ISREG(st.st_mode))
		return "not a regular file";
	if (st.st_size > (off_t)LC_CONF_MAX_BYTES)
		return "larger than 1 MiB";
	return NULL;
}

int lc_conf_read(const char *path, struct lc_conf *c, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	const char *why = NULL;
	char *buf = NULL, *arg;
	size_t cap = 0, total = 0;
	unsigned line = 0;
	ssize_t n;

	*c = (struct lc_conf){0};
	if (!f || (why = file_refused(f))) {
		snprintf(err, errlen, "config file %s: %s", path, f ? why : strerror(errno));
		if (f)
			fclose(f);
		return -1;
	}
	while (!why && (n = getline(&buf, &cap, f)) > 0) {
		line++;
		total += (size_t)n;
		if (total > LC_CONF_MAX_BYTES)
			why = "the file grew past 1 MiB";
		else if (strlen(buf) != (size_t)n)
			why = "a NUL byte";
		else if (!(why = line_arg(buf, &arg)) && arg && add(c, arg, line)) {
			free(arg);
			why = "out of memory";
		}
	}
	free(buf);
	if (!why && ferror(f))
		why = "read error";
	fclose(f);
	if (!why)
		return 0;
	snprintf(err, errlen, "config file %s, line %u: %s", path, line, why);
	lc_conf_free(c);
	return -1;
}

void lc_conf_free(struct lc_conf *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->args[i]);
	free(c->args);
	free(c->lines);
	*c = (struct lc_conf){0};
}

const char *lc_conf_path(int argc, char **argv, const char **why)
{
	const char *path = NULL;

	*why = NULL;
	for (int i = 1; i < argc; i++) {
		const char *p = NULL;

		if (!strncmp(argv[i], "--config=", 9))
			p = argv[i] + 9;
		else if (!strcmp(argv[i], "--config") && i + 1 == argc)
			*why = "--config needs a value";
		else if (!strcmp(argv[i], "--config"))
			p = argv[++i];
		if (p && path)
			*why = "--config given twice";
		if (*why)
			return NULL;
		if (p)
			path = p;
	}
	return path;
}
