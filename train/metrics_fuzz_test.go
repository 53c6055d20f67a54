package train

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzReadMetrics reads fuzzed metrics.jsonl files, and truncates them as a
// resumed run does (OpenMetrics). ReadMetrics must read any bytes, passing
// over lines that are not records; truncating after a step must leave
// exactly the records of the steps up to it (the file untouched when it
// drops none, but for a newline ending a cut last line), and a record
// appended must read back last, whatever the file ended with.
func FuzzReadMetrics(f *testing.F) {
	f.Add([]byte("{\"step\": 1, \"loss\": 5.5, \"lr\": 0.01, \"tokens\": 512}\n{\"step\": 2, \"loss\": 5.1}\n{\"step\": 2, \"eval\": true, \"val_loss\": 5.2, \"srank_rk_head\": [[1, 2]]}\n"), int16(1))
	f.Add([]byte("{\"step\": 1}\n{\"step\": 3, \"cor\": [0.1, 0.2]}\n{\"step\": 4, \"lo"), int16(3))
	f.Add([]byte("{\"step\": 10}\r\n\n[]\nnull\n{\"step\": \"x\"}\n{\"step\": 1e400}\n"), int16(0))
	f.Add([]byte{}, int16(-1))
	dir := f.TempDir()
	path := filepath.Join(dir, "metrics.jsonl")
	f.Fuzz(func(t *testing.T, data []byte, after int16) {
		if len(data) > 1<<20 {
			t.Skip()
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		recs, err := ReadMetrics(path)
		if err != nil {
			t.Fatalf("ReadMetrics: %v", err)
		}
		var keep []Record
		for _, r := range recs {
			if r.Step <= int(after) {
				keep = append(keep, r)
			}
		}
		l, err := OpenMetrics(path, int(after))
		if err != nil {
			t.Fatalf("OpenMetrics: %v", err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadMetrics(path)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case after < 0 || len(keep) == len(recs):
			want := string(data)
			if len(want) > 0 && want[len(want)-1] != '\n' {
				want += "\n" // a line cut by a crash is ended
			}
			if string(b) != want {
				t.Fatalf("OpenMetrics(%d) changed a file it had nothing to drop from: %q became %q", after, data, b)
			}
		case !reflect.DeepEqual(got, keep):
			t.Fatalf("truncated after step %d, the file holds %+v, want %+v", after, got, keep)
		}
		l, err = OpenMetrics(path, -1)
		if err != nil {
			t.Fatal(err)
		}
		loss := 1.5
		r := Record{Step: 99, Loss: &loss, COR: []float64{0.5}}
		if err := l.Write(r); err != nil {
			t.Fatal(err)
		}
		l.Close()
		again, err := ReadMetrics(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) == 0 || !reflect.DeepEqual(again[len(again)-1], r) {
			t.Fatalf("the appended record did not read back last: %+v", again)
		}
	})
}
