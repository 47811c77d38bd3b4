/*
 * json.h - any protobuf-c message as one line of JSON, walked through its
 * descriptor (field names as in lunar.proto), for admin answers over HTTP
 * and lunarctl -o json.
 */
#ifndef LUNAR_PROTO_JSON_H
#define LUNAR_PROTO_JSON_H

#include <protobuf-c/protobuf-c.h>

struct lc_http_reply;

/* lp_json_render - append msg as a JSON object to rep. 0 or -ENOMEM. */
int lp_json_render(const ProtobufCMessage *msg, struct lc_http_reply *rep);

#endif /* LUNAR_PROTO_JSON_H */
