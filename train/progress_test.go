package train

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProgressPlainLines(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, 0, 20, 5)
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	p.start = clock
	for s := 1; s <= 20; s++ {
		clock = clock.Add(time.Second)
		p.Update(s, 3.5, 0.02, 1000)
		if s == 12 {
			p.Println("step 12: val loss 3.6")
		}
	}
	out := buf.String()
	if strings.Contains(out, "\r") {
		t.Error("carriage returns written to a non-terminal")
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 { // steps 5, 10, the message, 15, 20
		t.Fatalf("got %d lines:\n%s", len(lines), out)
	}
	if !strings.HasPrefix(lines[0], "step  5/20") || !strings.Contains(lines[0], "ETA 15s") {
		t.Errorf("first line %q", lines[0])
	}
	if !strings.Contains(lines[4], "took 20s") || !strings.Contains(lines[4], "1.0k tok/s") {
		t.Errorf("last line %q", lines[4])
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Second: "5s", 192 * time.Second: "3m12s", 2*time.Hour + 5*time.Minute: "2h05m",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestProgressTerminalBar(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, 0, 10, 0)
	p.tty = true
	clock := time.Unix(0, 0)
	p.now = func() time.Time { return clock }
	p.start = clock
	for s := 1; s <= 10; s++ {
		clock = clock.Add(50 * time.Millisecond) // redraws are limited to 10 a second
		p.Update(s, 2, 0.01, 500)
	}
	out := buf.String()
	if n := strings.Count(out, "\r"); n < 4 || n > 6 {
		t.Errorf("%d redraws for 10 steps at 20 a second", n)
	}
	if !strings.Contains(out, "[========================] 100%") || !strings.HasSuffix(out, "\n") {
		t.Errorf("final bar missing or not ended by a newline: %q", out)
	}
}

// TestIsTerminal: only a terminal gets the redrawn bar; /dev/null is a
// character device but not a terminal, and neither is a file, a pipe or a
// buffer.
func TestIsTerminal(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
	}{
		{"/dev/null", devNull},
		{"regular file", file},
		{"pipe", pw},
		{"buffer", &bytes.Buffer{}},
	} {
		if IsTerminal(tc.w) {
			t.Errorf("%s is taken for a terminal", tc.name)
		}
	}
}
