/*
 * conf.c - see conf.h.
 */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	int quoted = 0;
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
	if (*v == '=')
		v = trim(v + 1);
	else if (v == s && *s)
		return "a flag's name is letters, digits and dashes";
	if (*v == '"') {
		size_t len = strlen(v);

		if (len < 2 || v[len - 1] != '"')
			return "a quoted value needs its closing quote";
		v[len - 1] = '\0';
		v++;
		quoted = 1;
	}
	if (asprintf(arg, *v || quoted ? "--%.*s=%s" : "--%.*s", (int)n, name, v) < 0) {
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

int lc_conf_read(const char *path, struct lc_conf *c, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	char buf[4096], *arg;
	const char *why = NULL;
	unsigned line = 0;
	long size;

	*c = (struct lc_conf){0};
	if (!f) {
		snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
		return -1;
	}
	if (fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || size > (long)LC_CONF_MAX_BYTES ||
	    fseek(f, 0, SEEK_SET)) {
		snprintf(err, errlen, "config file %s: not a file of at most %u bytes", path,
			 LC_CONF_MAX_BYTES);
		fclose(f);
		return -1;
	}
	while (!why && fgets(buf, sizeof(buf), f)) {
		line++;
		if (!strchr(buf, '\n') && !feof(f))
			why = "line longer than 4095 bytes";
		else if (!(why = line_arg(buf, &arg)) && arg && add(c, arg, line)) {
			free(arg);
			why = "out of memory";
		}
	}
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

const char *lc_conf_path(int argc, char **argv, int *bad)
{
	*bad = 0;
	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--config=", 9))
			return argv[i] + 9;
		if (!strcmp(argv[i], "--config")) {
			if (i + 1 < argc)
				return argv[i + 1];
			*bad = 1;
			return NULL;
		}
	}
	return NULL;
}
