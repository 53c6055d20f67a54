package vulkan

/*
#include "pxvk.h"
*/
import "C"

import (
	"fmt"
	"os"
)

// reportStats prints what the driver's compiler made of a new pipeline
// (registers, spills, shared memory and the like, as the driver names
// them) to standard error when PARALLAX_VULKAN_PIPELINE_STATS=1 and the
// device has VK_KHR_pipeline_executable_properties. It is a tuning aid:
// a kernel far below its roofline usually shows why here. Pipelines taken
// from the on-disk cache may report nothing
// (PARALLAX_VULKAN_PIPELINE_CACHE=0 avoids that).
func (d *Device) reportStats(kernel string, sp spec, ph C.pxHandle) {
	if d.px == nil {
		return
	}
	var buf [4096]C.char
	if C.px_pipeline_stats(d.px, ph, &buf[0], C.int(len(buf))) == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "vulkan: pipeline %s %s: %s\n", kernel, sp.key(), C.GoString(&buf[0]))
}
