package chat

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoadGenerationConfig feeds generation_config.json files to
// LoadGenerationConfig. It must agree with ParseGenerationConfig on the
// file's bytes, name the file in its errors, and a config it accepts must
// come back the same when written out as generation_config.json again.
func FuzzLoadGenerationConfig(f *testing.F) {
	f.Add([]byte(`{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643], "pad_token_id": 151643,
		"temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"}`))
	f.Add([]byte(`{"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "do_sample": true, "temperature": 0.6, "top_p": 0.9}`))
	f.Add([]byte(`{"eos_token_id": 2, "top_k": 0, "temperature": 0}`))
	f.Add([]byte(`{"eos_token_id": [], "bos_token_id": null, "do_sample": false}`))
	f.Add([]byte(`{"eos_token_id": "2"}`))
	f.Add([]byte(`{"top_p": 0}`))
	f.Add([]byte(`{"temperature": -1e-300}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	dir := f.TempDir()
	path := filepath.Join(dir, GenerationConfigFile)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			t.Skip()
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := LoadGenerationConfig(dir)
		want, wantErr := ParseGenerationConfig(data)
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("LoadGenerationConfig: %v; ParseGenerationConfig: %v", err, wantErr)
		}
		if err != nil {
			if g != nil {
				t.Fatalf("a failed load (%v) returned a config", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error %q does not name %s", err, path)
			}
			return
		}
		if !reflect.DeepEqual(g, want) {
			t.Fatalf("LoadGenerationConfig gave %+v, ParseGenerationConfig %+v", g, want)
		}
		if g.BOS != nil && (*g.BOS < 0 || *g.BOS >= maxTokenID) {
			t.Fatalf("bos id %d accepted", *g.BOS)
		}
		// Written back in the file's own keys, it reads the same.
		out := map[string]any{}
		if g.EOS != nil {
			out["eos_token_id"] = g.EOS
		}
		if g.BOS != nil {
			out["bos_token_id"] = *g.BOS
		}
		for key, v := range map[string]any{"temperature": g.Temperature, "top_p": g.TopP, "top_k": g.TopK, "do_sample": g.DoSample} {
			if !reflect.ValueOf(v).IsNil() {
				out[key] = v
			}
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("marshal %+v: %v", g, err)
		}
		again, err := ParseGenerationConfig(b)
		if err != nil {
			t.Fatalf("the config written back does not parse: %v\n%s", err, b)
		}
		if len(g.EOS) == 0 && len(again.EOS) == 0 {
			again.EOS = g.EOS // an empty list and none are the same
		}
		if !reflect.DeepEqual(g, again) {
			t.Fatalf("written back and read again, %+v became %+v", g, again)
		}
	})
}
