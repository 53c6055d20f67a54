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
// (vocab.bpe) through LoadGPT2, from text through Train, or from a Hugging
// Face tokenizer.json through LoadHF, which runs the pipeline the file
// describes (normalizer, pre-tokenizer, BPE model, post-processor, decoder)
// the way the tokenizers library does: EncodeHF and DecodeHF give what its
// Tokenizer.encode and Tokenizer.decode give, for the layouts of Qwen2, 2.5
// and 3, Llama 3, SentencePiece-style BPE (Mistral, Llama 2) and GPT-2. A
// tokenizer.json in GPT-2's own layout takes the byte-level fast path. SaveHF writes
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
