package cpu

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parallax-engine/parallax/engine"
)

func TestProcMemInfo(t *testing.T) {
	for _, c := range []struct {
		name         string
		text         string
		avail, total int64
		fails        bool
	}{
		{"available", "MemTotal:       24683652 kB\nMemFree:        1000 kB\nMemAvailable:   23777108 kB\n", 23777108 << 10, 24683652 << 10, false},
		{"old kernel without MemAvailable", "MemTotal: 2048 kB\nMemFree: 1024 kB\n", 1 << 20, 2 << 20, false},
		{"no total", "MemFree: 1024 kB\n", 0, 0, true},
		{"garbage", "not a meminfo file", 0, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "meminfo")
			if err := os.WriteFile(path, []byte(c.text), 0o644); err != nil {
				t.Fatal(err)
			}
			avail, total, err := procMemInfo(path)
			if (err != nil) != c.fails {
				t.Fatalf("error %v, want failure %v", err, c.fails)
			}
			if avail != c.avail || total != c.total {
				t.Errorf("got %d of %d, want %d of %d", avail, total, c.avail, c.total)
			}
		})
	}
}

// TestCPUMemInfo: the CPU device reports its memory to engine.MemoryOf.
func TestCPUMemInfo(t *testing.T) {
	if _, err := os.Stat("/proc/meminfo"); err != nil {
		t.Skip("no /proc/meminfo")
	}
	free, total, known := engine.MemoryOf(New())
	if !known || free <= 0 || total < free {
		t.Fatalf("MemoryOf(cpu) = %d free of %d (known %v)", free, total, known)
	}
}
