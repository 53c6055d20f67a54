package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

const devicesUsage = `
Usage:
  parallax devices [--json]

Lists every compute backend built into this program, the devices each one
finds on this machine (ID, name, kind, memory, dtypes, features, and the
kernels each op family runs under the options the environment sets), or
why a backend cannot run here. A Vulkan device's "matmul path" says which
kernel its f16 products take (NV or KHR cooperative matrices, or scalar)
and why; PARALLAX_VULKAN_COOP=auto|nv|khr|off changes the choice. A device ID is what --device accepts elsewhere;
"auto" picks CUDA first, then a discrete Vulkan GPU, then any Vulkan device,
then the CPU.
`

const devicesExamples = `
  parallax devices
  parallax devices --json | jq '.backends[].devices[].id'
`

func runDevices(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("devices", devicesUsage, devicesExamples, stdout)
	asJSON := fs.Bool("json", false, "print the listing as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := noArgs(fs); err != nil {
		return err
	}
	list := engine.List()
	if *asJSON {
		return writeDevicesJSON(stdout, list)
	}
	writeDevicesText(stdout, list)
	return nil
}

// deviceJSON and backendJSON are the --json listing's schema.
type deviceJSON struct {
	ID          string            `json:"id"`
	Backend     string            `json:"backend"`
	Index       int               `json:"index"`
	Name        string            `json:"name"`
	Kind        string            `json:"kind"`
	MemoryBytes int64             `json:"memory_bytes"` // 0 when unknown
	DTypes      []string          `json:"dtypes"`
	Features    map[string]string `json:"features"`
	Kernels     map[string]string `json:"kernels"` // op family -> the kernels it runs
}

type backendJSON struct {
	Name      string       `json:"name"`
	Available bool         `json:"available"`
	Error     string       `json:"error,omitempty"`
	Devices   []deviceJSON `json:"devices"`
}

func writeDevicesJSON(w io.Writer, list []engine.BackendStatus) error {
	out := struct {
		Backends []backendJSON `json:"backends"`
	}{Backends: []backendJSON{}}
	for _, b := range list {
		bj := backendJSON{Name: b.Name, Available: b.Err == nil, Devices: []deviceJSON{}}
		if b.Err != nil {
			bj.Error = b.Err.Error()
		}
		for _, d := range b.Devices {
			dj := deviceJSON{ID: d.ID(), Backend: d.Backend, Index: d.Index, Name: d.Name,
				Kind: d.Kind.String(), MemoryBytes: d.Memory, DTypes: dtypeNames(d.DTypes),
				Features: maps.Clone(d.Features), Kernels: maps.Clone(d.Kernels)}
			if dj.Features == nil {
				dj.Features = map[string]string{}
			}
			if dj.Kernels == nil {
				dj.Kernels = map[string]string{}
			}
			bj.Devices = append(bj.Devices, dj)
		}
		out.Backends = append(out.Backends, bj)
	}
	return writeJSON(w, out)
}

func writeDevicesText(w io.Writer, list []engine.BackendStatus) {
	if len(list) == 0 {
		fmt.Fprintln(w, "no compute backends are built into this program")
		return
	}
	for _, b := range list {
		switch {
		case b.Err != nil:
			// The backend's error may already say it is unavailable.
			fmt.Fprintf(w, "%s: unavailable: %s\n", b.Name, strings.TrimPrefix(b.Err.Error(), b.Name+" unavailable: "))
			continue
		case len(b.Devices) == 0:
			fmt.Fprintf(w, "%s: no devices found\n", b.Name)
			continue
		case len(b.Devices) == 1:
			fmt.Fprintf(w, "%s: 1 device\n", b.Name)
		default:
			fmt.Fprintf(w, "%s: %d devices\n", b.Name, len(b.Devices))
		}
		for _, d := range b.Devices {
			fmt.Fprintf(w, "  %s  %s\n", d.ID(), d.Name)
			fmt.Fprintf(w, "    kind:    %s\n", d.Kind)
			fmt.Fprintf(w, "    memory:  %s\n", formatBytes(d.Memory))
			fmt.Fprintf(w, "    dtypes:  %s\n", strings.Join(dtypeNames(d.DTypes), ", "))
			for _, k := range slices.Sorted(maps.Keys(d.Features)) {
				fmt.Fprintf(w, "    %s: %s\n", k, d.Features[k])
			}
			if len(d.Kernels) > 0 {
				fmt.Fprintf(w, "    kernels:\n")
				for _, k := range slices.Sorted(maps.Keys(d.Kernels)) {
					fmt.Fprintf(w, "      %s: %s\n", k, d.Kernels[k])
				}
			}
		}
	}
}

func dtypeNames(ds []engine.DType) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}

// formatBytes renders a byte count in binary units ("139.8 GiB"), or
// "unknown" for 0.
func formatBytes(n int64) string {
	if n <= 0 {
		return "unknown"
	}
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
