// present.c: what drawing into a window needs (parallax-view): the
// surface and swapchain structures and calls of VK_KHR_surface and
// VK_KHR_swapchain, the images the frame is drawn into, and the feature
// chain of a device that presents. The compute side is in shim.c.
#include "pxvk.h"
#include "pfn.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- Presenting ----
//
// The Vulkan 1.0 and VK_KHR_surface/VK_KHR_swapchain structures used to
// present, declared here with their x86-64/aarch64 layouts asserted (the
// binding's would need Go-side slices during the calls: shim.c, Recording).

typedef struct pxExtent2D {
	uint32_t width, height;
} pxExtent2D;

typedef struct pxSurfaceCaps {
	uint32_t minImageCount, maxImageCount;
	pxExtent2D currentExtent, minImageExtent, maxImageExtent;
	uint32_t maxImageArrayLayers, supportedTransforms, currentTransform, supportedCompositeAlpha, supportedUsageFlags;
} pxSurfaceCaps;
_Static_assert(sizeof(pxSurfaceCaps) == 52, "VkSurfaceCapabilitiesKHR size");

typedef struct pxSurfaceFormat {
	int32_t format, colorSpace;
} pxSurfaceFormat;

typedef struct pxSwapchainCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	pxHandle surface;
	uint32_t minImageCount;
	int32_t imageFormat, imageColorSpace;
	pxExtent2D imageExtent;
	uint32_t imageArrayLayers, imageUsage;
	int32_t imageSharingMode;
	uint32_t queueFamilyIndexCount;
	const uint32_t *pQueueFamilyIndices;
	uint32_t preTransform, compositeAlpha;
	int32_t presentMode;
	pxBool32 clipped;
	pxHandle oldSwapchain;
} pxSwapchainCreateInfo;
_Static_assert(sizeof(pxSwapchainCreateInfo) == 104, "VkSwapchainCreateInfoKHR size");
_Static_assert(offsetof(pxSwapchainCreateInfo, surface) == 24, "VkSwapchainCreateInfoKHR.surface");
_Static_assert(offsetof(pxSwapchainCreateInfo, pQueueFamilyIndices) == 72, "VkSwapchainCreateInfoKHR.pQueueFamilyIndices");
_Static_assert(offsetof(pxSwapchainCreateInfo, oldSwapchain) == 96, "VkSwapchainCreateInfoKHR.oldSwapchain");

typedef struct pxSubresourceRange {
	uint32_t aspectMask, baseMipLevel, levelCount, baseArrayLayer, layerCount;
} pxSubresourceRange;

typedef struct pxImageViewCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	pxHandle image;
	int32_t viewType, format;
	int32_t components[4];
	pxSubresourceRange range;
} pxImageViewCreateInfo;
_Static_assert(sizeof(pxImageViewCreateInfo) == 80, "VkImageViewCreateInfo size");
_Static_assert(offsetof(pxImageViewCreateInfo, range) == 56, "VkImageViewCreateInfo.subresourceRange");

typedef struct pxImageMemoryBarrier {
	int32_t sType;
	const void *pNext;
	uint32_t srcAccessMask, dstAccessMask;
	int32_t oldLayout, newLayout;
	uint32_t srcQueueFamilyIndex, dstQueueFamilyIndex;
	pxHandle image;
	pxSubresourceRange range;
} pxImageMemoryBarrier;
_Static_assert(sizeof(pxImageMemoryBarrier) == 72, "VkImageMemoryBarrier size");
_Static_assert(offsetof(pxImageMemoryBarrier, image) == 40, "VkImageMemoryBarrier.image");

typedef struct pxPresentInfo {
	int32_t sType;
	const void *pNext;
	uint32_t waitSemaphoreCount;
	const pxHandle *pWaitSemaphores;
	uint32_t swapchainCount;
	const pxHandle *pSwapchains;
	const uint32_t *pImageIndices;
	pxResult *pResults;
} pxPresentInfo;
_Static_assert(sizeof(pxPresentInfo) == 64, "VkPresentInfoKHR size");
_Static_assert(offsetof(pxPresentInfo, pSwapchains) == 40, "VkPresentInfoKHR.pSwapchains");

typedef struct pxSetLayoutBinding {
	uint32_t binding;
	int32_t descriptorType;
	uint32_t descriptorCount, stageFlags;
	const void *pImmutableSamplers;
} pxSetLayoutBinding;
_Static_assert(sizeof(pxSetLayoutBinding) == 24, "VkDescriptorSetLayoutBinding size");

typedef struct pxSetLayoutCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags, bindingCount;
	const pxSetLayoutBinding *pBindings;
} pxSetLayoutCreateInfo;
_Static_assert(sizeof(pxSetLayoutCreateInfo) == 32, "VkDescriptorSetLayoutCreateInfo size");

typedef struct pxPushConstantRange {
	uint32_t stageFlags, offset, size;
} pxPushConstantRange;

typedef struct pxPipelineLayoutCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags, setLayoutCount;
	const pxHandle *pSetLayouts;
	uint32_t pushConstantRangeCount;
	const pxPushConstantRange *pPushConstantRanges;
} pxPipelineLayoutCreateInfo;
_Static_assert(sizeof(pxPipelineLayoutCreateInfo) == 48, "VkPipelineLayoutCreateInfo size");
_Static_assert(offsetof(pxPipelineLayoutCreateInfo, pPushConstantRanges) == 40, "VkPipelineLayoutCreateInfo.pPushConstantRanges");

typedef struct pxPoolSize {
	int32_t type;
	uint32_t count;
} pxPoolSize;

typedef struct pxDescriptorPoolCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags, maxSets, poolSizeCount;
	const pxPoolSize *pPoolSizes;
} pxDescriptorPoolCreateInfo;
_Static_assert(sizeof(pxDescriptorPoolCreateInfo) == 40, "VkDescriptorPoolCreateInfo size");
_Static_assert(offsetof(pxDescriptorPoolCreateInfo, pPoolSizes) == 32, "VkDescriptorPoolCreateInfo.pPoolSizes");

typedef struct pxDescriptorImageInfo {
	pxHandle sampler, imageView;
	int32_t imageLayout;
} pxDescriptorImageInfo;
_Static_assert(sizeof(pxDescriptorImageInfo) == 24, "VkDescriptorImageInfo size");

typedef struct pxCommandPoolCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags, queueFamilyIndex;
} pxCommandPoolCreateInfo;
_Static_assert(sizeof(pxCommandPoolCreateInfo) == 24, "VkCommandPoolCreateInfo size");

typedef struct pxCommandBufferAllocateInfo {
	int32_t sType;
	const void *pNext;
	pxHandle commandPool;
	int32_t level;
	uint32_t commandBufferCount;
} pxCommandBufferAllocateInfo;
_Static_assert(sizeof(pxCommandBufferAllocateInfo) == 32, "VkCommandBufferAllocateInfo size");

typedef struct pxCommandBufferBeginInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	const void *pInheritanceInfo;
} pxCommandBufferBeginInfo;
_Static_assert(sizeof(pxCommandBufferBeginInfo) == 32, "VkCommandBufferBeginInfo size");

typedef struct pxSimpleCreateInfo { // VkSemaphoreCreateInfo, VkFenceCreateInfo
	int32_t sType;
	const void *pNext;
	uint32_t flags;
} pxSimpleCreateInfo;
_Static_assert(sizeof(pxSimpleCreateInfo) == 24, "VkSemaphoreCreateInfo size");

typedef struct pxImageCreateInfo {
	int32_t sType;
	const void *pNext;
	uint32_t flags;
	int32_t imageType, format;
	uint32_t extent[3];
	uint32_t mipLevels, arrayLayers, samples;
	int32_t tiling;
	uint32_t usage;
	int32_t sharingMode;
	uint32_t queueFamilyIndexCount;
	const uint32_t *pQueueFamilyIndices;
	int32_t initialLayout;
} pxImageCreateInfo;
_Static_assert(sizeof(pxImageCreateInfo) == 88, "VkImageCreateInfo size");
_Static_assert(offsetof(pxImageCreateInfo, pQueueFamilyIndices) == 72, "VkImageCreateInfo.pQueueFamilyIndices");

typedef struct pxMemoryRequirements {
	pxDeviceSize size, alignment;
	uint32_t memoryTypeBits;
} pxMemoryRequirements;
_Static_assert(sizeof(pxMemoryRequirements) == 24, "VkMemoryRequirements size");

typedef struct pxMemoryAllocateInfo {
	int32_t sType;
	const void *pNext;
	pxDeviceSize allocationSize;
	uint32_t memoryTypeIndex;
} pxMemoryAllocateInfo;
_Static_assert(sizeof(pxMemoryAllocateInfo) == 32, "VkMemoryAllocateInfo size");

typedef struct pxMemoryProperties {
	uint32_t memoryTypeCount;
	struct {
		uint32_t propertyFlags, heapIndex;
	} memoryTypes[32];
	uint32_t memoryHeapCount;
	struct {
		pxDeviceSize size;
		uint32_t flags;
	} memoryHeaps[16];
} pxMemoryProperties;
_Static_assert(sizeof(pxMemoryProperties) == 520, "VkPhysicalDeviceMemoryProperties size");

typedef struct pxSubresourceLayers {
	uint32_t aspectMask, mipLevel, baseArrayLayer, layerCount;
} pxSubresourceLayers;

typedef struct pxBufferImageCopy {
	pxDeviceSize bufferOffset;
	uint32_t bufferRowLength, bufferImageHeight;
	pxSubresourceLayers imageSubresource;
	int32_t imageOffset[3];
	uint32_t imageExtent[3];
} pxBufferImageCopy;
_Static_assert(sizeof(pxBufferImageCopy) == 56, "VkBufferImageCopy size");

typedef struct pxImageBlit {
	pxSubresourceLayers srcSubresource;
	int32_t srcOffsets[2][3];
	pxSubresourceLayers dstSubresource;
	int32_t dstOffsets[2][3];
} pxImageBlit;
_Static_assert(sizeof(pxImageBlit) == 80, "VkImageBlit size");

typedef struct pxFormatProperties {
	uint32_t linearTilingFeatures, optimalTilingFeatures, bufferFeatures;
} pxFormatProperties;

enum {
	PX_FMT_R8G8B8A8_UNORM = 37,
	PX_FMT_B8G8R8A8_UNORM = 44,
	PX_LAYOUT_UNDEFINED = 0,
	PX_LAYOUT_GENERAL = 1,
	PX_LAYOUT_TRANSFER_SRC = 6,
	PX_LAYOUT_TRANSFER_DST = 7,
	PX_LAYOUT_PRESENT_SRC = 1000001002,
	PX_USAGE_TRANSFER_SRC = 0x1,
	PX_USAGE_TRANSFER_DST = 0x2,
	PX_USAGE_STORAGE = 0x8,
	PX_FORMAT_FEATURE_STORAGE_IMAGE = 0x2,
	PX_FORMAT_FEATURE_BLIT_DST = 0x800,
	PX_DESCRIPTOR_STORAGE_IMAGE = 3,
	PX_ACCESS_MEMORY_READ = 0x8000,
	PX_ASPECT_COLOR = 0x1,
	PX_RESULT_SUBOPTIMAL = 1000001003,
	PX_RESULT_OUT_OF_DATE = -1000001004,
	PX_FEAT_WRITE_WITHOUT_FORMAT = 32, // VkPhysicalDeviceFeatures.shaderStorageImageWriteWithoutFormat
};

typedef void (*PFN_GetFeatures)(void *, pxBool32 *);
typedef void (*PFN_GetFormatProperties)(void *, int32_t, pxFormatProperties *);
typedef void (*PFN_GetMemoryProperties)(void *, pxMemoryProperties *);
typedef pxResult (*PFN_GetSurfaceSupport)(void *, uint32_t, pxHandle, pxBool32 *);
typedef pxResult (*PFN_GetSurfaceCaps)(void *, pxHandle, pxSurfaceCaps *);
typedef pxResult (*PFN_GetSurfaceFormats)(void *, pxHandle, uint32_t *, pxSurfaceFormat *);
typedef pxResult (*PFN_GetPresentModes)(void *, pxHandle, uint32_t *, int32_t *);
typedef void (*PFN_DestroySurface)(void *, pxHandle, const void *);
typedef pxResult (*PFN_Create)(void *, const void *, const void *, pxHandle *);
typedef void (*PFN_Destroy)(void *, pxHandle, const void *);
typedef pxResult (*PFN_GetSwapchainImages)(void *, pxHandle, uint32_t *, pxHandle *);
typedef pxResult (*PFN_AcquireNextImage)(void *, pxHandle, uint64_t, pxHandle, pxHandle, uint32_t *);
typedef pxResult (*PFN_QueuePresent)(void *, const pxPresentInfo *);
typedef void (*PFN_GetImageMemoryRequirements)(void *, pxHandle, pxMemoryRequirements *);
typedef pxResult (*PFN_BindImageMemory)(void *, pxHandle, pxHandle, pxDeviceSize);
typedef pxResult (*PFN_AllocateCommandBuffers)(void *, const pxCommandBufferAllocateInfo *, void **);
typedef pxResult (*PFN_BeginCommandBuffer)(void *, const pxCommandBufferBeginInfo *);
typedef pxResult (*PFN_EndCommandBuffer)(void *);
typedef pxResult (*PFN_WaitForFences)(void *, uint32_t, const pxHandle *, pxBool32, uint64_t);
typedef pxResult (*PFN_ResetFences)(void *, uint32_t, const pxHandle *);
typedef pxResult (*PFN_DeviceWaitIdle)(void *);
typedef void (*PFN_CmdPipelineBarrierImg)(void *, uint32_t, uint32_t, uint32_t, uint32_t, const pxMemoryBarrier *, uint32_t,
	const void *, uint32_t, const pxImageMemoryBarrier *);
typedef void (*PFN_CmdCopyImageToBuffer)(void *, pxHandle, int32_t, pxHandle, uint32_t, const pxBufferImageCopy *);
typedef void (*PFN_CmdBlitImage)(void *, pxHandle, int32_t, pxHandle, int32_t, uint32_t, const pxImageBlit *, int32_t);

#define PX_MAX_SWAP_IMAGES 16

struct pxPresent {
	void *instance, *pd, *device, *queue;
	uint32_t family;
	pxBool32 wwf;
	pxHandle surface;
	// Instance-level functions.
	PFN_GetFormatProperties getFormatProperties;
	PFN_GetMemoryProperties getMemoryProperties;
	PFN_GetSurfaceCaps getSurfaceCaps;
	PFN_GetSurfaceFormats getSurfaceFormats;
	PFN_GetPresentModes getPresentModes;
	PFN_DestroySurface destroySurface;
	// Device-level functions.
	PFN_Create createSwapchain, createImageView, createImage, allocateMemory, createSetLayout, createPipelineLayout,
		createDescriptorPool, createCommandPool, createSemaphore, createFence;
	PFN_Destroy destroySwapchain, destroyImageView, destroyImage, freeMemory, destroySetLayout, destroyPipelineLayout,
		destroyDescriptorPool, destroyCommandPool, destroySemaphore, destroyFence;
	PFN_GetSwapchainImages getSwapchainImages;
	PFN_AcquireNextImage acquireNextImage;
	PFN_QueuePresent queuePresent;
	PFN_GetImageMemoryRequirements getImageMemoryRequirements;
	PFN_BindImageMemory bindImageMemory;
	PFN_AllocateDescriptorSets allocateDescriptorSets;
	PFN_UpdateDescriptorSets updateDescriptorSets;
	PFN_AllocateCommandBuffers allocateCommandBuffers;
	PFN_BeginCommandBuffer beginCommandBuffer;
	PFN_EndCommandBuffer endCommandBuffer;
	PFN_QueueSubmit queueSubmit;
	PFN_WaitForFences waitForFences;
	PFN_ResetFences resetFences;
	PFN_DeviceWaitIdle deviceWaitIdle;
	PFN_CmdPipelineBarrierImg pipelineBarrier;
	PFN_CmdBindPipeline bindPipeline;
	PFN_CmdBindDescriptorSets bindDescriptorSets;
	PFN_CmdPushConstants pushConstants;
	PFN_CmdDispatch dispatch;
	PFN_CmdCopyImageToBuffer copyImageToBuffer;
	PFN_CmdBlitImage blitImage;
	// Objects that live as long as the presenter.
	pxHandle setLayout, pipelineLayout, descriptorPool, descriptorSet, commandPool, fence, acquireSem;
	void *cmd;
	// The swapchain and what depends on its size.
	pxHandle swapchain;
	uint32_t imageCount;
	pxHandle images[PX_MAX_SWAP_IMAGES], views[PX_MAX_SWAP_IMAGES], renderSem[PX_MAX_SWAP_IMAGES];
	pxSwapInfo info;
	pxHandle offImage, offMemory, offView; // the offscreen path's storage image
};

pxBool32 px_write_without_format(pxGetInstanceProcAddr gipa, void *instance, void *pd) {
	PFN_GetFeatures f = (PFN_GetFeatures)gipa(instance, "vkGetPhysicalDeviceFeatures");
	if (f == NULL) {
		return 0;
	}
	pxBool32 feats[55];
	memset(feats, 0, sizeof feats);
	f(pd, feats);
	return feats[PX_FEAT_WRITE_WITHOUT_FORMAT];
}

void *px_feature_chain_present(const pxEnable *e, pxBool32 wwf) {
	pxFeatures2 *f2 = (pxFeatures2 *)px_feature_chain(e);
	if (f2 != NULL && wwf) {
		f2->features[PX_FEAT_WRITE_WITHOUT_FORMAT] = 1;
	}
	return f2;
}

static void present_destroy_swapchain_parts(pxPresent *p, int keepSwapchain) {
	void *dev = p->device;
	for (uint32_t i = 0; i < PX_MAX_SWAP_IMAGES; i++) {
		if (p->views[i] != 0) {
			p->destroyImageView(dev, p->views[i], NULL);
			p->views[i] = 0;
		}
		if (p->renderSem[i] != 0) {
			p->destroySemaphore(dev, p->renderSem[i], NULL);
			p->renderSem[i] = 0;
		}
		p->images[i] = 0;
	}
	if (p->offView != 0) {
		p->destroyImageView(dev, p->offView, NULL);
		p->offView = 0;
	}
	if (p->offImage != 0) {
		p->destroyImage(dev, p->offImage, NULL);
		p->offImage = 0;
	}
	if (p->offMemory != 0) {
		p->freeMemory(dev, p->offMemory, NULL);
		p->offMemory = 0;
	}
	if (!keepSwapchain && p->swapchain != 0) {
		p->destroySwapchain(dev, p->swapchain, NULL);
		p->swapchain = 0;
	}
	p->imageCount = 0;
}

void px_present_free(pxPresent *p) {
	if (p == NULL) {
		return;
	}
	void *dev = p->device;
	if (p->deviceWaitIdle != NULL) {
		p->deviceWaitIdle(dev);
	}
	if (p->destroyImageView != NULL) {
		present_destroy_swapchain_parts(p, 0);
	}
	if (p->acquireSem != 0) {
		p->destroySemaphore(dev, p->acquireSem, NULL);
	}
	if (p->fence != 0) {
		p->destroyFence(dev, p->fence, NULL);
	}
	if (p->commandPool != 0) {
		p->destroyCommandPool(dev, p->commandPool, NULL); // frees its command buffer
	}
	if (p->descriptorPool != 0) {
		p->destroyDescriptorPool(dev, p->descriptorPool, NULL); // frees its set
	}
	if (p->pipelineLayout != 0) {
		p->destroyPipelineLayout(dev, p->pipelineLayout, NULL);
	}
	if (p->setLayout != 0) {
		p->destroySetLayout(dev, p->setLayout, NULL);
	}
	if (p->surface != 0 && p->destroySurface != NULL) {
		p->destroySurface(p->instance, p->surface, NULL);
	}
	free(p);
}

pxPresent *px_present_new(pxGetInstanceProcAddr gipa, void *instance, void *pd, void *device, void *queue,
	uint32_t family, pxHandle surface, pxBool32 wwf, char *err, int errlen) {
	pxPresent *p = calloc(1, sizeof *p);
	PFN_DestroySurface destroySurface = (PFN_DestroySurface)gipa(instance, "vkDestroySurfaceKHR");
	if (p == NULL) {
		if (destroySurface != NULL) {
			destroySurface(instance, surface, NULL);
		}
		snprintf(err, errlen, "out of host memory");
		return NULL;
	}
	p->instance = instance;
	p->pd = pd;
	p->device = device;
	p->queue = queue;
	p->family = family;
	p->surface = surface;
	p->wwf = wwf;
	p->destroySurface = destroySurface;
	pxGetDeviceProcAddr gdpa = (pxGetDeviceProcAddr)gipa(instance, "vkGetDeviceProcAddr");
	PFN_GetSurfaceSupport support = (PFN_GetSurfaceSupport)gipa(instance, "vkGetPhysicalDeviceSurfaceSupportKHR");
#define ILOAD(field, type, name)                                              \
	p->field = (type)gipa(instance, name);                                    \
	if (p->field == NULL) {                                                   \
		snprintf(err, errlen, "instance function %s not found (was the instance created with the surface extensions?)", name); \
		px_present_free(p);                                                   \
		return NULL;                                                          \
	}
#define DLOAD(field, type, name)                                                      \
	p->field = (type)gdpa(device, name);                                              \
	if (p->field == NULL) {                                                           \
		snprintf(err, errlen, "device function %s not found (VK_KHR_swapchain not enabled?)", name); \
		px_present_free(p);                                                           \
		return NULL;                                                                  \
	}
	if (gdpa == NULL || support == NULL || destroySurface == NULL) {
		snprintf(err, errlen, "the Vulkan instance has no surface support (VK_KHR_surface not enabled)");
		px_present_free(p);
		return NULL;
	}
	ILOAD(getFormatProperties, PFN_GetFormatProperties, "vkGetPhysicalDeviceFormatProperties");
	ILOAD(getMemoryProperties, PFN_GetMemoryProperties, "vkGetPhysicalDeviceMemoryProperties");
	ILOAD(getSurfaceCaps, PFN_GetSurfaceCaps, "vkGetPhysicalDeviceSurfaceCapabilitiesKHR");
	ILOAD(getSurfaceFormats, PFN_GetSurfaceFormats, "vkGetPhysicalDeviceSurfaceFormatsKHR");
	ILOAD(getPresentModes, PFN_GetPresentModes, "vkGetPhysicalDeviceSurfacePresentModesKHR");
	DLOAD(deviceWaitIdle, PFN_DeviceWaitIdle, "vkDeviceWaitIdle");
	DLOAD(createImageView, PFN_Create, "vkCreateImageView");
	DLOAD(destroyImageView, PFN_Destroy, "vkDestroyImageView");
	DLOAD(createSwapchain, PFN_Create, "vkCreateSwapchainKHR");
	DLOAD(destroySwapchain, PFN_Destroy, "vkDestroySwapchainKHR");
	DLOAD(createImage, PFN_Create, "vkCreateImage");
	DLOAD(destroyImage, PFN_Destroy, "vkDestroyImage");
	DLOAD(allocateMemory, PFN_Create, "vkAllocateMemory");
	DLOAD(freeMemory, PFN_Destroy, "vkFreeMemory");
	DLOAD(createSetLayout, PFN_Create, "vkCreateDescriptorSetLayout");
	DLOAD(destroySetLayout, PFN_Destroy, "vkDestroyDescriptorSetLayout");
	DLOAD(createPipelineLayout, PFN_Create, "vkCreatePipelineLayout");
	DLOAD(destroyPipelineLayout, PFN_Destroy, "vkDestroyPipelineLayout");
	DLOAD(createDescriptorPool, PFN_Create, "vkCreateDescriptorPool");
	DLOAD(destroyDescriptorPool, PFN_Destroy, "vkDestroyDescriptorPool");
	DLOAD(createCommandPool, PFN_Create, "vkCreateCommandPool");
	DLOAD(destroyCommandPool, PFN_Destroy, "vkDestroyCommandPool");
	DLOAD(createSemaphore, PFN_Create, "vkCreateSemaphore");
	DLOAD(destroySemaphore, PFN_Destroy, "vkDestroySemaphore");
	DLOAD(createFence, PFN_Create, "vkCreateFence");
	DLOAD(destroyFence, PFN_Destroy, "vkDestroyFence");
	DLOAD(getSwapchainImages, PFN_GetSwapchainImages, "vkGetSwapchainImagesKHR");
	DLOAD(acquireNextImage, PFN_AcquireNextImage, "vkAcquireNextImageKHR");
	DLOAD(queuePresent, PFN_QueuePresent, "vkQueuePresentKHR");
	DLOAD(getImageMemoryRequirements, PFN_GetImageMemoryRequirements, "vkGetImageMemoryRequirements");
	DLOAD(bindImageMemory, PFN_BindImageMemory, "vkBindImageMemory");
	DLOAD(allocateDescriptorSets, PFN_AllocateDescriptorSets, "vkAllocateDescriptorSets");
	DLOAD(updateDescriptorSets, PFN_UpdateDescriptorSets, "vkUpdateDescriptorSets");
	DLOAD(allocateCommandBuffers, PFN_AllocateCommandBuffers, "vkAllocateCommandBuffers");
	DLOAD(beginCommandBuffer, PFN_BeginCommandBuffer, "vkBeginCommandBuffer");
	DLOAD(endCommandBuffer, PFN_EndCommandBuffer, "vkEndCommandBuffer");
	DLOAD(queueSubmit, PFN_QueueSubmit, "vkQueueSubmit");
	DLOAD(waitForFences, PFN_WaitForFences, "vkWaitForFences");
	DLOAD(resetFences, PFN_ResetFences, "vkResetFences");
	DLOAD(pipelineBarrier, PFN_CmdPipelineBarrierImg, "vkCmdPipelineBarrier");
	DLOAD(bindPipeline, PFN_CmdBindPipeline, "vkCmdBindPipeline");
	DLOAD(bindDescriptorSets, PFN_CmdBindDescriptorSets, "vkCmdBindDescriptorSets");
	DLOAD(pushConstants, PFN_CmdPushConstants, "vkCmdPushConstants");
	DLOAD(dispatch, PFN_CmdDispatch, "vkCmdDispatch");
	DLOAD(copyImageToBuffer, PFN_CmdCopyImageToBuffer, "vkCmdCopyImageToBuffer");
	DLOAD(blitImage, PFN_CmdBlitImage, "vkCmdBlitImage");
#undef ILOAD
#undef DLOAD

	pxBool32 can = 0;
	if (support(pd, family, surface, &can) != 0 || !can) {
		snprintf(err, errlen, "the device's compute queue (family %u) cannot present to this window", family);
		px_present_free(p);
		return NULL;
	}
	pxResult r;
	// Binding 0: the frame (a storage image); 1..: the kernel's buffers.
	pxSetLayoutBinding binds[1 + PX_VIEW_BUFFERS];
	memset(binds, 0, sizeof binds);
	for (int i = 0; i <= PX_VIEW_BUFFERS; i++) {
		binds[i].binding = (uint32_t)i;
		binds[i].descriptorType = i == 0 ? PX_DESCRIPTOR_STORAGE_IMAGE : PX_DESCRIPTOR_STORAGE_BUFFER;
		binds[i].descriptorCount = 1;
		binds[i].stageFlags = PX_SHADER_STAGE_COMPUTE;
	}
	pxSetLayoutCreateInfo slci = {32, NULL, 0, 1 + PX_VIEW_BUFFERS, binds};
	if ((r = p->createSetLayout(device, &slci, NULL, &p->setLayout)) != 0) {
		snprintf(err, errlen, "vkCreateDescriptorSetLayout: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	pxPushConstantRange pcr = {PX_SHADER_STAGE_COMPUTE, 0, 128};
	pxPipelineLayoutCreateInfo plci = {30, NULL, 0, 1, &p->setLayout, 1, &pcr};
	if ((r = p->createPipelineLayout(device, &plci, NULL, &p->pipelineLayout)) != 0) {
		snprintf(err, errlen, "vkCreatePipelineLayout: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	pxPoolSize sizes[2] = {{PX_DESCRIPTOR_STORAGE_IMAGE, 1}, {PX_DESCRIPTOR_STORAGE_BUFFER, PX_VIEW_BUFFERS}};
	pxDescriptorPoolCreateInfo dpci = {33, NULL, 0, 1, 2, sizes};
	if ((r = p->createDescriptorPool(device, &dpci, NULL, &p->descriptorPool)) != 0) {
		snprintf(err, errlen, "vkCreateDescriptorPool: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	pxDescriptorSetAllocateInfo dsai = {PX_ST_DESCRIPTOR_SET_ALLOCATE_INFO, NULL, p->descriptorPool, 1, &p->setLayout};
	if ((r = p->allocateDescriptorSets(device, &dsai, &p->descriptorSet)) != 0) {
		snprintf(err, errlen, "vkAllocateDescriptorSets: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	pxCommandPoolCreateInfo cpci = {39, NULL, 0x2 /* RESET_COMMAND_BUFFER */, family};
	if ((r = p->createCommandPool(device, &cpci, NULL, &p->commandPool)) != 0) {
		snprintf(err, errlen, "vkCreateCommandPool: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	pxCommandBufferAllocateInfo cbai = {40, NULL, p->commandPool, 0, 1};
	if ((r = p->allocateCommandBuffers(device, &cbai, &p->cmd)) != 0) {
		snprintf(err, errlen, "vkAllocateCommandBuffers: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	pxSimpleCreateInfo sci = {9, NULL, 0};
	pxSimpleCreateInfo fci = {8, NULL, 0};
	if ((r = p->createSemaphore(device, &sci, NULL, &p->acquireSem)) != 0 ||
		(r = p->createFence(device, &fci, NULL, &p->fence)) != 0) {
		snprintf(err, errlen, "creating the frame's semaphore and fence: VkResult %d", r);
		px_present_free(p);
		return NULL;
	}
	return p;
}

pxHandle px_present_layout(pxPresent *p) { return p->pipelineLayout; }

int32_t px_present_readback_format(pxPresent *p) {
	return p->info.direct ? p->info.format : PX_FMT_R8G8B8A8_UNORM;
}

static pxResult present_view(pxPresent *p, pxHandle image, int32_t format, pxHandle *out) {
	pxImageViewCreateInfo ci;
	memset(&ci, 0, sizeof ci);
	ci.sType = 15; // VK_STRUCTURE_TYPE_IMAGE_VIEW_CREATE_INFO
	ci.image = image;
	ci.viewType = 1; // 2D
	ci.format = format;
	ci.range.aspectMask = PX_ASPECT_COLOR;
	ci.range.levelCount = 1;
	ci.range.layerCount = 1;
	return p->createImageView(p->device, &ci, NULL, out);
}

// present_offscreen makes the offscreen path's RGBA8 storage image.
static pxResult present_offscreen(pxPresent *p, uint32_t w, uint32_t h, char *err, int errlen) {
	pxImageCreateInfo ci;
	memset(&ci, 0, sizeof ci);
	ci.sType = 14; // VK_STRUCTURE_TYPE_IMAGE_CREATE_INFO
	ci.imageType = 1;
	ci.format = PX_FMT_R8G8B8A8_UNORM; // storage-image capable on every device
	ci.extent[0] = w;
	ci.extent[1] = h;
	ci.extent[2] = 1;
	ci.mipLevels = 1;
	ci.arrayLayers = 1;
	ci.samples = 1;
	ci.tiling = 0; // optimal
	ci.usage = PX_USAGE_STORAGE | PX_USAGE_TRANSFER_SRC;
	pxResult r = p->createImage(p->device, &ci, NULL, &p->offImage);
	if (r != 0) {
		snprintf(err, errlen, "vkCreateImage (offscreen frame %ux%u): VkResult %d", w, h, r);
		return r;
	}
	pxMemoryRequirements req;
	p->getImageMemoryRequirements(p->device, p->offImage, &req);
	pxMemoryProperties mp;
	memset(&mp, 0, sizeof mp);
	p->getMemoryProperties(p->pd, &mp);
	int pick = -1;
	for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
		if ((req.memoryTypeBits & (1u << i)) == 0) {
			continue;
		}
		if (pick < 0 || ((mp.memoryTypes[i].propertyFlags & 1u) && !(mp.memoryTypes[pick].propertyFlags & 1u))) {
			pick = (int)i; // the first device-local type, else the first allowed one
		}
	}
	if (pick < 0) {
		snprintf(err, errlen, "no memory type for the offscreen frame");
		return -2;
	}
	pxMemoryAllocateInfo ai = {5, NULL, req.size, (uint32_t)pick};
	if ((r = p->allocateMemory(p->device, &ai, NULL, &p->offMemory)) != 0) {
		snprintf(err, errlen, "vkAllocateMemory (offscreen frame, %llu bytes): VkResult %d", (unsigned long long)req.size, r);
		return r;
	}
	if ((r = p->bindImageMemory(p->device, p->offImage, p->offMemory, 0)) != 0) {
		snprintf(err, errlen, "vkBindImageMemory: VkResult %d", r);
		return r;
	}
	if ((r = present_view(p, p->offImage, PX_FMT_R8G8B8A8_UNORM, &p->offView)) != 0) {
		snprintf(err, errlen, "vkCreateImageView (offscreen frame): VkResult %d", r);
	}
	return r;
}

pxResult px_present_swapchain(pxPresent *p, uint32_t width, uint32_t height, int forceOffscreen, pxSwapInfo *out,
	char *err, int errlen) {
	void *dev = p->device;
	pxResult r = p->deviceWaitIdle(dev);
	if (r != 0) {
		snprintf(err, errlen, "vkDeviceWaitIdle: VkResult %d", r);
		return r;
	}
	pxSurfaceCaps caps;
	memset(&caps, 0, sizeof caps);
	if ((r = p->getSurfaceCaps(p->pd, p->surface, &caps)) != 0) {
		snprintf(err, errlen, "vkGetPhysicalDeviceSurfaceCapabilitiesKHR: VkResult %d", r);
		return r;
	}
	pxExtent2D ext = caps.currentExtent;
	if (ext.width == 0xFFFFFFFFu) {
		ext.width = width < caps.minImageExtent.width ? caps.minImageExtent.width : width;
		ext.height = height < caps.minImageExtent.height ? caps.minImageExtent.height : height;
		if (ext.width > caps.maxImageExtent.width) {
			ext.width = caps.maxImageExtent.width;
		}
		if (ext.height > caps.maxImageExtent.height) {
			ext.height = caps.maxImageExtent.height;
		}
	}
	if (ext.width == 0 || ext.height == 0) {
		return 1; // minimised
	}
	// Format: an 8-bit UNORM one, so the kernel's colours are stored as
	// written; else whatever the surface offers first (through the blit,
	// which converts).
	pxSurfaceFormat fmts[64];
	uint32_t nf = 64;
	if ((r = p->getSurfaceFormats(p->pd, p->surface, &nf, fmts)) < 0 || nf == 0) {
		snprintf(err, errlen, "vkGetPhysicalDeviceSurfaceFormatsKHR: VkResult %d (%u formats)", r, nf);
		return r < 0 ? r : -3;
	}
	pxSurfaceFormat fmt = fmts[0];
	for (uint32_t i = 0; i < nf; i++) {
		if (fmts[i].format == PX_FMT_B8G8R8A8_UNORM || fmts[i].format == PX_FMT_R8G8B8A8_UNORM) {
			fmt = fmts[i];
			break;
		}
	}
	pxFormatProperties fp;
	memset(&fp, 0, sizeof fp);
	p->getFormatProperties(p->pd, fmt.format, &fp);
	int unorm = fmt.format == PX_FMT_B8G8R8A8_UNORM || fmt.format == PX_FMT_R8G8B8A8_UNORM;
	int direct = !forceOffscreen && p->wwf && unorm && (caps.supportedUsageFlags & PX_USAGE_STORAGE) &&
		(fp.optimalTilingFeatures & PX_FORMAT_FEATURE_STORAGE_IMAGE);
	uint32_t usage;
	if (direct) {
		usage = PX_USAGE_STORAGE;
		if (caps.supportedUsageFlags & PX_USAGE_TRANSFER_SRC) {
			usage |= PX_USAGE_TRANSFER_SRC;
		}
	} else {
		if (!(caps.supportedUsageFlags & PX_USAGE_TRANSFER_DST) || !(fp.optimalTilingFeatures & PX_FORMAT_FEATURE_BLIT_DST)) {
			snprintf(err, errlen, "the window's surface accepts neither compute writes (storage images) nor blits (format %d, usage flags %#x)",
				fmt.format, caps.supportedUsageFlags);
			return -3;
		}
		usage = PX_USAGE_TRANSFER_DST;
	}
	uint32_t count = caps.minImageCount + 1;
	if (caps.maxImageCount > 0 && count > caps.maxImageCount) {
		count = caps.maxImageCount;
	}
	if (caps.minImageCount > PX_MAX_SWAP_IMAGES) {
		snprintf(err, errlen, "the surface wants at least %u swapchain images (at most %d supported)", caps.minImageCount, PX_MAX_SWAP_IMAGES);
		return -3;
	}
	if (count > PX_MAX_SWAP_IMAGES) {
		count = PX_MAX_SWAP_IMAGES;
	}
	uint32_t alpha = 1; // OPAQUE
	if (!(caps.supportedCompositeAlpha & alpha)) {
		for (alpha = 1; alpha < 16 && !(caps.supportedCompositeAlpha & alpha); alpha <<= 1) {
		}
	}
	pxSwapchainCreateInfo ci;
	memset(&ci, 0, sizeof ci);
	ci.sType = 1000001000; // VK_STRUCTURE_TYPE_SWAPCHAIN_CREATE_INFO_KHR
	ci.surface = p->surface;
	ci.minImageCount = count;
	ci.imageFormat = fmt.format;
	ci.imageColorSpace = fmt.colorSpace;
	ci.imageExtent = ext;
	ci.imageArrayLayers = 1;
	ci.imageUsage = usage;
	ci.preTransform = caps.currentTransform;
	ci.compositeAlpha = alpha;
	ci.presentMode = 2; // FIFO: always available
	ci.clipped = 1;
	ci.oldSwapchain = p->swapchain;
	pxHandle sc = 0;
	r = p->createSwapchain(dev, &ci, NULL, &sc);
	// The old swapchain is retired either way.
	present_destroy_swapchain_parts(p, 0);
	if (r != 0) {
		snprintf(err, errlen, "vkCreateSwapchainKHR (%ux%u, format %d): VkResult %d", ext.width, ext.height, fmt.format, r);
		return r;
	}
	p->swapchain = sc;
	uint32_t n = PX_MAX_SWAP_IMAGES;
	if ((r = p->getSwapchainImages(dev, sc, &n, p->images)) != 0) {
		// VK_INCOMPLETE (5): more images than PX_MAX_SWAP_IMAGES.
		snprintf(err, errlen, "vkGetSwapchainImagesKHR: VkResult %d", r);
		return r < 0 ? r : -3;
	}
	p->imageCount = n;
	pxSimpleCreateInfo sci = {9, NULL, 0};
	for (uint32_t i = 0; i < n; i++) {
		if (direct && (r = present_view(p, p->images[i], fmt.format, &p->views[i])) != 0) {
			snprintf(err, errlen, "vkCreateImageView (swapchain image %u): VkResult %d", i, r);
			return r;
		}
		if ((r = p->createSemaphore(dev, &sci, NULL, &p->renderSem[i])) != 0) {
			snprintf(err, errlen, "vkCreateSemaphore: VkResult %d", r);
			return r;
		}
	}
	if (!direct && (r = present_offscreen(p, ext.width, ext.height, err, errlen)) != 0) {
		return r;
	}
	p->info.width = ext.width;
	p->info.height = ext.height;
	p->info.imageCount = n;
	p->info.format = fmt.format;
	p->info.direct = direct;
	p->info.readable = !direct || (usage & PX_USAGE_TRANSFER_SRC) != 0;
	*out = p->info;
	return 0;
}

static void image_barrier(pxPresent *p, pxHandle image, uint32_t srcStage, uint32_t dstStage, uint32_t srcAccess,
	uint32_t dstAccess, int32_t oldLayout, int32_t newLayout) {
	pxImageMemoryBarrier b;
	memset(&b, 0, sizeof b);
	b.sType = 45; // VK_STRUCTURE_TYPE_IMAGE_MEMORY_BARRIER
	b.srcAccessMask = srcAccess;
	b.dstAccessMask = dstAccess;
	b.oldLayout = oldLayout;
	b.newLayout = newLayout;
	b.srcQueueFamilyIndex = PX_QUEUE_FAMILY_IGNORED;
	b.dstQueueFamilyIndex = PX_QUEUE_FAMILY_IGNORED;
	b.image = image;
	b.range.aspectMask = PX_ASPECT_COLOR;
	b.range.levelCount = 1;
	b.range.layerCount = 1;
	p->pipelineBarrier(p->cmd, srcStage, dstStage, 0, 0, NULL, 0, NULL, 1, &b);
}

pxResult px_present_frame(pxPresent *p, pxHandle pipeline, int nbuf, const uint64_t *bufs, const uint64_t *offs,
	const uint64_t *ranges, const void *push, uint32_t pushSize, uint32_t gx, uint32_t gy, pxHandle readback,
	uint64_t readbackOff) {
	void *dev = p->device;
	if (p->swapchain == 0 || nbuf > PX_VIEW_BUFFERS) {
		return PX_RESULT_OUT_OF_DATE;
	}
	uint32_t idx = 0;
	pxResult acq = p->acquireNextImage(dev, p->swapchain, 10ull * 1000 * 1000 * 1000, p->acquireSem, 0, &idx);
	if (acq < 0 || acq == 2 /* VK_TIMEOUT */ || acq == 3 /* VK_NOT_READY */) {
		return acq == 2 || acq == 3 ? PX_RESULT_OUT_OF_DATE : acq;
	}
	if (idx >= p->imageCount) {
		return -13; // VK_ERROR_UNKNOWN: an index a conforming driver never returns
	}
	pxHandle target = p->info.direct ? p->images[idx] : p->offImage;
	pxHandle targetView = p->info.direct ? p->views[idx] : p->offView;

	// Nothing is in flight (frames are synchronous): update the set in place.
	pxDescriptorImageInfo ii = {0, targetView, PX_LAYOUT_GENERAL};
	pxDescriptorBufferInfo bi[PX_VIEW_BUFFERS];
	pxWriteDescriptorSet w[1 + PX_VIEW_BUFFERS];
	memset(w, 0, sizeof w);
	w[0].sType = PX_ST_WRITE_DESCRIPTOR_SET;
	w[0].dstSet = p->descriptorSet;
	w[0].dstBinding = 0;
	w[0].descriptorCount = 1;
	w[0].descriptorType = PX_DESCRIPTOR_STORAGE_IMAGE;
	w[0].pImageInfo = &ii;
	for (int i = 0; i < nbuf; i++) {
		bi[i].buffer = bufs[i];
		bi[i].offset = offs[i];
		bi[i].range = ranges[i];
		w[1 + i].sType = PX_ST_WRITE_DESCRIPTOR_SET;
		w[1 + i].dstSet = p->descriptorSet;
		w[1 + i].dstBinding = (uint32_t)(1 + i);
		w[1 + i].descriptorCount = 1;
		w[1 + i].descriptorType = PX_DESCRIPTOR_STORAGE_BUFFER;
		w[1 + i].pBufferInfo = &bi[i];
	}
	p->updateDescriptorSets(dev, (uint32_t)(1 + nbuf), w, 0, NULL);

	pxCommandBufferBeginInfo begin = {42, NULL, 0x1 /* ONE_TIME_SUBMIT */, NULL};
	pxResult r = p->beginCommandBuffer(p->cmd, &begin);
	if (r != 0) {
		return r;
	}
	const uint32_t CT = PX_STAGE_COMPUTE | PX_STAGE_TRANSFER;
	// Order after the writes of earlier submissions (the engine's batches).
	pxMemoryBarrier mb = {PX_ST_MEMORY_BARRIER, NULL, PX_ACCESS_SHADER_WRITE | PX_ACCESS_TRANSFER_WRITE, PX_ACCESS_SHADER_READ};
	p->pipelineBarrier(p->cmd, CT, PX_STAGE_COMPUTE, 0, 1, &mb, 0, NULL, 0, NULL);
	// The acquire semaphore is waited at the compute and transfer stages;
	// these barriers start there, so they come after it.
	image_barrier(p, target, CT, PX_STAGE_COMPUTE, 0, PX_ACCESS_SHADER_WRITE, PX_LAYOUT_UNDEFINED, PX_LAYOUT_GENERAL);
	p->bindPipeline(p->cmd, PX_BIND_POINT_COMPUTE, pipeline);
	p->bindDescriptorSets(p->cmd, PX_BIND_POINT_COMPUTE, p->pipelineLayout, 0, 1, &p->descriptorSet, 0, NULL);
	if (pushSize > 0) {
		p->pushConstants(p->cmd, p->pipelineLayout, PX_SHADER_STAGE_COMPUTE, 0, pushSize, push);
	}
	p->dispatch(p->cmd, gx, gy, 1);
	// Copies read the frame in TRANSFER_SRC_OPTIMAL, where the image allows.
	int32_t mid = p->info.readable ? PX_LAYOUT_TRANSFER_SRC : PX_LAYOUT_GENERAL;
	image_barrier(p, target, PX_STAGE_COMPUTE, PX_STAGE_TRANSFER, PX_ACCESS_SHADER_WRITE, PX_ACCESS_TRANSFER_READ,
		PX_LAYOUT_GENERAL, mid);
	if (readback != 0 && p->info.readable) {
		pxBufferImageCopy c;
		memset(&c, 0, sizeof c);
		c.bufferOffset = readbackOff;
		c.imageSubresource.aspectMask = PX_ASPECT_COLOR;
		c.imageSubresource.layerCount = 1;
		c.imageExtent[0] = p->info.width;
		c.imageExtent[1] = p->info.height;
		c.imageExtent[2] = 1;
		p->copyImageToBuffer(p->cmd, target, mid, readback, 1, &c);
		pxMemoryBarrier hb = {PX_ST_MEMORY_BARRIER, NULL, PX_ACCESS_TRANSFER_WRITE, PX_ACCESS_HOST_READ};
		p->pipelineBarrier(p->cmd, PX_STAGE_TRANSFER, PX_STAGE_HOST, 0, 1, &hb, 0, NULL, 0, NULL);
	}
	if (!p->info.direct) {
		pxHandle sw = p->images[idx];
		image_barrier(p, sw, CT, PX_STAGE_TRANSFER, 0, PX_ACCESS_TRANSFER_WRITE, PX_LAYOUT_UNDEFINED, PX_LAYOUT_TRANSFER_DST);
		pxImageBlit blit;
		memset(&blit, 0, sizeof blit);
		blit.srcSubresource.aspectMask = PX_ASPECT_COLOR;
		blit.srcSubresource.layerCount = 1;
		blit.dstSubresource = blit.srcSubresource;
		blit.srcOffsets[1][0] = blit.dstOffsets[1][0] = (int32_t)p->info.width;
		blit.srcOffsets[1][1] = blit.dstOffsets[1][1] = (int32_t)p->info.height;
		blit.srcOffsets[1][2] = blit.dstOffsets[1][2] = 1;
		p->blitImage(p->cmd, target, mid, sw, PX_LAYOUT_TRANSFER_DST, 1, &blit, 0 /* NEAREST */);
		image_barrier(p, sw, PX_STAGE_TRANSFER, PX_STAGE_BOTTOM, PX_ACCESS_TRANSFER_WRITE, 0, PX_LAYOUT_TRANSFER_DST,
			PX_LAYOUT_PRESENT_SRC);
	} else {
		image_barrier(p, target, PX_STAGE_TRANSFER, PX_STAGE_BOTTOM, 0, 0, mid, PX_LAYOUT_PRESENT_SRC);
	}
	if ((r = p->endCommandBuffer(p->cmd)) != 0) {
		return r;
	}
	uint32_t waitStage = CT;
	pxSubmitInfo si;
	memset(&si, 0, sizeof si);
	si.sType = 4; // VK_STRUCTURE_TYPE_SUBMIT_INFO
	si.waitSemaphoreCount = 1;
	si.pWaitSemaphores = &p->acquireSem;
	si.pWaitDstStageMask = &waitStage;
	si.commandBufferCount = 1;
	si.pCommandBuffers = &p->cmd;
	si.signalSemaphoreCount = 1;
	si.pSignalSemaphores = &p->renderSem[idx];
	if ((r = p->queueSubmit(p->queue, 1, &si, p->fence)) != 0) {
		return r;
	}
	pxPresentInfo pi = {1000001001, NULL, 1, &p->renderSem[idx], 1, &p->swapchain, &idx, NULL};
	pxResult pr = p->queuePresent(p->queue, &pi);
	// Wait for the frame even when presenting failed: the submission
	// signals the fence regardless.
	r = p->waitForFences(dev, 1, &p->fence, 1, 60ull * 1000 * 1000 * 1000);
	if (r != 0) {
		return r == 2 ? -4 /* VK_ERROR_DEVICE_LOST: a frame that never completes */ : r;
	}
	if ((r = p->resetFences(dev, 1, &p->fence)) != 0) {
		return r;
	}
	if (pr < 0) {
		return pr;
	}
	if (pr == PX_RESULT_SUBOPTIMAL || acq == PX_RESULT_SUBOPTIMAL) {
		return PX_RESULT_SUBOPTIMAL;
	}
	return 0;
}

void px_destroy_surface(pxGetInstanceProcAddr gipa, void *instance, pxHandle surface) {
	PFN_DestroySurface f = (PFN_DestroySurface)gipa(instance, "vkDestroySurfaceKHR");
	if (f != NULL && surface != 0) {
		f(instance, surface, NULL);
	}
}
