// pxvk.h: the part of the Vulkan C API that the vulkan-go binding (headers
// 1.1.88) lacks or that the backend drives directly from C: the
// Properties2/Features2 structures of later versions and extensions, with
// their exact layouts checked by _Static_assert against the Khronos headers
// (Vulkan-Headers 1.3.239 for everything but VK_KHR_cooperative_matrix and
// VK_KHR_shader_bfloat16, whose layouts follow the registry), and the few
// command-buffer entry points the backend records through its own function
// pointers (push descriptors, barriers, dispatches, copies).
//
// Non-dispatchable handles are uint64_t here and on the Go side, so Go never
// holds them in pointer-typed variables (see doc.go).
#ifndef PXVK_H
#define PXVK_H

#include <stddef.h>
#include <stdint.h>

typedef uint32_t pxBool32;
typedef uint64_t pxDeviceSize;
typedef uint64_t pxHandle; // any non-dispatchable handle
typedef int32_t pxResult;
typedef void (*pxVoidFunction)(void);
typedef pxVoidFunction (*pxGetInstanceProcAddr)(void *instance, const char *name);
typedef pxVoidFunction (*pxGetDeviceProcAddr)(void *device, const char *name);

// Structure types (VkStructureType values).
enum {
	PX_ST_PHYSICAL_DEVICE_FEATURES_2 = 1000059000,
	PX_ST_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001,
	PX_ST_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES = 1000080000,
	PX_ST_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES = 1000082000,
	PX_ST_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES = 1000083000,
	PX_ST_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES = 1000094000,
	PX_ST_PHYSICAL_DEVICE_SHADER_BFLOAT16_FEATURES = 1000141000,
	PX_ST_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES = 1000168000,
	PX_ST_PHYSICAL_DEVICE_DRIVER_PROPERTIES = 1000196000,
	PX_ST_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES = 1000211000,
	PX_ST_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES = 1000225000,
	PX_ST_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES = 1000225002,
	PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV = 1000249000,
	PX_ST_COOPERATIVE_MATRIX_PROPERTIES_NV = 1000249001,
	PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV = 1000249002,
	PX_ST_PHYSICAL_DEVICE_SHADER_ATOMIC_FLOAT_FEATURES = 1000260000,
	PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR = 1000506000,
	PX_ST_COOPERATIVE_MATRIX_PROPERTIES_KHR = 1000506001,
	PX_ST_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR = 1000506002,
	PX_ST_WRITE_DESCRIPTOR_SET = 35,
	PX_ST_BUFFER_MEMORY_BARRIER = 44,
	PX_ST_MEMORY_BARRIER = 46,
	PX_ST_DESCRIPTOR_SET_ALLOCATE_INFO = 34,
};

// The common head of every chainable structure.
typedef struct pxBaseOut {
	int32_t sType;
	void *pNext;
} pxBaseOut;

// VkPhysicalDeviceProperties2 with the 824-byte core structure kept opaque
// (the Go side reads the core properties through the binding).
typedef struct pxProperties2 {
	int32_t sType;
	void *pNext;
	uint64_t properties[103];
} pxProperties2;
_Static_assert(sizeof(pxProperties2) == 840, "VkPhysicalDeviceProperties2 size");
_Static_assert(offsetof(pxProperties2, properties) == 16, "VkPhysicalDeviceProperties2.properties");

// VkPhysicalDeviceFeatures2 with VkPhysicalDeviceFeatures as its 55 VkBool32
// in declaration order.
typedef struct pxFeatures2 {
	int32_t sType;
	void *pNext;
	pxBool32 features[55];
} pxFeatures2;
_Static_assert(sizeof(pxFeatures2) == 240, "VkPhysicalDeviceFeatures2 size");
_Static_assert(offsetof(pxFeatures2, features) == 16, "VkPhysicalDeviceFeatures2.features");

// Indices into pxFeatures2.features (VkPhysicalDeviceFeatures members).
enum {
	PX_FEAT_ROBUST_BUFFER_ACCESS = 0,
	PX_FEAT_SHADER_FLOAT64 = 40,
	PX_FEAT_SHADER_INT64 = 41,
	PX_FEAT_SHADER_INT16 = 42,
};

typedef struct pxSubgroupProperties {
	int32_t sType;
	void *pNext;
	uint32_t subgroupSize;
	uint32_t supportedStages;
	uint32_t supportedOperations;
	pxBool32 quadOperationsInAllStages;
} pxSubgroupProperties;
_Static_assert(sizeof(pxSubgroupProperties) == 32, "VkPhysicalDeviceSubgroupProperties size");
_Static_assert(offsetof(pxSubgroupProperties, subgroupSize) == 16, "subgroupSize");
_Static_assert(offsetof(pxSubgroupProperties, quadOperationsInAllStages) == 28, "quadOperationsInAllStages");

typedef struct pxSubgroupSizeControlProperties {
	int32_t sType;
	void *pNext;
	uint32_t minSubgroupSize;
	uint32_t maxSubgroupSize;
	uint32_t maxComputeWorkgroupSubgroups;
	uint32_t requiredSubgroupSizeStages;
} pxSubgroupSizeControlProperties;
_Static_assert(sizeof(pxSubgroupSizeControlProperties) == 32, "VkPhysicalDeviceSubgroupSizeControlProperties size");
_Static_assert(offsetof(pxSubgroupSizeControlProperties, requiredSubgroupSizeStages) == 28, "requiredSubgroupSizeStages");

typedef struct pxSubgroupSizeControlFeatures {
	int32_t sType;
	void *pNext;
	pxBool32 subgroupSizeControl;
	pxBool32 computeFullSubgroups;
} pxSubgroupSizeControlFeatures;
_Static_assert(sizeof(pxSubgroupSizeControlFeatures) == 24, "VkPhysicalDeviceSubgroupSizeControlFeatures size");
_Static_assert(offsetof(pxSubgroupSizeControlFeatures, computeFullSubgroups) == 20, "computeFullSubgroups");

typedef struct px16BitStorageFeatures {
	int32_t sType;
	void *pNext;
	pxBool32 storageBuffer16BitAccess;
	pxBool32 uniformAndStorageBuffer16BitAccess;
	pxBool32 storagePushConstant16;
	pxBool32 storageInputOutput16;
} px16BitStorageFeatures;
_Static_assert(sizeof(px16BitStorageFeatures) == 32, "VkPhysicalDevice16BitStorageFeatures size");
_Static_assert(offsetof(px16BitStorageFeatures, storageInputOutput16) == 28, "storageInputOutput16");

typedef struct pxFloat16Int8Features {
	int32_t sType;
	void *pNext;
	pxBool32 shaderFloat16;
	pxBool32 shaderInt8;
} pxFloat16Int8Features;
_Static_assert(sizeof(pxFloat16Int8Features) == 24, "VkPhysicalDeviceShaderFloat16Int8Features size");
_Static_assert(offsetof(pxFloat16Int8Features, shaderInt8) == 20, "shaderInt8");

typedef struct pxDriverProperties {
	int32_t sType;
	void *pNext;
	uint32_t driverID;
	char driverName[256];
	char driverInfo[256];
	uint8_t conformanceVersion[4];
} pxDriverProperties;
_Static_assert(sizeof(pxDriverProperties) == 536, "VkPhysicalDeviceDriverProperties size");
_Static_assert(offsetof(pxDriverProperties, driverName) == 20, "driverName");
_Static_assert(offsetof(pxDriverProperties, driverInfo) == 276, "driverInfo");
_Static_assert(offsetof(pxDriverProperties, conformanceVersion) == 532, "conformanceVersion");

typedef struct pxMemoryModelFeatures {
	int32_t sType;
	void *pNext;
	pxBool32 vulkanMemoryModel;
	pxBool32 vulkanMemoryModelDeviceScope;
	pxBool32 vulkanMemoryModelAvailabilityVisibilityChains;
} pxMemoryModelFeatures;
_Static_assert(sizeof(pxMemoryModelFeatures) == 32, "VkPhysicalDeviceVulkanMemoryModelFeatures size");
_Static_assert(offsetof(pxMemoryModelFeatures, vulkanMemoryModelAvailabilityVisibilityChains) == 24, "chains");

typedef struct pxAtomicFloatFeatures {
	int32_t sType;
	void *pNext;
	pxBool32 flags[12]; // shaderBufferFloat32Atomics, shaderBufferFloat32AtomicAdd, ...
} pxAtomicFloatFeatures;
_Static_assert(sizeof(pxAtomicFloatFeatures) == 64, "VkPhysicalDeviceShaderAtomicFloatFeaturesEXT size");
_Static_assert(offsetof(pxAtomicFloatFeatures, flags) + 4 == 20, "shaderBufferFloat32AtomicAdd at 20");

typedef struct pxPushDescriptorProperties {
	int32_t sType;
	void *pNext;
	uint32_t maxPushDescriptors;
} pxPushDescriptorProperties;
_Static_assert(sizeof(pxPushDescriptorProperties) == 24, "VkPhysicalDevicePushDescriptorPropertiesKHR size");

typedef struct pxMaintenance3Properties {
	int32_t sType;
	void *pNext;
	uint32_t maxPerSetDescriptors;
	pxDeviceSize maxMemoryAllocationSize;
} pxMaintenance3Properties;
_Static_assert(sizeof(pxMaintenance3Properties) == 32, "VkPhysicalDeviceMaintenance3Properties size");
_Static_assert(offsetof(pxMaintenance3Properties, maxMemoryAllocationSize) == 24, "maxMemoryAllocationSize");

// VK_NV_cooperative_matrix.
typedef struct pxCoopMatFeaturesNV {
	int32_t sType;
	void *pNext;
	pxBool32 cooperativeMatrix;
	pxBool32 cooperativeMatrixRobustBufferAccess;
} pxCoopMatFeaturesNV;
_Static_assert(sizeof(pxCoopMatFeaturesNV) == 24, "VkPhysicalDeviceCooperativeMatrixFeaturesNV size");

typedef struct pxCoopMatPropertiesNV {
	int32_t sType;
	void *pNext;
	uint32_t MSize, NSize, KSize;
	int32_t AType, BType, CType, DType;
	int32_t scope;
} pxCoopMatPropertiesNV;
_Static_assert(sizeof(pxCoopMatPropertiesNV) == 48, "VkCooperativeMatrixPropertiesNV size");
_Static_assert(offsetof(pxCoopMatPropertiesNV, DType) == 40, "VkCooperativeMatrixPropertiesNV.DType");
_Static_assert(offsetof(pxCoopMatPropertiesNV, scope) == 44, "VkCooperativeMatrixPropertiesNV.scope");

typedef struct pxCoopMatStagesNV {
	int32_t sType;
	void *pNext;
	uint32_t cooperativeMatrixSupportedStages;
} pxCoopMatStagesNV;
_Static_assert(sizeof(pxCoopMatStagesNV) == 24, "VkPhysicalDeviceCooperativeMatrixPropertiesNV size");

// VK_KHR_cooperative_matrix (matmul_coop_khr; the other tensor-core
// kernels use the NV extension).
typedef struct pxCoopMatFeaturesKHR {
	int32_t sType;
	void *pNext;
	pxBool32 cooperativeMatrix;
	pxBool32 cooperativeMatrixRobustBufferAccess;
} pxCoopMatFeaturesKHR;
_Static_assert(sizeof(pxCoopMatFeaturesKHR) == 24, "VkPhysicalDeviceCooperativeMatrixFeaturesKHR size");

typedef struct pxCoopMatPropertiesKHR {
	int32_t sType;
	void *pNext;
	uint32_t MSize, NSize, KSize;
	int32_t AType, BType, CType, ResultType;
	pxBool32 saturatingAccumulation;
	int32_t scope;
} pxCoopMatPropertiesKHR;
_Static_assert(sizeof(pxCoopMatPropertiesKHR) == 56, "VkCooperativeMatrixPropertiesKHR size");
_Static_assert(offsetof(pxCoopMatPropertiesKHR, scope) == 48, "VkCooperativeMatrixPropertiesKHR.scope");

typedef struct pxBFloat16Features {
	int32_t sType;
	void *pNext;
	pxBool32 shaderBFloat16Type;
	pxBool32 shaderBFloat16DotProduct;
	pxBool32 shaderBFloat16CooperativeMatrix;
} pxBFloat16Features;
_Static_assert(sizeof(pxBFloat16Features) == 32, "VkPhysicalDeviceShaderBfloat16FeaturesKHR size");

// VkComponentTypeKHR / NV values and the subgroup scope.
enum {
	PX_COMPONENT_FLOAT16 = 0,
	PX_COMPONENT_FLOAT32 = 1,
	PX_COMPONENT_BFLOAT16 = 1000141000,
	PX_SCOPE_SUBGROUP = 3,
};

// Command-buffer structures recorded from C.
typedef struct pxDescriptorBufferInfo {
	pxHandle buffer;
	pxDeviceSize offset;
	pxDeviceSize range;
} pxDescriptorBufferInfo;
_Static_assert(sizeof(pxDescriptorBufferInfo) == 24, "VkDescriptorBufferInfo size");

typedef struct pxWriteDescriptorSet {
	int32_t sType;
	const void *pNext;
	pxHandle dstSet;
	uint32_t dstBinding;
	uint32_t dstArrayElement;
	uint32_t descriptorCount;
	int32_t descriptorType;
	const void *pImageInfo;
	const pxDescriptorBufferInfo *pBufferInfo;
	const void *pTexelBufferView;
} pxWriteDescriptorSet;
_Static_assert(sizeof(pxWriteDescriptorSet) == 64, "VkWriteDescriptorSet size");
_Static_assert(offsetof(pxWriteDescriptorSet, dstBinding) == 24, "VkWriteDescriptorSet.dstBinding");
_Static_assert(offsetof(pxWriteDescriptorSet, descriptorType) == 36, "VkWriteDescriptorSet.descriptorType");
_Static_assert(offsetof(pxWriteDescriptorSet, pBufferInfo) == 48, "VkWriteDescriptorSet.pBufferInfo");

typedef struct pxMemoryBarrier {
	int32_t sType;
	const void *pNext;
	uint32_t srcAccessMask;
	uint32_t dstAccessMask;
} pxMemoryBarrier;
_Static_assert(sizeof(pxMemoryBarrier) == 24, "VkMemoryBarrier size");

typedef struct pxBufferMemoryBarrier {
	int32_t sType;
	const void *pNext;
	uint32_t srcAccessMask;
	uint32_t dstAccessMask;
	uint32_t srcQueueFamilyIndex;
	uint32_t dstQueueFamilyIndex;
	pxHandle buffer;
	pxDeviceSize offset;
	pxDeviceSize size;
} pxBufferMemoryBarrier;
_Static_assert(sizeof(pxBufferMemoryBarrier) == 56, "VkBufferMemoryBarrier size");
_Static_assert(offsetof(pxBufferMemoryBarrier, buffer) == 32, "VkBufferMemoryBarrier.buffer");
_Static_assert(offsetof(pxBufferMemoryBarrier, size) == 48, "VkBufferMemoryBarrier.size");

typedef struct pxBufferCopy {
	pxDeviceSize srcOffset;
	pxDeviceSize dstOffset;
	pxDeviceSize size;
} pxBufferCopy;
_Static_assert(sizeof(pxBufferCopy) == 24, "VkBufferCopy size");

typedef struct pxDescriptorSetAllocateInfo {
	int32_t sType;
	const void *pNext;
	pxHandle descriptorPool;
	uint32_t descriptorSetCount;
	const pxHandle *pSetLayouts;
} pxDescriptorSetAllocateInfo;
_Static_assert(sizeof(pxDescriptorSetAllocateInfo) == 40, "VkDescriptorSetAllocateInfo size");
_Static_assert(offsetof(pxDescriptorSetAllocateInfo, pSetLayouts) == 32, "VkDescriptorSetAllocateInfo.pSetLayouts");

// Structures of calls made from C rather than through the binding: the
// binding converts slice arguments (pSubmits, pCreateInfos, output arrays)
// into C memory whose release it ties to a finalizer on a temporary, which
// the garbage collector may run while the call is still reading it.
typedef struct pxSubmitInfo {
	int32_t sType;
	const void *pNext;
	uint32_t waitSemaphoreCount;
	const pxHandle *pWaitSemaphores;
	const uint32_t *pWaitDstStageMask;
	uint32_t commandBufferCount;
	void *const *pCommandBuffers;
	uint32_t signalSemaphoreCount;
	const pxHandle *pSignalSemaphores;
} pxSubmitInfo;
_Static_assert(sizeof(pxSubmitInfo) == 72, "VkSubmitInfo size");
_Static_assert(offsetof(pxSubmitInfo, commandBufferCount) == 40, "VkSubmitInfo.commandBufferCount");
_Static_assert(offsetof(pxSubmitInfo, pCommandBuffers) == 48, "VkSubmitInfo.pCommandBuffers");
_Static_assert(offsetof(pxSubmitInfo, pSignalSemaphores) == 64, "VkSubmitInfo.pSignalSemaphores");

typedef struct pxSpecializationMapEntry {
	uint32_t constantID;
	uint32_t offset;
	size_t size;
} pxSpecializationMapEntry;
_Static_assert(sizeof(pxSpecializationMapEntry) == 16, "VkSpecializationMapEntry size");

typedef struct pxSpecializationInfo {
	uint32_t mapEntryCount;
	const pxSpecializationMapEntry *pMapEntries;
	size_t dataSize;
	const void *pData;
} pxSpecializationInfo;
_Static_assert(sizeof(pxSpecializationInfo) == 32, "VkSpecializationInfo size");
_Static_assert(offsetof(pxSpecializationInfo, pData) == 24, "VkSpecializationInfo.pData");

typedef struct pxShaderStageCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	uint32_t stage;
	pxHandle module;
	const char *pName;
	const pxSpecializationInfo *pSpecializationInfo;
} pxShaderStageCreateInfo;
_Static_assert(sizeof(pxShaderStageCreateInfo) == 48, "VkPipelineShaderStageCreateInfo size");
_Static_assert(offsetof(pxShaderStageCreateInfo, stage) == 20, "VkPipelineShaderStageCreateInfo.stage");
_Static_assert(offsetof(pxShaderStageCreateInfo, pSpecializationInfo) == 40, "VkPipelineShaderStageCreateInfo.pSpecializationInfo");

typedef struct pxComputePipelineCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	pxShaderStageCreateInfo stage;
	pxHandle layout;
	pxHandle basePipelineHandle;
	int32_t basePipelineIndex;
} pxComputePipelineCreateInfo;
_Static_assert(sizeof(pxComputePipelineCreateInfo) == 96, "VkComputePipelineCreateInfo size");
_Static_assert(offsetof(pxComputePipelineCreateInfo, stage) == 24, "VkComputePipelineCreateInfo.stage");
_Static_assert(offsetof(pxComputePipelineCreateInfo, layout) == 72, "VkComputePipelineCreateInfo.layout");
_Static_assert(offsetof(pxComputePipelineCreateInfo, basePipelineIndex) == 88, "VkComputePipelineCreateInfo.basePipelineIndex");

typedef struct pxQueueFamilyProperties {
	uint32_t queueFlags;
	uint32_t queueCount;
	uint32_t timestampValidBits;
	uint32_t minImageTransferGranularity[3];
} pxQueueFamilyProperties;
_Static_assert(sizeof(pxQueueFamilyProperties) == 24, "VkQueueFamilyProperties size");

typedef struct pxExtensionProperties {
	char extensionName[256];
	uint32_t specVersion;
} pxExtensionProperties;
_Static_assert(sizeof(pxExtensionProperties) == 260, "VkExtensionProperties size");

typedef struct pxLayerProperties {
	char layerName[256];
	uint32_t specVersion;
	uint32_t implementationVersion;
	char description[256];
} pxLayerProperties;
_Static_assert(sizeof(pxLayerProperties) == 520, "VkLayerProperties size");

// ---- What the Go side calls ----

// px_load dlopens libvulkan.so.1 (then libvulkan.so) and returns its
// vkGetInstanceProcAddr, or NULL with a message in err.
void *px_load(char *err, int errlen);

// pxDeviceInfo is the flat result of px_query for one physical device.
typedef struct pxDeviceInfo {
	// Which structures were chained (the device's version or extensions
	// allow them).
	int hasProps2, hasDriver, hasSizeControl, has16Bit, hasFloat16, hasMemoryModel;
	int hasCoopNV, hasCoopKHR, hasPushDescriptor, hasAtomicFloat, hasBFloat16;
	uint32_t subgroupSize, subgroupStages, subgroupOps;
	uint32_t minSubgroupSize, maxSubgroupSize;
	pxBool32 subgroupSizeControl, computeFullSubgroups;
	pxBool32 storageBuffer16BitAccess, shaderFloat16, shaderInt8;
	pxBool32 shaderFloat64, shaderInt64, shaderInt16;
	pxBool32 vulkanMemoryModel, vulkanMemoryModelDeviceScope;
	pxBool32 coopNV, coopKHR, atomicFloat32Add, bf16Type, bf16CoopMat;
	uint32_t maxPushDescriptors;
	uint64_t maxMemoryAllocationSize;
	uint32_t driverID;
	char driverName[256];
	char driverInfo[256];
	// Cooperative matrix shapes (at most 32 of each).
	int nCoopNV, nCoopKHR;
	pxCoopMatPropertiesNV coopNVProps[32];
	pxCoopMatPropertiesKHR coopKHRProps[32];
} pxDeviceInfo;

// px_query fills info for physical device pd of instance (apiVersion is the
// device's; exts its extension names, n of them).
void px_query(pxGetInstanceProcAddr gipa, void *instance, void *pd, uint32_t apiVersion,
	const char **exts, int n, pxDeviceInfo *info);

// pxEnable lists the features to switch on at device creation.
typedef struct pxEnable {
	int chain16Bit, chainFloat16, chainMemoryModel, chainCoopNV, chainCoopKHR;
	pxBool32 shaderFloat64, shaderInt16;
	int chainExecStats; // VK_KHR_pipeline_executable_properties (diagnostics)
} pxEnable;

// px_feature_chain allocates (malloc) the VkPhysicalDeviceFeatures2 chain
// for VkDeviceCreateInfo.pNext; px_free releases it after vkCreateDevice.
void *px_feature_chain(const pxEnable *e);
void px_free(void *p);

// pxDevice holds the device-level function pointers used while recording.
typedef struct pxDevice pxDevice;
pxDevice *px_device_new(pxGetInstanceProcAddr gipa, void *instance, void *device, int pushDescriptors, char *err, int errlen);
void px_device_free(pxDevice *d);

// px_device_capture_stats makes later pipelines capture the driver's
// statistics (registers, spills, shared memory ...) when on is 1 and the
// device was created with VK_KHR_pipeline_executable_properties.
void px_device_capture_stats(pxDevice *d, pxGetInstanceProcAddr gipa, void *instance, int on);

// px_pipeline_stats writes the driver's statistics of pipeline as
// "name=value" pairs separated by ", " into out; returns 0 when the device
// cannot report them.
int px_pipeline_stats(pxDevice *d, pxHandle pipeline, char *out, int outlen);

// px_dispatch binds pipeline, its n storage-buffer descriptors (push
// descriptors, or a set allocated from pool when pool != 0), the push
// constants and dispatches gx*gy*gz workgroups. Returns a VkResult.
pxResult px_dispatch(pxDevice *d, void *cmd, pxHandle pipeline, pxHandle layout, pxHandle setLayout, pxHandle pool,
	int n, const uint64_t *buffers, const uint64_t *offsets, const uint64_t *ranges,
	const void *push, uint32_t pushSize, uint32_t gx, uint32_t gy, uint32_t gz);

// px_barrier records a compute/transfer to compute/transfer dependency
// making the n listed buffer ranges' writes visible (a global memory
// barrier when n == 0).
void px_barrier(pxDevice *d, void *cmd, int n, const uint64_t *buffers, const uint64_t *offsets, const uint64_t *sizes);

// px_barrier_host makes every earlier write visible to host reads after the
// batch's fence.
void px_barrier_host(pxDevice *d, void *cmd);

// px_copy records a buffer-to-buffer copy; px_fill a vkCmdFillBuffer.
void px_copy(pxDevice *d, void *cmd, pxHandle src, pxHandle dst, uint64_t srcOff, uint64_t dstOff, uint64_t size);
void px_fill(pxDevice *d, void *cmd, pxHandle dst, uint64_t off, uint64_t size, uint32_t value);

// px_submit submits one command buffer signalling fence.
pxResult px_submit(pxDevice *d, void *queue, void *cmd, pxHandle fence);

// px_compute_pipeline creates a compute pipeline from module (entry "main")
// with n 32-bit specialization constants.
pxResult px_compute_pipeline(pxDevice *d, pxHandle cache, pxHandle layout, pxHandle module, int n,
	const uint32_t *ids, const uint32_t *values, pxHandle *out);

// px_queue_families writes up to max queue family properties and returns
// the count; px_device_extensions returns a malloc'd array of the device's
// extensions (count in *n, free with px_free); px_instance_layer returns
// whether an instance layer is installed.
int px_queue_families(pxGetInstanceProcAddr gipa, void *instance, void *pd, pxQueueFamilyProperties *out, int max);
pxExtensionProperties *px_device_extensions(pxGetInstanceProcAddr gipa, void *instance, void *pd, int *n);
int px_instance_layer(pxGetInstanceProcAddr gipa, const char *name);

// px_timestamp writes a timestamp (at the bottom of the pipe) into query q
// of pool; px_reset_queries resets n queries.
void px_timestamp(pxDevice *d, void *cmd, pxHandle pool, uint32_t q);
void px_reset_queries(pxDevice *d, void *cmd, pxHandle pool, uint32_t first, uint32_t n);

// px_enable_debug installs a VK_EXT_debug_utils messenger that prints
// validation warnings and errors to stderr and counts the errors
// (px_validation_error_count).
int px_enable_debug(pxGetInstanceProcAddr gipa, void *instance);
long px_validation_error_count(void);

// ---- Presenting (cmd/parallax-view) ----
//
// A window's swapchain on the device that runs the model: a compute kernel
// draws each frame straight into the acquired swapchain image (a storage
// image), or, where the surface or its format cannot be a storage image,
// into an RGBA8 image of our own that is then blitted into the swapchain
// image. Frames are synchronous: px_present_frame returns once the frame's
// commands have completed, so the buffers it read may be written at once.

// px_write_without_format reports whether the device supports
// shaderStorageImageWriteWithoutFormat (the direct path's shader needs it).
pxBool32 px_write_without_format(pxGetInstanceProcAddr gipa, void *instance, void *pd);

// px_feature_chain_present is px_feature_chain with
// shaderStorageImageWriteWithoutFormat switched on as well when wwf is set.
void *px_feature_chain_present(const pxEnable *e, pxBool32 wwf);

// pxSwapInfo describes the swapchain px_present_swapchain made.
typedef struct pxSwapInfo {
	uint32_t width, height, imageCount;
	int32_t format;   // VkFormat of the swapchain images
	int32_t direct;   // 1: frames are drawn into the swapchain image itself
	int32_t readable; // 1: frames can be read back (px_present_frame's readback)
} pxSwapInfo;

typedef struct pxPresent pxPresent;

// px_present_new prepares presenting to surface from queue (family
// family) of device: checks that the family can present, creates the draw
// kernel's layouts (binding 0 a storage image, 1..PX_VIEW_BUFFERS storage
// buffers, 128 bytes of push constants), a command buffer and the frame's
// synchronisation objects. wwf says whether the device was created with
// shaderStorageImageWriteWithoutFormat. It takes ownership of surface
// (destroyed by px_present_free, also on failure).
enum { PX_VIEW_BUFFERS = 4 };
pxPresent *px_present_new(pxGetInstanceProcAddr gipa, void *instance, void *pd, void *device, void *queue,
	uint32_t family, pxHandle surface, pxBool32 wwf, char *err, int errlen);

// px_present_layout returns the pipeline layout for the draw kernel.
pxHandle px_present_layout(pxPresent *p);

// px_present_swapchain (re)creates the swapchain for a framebuffer of
// width x height (the surface's current extent wins when it has one);
// forceOffscreen selects the offscreen-image path even where the direct
// one works. Returns 0, or 1 when the surface has a zero extent (a
// minimised window: try again later), or a negative VkResult with a
// message in err.
pxResult px_present_swapchain(pxPresent *p, uint32_t width, uint32_t height, int forceOffscreen, pxSwapInfo *out,
	char *err, int errlen);

// px_present_frame records and submits one frame: a global memory barrier
// (ordering it after earlier submissions' writes), the draw kernel
// (pipeline) over gx x gy workgroups with the target image at binding 0
// and the nbuf buffer ranges after it, optionally a copy of the frame into
// readback at readbackOff (tightly packed rows, 4 bytes a pixel, in the
// target's byte order: see px_present_readback_format), then presents
// it and waits for the frame to complete. Returns 0, VK_SUBOPTIMAL_KHR
// (1000001003) when the swapchain should be recreated, or a negative
// VkResult (VK_ERROR_OUT_OF_DATE_KHR: recreate and draw again).
pxResult px_present_frame(pxPresent *p, pxHandle pipeline, int nbuf, const uint64_t *bufs, const uint64_t *offs,
	const uint64_t *ranges, const void *push, uint32_t pushSize, uint32_t gx, uint32_t gy, pxHandle readback,
	uint64_t readbackOff);

// px_present_readback_format is the VkFormat of the pixels a readback
// holds (the swapchain's on the direct path, R8G8B8A8_UNORM otherwise).
int32_t px_present_readback_format(pxPresent *p);

// px_present_free waits for the device to be idle and destroys the
// swapchain, the surface and every object px_present_new made.
void px_present_free(pxPresent *p);

// px_destroy_surface destroys a surface no presenter took.
void px_destroy_surface(pxGetInstanceProcAddr gipa, void *instance, pxHandle surface);

#endif
