#!/usr/bin/env python3
"""Write the Hugging Face Qwen3 fixture of cmd/parallax/testdata with transformers.

Creates, offline, a tiny random Qwen3ForCausalLM (2 layers, hidden 64, 4 query
and 2 key/value heads of 16, SwiGLU 128, vocabulary 384, tied embeddings), its
byte-level BPE tokenizer (tokenizers, trained on a fixed text), and the loss
transformers computes on a fixed batch, into:

  OUT/hf-qwen3-tiny/          config.json, model.safetensors (bf16),
                              tokenizer.json, expected.json
  OUT/hf-qwen3-tiny-sharded/  the same model saved in several shards

expected.json holds the batch ("tokens": 33 ids, the formula of
cmd/parallax/adapt_test.go) and "loss": the mean next-token cross-entropy of
the bf16 weights evaluated in float32 with eager attention.

Usage: python3 scripts/hf-fixture.py --out DIR
"""
import argparse
import json
import os
import shutil

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import Qwen3Config, Qwen3ForCausalLM

VOCAB = 384
EOT = "<|endoftext|>"

TEXT = """It is a truth universally acknowledged, that a single man in possession
of a good fortune, must be in want of a wife. However little known the feelings
or views of such a man may be on his first entering a neighbourhood, this truth
is so well fixed in the minds of the surrounding families, that he is considered
the rightful property of some one or other of their daughters.
"My dear Mr. Bennet," said his lady to him one day, "have you heard that
Netherfield Park is let at last?" Mr. Bennet replied that he had not.
"But it is," returned she; "for Mrs. Long has just been here, and she told me
all about it." Mr. Bennet made no answer. "Do you not want to know who has
taken it?" cried his wife impatiently. "You want to tell me, and I have no
objection to hearing it." This was invitation enough.
The quick brown fox jumps over the lazy dog 0123456789 times; then again, and
again, until the numbers 10, 20, 30, 40 and 50 are all counted twice over.
"""


def batch_tokens():
    return [(i * 37 + 11) % VOCAB for i in range(33)]


def make_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TEXT] * 20, trainer=trainer)
    if tok.get_vocab_size() != VOCAB:
        raise SystemExit(f"tokenizer has {tok.get_vocab_size()} tokens, want {VOCAB}")
    tok.save(path)
    return tok.token_to_id(EOT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    out = os.path.join(args.out, "hf-qwen3-tiny")
    sharded = os.path.join(args.out, "hf-qwen3-tiny-sharded")
    for d in (out, sharded):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    eot = make_tokenizer(os.path.join(out, "tokenizer.json"))
    shutil.copy(os.path.join(out, "tokenizer.json"), sharded)

    cfg = Qwen3Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, hidden_act="silu",
        max_position_embeddings=256, rms_norm_eps=1e-6, rope_theta=10000.0,
        tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        bos_token_id=eot, eos_token_id=eot,
    )
    model = Qwen3ForCausalLM(cfg)
    # Larger than the default initialisation so the logits are far from
    # uniform; the norm gains are perturbed around 1 so they matter too.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.1)
            else:
                p.normal_(0.0, 0.1)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    model.save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")

    try:
        ref = Qwen3ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        ref = Qwen3ForCausalLM.from_pretrained(out, torch_dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    ids = torch.tensor([batch_tokens()], dtype=torch.long)
    with torch.no_grad():
        loss = ref(input_ids=ids, labels=ids).loss.item()
    expected = {
        "tokens": batch_tokens(),
        "loss": loss,
        "source": f"transformers {transformers.__version__}, torch {torch.__version__}: "
        "bf16 weights evaluated in float32, eager attention",
    }
    for d in (out, sharded):
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(expected, f, indent=2)
            f.write("\n")
    print(f"wrote {out} and {sharded}; transformers loss {loss:.9f}")


if __name__ == "__main__":
    main()
