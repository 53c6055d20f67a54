package vulkan

/*
#include <stdlib.h>
#include "pxvk.h"
*/
import "C"

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	vk "github.com/vulkan-go/vulkan"

	"github.com/parallax-engine/parallax/shaders"

	"github.com/parallax-engine/parallax/internal/atomicfile"
)

// Pipelines. A kernel is a SPIR-V module of package shaders plus its
// specialization constants: the workgroup size (constant 0), tile sizes
// and head dimensions (small ids, per kernel) and the dtype of every
// binding (100 + binding). Each distinct combination is compiled once per
// device into a compute pipeline and kept; a VkPipelineCache, saved under
// the user's cache directory keyed by the driver's pipelineCacheUUID, makes
// later processes skip the driver's compiler.

// maxBindings is the most storage buffers a kernel binds (push descriptors
// need maxPushDescriptors >= this).
const maxBindings = 16

// pushBytes is the push-constant range every pipeline layout declares.
const pushBytes = 128

type pipeline struct {
	pipe      handle
	layout    handle
	setLayout handle
	nbind     int
}

type layoutSet struct{ set, layout handle }

type pipelines struct {
	d         *Device
	cache     handle
	cachePath string
	created   int
	modules   map[string]handle
	layouts   map[int]layoutSet
	byKey     map[string]*pipeline
}

func (p *pipelines) init(d *Device) error {
	p.d = d
	p.modules = map[string]handle{}
	p.layouts = map[int]layoutSet{}
	p.byKey = map[string]*pipeline{}
	var initial []byte
	if os.Getenv("PARALLAX_VULKAN_PIPELINE_CACHE") != "0" {
		if dir, err := os.UserCacheDir(); err == nil {
			pd := d.pd
			sum := sha256.Sum256(append([]byte(pd.name+"\x00"+strconv.FormatUint(uint64(pd.driverVer), 10)+"\x00"), pd.cacheUUID[:]...))
			p.cachePath = filepath.Join(dir, "parallax", "vulkan", hex.EncodeToString(sum[:12])+".cache")
			initial, _ = os.ReadFile(p.cachePath)
		}
	}
	ci := &vk.PipelineCacheCreateInfo{SType: vk.StructureTypePipelineCacheCreateInfo}
	var cdata unsafe.Pointer
	if len(initial) > 0 {
		cdata = C.CBytes(initial)
		defer C.free(cdata)
		ci.InitialDataSize = uint(len(initial))
		ci.PInitialData = cdata
	}
	var cache vk.PipelineCache
	if res := vk.CreatePipelineCache(d.dev, ci, nil, &cache); res != vk.Success {
		// A corrupt or foreign cache file: start empty.
		ci = &vk.PipelineCacheCreateInfo{SType: vk.StructureTypePipelineCacheCreateInfo}
		if res := vk.CreatePipelineCache(d.dev, ci, nil, &cache); res != vk.Success {
			return vkErr("vkCreatePipelineCache", res)
		}
	}
	p.cache = toHandle(cache)
	return checkHandle("VkPipelineCache", p.cache)
}

// save writes the pipeline cache to disk when new pipelines were built.
func (p *pipelines) save() {
	if p.cachePath == "" || p.created == 0 || p.cache == 0 {
		return
	}
	var n uint
	if vk.GetPipelineCacheData(p.d.dev, vkOf[vk.PipelineCache](p.cache), &n, nil) != vk.Success || n == 0 {
		return
	}
	buf := C.malloc(C.size_t(n))
	defer C.free(buf)
	if vk.GetPipelineCacheData(p.d.dev, vkOf[vk.PipelineCache](p.cache), &n, buf) != vk.Success {
		return
	}
	data := C.GoBytes(buf, C.int(n))
	if err := os.MkdirAll(filepath.Dir(p.cachePath), 0o755); err != nil {
		return
	}
	_ = atomicfile.WriteFile(p.cachePath, data) // a cache: losing it costs only time
}

func (p *pipelines) destroy() {
	d := p.d
	if d == nil || d.dev == nil {
		return
	}
	p.save()
	for _, pl := range p.byKey {
		vk.DestroyPipeline(d.dev, vkOf[vk.Pipeline](pl.pipe), nil)
	}
	for _, l := range p.layouts {
		vk.DestroyPipelineLayout(d.dev, vkOf[vk.PipelineLayout](l.layout), nil)
		vk.DestroyDescriptorSetLayout(d.dev, vkOf[vk.DescriptorSetLayout](l.set), nil)
	}
	for _, m := range p.modules {
		vk.DestroyShaderModule(d.dev, vkOf[vk.ShaderModule](m), nil)
	}
	if p.cache != 0 {
		vk.DestroyPipelineCache(d.dev, vkOf[vk.PipelineCache](p.cache), nil)
	}
	p.byKey, p.layouts, p.modules = nil, nil, nil
	p.cache = 0
}

// module returns the shader module of a kernel, the word-access variant on
// devices without 16-bit storage.
func (p *pipelines) module(kernel string) (handle, error) {
	name := kernel
	if p.d.no16 {
		if _, ok := shaders.SPIRV(kernel + ".no16"); ok {
			name = kernel + ".no16"
		}
	}
	if m, ok := p.modules[name]; ok {
		return m, nil
	}
	code, ok := shaders.SPIRV(name)
	if !ok {
		return 0, fmt.Errorf("no SPIR-V for kernel %q (run go generate ./shaders)", name)
	}
	if len(code)%4 != 0 {
		return 0, fmt.Errorf("SPIR-V of %q is %d bytes, not a whole number of words", name, len(code))
	}
	words := make([]uint32, len(code)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(code[4*i:])
	}
	ci := &vk.ShaderModuleCreateInfo{
		SType:    vk.StructureTypeShaderModuleCreateInfo,
		CodeSize: uint(len(code)), // bytes
		PCode:    words,
	}
	var m vk.ShaderModule
	res := vk.CreateShaderModule(p.d.dev, ci, nil, &m)
	// The binding passes the Go slice of code words by pointer inside its C
	// copy of the create info: keep it alive until the call returns.
	runtime.KeepAlive(ci)
	runtime.KeepAlive(words)
	if res != vk.Success {
		return 0, vkErr("vkCreateShaderModule "+name, res)
	}
	h := toHandle(m)
	if err := checkHandle("VkShaderModule", h); err != nil {
		return 0, err
	}
	p.modules[name] = h
	return h, nil
}

// layoutFor returns the descriptor-set and pipeline layouts for n storage
// buffers and the push-constant range.
func (p *pipelines) layoutFor(n int) (layoutSet, error) {
	if l, ok := p.layouts[n]; ok {
		return l, nil
	}
	d := p.d
	binds := make([]vk.DescriptorSetLayoutBinding, n)
	for i := range binds {
		binds[i] = vk.DescriptorSetLayoutBinding{
			Binding:         uint32(i),
			DescriptorType:  vk.DescriptorTypeStorageBuffer,
			DescriptorCount: 1,
			StageFlags:      vk.ShaderStageFlags(vk.ShaderStageComputeBit),
		}
	}
	var flags vk.DescriptorSetLayoutCreateFlags
	if d.push {
		flags = vk.DescriptorSetLayoutCreateFlags(vk.DescriptorSetLayoutCreatePushDescriptorBit)
	}
	sci := &vk.DescriptorSetLayoutCreateInfo{
		SType:        vk.StructureTypeDescriptorSetLayoutCreateInfo,
		Flags:        flags,
		BindingCount: uint32(n),
		PBindings:    binds,
	}
	var set vk.DescriptorSetLayout
	if res := vk.CreateDescriptorSetLayout(d.dev, sci, nil, &set); res != vk.Success {
		return layoutSet{}, vkErr("vkCreateDescriptorSetLayout", res)
	}
	sh := toHandle(set)
	lci := &vk.PipelineLayoutCreateInfo{
		SType:                  vk.StructureTypePipelineLayoutCreateInfo,
		SetLayoutCount:         1,
		PSetLayouts:            []vk.DescriptorSetLayout{vkOf[vk.DescriptorSetLayout](sh)},
		PushConstantRangeCount: 1,
		PPushConstantRanges: []vk.PushConstantRange{{
			StageFlags: vk.ShaderStageFlags(vk.ShaderStageComputeBit),
			Size:       pushBytes,
		}},
	}
	var pl vk.PipelineLayout
	res := vk.CreatePipelineLayout(d.dev, lci, nil, &pl)
	runtime.KeepAlive(lci) // its PSetLayouts slice is passed by pointer
	if res != vk.Success {
		vk.DestroyDescriptorSetLayout(d.dev, vkOf[vk.DescriptorSetLayout](sh), nil)
		return layoutSet{}, vkErr("vkCreatePipelineLayout", res)
	}
	l := layoutSet{set: sh, layout: toHandle(pl)}
	if err := checkHandle("VkPipelineLayout", l.layout); err != nil {
		return layoutSet{}, err
	}
	p.layouts[n] = l
	return l, nil
}

// spec is a kernel's specialization: constant id -> value.
type spec map[uint32]uint32

func (s spec) key() string {
	ids := make([]int, 0, len(s))
	for id := range s {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "%d=%d,", id, s[uint32(id)])
	}
	return b.String()
}

// get returns the pipeline of kernel with nbind bindings specialised by sp,
// building it on first use.
func (p *pipelines) get(kernel string, nbind int, sp spec) (*pipeline, error) {
	key := kernel + "/" + strconv.Itoa(nbind) + "/" + sp.key()
	if pl, ok := p.byKey[key]; ok {
		return pl, nil
	}
	mod, err := p.module(kernel)
	if err != nil {
		return nil, err
	}
	lay, err := p.layoutFor(nbind)
	if err != nil {
		return nil, err
	}
	ids := make([]int, 0, len(sp))
	for id := range sp {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	cids := make([]uint32, len(ids)+1)
	cvals := make([]uint32, len(ids)+1)
	for i, id := range ids {
		cids[i], cvals[i] = uint32(id), sp[uint32(id)]
	}
	// Created from C: the binding's CreateComputePipelines frees its C copy
	// of the create info from a finalizer that may run during the call.
	var ph C.pxHandle
	if res := C.px_compute_pipeline(p.d.px, C.pxHandle(p.cache), C.pxHandle(lay.layout), C.pxHandle(mod), C.int(len(ids)),
		(*C.uint32_t)(&cids[0]), (*C.uint32_t)(&cvals[0]), &ph); res != 0 {
		return nil, vkErr("vkCreateComputePipelines "+kernel+" "+sp.key(), vk.Result(res))
	}
	pl := &pipeline{pipe: handle(ph), layout: lay.layout, setLayout: lay.set, nbind: nbind}
	if err := checkHandle("VkPipeline", pl.pipe); err != nil {
		return nil, err
	}
	p.byKey[key] = pl
	p.created++
	p.d.reportStats(kernel, sp, ph)
	return pl, nil
}
