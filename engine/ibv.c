/*
 * ibv.c - libibverbs through dlopen (ibv.h): the proxy starts and serves on
 * TCP where the library is not installed, and takes RDMA where it is.
 */
#include "ibv.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define ENG_LOG_IBV "engine"

/* One symbol; NULL (and the name logged) when the library lacks it. */
static void *sym(void *lib, const char *name)
{
	void *p = dlsym(lib, name);

	if (!p)
		LC_DEBUG(ENG_LOG_IBV, "%s has no %s", ENG_IBV_LIB, name);
	return p;
}

#define SYM(field, name) ((*(void **)&ibv->field = sym(ibv->lib, name)) != NULL)

int eng_ibv_load(struct eng_ibv *ibv)
{
	const char *path = getenv(ENG_IBV_LIB_ENV);

	memset(ibv, 0, sizeof(*ibv));
	ibv->lib = dlopen(path && *path ? path : ENG_IBV_LIB, RTLD_NOW | RTLD_LOCAL);
	if (!ibv->lib) {
		LC_DEBUG(ENG_LOG_IBV, "no libibverbs: %s", dlerror());
		return -ENOENT;
	}
	if (SYM(get_device_list, "ibv_get_device_list") &&
	    SYM(free_device_list, "ibv_free_device_list") &&
	    SYM(get_device_name, "ibv_get_device_name") && SYM(open_device, "ibv_open_device") &&
	    SYM(close_device, "ibv_close_device") && SYM(query_port, "ibv_query_port") &&
	    SYM(query_device, "ibv_query_device") && SYM(query_gid, "ibv_query_gid") &&
	    SYM(alloc_pd, "ibv_alloc_pd") && SYM(dealloc_pd, "ibv_dealloc_pd") &&
	    SYM(reg_mr, "ibv_reg_mr") && SYM(dereg_mr, "ibv_dereg_mr") &&
	    SYM(create_comp_channel, "ibv_create_comp_channel") &&
	    SYM(destroy_comp_channel, "ibv_destroy_comp_channel") &&
	    SYM(create_cq, "ibv_create_cq") && SYM(destroy_cq, "ibv_destroy_cq") &&
	    SYM(get_cq_event, "ibv_get_cq_event") && SYM(ack_cq_events, "ibv_ack_cq_events") &&
	    SYM(create_qp, "ibv_create_qp") && SYM(modify_qp, "ibv_modify_qp") &&
	    SYM(destroy_qp, "ibv_destroy_qp"))
		return 0;
	dlclose(ibv->lib);
	memset(ibv, 0, sizeof(*ibv));
	return -ENOSYS;
}

void eng_ibv_unload(struct eng_ibv *ibv)
{
	if (ibv->lib)
		dlclose(ibv->lib);
	memset(ibv, 0, sizeof(*ibv));
}
