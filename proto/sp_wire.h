/*
 * sp_wire.h - the bytes of nng's SP request/reply wire that both of its
 * sides, lp_spreq (sp_req.h) and lp_sprep (sp_rep.h), speak.
 *
 * A connection opens with an 8-byte header each way: 00 'S' 'P' 00, the
 * sender's protocol (big-endian u16: REQ 0x0030, REP 0x0031), 00 00. Then
 * each message is a big-endian u64 length and that many bytes (sp-ipc puts
 * the byte 0x01 before the length). A request starts with its backtrace:
 * 4-byte big-endian words, one a hop, the last (the requester's id) with
 * the top bit set; a direct requester sends that one word only. The reply
 * starts with the same backtrace.
 */
#ifndef LUNAR_PROTO_SP_WIRE_H
#define LUNAR_PROTO_SP_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SP_REQ0	    0x30u /* nng's protocol numbers */
#define SP_REP0	    0x31u
#define SP_IPC_MSG  0x01u	/* sp-ipc: the byte before each length */
#define SP_HELLO    8		/* bytes of the opening header */
#define SP_ID_TOP   0x80000000u /* marks a backtrace's last word */
#define SP_HOPS_MAX 8		/* backtrace words accepted (nng's default TTL) */

/* sp_hello - the opening header of a socket of protocol proto. */
static inline void sp_hello(uint8_t out[SP_HELLO], unsigned proto)
{
	const uint8_t h[SP_HELLO] = {0, 'S', 'P', 0, 0, (uint8_t)proto, 0, 0};

	for (int i = 0; i < SP_HELLO; i++)
		out[i] = h[i];
}

/* sp_hello_is - whether in is the opening header of a socket of protocol
 * proto (untrusted bytes). */
static inline bool sp_hello_is(const uint8_t in[SP_HELLO], unsigned proto)
{
	uint8_t h[SP_HELLO];

	sp_hello(h, proto);
	for (int i = 0; i < SP_HELLO; i++)
		if (in[i] != h[i])
			return false;
	return true;
}

/*
 * sp_tcp_split - HOST and PORT of url, a "tcp://HOST:PORT" (HOST a name or
 * an address, [v6] bracketed: the brackets are dropped; PORT min_port to
 * 65535, as lc_parse_rpc_url's are 1 to 65535), into host (hmax bytes) and
 * port (pmax bytes), NUL-terminated. 0 or -EINVAL.
 */
int sp_tcp_split(const char *url, unsigned min_port, char *host, size_t hmax, char *port,
		 size_t pmax);

#endif /* LUNAR_PROTO_SP_WIRE_H */
