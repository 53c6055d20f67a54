// A second stream ordered against the device's stream with events; see
// stream_events.go. cuStreamWaitEvent is bound here, apart from shim.c's
// table, from the driver library that shim.c already opened.
#ifndef PARALLAX_CUDA_STREAM_EVENTS_H
#define PARALLAX_CUDA_STREAM_EVENTS_H

#include "shim.h"

// pxcu_bind_stream_wait binds cuStreamWaitEvent from the already loaded
// driver library at path (the path or soname that was opened); it returns
// NULL or what failed.
const char *pxcu_bind_stream_wait(const char *path);

// pxcu_stream_wait_event makes stream s wait (on the device, without
// blocking the host) for the work captured by the last record of e.
CUresult pxcu_stream_wait_event(CUcontext ctx, CUstream s, CUevent e);

#endif
