/*
 * wire.c - the TCP frame headers (eng_int.h): byte order, and the server's
 * check of a request against its segment.
 */
#include "eng_int.h"

#include <endian.h>

#include "lunar.h"

void eng_wire_req_encode(struct eng_wire_req *r)
{
	r->magic = htole32(r->magic);
	r->version = htole16(r->version);
	r->op = htole16(r->op);
	r->offset = htole64(r->offset);
	r->length = htole64(r->length);
	r->id = htole64(r->id);
}

void eng_wire_req_decode(struct eng_wire_req *r)
{
	r->magic = le32toh(r->magic);
	r->version = le16toh(r->version);
	r->op = le16toh(r->op);
	r->offset = le64toh(r->offset);
	r->length = le64toh(r->length);
	r->id = le64toh(r->id);
}

void eng_wire_rep_encode(struct eng_wire_rep *r)
{
	r->magic = htole32(r->magic);
	r->status = (int32_t)htole32((uint32_t)r->status);
	r->id = htole64(r->id);
	r->length = htole64(r->length);
}

void eng_wire_rep_decode(struct eng_wire_rep *r)
{
	r->magic = le32toh(r->magic);
	r->status = (int32_t)le32toh((uint32_t)r->status);
	r->id = le64toh(r->id);
	r->length = le64toh(r->length);
}

int eng_wire_req_check(const struct eng_wire_req *r, uint64_t seg_size)
{
	if (r->magic != ENG_WIRE_REQ_MAGIC)
		return LUNAR_ERR_PROTOCOL;
	if (r->version != ENG_WIRE_VERSION)
		return LUNAR_ERR_VERSION_MISMATCH;
	if (r->op != ENG_OP_READ && r->op != ENG_OP_WRITE)
		return LUNAR_ERR_PROTOCOL;
	/* Written so that no sum can wrap: offset <= size first, then the room. */
	if (r->length == 0 || r->offset > seg_size || r->length > seg_size - r->offset)
		return LUNAR_ERR_INVALID_PARAMS;
	return 0;
}
