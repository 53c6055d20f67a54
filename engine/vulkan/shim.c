// shim.c: loading libvulkan, querying post-1.1 device properties and
// features through pNext chains, building the feature chain for device
// creation, and recording commands through device-level function pointers.
#include "pxvk.h"
#include "pfn.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- Loader ----

static void *libvulkan;

void *px_load(char *err, int errlen) {
	static const char *names[] = {"libvulkan.so.1", "libvulkan.so"};
	if (libvulkan == NULL) {
		char first[512] = "";
		for (int i = 0; i < 2 && libvulkan == NULL; i++) {
			libvulkan = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
			if (libvulkan == NULL && i == 0) {
				const char *e = dlerror();
				snprintf(first, sizeof first, "%s", e ? e : names[i]);
			}
		}
		if (libvulkan == NULL) {
			snprintf(err, errlen, "cannot load the Vulkan loader (%s); install libvulkan1 (and a driver: mesa-vulkan-drivers for lavapipe on a CPU)", first);
			return NULL;
		}
	}
	void *f = dlsym(libvulkan, "vkGetInstanceProcAddr");
	if (f == NULL) {
		snprintf(err, errlen, "libvulkan has no vkGetInstanceProcAddr");
		return NULL;
	}
	return f;
}

void px_free(void *p) { free(p); }

// ---- Device queries ----

typedef void (*pxGetProps2)(void *pd, void *props);
typedef void (*pxGetFeats2)(void *pd, void *feats);
typedef pxResult (*pxGetCoopNV)(void *pd, uint32_t *n, pxCoopMatPropertiesNV *props);
typedef pxResult (*pxGetCoopKHR)(void *pd, uint32_t *n, pxCoopMatPropertiesKHR *props);

static int has_ext(const char **exts, int n, const char *name) {
	for (int i = 0; i < n; i++) {
		if (strcmp(exts[i], name) == 0) {
			return 1;
		}
	}
	return 0;
}

// link prepends s to the chain headed by *head.
static void chain_link(void **head, void *s) {
	((pxBaseOut *)s)->pNext = *head;
	*head = s;
}

#define VERSION(major, minor) (((uint32_t)(major) << 22) | ((uint32_t)(minor) << 12))

void px_query(pxGetInstanceProcAddr gipa, void *instance, void *pd, uint32_t api, const char **exts, int n,
	pxDeviceInfo *info) {
	memset(info, 0, sizeof *info);
	pxGetProps2 props2 = (pxGetProps2)gipa(instance, "vkGetPhysicalDeviceProperties2");
	pxGetFeats2 feats2 = (pxGetFeats2)gipa(instance, "vkGetPhysicalDeviceFeatures2");
	if (props2 == NULL) {
		props2 = (pxGetProps2)gipa(instance, "vkGetPhysicalDeviceProperties2KHR");
	}
	if (feats2 == NULL) {
		feats2 = (pxGetFeats2)gipa(instance, "vkGetPhysicalDeviceFeatures2KHR");
	}
	if (props2 == NULL || feats2 == NULL || api < VERSION(1, 1)) {
		return;
	}
	info->hasProps2 = 1;
	info->hasDriver = api >= VERSION(1, 2) || has_ext(exts, n, "VK_KHR_driver_properties");
	info->hasSizeControl = api >= VERSION(1, 3) || has_ext(exts, n, "VK_EXT_subgroup_size_control");
	info->has16Bit = 1; // core in 1.1
	info->hasFloat16 = api >= VERSION(1, 2) || has_ext(exts, n, "VK_KHR_shader_float16_int8");
	info->hasMemoryModel = api >= VERSION(1, 2) || has_ext(exts, n, "VK_KHR_vulkan_memory_model");
	info->hasCoopNV = has_ext(exts, n, "VK_NV_cooperative_matrix");
	info->hasCoopKHR = has_ext(exts, n, "VK_KHR_cooperative_matrix");
	info->hasPushDescriptor = has_ext(exts, n, "VK_KHR_push_descriptor");
	info->hasAtomicFloat = has_ext(exts, n, "VK_EXT_shader_atomic_float");
	info->hasBFloat16 = has_ext(exts, n, "VK_KHR_shader_bfloat16");

	// Properties.
	pxProperties2 p2 = {PX_ST_PHYSICAL_DEVICE_PROPERTIES_2, NULL, {0}};
	pxSubgroupProperties sg = {PX_ST_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, NULL, 0, 0, 0, 0};
	pxSubgroupSizeControlProperties sc = {PX_ST_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES, NULL, 0, 0, 0, 0};
	pxDriverProperties drv;
	memset(&drv, 0, sizeof drv);
	drv.sType = PX_ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
	pxPushDescriptorProperties pdp = {PX_ST_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES, NULL, 0};
	pxMaintenance3Properties m3 = {PX_ST_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, NULL, 0, 0};
	chain_link(&p2.pNext, &sg);
	chain_link(&p2.pNext, &m3);
	if (info->hasSizeControl) {
		chain_link(&p2.pNext, &sc);
	}
	if (info->hasDriver) {
		chain_link(&p2.pNext, &drv);
	}
	if (info->hasPushDescriptor) {
		chain_link(&p2.pNext, &pdp);
	}
	props2(pd, &p2);
	info->subgroupSize = sg.subgroupSize;
	info->subgroupStages = sg.supportedStages;
	info->subgroupOps = sg.supportedOperations;
	info->minSubgroupSize = sc.minSubgroupSize;
	info->maxSubgroupSize = sc.maxSubgroupSize;
	info->maxPushDescriptors = pdp.maxPushDescriptors;
	info->maxMemoryAllocationSize = m3.maxMemoryAllocationSize;
	info->driverID = drv.driverID;
	memcpy(info->driverName, drv.driverName, sizeof info->driverName);
	memcpy(info->driverInfo, drv.driverInfo, sizeof info->driverInfo);
	info->driverName[255] = info->driverInfo[255] = 0;

	// Features.
	pxFeatures2 f2;
	memset(&f2, 0, sizeof f2);
	f2.sType = PX_ST_PHYSICAL_DEVICE_FEATURES_2;
	px16BitStorageFeatures s16 = {PX_ST_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES, NULL, 0, 0, 0, 0};
	pxFloat16Int8Features f16 = {PX_ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, NULL, 0, 0};
	pxSubgroupSizeControlFeatures scf = {PX_ST_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES, NULL, 0, 0};
	pxMemoryModelFeatures mm = {PX_ST_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES, NULL, 0, 0, 0};
	pxCoopMatFeaturesNV cnv = {PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV, NULL, 0, 0};
	pxCoopMatFeaturesKHR ckhr = {PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR, NULL, 0, 0};
	pxAtomicFloatFeatures af;
	memset(&af, 0, sizeof af);
	af.sType = PX_ST_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES;
	pxBFloat16Features bf = {PX_ST_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES, NULL, 0, 0, 0};
	chain_link(&f2.pNext, &s16);
	if (info->hasFloat16) {
		chain_link(&f2.pNext, &f16);
	}
	if (info->hasSizeControl) {
		chain_link(&f2.pNext, &scf);
	}
	if (info->hasMemoryModel) {
		chain_link(&f2.pNext, &mm);
	}
	if (info->hasCoopNV) {
		chain_link(&f2.pNext, &cnv);
	}
	if (info->hasCoopKHR) {
		chain_link(&f2.pNext, &ckhr);
	}
	if (info->hasAtomicFloat) {
		chain_link(&f2.pNext, &af);
	}
	if (info->hasBFloat16) {
		chain_link(&f2.pNext, &bf);
	}
	feats2(pd, &f2);
	info->shaderFloat64 = f2.features[PX_FEAT_SHADER_FLOAT64];
	info->shaderInt64 = f2.features[PX_FEAT_SHADER_INT64];
	info->shaderInt16 = f2.features[PX_FEAT_SHADER_INT16];
	info->storageBuffer16BitAccess = s16.storageBuffer16BitAccess;
	info->shaderFloat16 = f16.shaderFloat16;
	info->shaderInt8 = f16.shaderInt8;
	info->subgroupSizeControl = scf.subgroupSizeControl;
	info->computeFullSubgroups = scf.computeFullSubgroups;
	info->vulkanMemoryModel = mm.vulkanMemoryModel;
	info->vulkanMemoryModelDeviceScope = mm.vulkanMemoryModelDeviceScope;
	info->coopNV = cnv.cooperativeMatrix;
	info->coopKHR = ckhr.cooperativeMatrix;
	info->atomicFloat32Add = af.flags[1];
	info->bf16Type = bf.shaderBFloat16Type;
	info->bf16CoopMat = bf.shaderBFloat16CooperativeMatrix;

	// Cooperative matrix shapes.
	if (info->hasCoopNV && info->coopNV) {
		pxGetCoopNV get = (pxGetCoopNV)gipa(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV");
		uint32_t cnt = 0;
		if (get != NULL && get(pd, &cnt, NULL) >= 0) {
			if (cnt > 32) {
				cnt = 32;
			}
			for (uint32_t i = 0; i < cnt; i++) {
				memset(&info->coopNVProps[i], 0, sizeof info->coopNVProps[i]);
				info->coopNVProps[i].sType = PX_ST_COOPERATIVE_MATRIX_PROPERTIES_NV;
			}
			// VK_INCOMPLETE (5) is expected when the list was cut at 32.
			if (get(pd, &cnt, info->coopNVProps) >= 0) {
				info->nCoopNV = (int)cnt;
			}
		}
	}
	if (info->hasCoopKHR && info->coopKHR) {
		pxGetCoopKHR get = (pxGetCoopKHR)gipa(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR");
		uint32_t cnt = 0;
		if (get != NULL && get(pd, &cnt, NULL) >= 0) {
			if (cnt > 32) {
				cnt = 32;
			}
			for (uint32_t i = 0; i < cnt; i++) {
				memset(&info->coopKHRProps[i], 0, sizeof info->coopKHRProps[i]);
				info->coopKHRProps[i].sType = PX_ST_COOPERATIVE_MATRIX_PROPERTIES_KHR;
			}
			if (get(pd, &cnt, info->coopKHRProps) >= 0) {
				info->nCoopKHR = (int)cnt;
			}
		}
	}
}

// ---- Feature chain for vkCreateDevice ----

typedef struct pxChain {
	pxFeatures2 f2;
	px16BitStorageFeatures s16;
	pxFloat16Int8Features f16;
	pxMemoryModelFeatures mm;
	pxCoopMatFeaturesNV cnv;
	pxCoopMatFeaturesKHR ckhr;
	struct {
		uint32_t sType;
		void *pNext;
		pxBool32 pipelineExecutableInfo;
	} eps;
} pxChain;

void *px_feature_chain(const pxEnable *e) {
	pxChain *c = calloc(1, sizeof *c);
	if (c == NULL) {
		return NULL;
	}
	c->f2.sType = PX_ST_PHYSICAL_DEVICE_FEATURES_2;
	c->f2.features[PX_FEAT_SHADER_FLOAT64] = e->shaderFloat64;
	c->f2.features[PX_FEAT_SHADER_INT16] = e->shaderInt16;
	if (e->chain16Bit) {
		c->s16.sType = PX_ST_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
		c->s16.storageBuffer16BitAccess = 1;
		chain_link(&c->f2.pNext, &c->s16);
	}
	if (e->chainFloat16) {
		c->f16.sType = PX_ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
		c->f16.shaderFloat16 = 1;
		chain_link(&c->f2.pNext, &c->f16);
	}
	if (e->chainMemoryModel) {
		c->mm.sType = PX_ST_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES;
		c->mm.vulkanMemoryModel = 1;
		chain_link(&c->f2.pNext, &c->mm);
	}
	if (e->chainCoopNV) {
		c->cnv.sType = PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
		c->cnv.cooperativeMatrix = 1;
		chain_link(&c->f2.pNext, &c->cnv);
	}
	if (e->chainCoopKHR) {
		c->ckhr.sType = PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR;
		c->ckhr.cooperativeMatrix = 1;
		chain_link(&c->f2.pNext, &c->ckhr);
	}
	if (e->chainExecStats) {
		c->eps.sType = 1000269000; // VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PIPELINE_EXECUTABLE_PROPERTIES_FEATURES_KHR
		c->eps.pipelineExecutableInfo = 1;
		chain_link(&c->f2.pNext, &c->eps);
	}
	return &c->f2; // the first member: px_free(c) == px_free(&c->f2)
}

// ---- Recording ----

struct pxDevice {
	void *device;
	int push;
	int captureStats;
	void *getExecProps, *getExecStats; // vkGetPipelineExecutable{Properties,Statistics}KHR
	PFN_CmdBindPipeline bindPipeline;
	PFN_CmdPushDescriptorSet pushDescriptorSet;
	PFN_CmdBindDescriptorSets bindDescriptorSets;
	PFN_AllocateDescriptorSets allocateDescriptorSets;
	PFN_UpdateDescriptorSets updateDescriptorSets;
	PFN_CmdPushConstants pushConstants;
	PFN_CmdDispatch dispatch;
	PFN_CmdPipelineBarrier pipelineBarrier;
	PFN_CmdCopyBuffer copyBuffer;
	PFN_CmdFillBuffer fillBuffer;
	PFN_CmdWriteTimestamp writeTimestamp;
	PFN_CmdResetQueryPool resetQueryPool;
	PFN_QueueSubmit queueSubmit;
	PFN_CreateComputePipelines createComputePipelines;
};

pxDevice *px_device_new(pxGetInstanceProcAddr gipa, void *instance, void *device, int push, char *err, int errlen) {
	pxGetDeviceProcAddr gdpa = (pxGetDeviceProcAddr)gipa(instance, "vkGetDeviceProcAddr");
	if (gdpa == NULL) {
		snprintf(err, errlen, "vkGetDeviceProcAddr not found");
		return NULL;
	}
	pxDevice *d = calloc(1, sizeof *d);
	if (d == NULL) {
		snprintf(err, errlen, "out of host memory");
		return NULL;
	}
	d->device = device;
	d->push = push;
#define LOAD(field, type, name)                                     \
	d->field = (type)gdpa(device, name);                             \
	if (d->field == NULL) {                                          \
		snprintf(err, errlen, "device function %s not found", name); \
		free(d);                                                     \
		return NULL;                                                 \
	}
	LOAD(bindPipeline, PFN_CmdBindPipeline, "vkCmdBindPipeline");
	LOAD(bindDescriptorSets, PFN_CmdBindDescriptorSets, "vkCmdBindDescriptorSets");
	LOAD(allocateDescriptorSets, PFN_AllocateDescriptorSets, "vkAllocateDescriptorSets");
	LOAD(updateDescriptorSets, PFN_UpdateDescriptorSets, "vkUpdateDescriptorSets");
	LOAD(pushConstants, PFN_CmdPushConstants, "vkCmdPushConstants");
	LOAD(dispatch, PFN_CmdDispatch, "vkCmdDispatch");
	LOAD(pipelineBarrier, PFN_CmdPipelineBarrier, "vkCmdPipelineBarrier");
	LOAD(copyBuffer, PFN_CmdCopyBuffer, "vkCmdCopyBuffer");
	LOAD(fillBuffer, PFN_CmdFillBuffer, "vkCmdFillBuffer");
	LOAD(writeTimestamp, PFN_CmdWriteTimestamp, "vkCmdWriteTimestamp");
	LOAD(resetQueryPool, PFN_CmdResetQueryPool, "vkCmdResetQueryPool");
	LOAD(queueSubmit, PFN_QueueSubmit, "vkQueueSubmit");
	LOAD(createComputePipelines, PFN_CreateComputePipelines, "vkCreateComputePipelines");
	if (push) {
		LOAD(pushDescriptorSet, PFN_CmdPushDescriptorSet, "vkCmdPushDescriptorSetKHR");
	}
#undef LOAD
	return d;
}

void px_device_free(pxDevice *d) { free(d); }

#define PX_MAX_BINDINGS 16

pxResult px_dispatch(pxDevice *d, void *cmd, pxHandle pipeline, pxHandle layout, pxHandle setLayout, pxHandle pool,
	int n, const uint64_t *buffers, const uint64_t *offsets, const uint64_t *ranges,
	const void *push, uint32_t pushSize, uint32_t gx, uint32_t gy, uint32_t gz) {
	if (n > PX_MAX_BINDINGS) {
		return -13; // VK_ERROR_UNKNOWN
	}
	pxDescriptorBufferInfo infos[PX_MAX_BINDINGS];
	pxWriteDescriptorSet writes[PX_MAX_BINDINGS];
	pxHandle set = 0;
	if (pool != 0) {
		pxDescriptorSetAllocateInfo ai = {PX_ST_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, pool, 1, &setLayout};
		pxResult r = d->allocateDescriptorSets(d->device, &ai, &set);
		if (r != 0) {
			return r;
		}
	}
	for (int i = 0; i < n; i++) {
		infos[i].buffer = buffers[i];
		infos[i].offset = offsets[i];
		infos[i].range = ranges[i];
		memset(&writes[i], 0, sizeof writes[i]);
		writes[i].sType = PX_ST_WRITE_DESCRIPTOR_SET;
		writes[i].dstSet = set;
		writes[i].dstBinding = (uint32_t)i;
		writes[i].descriptorCount = 1;
		writes[i].descriptorType = PX_DESCRIPTOR_STORAGE_BUFFER;
		writes[i].pBufferInfo = &infos[i];
	}
	d->bindPipeline(cmd, PX_BIND_POINT_COMPUTE, pipeline);
	if (pool != 0) {
		d->updateDescriptorSets(d->device, (uint32_t)n, writes, 0, NULL);
		d->bindDescriptorSets(cmd, PX_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
	} else {
		d->pushDescriptorSet(cmd, PX_BIND_POINT_COMPUTE, layout, 0, (uint32_t)n, writes);
	}
	if (pushSize > 0) {
		d->pushConstants(cmd, layout, PX_SHADER_STAGE_COMPUTE, 0, pushSize, push);
	}
	d->dispatch(cmd, gx, gy, gz);
	return 0;
}

#define PX_MAX_BARRIERS 32

void px_barrier(pxDevice *d, void *cmd, int n, const uint64_t *buffers, const uint64_t *offsets, const uint64_t *sizes) {
	const uint32_t stages = PX_STAGE_COMPUTE | PX_STAGE_TRANSFER;
	const uint32_t src = PX_ACCESS_SHADER_WRITE | PX_ACCESS_TRANSFER_WRITE;
	const uint32_t dst = PX_ACCESS_SHADER_READ | PX_ACCESS_SHADER_WRITE | PX_ACCESS_TRANSFER_READ | PX_ACCESS_TRANSFER_WRITE;
	if (n <= 0 || n > PX_MAX_BARRIERS) {
		pxMemoryBarrier mb = {PX_ST_MEMORY_BARRIER, NULL, src, dst};
		d->pipelineBarrier(cmd, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
		return;
	}
	pxBufferMemoryBarrier b[PX_MAX_BARRIERS];
	for (int i = 0; i < n; i++) {
		b[i].sType = PX_ST_BUFFER_MEMORY_BARRIER;
		b[i].pNext = NULL;
		b[i].srcAccessMask = src;
		b[i].dstAccessMask = dst;
		b[i].srcQueueFamilyIndex = PX_QUEUE_FAMILY_IGNORED;
		b[i].dstQueueFamilyIndex = PX_QUEUE_FAMILY_IGNORED;
		b[i].buffer = buffers[i];
		b[i].offset = offsets[i];
		b[i].size = sizes[i];
	}
	d->pipelineBarrier(cmd, stages, stages, 0, 0, NULL, (uint32_t)n, b, 0, NULL);
}

// px_barrier_host makes every write of the batch visible to host reads
// after the fence.
void px_barrier_host(pxDevice *d, void *cmd) {
	pxMemoryBarrier mb = {PX_ST_MEMORY_BARRIER, NULL, PX_ACCESS_SHADER_WRITE | PX_ACCESS_TRANSFER_WRITE, PX_ACCESS_HOST_READ};
	d->pipelineBarrier(cmd, PX_STAGE_COMPUTE | PX_STAGE_TRANSFER, PX_STAGE_HOST, 0, 1, &mb, 0, NULL, 0, NULL);
}

void px_copy(pxDevice *d, void *cmd, pxHandle src, pxHandle dst, uint64_t srcOff, uint64_t dstOff, uint64_t size) {
	pxBufferCopy c = {srcOff, dstOff, size};
	d->copyBuffer(cmd, src, dst, 1, &c);
}

void px_fill(pxDevice *d, void *cmd, pxHandle dst, uint64_t off, uint64_t size, uint32_t value) {
	d->fillBuffer(cmd, dst, off, size, value);
}

pxResult px_submit(pxDevice *d, void *queue, void *cmd, pxHandle fence) {
	pxSubmitInfo si;
	memset(&si, 0, sizeof si);
	si.sType = 4; // VK_STRUCTURE_TYPE_SUBMIT_INFO
	si.commandBufferCount = 1;
	si.pCommandBuffers = &cmd;
	return d->queueSubmit(queue, 1, &si, fence);
}

void *px_device_handle(pxDevice *d) { return d->device; }

void px_device_set_stats(pxDevice *d, int on, void *props, void *stats) {
	d->captureStats = on;
	d->getExecProps = props;
	d->getExecStats = stats;
}

int px_device_stats(pxDevice *d, void **props, void **stats) {
	*props = d->getExecProps;
	*stats = d->getExecStats;
	return d->captureStats;
}

pxResult px_compute_pipeline(pxDevice *d, pxHandle cache, pxHandle layout, pxHandle module, int n,
	const uint32_t *ids, const uint32_t *values, pxHandle *out) {
	pxSpecializationMapEntry entries[64];
	if (n > 64) {
		return -13; // VK_ERROR_UNKNOWN
	}
	for (int i = 0; i < n; i++) {
		entries[i].constantID = ids[i];
		entries[i].offset = (uint32_t)(4 * i);
		entries[i].size = 4;
	}
	pxSpecializationInfo spec = {(uint32_t)n, entries, (size_t)(4 * n), values};
	pxComputePipelineCreateInfo ci;
	memset(&ci, 0, sizeof ci);
	ci.sType = 29; // VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO
	ci.stage.sType = 18; // VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
	ci.stage.stage = PX_SHADER_STAGE_COMPUTE;
	ci.stage.module = module;
	ci.stage.pName = "main";
	ci.stage.pSpecializationInfo = n > 0 ? &spec : NULL;
	ci.layout = layout;
	ci.basePipelineIndex = -1;
	if (d->captureStats) {
		ci.flags = 0x40; // VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
	}
	return d->createComputePipelines(d->device, cache, 1, &ci, NULL, out);
}

typedef void (*PFN_GetQueueFamilies)(void *, uint32_t *, pxQueueFamilyProperties *);
typedef pxResult (*PFN_EnumDeviceExts)(void *, const char *, uint32_t *, pxExtensionProperties *);
typedef pxResult (*PFN_EnumLayers)(uint32_t *, pxLayerProperties *);

int px_queue_families(pxGetInstanceProcAddr gipa, void *instance, void *pd, pxQueueFamilyProperties *out, int max) {
	PFN_GetQueueFamilies f = (PFN_GetQueueFamilies)gipa(instance, "vkGetPhysicalDeviceQueueFamilyProperties");
	if (f == NULL) {
		return 0;
	}
	uint32_t n = 0;
	f(pd, &n, NULL);
	if (n > (uint32_t)max) {
		n = (uint32_t)max;
	}
	f(pd, &n, out);
	return (int)n;
}

pxExtensionProperties *px_device_extensions(pxGetInstanceProcAddr gipa, void *instance, void *pd, int *count) {
	*count = 0;
	PFN_EnumDeviceExts f = (PFN_EnumDeviceExts)gipa(instance, "vkEnumerateDeviceExtensionProperties");
	uint32_t n = 0;
	if (f == NULL || f(pd, NULL, &n, NULL) < 0 || n == 0) {
		return NULL;
	}
	pxExtensionProperties *p = calloc(n, sizeof *p);
	if (p == NULL) {
		return NULL;
	}
	if (f(pd, NULL, &n, p) < 0) {
		free(p);
		return NULL;
	}
	for (uint32_t i = 0; i < n; i++) {
		p[i].extensionName[255] = 0;
	}
	*count = (int)n;
	return p;
}

int px_instance_layer(pxGetInstanceProcAddr gipa, const char *name) {
	PFN_EnumLayers f = (PFN_EnumLayers)gipa(NULL, "vkEnumerateInstanceLayerProperties");
	uint32_t n = 0;
	if (f == NULL || f(&n, NULL) < 0 || n == 0) {
		return 0;
	}
	pxLayerProperties *p = calloc(n, sizeof *p);
	if (p == NULL) {
		return 0;
	}
	int found = 0;
	if (f(&n, p) >= 0) {
		for (uint32_t i = 0; i < n && !found; i++) {
			p[i].layerName[255] = 0;
			found = strcmp(p[i].layerName, name) == 0;
		}
	}
	free(p);
	return found;
}

void px_timestamp(pxDevice *d, void *cmd, pxHandle pool, uint32_t q) {
	d->writeTimestamp(cmd, PX_STAGE_BOTTOM, pool, q);
}

void px_reset_queries(pxDevice *d, void *cmd, pxHandle pool, uint32_t first, uint32_t n) {
	d->resetQueryPool(cmd, pool, first, n);
}

// ---- Validation messages ----

typedef struct pxDebugCallbackData {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	const char *pMessageIdName;
	int32_t messageIdNumber;
	const char *pMessage;
} pxDebugCallbackData;
_Static_assert(offsetof(pxDebugCallbackData, pMessageIdName) == 24, "VkDebugUtilsMessengerCallbackDataEXT.pMessageIdName");
_Static_assert(offsetof(pxDebugCallbackData, pMessage) == 40, "VkDebugUtilsMessengerCallbackDataEXT.pMessage");

typedef pxBool32 (*pxDebugCallback)(uint32_t severity, uint32_t types, const pxDebugCallbackData *data, void *user);

typedef struct pxDebugMessengerCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	uint32_t messageSeverity;
	uint32_t messageType;
	pxDebugCallback pfnUserCallback;
	void *pUserData;
} pxDebugMessengerCreateInfo;
_Static_assert(sizeof(pxDebugMessengerCreateInfo) == 48, "VkDebugUtilsMessengerCreateInfoEXT size");
_Static_assert(offsetof(pxDebugMessengerCreateInfo, pfnUserCallback) == 32, "pfnUserCallback");

typedef pxResult (*pxCreateDebugMessenger)(void *instance, const pxDebugMessengerCreateInfo *, const void *, pxHandle *);

static volatile long px_validation_errors;

static pxBool32 px_debug_cb(uint32_t severity, uint32_t types, const pxDebugCallbackData *data, void *user) {
	(void)types;
	(void)user;
	if (severity >= 0x1000) { // ERROR
		__sync_fetch_and_add(&px_validation_errors, 1);
		fprintf(stderr, "vulkan validation error: %s\n", data && data->pMessage ? data->pMessage : "?");
	} else if (severity >= 0x100) { // WARNING
		fprintf(stderr, "vulkan validation warning: %s\n", data && data->pMessage ? data->pMessage : "?");
	}
	return 0;
}

int px_enable_debug(pxGetInstanceProcAddr gipa, void *instance) {
	pxCreateDebugMessenger create = (pxCreateDebugMessenger)gipa(instance, "vkCreateDebugUtilsMessengerEXT");
	if (create == NULL) {
		return -1;
	}
	pxDebugMessengerCreateInfo ci = {1000128004, NULL, 0, 0x100 | 0x1000, 0x1 | 0x2 | 0x4, px_debug_cb, NULL};
	pxHandle m = 0;
	return create(instance, &ci, NULL, &m);
}

long px_validation_error_count(void) { return __sync_fetch_and_add(&px_validation_errors, 0); }
