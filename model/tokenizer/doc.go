// Package tokenizer implements byte-level byte-pair encoding (BPE) exactly as
// GPT-2 does it: text is split into pre-tokens by GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// (matched by a hand-written scanner, since Go's regexp has no lookahead),
// each pre-token's UTF-8 bytes are mapped to printable characters, and merges
// are applied by rank, lowest first, each to all its occurrences left to
// right.
//
// A Tokenizer comes from GPT-2's vocab.json (encoder.json) and merges.txt
// (vocab.bpe) through LoadGPT2, from a Hugging Face tokenizer.json of the
// same kind through LoadHF, or from text through Train. SaveHF writes
// tokenizer.json, which LoadHF and the Hugging Face tokenizers library read;
// Save writes that and GPT-2's two files.
//
// Encode works on arbitrary bytes, so Decode(Encode(s)) == s for every
// string s, valid UTF-8 or not. A byte that is not part of valid UTF-8 is
// treated by the pre-tokenizer as punctuation (neither letter, number nor
// space); GPT-2 itself never sees such bytes because it works on Unicode
// text. Encode treats special tokens' text as ordinary text;
// EncodeWithSpecials turns it into the special tokens.
//
// A *Tokenizer is safe for concurrent use.
package tokenizer
