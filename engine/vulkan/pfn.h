// pfn.h: what shim.c (compute) and present.c (the viewer's swapchain)
// share: the Vulkan constants they record with and the device-level calls,
// as function pointer types (loaded with vkGetDeviceProcAddr).
#ifndef PX_PFN_H
#define PX_PFN_H

#include "pxvk.h"

enum {
	PX_BIND_POINT_COMPUTE = 1,
	PX_DESCRIPTOR_STORAGE_BUFFER = 7,
	PX_STAGE_TOP = 0x1,
	PX_STAGE_COMPUTE = 0x800,
	PX_STAGE_TRANSFER = 0x1000,
	PX_STAGE_BOTTOM = 0x2000,
	PX_STAGE_HOST = 0x4000,
	PX_ACCESS_SHADER_READ = 0x20,
	PX_ACCESS_SHADER_WRITE = 0x40,
	PX_ACCESS_TRANSFER_READ = 0x800,
	PX_ACCESS_TRANSFER_WRITE = 0x1000,
	PX_ACCESS_HOST_READ = 0x2000,
	PX_SHADER_STAGE_COMPUTE = 0x20,
	PX_QUEUE_FAMILY_IGNORED = ~0u,
};

typedef void (*PFN_CmdBindPipeline)(void *, int32_t, pxHandle);
typedef void (*PFN_CmdPushDescriptorSet)(void *, int32_t, pxHandle, uint32_t, uint32_t, const pxWriteDescriptorSet *);
typedef void (*PFN_CmdBindDescriptorSets)(void *, int32_t, pxHandle, uint32_t, uint32_t, const pxHandle *, uint32_t, const uint32_t *);
typedef pxResult (*PFN_AllocateDescriptorSets)(void *, const pxDescriptorSetAllocateInfo *, pxHandle *);
typedef void (*PFN_UpdateDescriptorSets)(void *, uint32_t, const pxWriteDescriptorSet *, uint32_t, const void *);
typedef void (*PFN_CmdPushConstants)(void *, pxHandle, uint32_t, uint32_t, uint32_t, const void *);
typedef void (*PFN_CmdDispatch)(void *, uint32_t, uint32_t, uint32_t);
typedef void (*PFN_CmdPipelineBarrier)(void *, uint32_t, uint32_t, uint32_t, uint32_t, const pxMemoryBarrier *, uint32_t,
	const pxBufferMemoryBarrier *, uint32_t, const void *);
typedef void (*PFN_CmdCopyBuffer)(void *, pxHandle, pxHandle, uint32_t, const pxBufferCopy *);
typedef void (*PFN_CmdFillBuffer)(void *, pxHandle, pxDeviceSize, pxDeviceSize, uint32_t);
typedef void (*PFN_CmdWriteTimestamp)(void *, uint32_t, pxHandle, uint32_t);
typedef void (*PFN_CmdResetQueryPool)(void *, pxHandle, uint32_t, uint32_t);
typedef pxResult (*PFN_QueueSubmit)(void *, uint32_t, const pxSubmitInfo *, pxHandle);
typedef pxResult (*PFN_CreateComputePipelines)(void *, pxHandle, uint32_t, const pxComputePipelineCreateInfo *, const void *, pxHandle *);

#endif
