package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// GenerationConfigFile is the name of the file LoadGenerationConfig reads.
const GenerationConfigFile = "generation_config.json"

// GenerationConfig is what generation_config.json says about generation:
// the ids that end it and the default sampling settings. A nil field is
// one the file does not set.
type GenerationConfig struct {
	// EOS lists the ids that end generation (eos_token_id, an integer or
	// a list of them).
	EOS         []int
	BOS         *int
	Temperature *float64
	TopP        *float64
	TopK        *int
	// DoSample is do_sample; false means greedy decoding.
	DoSample *bool
}

// LoadGenerationConfig reads dir/generation_config.json. A missing file is
// an empty config, not an error.
func LoadGenerationConfig(dir string) (*GenerationConfig, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &GenerationConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("chat: %w", err)
	}
	g, err := ParseGenerationConfig(data)
	if err != nil {
		return nil, fmt.Errorf("chat: %s: %w", path, err)
	}
	return g, nil
}

// maxTokenID bounds the ids generation_config.json may name.
const maxTokenID = 1 << 24

// ParseGenerationConfig parses the contents of a generation_config.json.
func ParseGenerationConfig(data []byte) (*GenerationConfig, error) {
	var raw struct {
		EOS         json.RawMessage `json:"eos_token_id"`
		BOS         json.RawMessage `json:"bos_token_id"`
		Temperature *float64        `json:"temperature"`
		TopP        *float64        `json:"top_p"`
		TopK        *int            `json:"top_k"`
		DoSample    *bool           `json:"do_sample"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	g := &GenerationConfig{Temperature: raw.Temperature, TopP: raw.TopP, TopK: raw.TopK, DoSample: raw.DoSample}
	var err error
	if g.EOS, err = ids(raw.EOS, "eos_token_id"); err != nil {
		return nil, err
	}
	bos, err := ids(raw.BOS, "bos_token_id")
	if err != nil {
		return nil, err
	}
	if len(bos) > 0 {
		g.BOS = &bos[0]
	}
	switch {
	case g.Temperature != nil && !(*g.Temperature >= 0 && !math.IsInf(*g.Temperature, 0)):
		return nil, fmt.Errorf("temperature %g must be a finite number >= 0", *g.Temperature)
	case g.TopP != nil && !(*g.TopP > 0 && *g.TopP <= 1):
		return nil, fmt.Errorf("top_p %g must be in (0, 1]", *g.TopP)
	case g.TopK != nil && *g.TopK < 0:
		return nil, fmt.Errorf("top_k %d must be >= 0", *g.TopK)
	}
	return g, nil
}

// ids reads an id or a list of ids.
func ids(raw json.RawMessage, name string) ([]int, error) {
	b := bytes.TrimSpace(raw)
	if len(b) == 0 || string(b) == "null" {
		return nil, nil
	}
	var one int
	if json.Unmarshal(b, &one) == nil {
		b = []byte(fmt.Sprintf("[%d]", one))
	}
	var list []int
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s is %s; want an integer id or a list of them", name, clipJSON(b))
	}
	for _, id := range list {
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("%s: id %d is outside [0, %d)", name, id, maxTokenID)
		}
	}
	return list, nil
}

func clipJSON(b []byte) string {
	if len(b) > 60 {
		return string(b[:57]) + "..."
	}
	return string(b)
}
