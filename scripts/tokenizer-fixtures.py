#!/usr/bin/env python3
"""Makes the tokenizer and chat-template fixtures with the Hugging Face
tokenizers and transformers libraries themselves.

Run from the repository root:

    python3 scripts/tokenizer-fixtures.py OUTDIR

It trains four small BPE tokenizers with the tokenizers library, each in the
layout of a model family, on two embedded novels and the test texts:

  qwen      NFC, Split with Qwen2's pattern (Isolated), ByteLevel without its
            regex, the ByteLevel decoder; specials <|endoftext|>,
            <|im_start|>, <|im_end|> and the non-special <think>, </think>,
            <tool_call>, </tool_call>
  llama3    Split with Llama 3's pattern (\\p{N}{1,3}), ByteLevel,
            ignore_merges, TemplateProcessing adding <|begin_of_text|>
  spbpe     SentencePiece-style BPE: Metaspace (prepend_scheme first, no
            split), byte_fallback with the <0xXX> tokens, fuse_unk, <unk>,
            TemplateProcessing adding <s>, the Replace/ByteFallback/Fuse/Strip
            decoder of Llama 2
  misc      NFKC + Lowercase + Strip + Replace, Digits + Punctuation +
            Metaspace(always), unk without byte fallback, the Metaspace
            decoder, added tokens with lstrip, rstrip, single_word and
            normalized

and for each writes tokenizer.json and cases.json: every text of
model/tokenizer/testdata/hf/texts.json with encode(text).ids,
encode(text, add_special_tokens=False).ids, decode(ids) and
decode(ids, skip_special_tokens=False).

It then renders every conversation of model/chat/testdata/cases.json with
each template of model/chat/testdata/templates through transformers'
apply_chat_template, with and without add_generation_prompt, into
rendered.json.

The output tree mirrors the repository: OUTDIR/model/tokenizer/testdata/hf/
and OUTDIR/model/chat/testdata/.
"""

import gzip
import json
import os
import shutil
import sys
import tempfile
import time

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

VOCAB = 3000


def corpus(texts):
    lines = []
    for name in ("emma", "persuasion"):
        with gzip.open(os.path.join("assets", "corpus", name + ".txt.gz"), "rt", encoding="utf-8") as f:
            lines.extend(f.read().split("\n"))
    # The test texts, several times, so that their scripts get merges too.
    for _ in range(5):
        lines.extend(texts)
    return lines


def train(tok, lines, special_tokens=(), limit_alphabet=None, byte_level=False):
    kw = dict(vocab_size=VOCAB, min_frequency=2, special_tokens=list(special_tokens), show_progress=False)
    if limit_alphabet:
        kw["limit_alphabet"] = limit_alphabet
    if byte_level:
        kw["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    tok.train_from_iterator(lines, trainers.BpeTrainer(**kw))


def patch(tok, fn):
    """Edits the tokenizer's JSON and loads it back (the library checks it)."""
    d = json.loads(tok.to_str())
    fn(d)
    return Tokenizer.from_str(json.dumps(d, ensure_ascii=False))


def qwen(lines):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, lines, byte_level=True)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ("<think>", "</think>", "<tool_call>", "</tool_call>")])

    def fix(d):
        d["model"]["byte_fallback"] = False
        d["model"]["ignore_merges"] = False
    return patch(tok, fix)


def llama3(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train(tok, lines, byte_level=True)
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in names])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])

    def fix(d):
        d["model"]["ignore_merges"] = True
    return patch(tok, fix)


def spbpe(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    byte_tokens = ["<0x%02X>" % b for b in range(256)]
    # A small alphabet, so that rare characters take the byte fallback.
    train(tok, lines, special_tokens=["<unk>", "<s>", "</s>"] + byte_tokens, limit_alphabet=150)
    tok.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0),
    ])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", tok.token_to_id("<s>"))])

    def fix(d):
        # As in Llama 2 and Mistral: the byte tokens are ordinary vocabulary,
        # only <unk>, <s> and </s> are added tokens; no split at spaces.
        d["added_tokens"] = [a for a in d["added_tokens"] if a["content"] in ("<unk>", "<s>", "</s>")]
        d["pre_tokenizer"]["split"] = False
        d["model"]["byte_fallback"] = True
        d["model"]["fuse_unk"] = True
    return patch(tok, fix)


def misc(lines):
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([
        normalizers.NFKC(), normalizers.Lowercase(), normalizers.Strip(left=True, right=True),
        normalizers.Replace("``", '"'),
    ])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True),
    ])
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    train(tok, lines, special_tokens=["<unk>"], limit_alphabet=120)
    tok.add_special_tokens([AddedToken("<mask>", special=True, lstrip=True, normalized=False)])
    tok.add_special_tokens([AddedToken("<sep>", special=True, rstrip=True, normalized=False)])
    tok.add_tokens([AddedToken("[word]", single_word=True, normalized=False)])
    tok.add_tokens([AddedToken("Normtok", normalized=True)])
    return tok


LAYOUTS = [("qwen", qwen), ("llama3", llama3), ("spbpe", spbpe), ("misc", misc)]


def tokenizer_fixtures(out, texts):
    lines = corpus(texts)
    made = {}
    for name, build in LAYOUTS:
        t0 = time.time()
        tok = build(lines)
        d = os.path.join(out, "model", "tokenizer", "testdata", "hf", name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=True)
        # Read back what was written, as the Go tests do.
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        cases = []
        for s in texts:
            ids = tok.encode(s).ids
            cases.append({
                "text": s,
                "ids": ids,
                "ids_plain": tok.encode(s, add_special_tokens=False).ids,
                "decoded": tok.decode(ids),
                "decoded_special": tok.decode(ids, skip_special_tokens=False),
            })
        with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
            json.dump({"made_by": "tokenizers " + tokenizers.__version__, "cases": cases}, f, ensure_ascii=False, indent=1)
        made[name] = tok
        print(f"{name}: {tok.get_vocab_size()} tokens, {len(cases)} cases, {time.time() - t0:.1f}s", file=sys.stderr)
    return made


def chat_fixtures(out, qwen_tok):
    import transformers
    from transformers import PreTrainedTokenizerFast

    with open(os.path.join("model", "chat", "testdata", "cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    tdir = os.path.join("model", "chat", "testdata", "templates")
    renders = []
    for name in sorted(os.listdir(tdir)):
        with tempfile.TemporaryDirectory() as tmp:
            qwen_tok.save(os.path.join(tmp, "tokenizer.json"))
            shutil.copy(os.path.join(tdir, name, "tokenizer_config.json"), tmp)
            tok = PreTrainedTokenizerFast.from_pretrained(tmp)
            for c in cases:
                for agp in (False, True):
                    r = {"template": name, "case": c["name"], "add_generation_prompt": agp, "prompt": "", "error": ""}
                    try:
                        r["prompt"] = tok.apply_chat_template(c["messages"], tools=c.get("tools"), add_generation_prompt=agp,
                                                              tokenize=False, **(c.get("vars") or {}))
                    except Exception as e:  # raise_exception in the template
                        r["error"] = str(e)
                    renders.append(r)
    d = os.path.join(out, "model", "chat", "testdata")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "rendered.json"), "w", encoding="utf-8") as f:
        json.dump({"made_by": "transformers " + transformers.__version__, "renders": renders}, f, ensure_ascii=False, indent=1)
    print(f"chat: {len(renders)} renders", file=sys.stderr)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tokenizer-fixtures.py OUTDIR")
    out = sys.argv[1]
    with open(os.path.join("model", "tokenizer", "testdata", "hf", "texts.json"), encoding="utf-8") as f:
        texts = json.load(f)
    made = tokenizer_fixtures(out, texts)
    chat_fixtures(out, made["qwen"])


if __name__ == "__main__":
    main()
