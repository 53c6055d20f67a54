//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"slices"
	"strings"
)

// Programmatic dependent launch (PDL). A decode step is some 170 kernels of
// a few microseconds each, and between two kernels of a stream (or of a
// recorded graph) the GPU drains the first, flushes its writes and only
// then starts the second's blocks: a gap of the order of a microsecond per
// kernel. A kernel launched with programmatic stream serialization
// (cuLaunchKernelEx, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
// may instead start as soon as every block of the kernel before it has run
// griddepcontrol.launch_dependents; it then runs griddepcontrol.wait, which
// returns once every earlier kernel has finished and its writes are
// visible, before it touches memory another kernel may write. The
// kernels launched this way (pdlKernel) all begin with pdl_trigger and
// call pdl_wait before their first dependent access (common.cuh); the
// matrix-vector kernels first ask the L2 for their weight rows, which is
// safe before the wait (the L2 is coherent) and lets the weights stream in
// while the previous kernel ends. Every other kernel is launched plainly,
// so it still waits for the whole of the kernel before it. Stream capture
// records the launches as programmatic edges of the graph.
//
// PDL needs compute capability 9.0 and a driver with cuLaunchKernelEx;
// Options.NoPDL (PARALLAX_CUDA_PDL=0) turns it off, to measure it.

// pdlKernel reports whether kernel name of module is written for PDL (it
// waits with pdl_wait before reading or writing what other kernels
// produce).
func pdlKernel(module, name string) bool {
	switch {
	case module == mmaMod:
		return strings.HasPrefix(name, "attn_dec_mma_")
	case slices.Contains(pdlModules, module):
		return true
	}
	return false
}

// pdlModules are the modules with kernels written for PDL: every kernel of
// each, but of mmaMod only the decode kernels (TestPDLKernelsWait checks
// each such kernel's PTX for the wait).
var pdlModules = []string{"gemv", decodePrepModule, qmod, qgemmMod, mmaMod}

// pdl reports whether kernels written for PDL are launched with it.
func (d *Device) pdl() bool {
	return !d.opts.NoPDL && d.g.ccMajor >= 9 && C.pxcu_has_launch_ex() != 0
}
