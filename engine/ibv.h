/*
 * ibv.h - libibverbs, loaded at run time. The proxy links no libibverbs:
 * eng_ibv_load dlopen()s "libibverbs.so.1" and looks up every exported
 * ibv_* function the RDMA transport calls, so a host without the library
 * runs the proxy on TCP. <infiniband/verbs.h> supplies the types only; the
 * verbs that verbs.h defines inline (ibv_post_send, ibv_poll_cq,
 * ibv_req_notify_cq) call through the device context's ops table, which the
 * dlopen'd library filled in, and so work as they are.
 */
#ifndef LUNAR_ENGINE_IBV_H
#define LUNAR_ENGINE_IBV_H

#include <infiniband/verbs.h>

/* The library's functions the transport uses; every pointer is set. */
struct eng_ibv {
	void *lib;
	struct ibv_device **(*get_device_list)(int *num);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	/* The exported symbol takes the old, shorter struct: pass a zeroed
	 * struct ibv_port_attr; the fields read here are in the common part. */
	int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
	int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *ch, int comp_vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
	int (*destroy_qp)(struct ibv_qp *qp);
};

/* The library file; the environment variable LUNAR_IBVERBS_LIB names
 * another (tests use it to play a host without libibverbs). */
#define ENG_IBV_LIB	"libibverbs.so.1"
#define ENG_IBV_LIB_ENV "LUNAR_IBVERBS_LIB"

/*
 * eng_ibv_load - dlopen the library and fill *ibv. 0, or -ENOENT when the
 * library is absent, -ENOSYS when it lacks a function (the reason logged
 * at debug level). Blocks on the loader; call once per engine.
 * eng_ibv_unload - dlclose it (after every object it made is destroyed).
 */
int eng_ibv_load(struct eng_ibv *ibv);
void eng_ibv_unload(struct eng_ibv *ibv);

#endif /* LUNAR_ENGINE_IBV_H */
