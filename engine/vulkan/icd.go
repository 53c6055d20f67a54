package vulkan

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The Vulkan loader finds drivers through JSON manifests: the files or
// folders VK_DRIVER_FILES (or the older VK_ICD_FILENAMES) names in place
// of the search, plus VK_ADD_DRIVER_FILES, else vulkan/icd.d under the XDG
// configuration and data folders and /etc. When vkCreateInstance finds no
// usable driver, which manifests were there tells a missing driver apart
// from one that is installed but cannot start (an NVIDIA driver in a
// container without its graphics libraries is the common case).

// icdManifests lists the driver manifests the loader would consider, as
// getenv describes the environment, sorted and without duplicates.
func icdManifests(getenv func(string) string) []string {
	var places []string
	split := func(v string) []string {
		return strings.FieldsFunc(v, func(r rune) bool { return r == os.PathListSeparator })
	}
	if v := getenv("VK_DRIVER_FILES"); v != "" {
		places = split(v)
	} else if v := getenv("VK_ICD_FILENAMES"); v != "" {
		places = split(v)
	} else {
		cfg := getenv("XDG_CONFIG_DIRS")
		if cfg == "" {
			cfg = "/etc/xdg"
		}
		data := getenv("XDG_DATA_DIRS")
		if data == "" {
			data = "/usr/local/share:/usr/share"
		}
		var dirs []string
		if h := getenv("XDG_CONFIG_HOME"); h != "" {
			dirs = append(dirs, h)
		}
		dirs = append(dirs, split(cfg)...)
		dirs = append(dirs, "/etc")
		if h := getenv("XDG_DATA_HOME"); h != "" {
			dirs = append(dirs, h)
		}
		dirs = append(dirs, split(data)...)
		for _, d := range dirs {
			places = append(places, filepath.Join(d, "vulkan", "icd.d"))
		}
	}
	places = append(places, split(getenv("VK_ADD_DRIVER_FILES"))...)
	seen := map[string]bool{}
	var out []string
	for _, p := range places {
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		files := []string{p}
		if fi.IsDir() {
			files, _ = filepath.Glob(filepath.Join(p, "*.json"))
		}
		for _, f := range files {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Strings(out)
	return out
}

// noDriverHint is the advice of the error for a loader that found no
// usable driver, given the manifests it had.
func noDriverHint(manifests []string) string {
	if len(manifests) == 0 {
		return "the Vulkan loader found no driver (ICD); install mesa-vulkan-drivers for the lavapipe CPU device, or your GPU's Vulkan driver"
	}
	hint := "the Vulkan loader could use none of the drivers it found (" + strings.Join(manifests, ", ") +
		"); VK_LOADER_DEBUG=driver prints why"
	for _, m := range manifests {
		if strings.Contains(strings.ToLower(filepath.Base(m)), "nvidia") {
			hint += "; an NVIDIA driver inside a container needs its graphics libraries " +
				"(NVIDIA_DRIVER_CAPABILITIES=all, or a list with graphics) for Vulkan"
			break
		}
	}
	return hint
}
