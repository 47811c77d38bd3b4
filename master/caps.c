/*
 * caps.c - the data-port capabilities a keyed master hands out (SPEC §13):
 * a keyed BLAKE2b of (segment, range, op, object version, expiry) under the
 * secret the segment's owner received at mount, on every replica a caller
 * is allowed to read or write, so a node with the cluster key still touches
 * only the ranges it was granted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "mst_int.h"
#include "mst_obj.h"

uint64_t mst_cap_clock_ms(void)
{
	return lc_now_ms();
}

int mst_cap_one(Lunar__Replica *p, const struct auth_key *secret, uint32_t op, const void *subject,
		size_t subject_len, uint64_t version, uint64_t expiry_ms)
{
	struct auth_cap c = {
	    .segment = p->segment,
	    .segment_len = strlen(p->segment),
	    .subject = subject,
	    .subject_len = subject_len,
	    .op = op,
	    .offset = subject ? 0 : p->offset,
	    .length = p->length,
	    .version = version,
	    .expiry_ms = expiry_ms,
	};
	unsigned char *tag = malloc(AUTH_CAP_BYTES);

	if (!tag)
		return -ENOMEM;
	auth_cap_make(secret->k, &c, tag);
	free(p->cap.data);
	p->cap.data = tag;
	p->cap.len = AUTH_CAP_BYTES;
	p->cap_expiry_ms = expiry_ms;
	p->version = version;
	return 0;
}

int mst_caps_grant(struct mst_master *m, const struct mst_object *o, const struct mst_replica *reps,
		   unsigned nrep, Lunar__Replica **v, size_t n, uint32_t op, uint64_t version,
		   uint64_t expiry_ms)
{
	struct auth_key secret;
	int rc = 0;

	if (!m->cfg.keyed)
		return 0;
	for (size_t i = 0; i < n && !rc; i++) {
		if (i < nrep) {
			rc = mst_cap_one(v[i], &reps[i].seg->secret, op, NULL, 0, version,
					 expiry_ms);
			continue;
		}
		/* A disk record's owner may have no segment mounted here now
		 * (it restarted): then no grant, and its data port refuses. */
		if (mst_segment_secret(m, v[i]->segment, &secret))
			continue;
		rc = mst_cap_one(v[i], &secret, MST_CAP_READ_DISK, o->kbuf, o->klen, version,
				 expiry_ms);
	}
	auth_key_wipe(&secret);
	return rc;
}

void mst_replicas_pb_free(Lunar__Replica **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		protobuf_c_message_free_unpacked(&v[i]->base, NULL);
	free(v);
}
