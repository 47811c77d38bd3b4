/*
 * rpc.h - the control-plane method table and request framing shared by the
 * master's server and the proxy's master client (see lunar.proto).
 */
#ifndef LUNAR_PROTO_RPC_H
#define LUNAR_PROTO_RPC_H

#include <stddef.h>
#include <stdint.h>

#include "lunar.pb-c.h"

#define LP_REQ_MAGIC 0x51524d4cu /* "LMRQ" little-endian */
#define LP_HDR_SIZE  8
#define LP_MAX_MSG   (64u << 20) /* largest request or reply accepted */

struct lp_method {
	uint32_t id; /* Lunar__Method */
	const char *name;
	const ProtobufCMessageDescriptor *req;
	const ProtobufCMessageDescriptor *rep;
};

/* lp_method_find - the table entry for id, or NULL. */
const struct lp_method *lp_method_find(uint32_t id);

/*
 * lp_request_pack - header + packed req into a malloc'd buffer. Returns 0 and
 * the buffer (caller frees) or -ENOMEM / -EMSGSIZE.
 */
int lp_request_pack(uint32_t method, const ProtobufCMessage *req, void **buf, size_t *len);
/*
 * lp_request_unpack - parse an untrusted request. Returns 0 with the method
 * and an unpacked request (free with protobuf_c_message_free_unpacked),
 * -ENOSYS for a well-framed request of a method this build does not know,
 * or LUNAR_ERR_PROTOCOL (bad header, undecodable body, or one whose unpacked
 * form would take more than 32 MiB).
 */
int lp_request_unpack(const void *buf, size_t len, const struct lp_method **m,
		      ProtobufCMessage **req);
/*
 * lp_reply_unpack - parse an untrusted reply to method mt; free it with
 * protobuf_c_message_free_unpacked(rep, NULL). NULL when it is over 64 MiB,
 * undecodable, or its unpacked form would take more than 128 MiB.
 */
ProtobufCMessage *lp_reply_unpack(const struct lp_method *mt, const void *buf, size_t len);

/* lp_status - the Status (field 1) of any reply message, or NULL if unset. */
Lunar__Status *lp_status(const ProtobufCMessage *rep);
/*
 * lp_reply_new - a heap reply of descriptor d with a Status {code, message
 * from lunar_strerror(code), view}. NULL on ENOMEM. Free with
 * protobuf_c_message_free_unpacked(rep, NULL).
 */
ProtobufCMessage *lp_reply_new(const ProtobufCMessageDescriptor *d, int code, uint64_t view);

#endif /* LUNAR_PROTO_RPC_H */
