package cpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.MemoryReporter = (*Device)(nil)

// MemInfo reports the memory tensors can still take and the total: the
// system's available and total physical memory (/proc/meminfo's
// MemAvailable and MemTotal), each capped by the process's cgroup memory
// limit (less the cgroup's usage) where one is set. It implements
// engine.MemoryReporter.
func (d *Device) MemInfo() (free, total int64, err error) {
	free, total, err = procMemInfo("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("cpu memory: %w", err)
	}
	if limit, used, ok := cgroupMemory(); ok && limit > 0 && limit < total {
		total = limit
		free = min(free, max(0, limit-used))
	}
	return free, total, nil
}

// procMemInfo reads MemAvailable (or MemFree, on kernels without it) and
// MemTotal from a meminfo file, in bytes.
func procMemInfo(path string) (avail, total int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	vals := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			v <<= 10
		}
		vals[name] = v
	}
	total, ok := vals["MemTotal"]
	if !ok || total <= 0 {
		return 0, 0, errors.New(path + " has no MemTotal")
	}
	avail, ok = vals["MemAvailable"]
	if !ok {
		avail = vals["MemFree"]
	}
	return avail, total, nil
}

// cgroupMemory returns the memory limit and usage of this process's cgroup
// (v2's memory.max and memory.current, or v1's memory.limit_in_bytes and
// memory.usage_in_bytes); ok is false when there is no limit to read.
func cgroupMemory() (limit, used int64, ok bool) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, 0, false
	}
	readInt := func(path string) (int64, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			dir := "/sys/fs/cgroup" + parts[2]
			if l, ok := readInt(dir + "/memory.max"); ok { // "max" fails to parse: no limit
				u, _ := readInt(dir + "/memory.current")
				return l, u, true
			}
		case strings.Contains(","+parts[1]+",", ",memory,"): // v1
			for _, dir := range []string{"/sys/fs/cgroup/memory" + parts[2], "/sys/fs/cgroup/memory"} {
				if l, ok := readInt(dir + "/memory.limit_in_bytes"); ok {
					u, _ := readInt(dir + "/memory.usage_in_bytes")
					return l, u, true
				}
			}
		}
	}
	return 0, 0, false
}
