package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/model/safetensors"
)

// Shard names of the fuzzed checkpoint: the first holds the fuzzer's bytes,
// the second a fixed valid file.
const (
	fuzzShard1 = "model-00001-of-00002.safetensors"
	fuzzShard2 = "model-00002-of-00002.safetensors"
)

func fuzzSafetensors(tb testing.TB, tensors ...safetensors.Tensor) []byte {
	tb.Helper()
	var buf bytes.Buffer
	if err := safetensors.Encode(&buf, tensors, map[string]string{"format": "pt"}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzOpenWeights feeds openWeights a model.safetensors.index.json and the
// first of the two shards it may name; the second shard is valid and fixed.
// An empty index means no index: the shard bytes are then model.safetensors.
// Weights that open must hold exactly the tensors the index names, each in
// the file the index says, all inside the directory.
func FuzzOpenWeights(f *testing.F) {
	shard1 := fuzzSafetensors(f,
		safetensors.BF16Tensor("model.embed_tokens.weight", []int{4, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8}),
		safetensors.F32Tensor("model.norm.weight", []int{2}, []float32{1, 1}))
	shard2 := fuzzSafetensors(f,
		safetensors.F32Tensor("lm_head.weight", []int{4, 2}, []float32{1, 2, 3, 4, 5, 6, 7, 8}))
	index := func(weightMap map[string]string) []byte {
		b, err := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": 72}, "weight_map": weightMap}, "", "  ")
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(index(map[string]string{"model.embed_tokens.weight": fuzzShard1, "model.norm.weight": fuzzShard1,
		"lm_head.weight": fuzzShard2}), shard1)
	f.Add(index(map[string]string{"lm_head.weight": fuzzShard2}), shard1)
	f.Add(index(map[string]string{"model.norm.weight": fuzzShard2}), shard1)                 // the index lies
	f.Add(index(map[string]string{"x": "../" + fuzzShard1}), shard1)                         // escapes the directory
	f.Add(index(map[string]string{"x": "model-00003-of-00003.safetensors"}), shard1)         // missing shard
	f.Add(index(map[string]string{"model.norm.weight": fuzzShard1}), shard1[:len(shard1)-3]) // truncated shard
	f.Add([]byte(`{"weight_map": {}}`), shard1)
	f.Add([]byte(`{"weight_map": null}`), shard1)
	f.Add([]byte(`[]`), shard1)
	f.Add([]byte{}, shard1) // no index: a single model.safetensors
	f.Add([]byte{}, []byte("not a tensor file at all"))
	// One directory, rewritten by each run: the runs of a worker are
	// sequential.
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, index, shard []byte) {
		if len(index) > fuzzMaxInput || len(shard) > fuzzMaxInput {
			t.Skip()
		}
		write := func(name string, b []byte) {
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range []string{WeightsFile, IndexFile, fuzzShard1, fuzzShard2} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		single := len(index) == 0
		if single {
			write(WeightsFile, shard)
		} else {
			write(IndexFile, index)
			write(fuzzShard1, shard)
			write(fuzzShard2, shard2)
		}
		ws, err := openWeights(dir)
		if err != nil {
			if ws != nil {
				t.Fatalf("openWeights failed (%v) but returned a weight set", err)
			}
			return
		}
		defer ws.close()
		_ = ws.describe()
		if len(ws.files) == 0 {
			t.Fatalf("openWeights opened no file")
		}
		for _, wf := range ws.files {
			if filepath.Dir(wf.path) != dir {
				t.Fatalf("opened %s, outside %s", wf.path, dir)
			}
		}
		for name, wf := range ws.where {
			if _, ok := wf.file.Info(name); !ok {
				t.Fatalf("tensor %q is placed in %s, which does not hold it", name, wf.path)
			}
			if !slices.Contains(ws.files, wf) {
				t.Fatalf("tensor %q is placed in %s, which is not among the opened files", name, wf.path)
			}
		}
		if single {
			if len(ws.files) != 1 || !slices.Equal(ws.files[0].file.Names(), fuzzSortedKeys(ws.where)) {
				t.Fatalf("single file: %d files, tensors %q", len(ws.files), fuzzSortedKeys(ws.where))
			}
			return
		}
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(index, &idx); err != nil {
			t.Fatalf("openWeights accepted an index that is not JSON: %v", err)
		}
		if len(idx.WeightMap) == 0 || len(idx.WeightMap) != len(ws.where) {
			t.Fatalf("the index names %d tensors, the weight set has %d", len(idx.WeightMap), len(ws.where))
		}
		for name, shardName := range idx.WeightMap {
			wf, ok := ws.where[name]
			if !ok || wf.path != filepath.Join(dir, shardName) {
				t.Fatalf("tensor %q: the index says %s, the weight set %v", name, shardName, wf)
			}
		}
	})
}

func fuzzSortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
