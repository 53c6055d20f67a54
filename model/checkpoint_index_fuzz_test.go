package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parallax-engine/parallax/model/safetensors"
)

// FuzzShardIndex feeds openWeights fuzzed model.safetensors.index.json
// files beside two fixed, valid shards, so that every run reaches the
// index's checks (FuzzOpenWeights fuzzes the shards too). The weights must
// open exactly when the index is a JSON object whose weight_map names at
// least one tensor and maps every one to a shard of the directory that
// holds it, and then place each tensor in its shard.
func FuzzShardIndex(f *testing.F) {
	shards := map[string][]string{
		fuzzShard1: {"model.embed_tokens.weight", "model.norm.weight"},
		fuzzShard2: {"lm_head.weight"},
	}
	index := func(weightMap map[string]string) []byte {
		b, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 72}, "weight_map": weightMap})
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	f.Add(index(map[string]string{"model.embed_tokens.weight": fuzzShard1, "model.norm.weight": fuzzShard1, "lm_head.weight": fuzzShard2}))
	f.Add(index(map[string]string{"lm_head.weight": fuzzShard1}))
	f.Add(index(map[string]string{"lm_head.weight": "./" + fuzzShard2}))
	f.Add(index(map[string]string{"lm_head.weight": IndexFile}))
	f.Add(index(map[string]string{"lm_head.weight": ""}))
	f.Add([]byte(`{"WEIGHT_MAP": {"lm_head.weight": "model-00002-of-00002.safetensors"}, "weight_map": {}}`))
	f.Add([]byte(`{"weight_map": {"lm_head.weight": null}}`))
	f.Add([]byte(`{"weight_map": {"lm_head.weight": 2}}`))
	f.Add([]byte(`{"weight_map": []}`))
	f.Add([]byte(`null`))
	dir := f.TempDir()
	for name, tensors := range shards {
		var ts []safetensors.Tensor
		for _, n := range tensors {
			ts = append(ts, safetensors.F32Tensor(n, []int{2}, []float32{1, 2}))
		}
		if err := os.WriteFile(filepath.Join(dir, name), fuzzSafetensors(f, ts...), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > fuzzMaxInput {
			t.Skip()
		}
		if err := os.WriteFile(filepath.Join(dir, IndexFile), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		valid := json.Unmarshal(data, &idx) == nil && len(idx.WeightMap) > 0
		for name, shard := range idx.WeightMap {
			valid = valid && slices.Contains(shards[shard], name)
		}
		ws, err := openWeights(dir)
		if (err == nil) != valid {
			t.Fatalf("openWeights: %v; the index is valid: %v", err, valid)
		}
		if err != nil {
			if ws != nil {
				t.Fatalf("openWeights failed (%v) but returned a weight set", err)
			}
			return
		}
		defer ws.close()
		if len(ws.where) != len(idx.WeightMap) {
			t.Fatalf("the index names %d tensors, the weight set has %d", len(idx.WeightMap), len(ws.where))
		}
		for name, shard := range idx.WeightMap {
			if wf := ws.where[name]; wf == nil || wf.path != filepath.Join(dir, shard) {
				t.Fatalf("tensor %q: the index says %s, the weight set %v", name, shard, wf)
			}
		}
	})
}
