// See stream_events.h.
#include "stream_events.h"

#include <dlfcn.h>

static CUresult (*p_cuStreamWaitEvent)(CUstream, CUevent, unsigned);

const char *pxcu_bind_stream_wait(const char *path) {
	// RTLD_NOLOAD: the handle of the library load() opened, not a new load.
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!lib) return "the loaded driver library (dlopen)";
	*(void **)(&p_cuStreamWaitEvent) = dlsym(lib, "cuStreamWaitEvent");
	dlclose(lib); // drops the reference taken above; the library stays loaded
	return p_cuStreamWaitEvent ? 0 : "cuStreamWaitEvent";
}

CUresult pxcu_stream_wait_event(CUcontext ctx, CUstream s, CUevent e) {
	CUresult r = pxcu_ctx_set_current(ctx);
	if (r) return r;
	return p_cuStreamWaitEvent(s, e, 0);
}
