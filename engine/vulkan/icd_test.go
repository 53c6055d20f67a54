package vulkan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestICDManifests(t *testing.T) {
	dir := t.TempDir()
	icd := filepath.Join(dir, "share", "vulkan", "icd.d")
	if err := os.MkdirAll(icd, 0o755); err != nil {
		t.Fatal(err)
	}
	nv, lvp := filepath.Join(icd, "nvidia_icd.json"), filepath.Join(icd, "lvp_icd.json")
	extra := filepath.Join(dir, "extra.json")
	for _, f := range []string{nv, lvp, extra, filepath.Join(icd, "README")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	none := filepath.Join(dir, "none")
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"search", map[string]string{"XDG_DATA_DIRS": filepath.Join(dir, "share"), "XDG_CONFIG_DIRS": none}, []string{lvp, nv}},
		{"override file", map[string]string{"VK_DRIVER_FILES": nv, "XDG_DATA_DIRS": filepath.Join(dir, "share")}, []string{nv}},
		{"older override", map[string]string{"VK_ICD_FILENAMES": lvp + string(os.PathListSeparator) + none}, []string{lvp}},
		{"added", map[string]string{"VK_DRIVER_FILES": icd, "VK_ADD_DRIVER_FILES": extra}, []string{extra, lvp, nv}},
		{"nothing", map[string]string{"VK_DRIVER_FILES": none}, nil},
	}
	for _, c := range cases {
		got := icdManifests(func(k string) string { return c.env[k] })
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestNoDriverHint(t *testing.T) {
	cases := []struct {
		manifests []string
		want      []string // substrings
		not       []string
	}{
		{nil, []string{"found no driver", "mesa-vulkan-drivers"}, []string{"NVIDIA"}},
		{[]string{"/usr/share/vulkan/icd.d/lvp_icd.json"}, []string{"could use none", "lvp_icd.json", "VK_LOADER_DEBUG=driver"}, []string{"NVIDIA"}},
		{[]string{"/etc/vulkan/icd.d/nvidia_icd.json"}, []string{"could use none", "NVIDIA_DRIVER_CAPABILITIES"}, nil},
	}
	for _, c := range cases {
		h := noDriverHint(c.manifests)
		for _, w := range c.want {
			if !strings.Contains(h, w) {
				t.Errorf("hint for %v lacks %q: %s", c.manifests, w, h)
			}
		}
		for _, w := range c.not {
			if strings.Contains(h, w) {
				t.Errorf("hint for %v has %q: %s", c.manifests, w, h)
			}
		}
	}
}
