// Pipeline statistics (VK_KHR_pipeline_executable_properties): what the
// driver's compiler made of a kernel, for PARALLAX_VULKAN_PIPELINE_STATS=1.
#include <stdio.h>
#include <string.h>

#include "pxvk.h"

typedef struct {
	int32_t sType;
	const void *pNext;
	pxHandle pipeline;
} pxPipelineInfo;

typedef struct {
	int32_t sType;
	void *pNext;
	uint32_t stages;
	char name[256];
	char description[256];
	uint32_t subgroupSize;
} pxExecProps;

typedef struct {
	int32_t sType;
	const void *pNext;
	pxHandle pipeline;
	uint32_t executableIndex;
} pxExecInfo;

typedef struct {
	int32_t sType;
	void *pNext;
	char name[256];
	char description[256];
	int32_t format; // 0 bool32, 1 int64, 2 uint64, 3 float64
	union {
		uint32_t b32;
		int64_t i64;
		uint64_t u64;
		double f64;
	} value;
} pxExecStat;

typedef pxResult (*PFN_GetExecProps)(void *, const pxPipelineInfo *, uint32_t *, pxExecProps *);
typedef pxResult (*PFN_GetExecStats)(void *, const pxExecInfo *, uint32_t *, pxExecStat *);

// The pxDevice fields this file uses (the full struct is in shim.c).
void *px_device_handle(pxDevice *d);
void px_device_set_stats(pxDevice *d, int on, void *props, void *stats);
int px_device_stats(pxDevice *d, void **props, void **stats);

void px_device_capture_stats(pxDevice *d, pxGetInstanceProcAddr gipa, void *instance, int on) {
	pxGetDeviceProcAddr get = (pxGetDeviceProcAddr)gipa(instance, "vkGetDeviceProcAddr");
	void *dev = px_device_handle(d);
	if (get == NULL) {
		return;
	}
	void *props = (void *)get(dev, "vkGetPipelineExecutablePropertiesKHR");
	void *stats = (void *)get(dev, "vkGetPipelineExecutableStatisticsKHR");
	px_device_set_stats(d, on && props != NULL && stats != NULL, props, stats);
}

int px_pipeline_stats(pxDevice *d, pxHandle pipeline, char *out, int outlen) {
	void *pf, *sf;
	if (!px_device_stats(d, &pf, &sf) || outlen <= 0) {
		return 0;
	}
	PFN_GetExecProps props = (PFN_GetExecProps)pf;
	PFN_GetExecStats stats = (PFN_GetExecStats)sf;
	void *dev = px_device_handle(d);
	pxPipelineInfo pi = {1000269001, NULL, pipeline};
	uint32_t n = 0;
	if (props(dev, &pi, &n, NULL) != 0 || n == 0) {
		return 0;
	}
	out[0] = 0;
	int used = 0;
	for (uint32_t e = 0; e < n && e < 4; e++) {
		pxExecInfo ei = {1000269003, NULL, pipeline, e};
		pxExecStat st[32];
		uint32_t m = 32;
		memset(st, 0, sizeof st);
		for (uint32_t i = 0; i < m; i++) {
			st[i].sType = 1000269004;
		}
		if (stats(dev, &ei, &m, st) < 0) {
			continue;
		}
		for (uint32_t i = 0; i < m && used < outlen - 1; i++) {
			char v[64];
			switch (st[i].format) {
			case 0:
				snprintf(v, sizeof v, "%u", st[i].value.b32);
				break;
			case 1:
				snprintf(v, sizeof v, "%lld", (long long)st[i].value.i64);
				break;
			case 2:
				snprintf(v, sizeof v, "%llu", (unsigned long long)st[i].value.u64);
				break;
			default:
				snprintf(v, sizeof v, "%g", st[i].value.f64);
			}
			used += snprintf(out + used, (size_t)(outlen - used), "%s%s=%s", used > 0 ? ", " : "", st[i].name, v);
		}
	}
	return used > 0;
}
