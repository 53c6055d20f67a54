package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// LoadHF loads a Hugging Face tokenizer.json whose model is BPE and runs
// the pipeline it describes the way the tokenizers library does: added
// tokens matched in the raw text, the normalizer, the pre-tokenizer, the BPE
// model, the post-processor (EncodeHF) and the decoder (DecodeHF). The
// components it knows:
//
//   - normalizers: NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents,
//     Replace, Prepend, Sequence;
//   - pre-tokenizers: Split (a regular expression or a string, every
//     behavior, invert), ByteLevel, Metaspace, Digits, Whitespace,
//     WhitespaceSplit, Punctuation, CharDelimiterSplit, BertPreTokenizer,
//     Sequence;
//   - the BPE model with merges as "a b" strings or ["a", "b"] pairs,
//     byte_fallback, ignore_merges, unk_token, fuse_unk,
//     continuing_subword_prefix and end_of_word_suffix;
//   - post-processors: TemplateProcessing, ByteLevel, RobertaProcessing,
//     BertProcessing, Sequence;
//   - decoders: ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
//     Sequence.
//
// Any other component (a WordPiece or Unigram model, say) is an error that
// names it. A file in GPT-2's layout (no normalizer, the ByteLevel
// pre-tokenizer with its regular expression) takes the same fast path as
// LoadGPT2.
func LoadHF(path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := parseHF(data, path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

// ReadHF is LoadHF on a reader; name is used in errors.
func ReadHF(r io.Reader, name string) (*Tokenizer, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", name, err)
	}
	t, err := parseHF(data, name)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return t, nil
}

type hfAddedToken struct {
	ID         *int    `json:"id"`
	Content    *string `json:"content"`
	SingleWord bool    `json:"single_word"`
	LStrip     bool    `json:"lstrip"`
	RStrip     bool    `json:"rstrip"`
	Normalized *bool   `json:"normalized"`
	Special    bool    `json:"special"`
}

type hfModel struct {
	Type                    string          `json:"type"`
	Dropout                 *float64        `json:"dropout"`
	UnkToken                *string         `json:"unk_token"`
	ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
	FuseUnk                 bool            `json:"fuse_unk"`
	ByteFallback            bool            `json:"byte_fallback"`
	IgnoreMerges            bool            `json:"ignore_merges"`
	Vocab                   json.RawMessage `json:"vocab"`
	Merges                  json.RawMessage `json:"merges"`
}

type hfFile struct {
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         *hfModel        `json:"model"`
}

// isNull reports whether a JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	b := bytes.TrimSpace(raw)
	return len(b) == 0 || string(b) == "null"
}

// unmarshalError turns a json error into one with a line and column.
func unmarshalError(data []byte, name string, err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		line, col := lineCol(data, syn.Offset-1)
		return fmt.Errorf("%s:%d:%d: %v", name, line, col, err)
	case errors.As(err, &typ):
		line, col := lineCol(data, typ.Offset)
		return fmt.Errorf("%s:%d:%d: %s is %s, want %s", name, line, col, typ.Field, typ.Value, jsonTypeName(typ.Type))
	}
	return fmt.Errorf("%s: %v", name, err)
}

func parseHF(data []byte, name string) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, unmarshalError(data, name, err)
	}
	m := f.Model
	if m == nil {
		return nil, fmt.Errorf("%s: no \"model\"", name)
	}
	switch m.Type {
	case "BPE", "":
	case "WordPiece", "Unigram", "WordLevel":
		return nil, fmt.Errorf("%s: model.type is %q; only \"BPE\" is supported (%s models are not)", name, m.Type, m.Type)
	default:
		return nil, fmt.Errorf("%s: model.type is %q; only \"BPE\" is supported", name, m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("%s: model.dropout %g is not supported", name, *m.Dropout)
	}
	if !isNull(f.Truncation) {
		return nil, fmt.Errorf("%s: truncation %s is not supported (want null)", name, clip(f.Truncation))
	}
	if !isNull(f.Padding) {
		return nil, fmt.Errorf("%s: padding %s is not supported (want null)", name, clip(f.Padding))
	}
	if len(m.Vocab) == 0 {
		return nil, fmt.Errorf("%s: no model.vocab", name)
	}
	vocab, err := parseVocabJSON(m.Vocab, "model.vocab", true)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	merges, err := parseHFMerges(m.Merges)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	for i, a := range f.AddedTokens {
		if a.ID == nil || a.Content == nil {
			return nil, fmt.Errorf("%s: added_tokens[%d]: want both \"id\" and \"content\"", name, i)
		}
	}
	if m.UnkToken != nil {
		found := false
		for _, e := range vocab {
			found = found || e.token == *m.UnkToken
		}
		if !found {
			return nil, fmt.Errorf("%s: model.unk_token %q is not in model.vocab", name, *m.UnkToken)
		}
	}
	if fastLayout(&f) {
		specials := []vocabEntry{}
		for i, a := range f.AddedTokens {
			specials = append(specials, vocabEntry{token: *a.Content, id: *a.ID, where: fmt.Sprintf("added_tokens[%d]", i)})
		}
		t, err := build(vocab, merges, specials, m.IgnoreMerges)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		t.special = make(map[int]bool)
		for _, a := range f.AddedTokens {
			if a.Special {
				t.special[*a.ID] = true
			}
		}
		return t, nil
	}
	t, err := buildPipeline(&f, data, vocab, merges)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return t, nil
}

// fastLayout reports whether f is in GPT-2's layout, which the byte-level
// fast path (the one LoadGPT2 uses) encodes exactly: no normalizer, a lone
// ByteLevel pre-tokenizer with the regular expression and no prefix space,
// the ByteLevel decoder, no post-processor that adds tokens, a plain BPE
// model and added tokens without flags.
func fastLayout(f *hfFile) bool {
	if !isNull(f.Normalizer) || f.Model.ContinuingSubwordPrefix != nil && *f.Model.ContinuingSubwordPrefix != "" ||
		f.Model.EndOfWordSuffix != nil && *f.Model.EndOfWordSuffix != "" {
		return false
	}
	for _, a := range f.AddedTokens {
		if a.LStrip || a.RStrip || a.SingleWord || *a.Content == "" {
			return false
		}
	}
	var p struct {
		Type           string            `json:"type"`
		AddPrefixSpace bool              `json:"add_prefix_space"`
		UseRegex       *bool             `json:"use_regex"`
		Pretokenizers  []json.RawMessage `json:"pretokenizers"`
		Processors     []json.RawMessage `json:"processors"`
		Decoders       []json.RawMessage `json:"decoders"`
	}
	raw := f.PreTokenizer
	for {
		p.Pretokenizers = nil
		if json.Unmarshal(raw, &p) != nil {
			return false
		}
		if p.Type == "Sequence" && len(p.Pretokenizers) == 1 {
			raw = p.Pretokenizers[0]
			continue
		}
		break
	}
	if p.Type != "ByteLevel" || p.AddPrefixSpace || (p.UseRegex != nil && !*p.UseRegex) {
		return false
	}
	if !isNull(f.PostProcessor) {
		p.Type = ""
		if json.Unmarshal(f.PostProcessor, &p) != nil || p.Type != "ByteLevel" {
			return false
		}
	}
	p.Type = ""
	if isNull(f.Decoder) || json.Unmarshal(f.Decoder, &p) != nil || p.Type != "ByteLevel" {
		return false
	}
	return true
}

func clip(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// parseHFMerges reads model.merges in either encoding: "a b" strings (older
// files) or ["a", "b"] pairs (newer ones, which allow spaces in tokens).
func parseHFMerges(raw json.RawMessage) ([]mergeEntry, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("model.merges: want a list: %v", err)
	}
	merges := make([]mergeEntry, len(items))
	for i, item := range items {
		where := fmt.Sprintf("model.merges[%d]", i)
		var s string
		var pair []string
		if json.Unmarshal(item, &s) == nil {
			a, b, ok := strings.Cut(s, " ")
			if !ok || a == "" || b == "" || strings.Contains(b, " ") {
				return nil, fmt.Errorf("%s: want \"a b\" (two tokens and one space), have %q", where, s)
			}
			merges[i] = mergeEntry{a: a, b: b, where: where}
		} else if json.Unmarshal(item, &pair) == nil {
			if len(pair) != 2 || pair[0] == "" || pair[1] == "" {
				return nil, fmt.Errorf("%s: want a pair of two non-empty tokens, have %s", where, clip(item))
			}
			merges[i] = mergeEntry{a: pair[0], b: pair[1], where: where}
		} else {
			return nil, fmt.Errorf("%s: want \"a b\" or [\"a\", \"b\"], have %s", where, clip(item))
		}
	}
	return merges, nil
}
