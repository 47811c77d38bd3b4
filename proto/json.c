/*
 * json.c - protobuf-c messages as JSON; see json.h. Enums print as their
 * names, 64-bit integers as numbers, strings escaped per RFC 8259.
 */
#include "json.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "http.h"

static int put_string(struct lc_http_reply *rep, const char *s)
{
	int rc = lc_http_reply_append(rep, "\"", 1);

	for (; !rc && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			rc = lc_http_reply_printf(rep, "\\%c", ch);
		else if (ch < 0x20)
			rc = lc_http_reply_printf(rep, "\\u%04x", ch);
		else
			rc = lc_http_reply_append(rep, s, 1);
	}
	return rc ? rc : lc_http_reply_append(rep, "\"", 1);
}

static int put_enum(struct lc_http_reply *rep, const ProtobufCEnumDescriptor *d, int v)
{
	const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(d, v);

	return ev ? put_string(rep, ev->name) : lc_http_reply_printf(rep, "%d", v);
}

/* One value of field f stored at p. */
static int put_value(struct lc_http_reply *rep, const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
		return lc_http_reply_printf(rep, "%" PRId32, *(const int32_t *)p);
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		return lc_http_reply_printf(rep, "%" PRIu32, *(const uint32_t *)p);
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		return lc_http_reply_printf(rep, "%" PRId64, *(const int64_t *)p);
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return lc_http_reply_printf(rep, "%" PRIu64, *(const uint64_t *)p);
	case PROTOBUF_C_TYPE_FLOAT:
		return lc_http_reply_printf(rep, "%g", (double)*(const float *)p);
	case PROTOBUF_C_TYPE_DOUBLE: return lc_http_reply_printf(rep, "%g", *(const double *)p);
	case PROTOBUF_C_TYPE_BOOL:
		return lc_http_reply_printf(rep, "%s",
					    *(const protobuf_c_boolean *)p ? "true" : "false");
	case PROTOBUF_C_TYPE_ENUM: return put_enum(rep, f->descriptor, *(const int *)p);
	case PROTOBUF_C_TYPE_STRING:
		return put_string(rep, *(char *const *)p ? *(char *const *)p : "");
	case PROTOBUF_C_TYPE_BYTES:
		return lc_http_reply_printf(rep, "%zu", ((const ProtobufCBinaryData *)p)->len);
	case PROTOBUF_C_TYPE_MESSAGE:
		if (!*(ProtobufCMessage *const *)p)
			return lc_http_reply_printf(rep, "null");
		return lp_json_render(*(ProtobufCMessage *const *)p, rep);
	}
	return -EINVAL;
}

static size_t type_size(const ProtobufCFieldDescriptor *f)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE: return 8;
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE: return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
	default: return 4;
	}
}

static int put_field(struct lc_http_reply *rep, const ProtobufCMessage *msg,
		     const ProtobufCFieldDescriptor *f)
{
	const char *base = (const char *)msg + f->offset;
	size_t n;
	int rc;

	if (f->label != PROTOBUF_C_LABEL_REPEATED)
		return put_value(rep, f, base);
	n = *(const size_t *)((const char *)msg + f->quantifier_offset);
	rc = lc_http_reply_append(rep, "[", 1);
	for (size_t i = 0; !rc && i < n; i++) {
		if (i)
			rc = lc_http_reply_append(rep, ",", 1);
		if (!rc)
			rc = put_value(rep, f, *(char *const *)base + i * type_size(f));
	}
	return rc ? rc : lc_http_reply_append(rep, "]", 1);
}

int lp_json_render(const ProtobufCMessage *msg, struct lc_http_reply *rep)
{
	const ProtobufCMessageDescriptor *d = msg->descriptor;
	int rc = lc_http_reply_append(rep, "{", 1);

	for (unsigned i = 0; !rc && i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];

		rc = lc_http_reply_printf(rep, "%s\"%s\":", i ? "," : "", f->name);
		if (!rc)
			rc = put_field(rep, msg, f);
	}
	return rc ? rc : lc_http_reply_append(rep, "}", 1);
}
