/*
 * rpc_server.h - serves a master on nng's REQ/REP wire with several workers.
 */
#ifndef LUNAR_MASTER_RPC_SERVER_H
#define LUNAR_MASTER_RPC_SERVER_H

#include <stdint.h>

struct mst_master;
struct mst_server;

struct auth_key;

/*
 * mst_server_start - listen on url ("tcp://HOST:PORT"; port 0 picks a free
 * one) with nworkers threads, each receiving, dispatching and replying on
 * its own (4096 connections open at most: at the cap a new one shuts the
 * one answered least recently, proto/sp_rep.h).
 * key: the cluster key every caller must prove (SPEC §13), copied: every
 * message is then an authenticated envelope (proto/rpc_auth.h), each
 * call checked against its session's role and client ids, and a peer that
 * fails a check is closed unanswered. NULL serves the plain keyless
 * protocol (loopback demo mode). Returns 0 and *out, or a LUNAR_ERR_*
 * code with the cause logged: INVALID_PARAMS for a bad url, BUSY when
 * the address is in use, INTERNAL for out of memory and other errors.
 * m must outlive the server. Blocks only to bind; start-up thread.
 */
int mst_server_start(struct mst_master *m, const char *url, unsigned nworkers,
		     const struct auth_key *key, struct mst_server **out);
/* mst_server_port - the bound TCP port (after port 0). Any thread. */
uint16_t mst_server_port(const struct mst_server *s);
/* mst_server_stop - stop listening, wait for the workers (a call in
 * progress ends first), close every connection, free. NULL is a no-op. Not
 * concurrent with itself. */
void mst_server_stop(struct mst_server *s);

#endif /* LUNAR_MASTER_RPC_SERVER_H */
