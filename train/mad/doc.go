// Package mad is the MAD synthetic benchmark (Poli et al. 2024, "Mechanistic
// Design and Scaling of Hybrid Architectures"; docs/MAD.md): its six tasks
// (in-context recall, fuzzy in-context recall, noisy in-context recall,
// selective copying, compression, memorization) with the 66-setting
// difficulty sweep, the MAD models (a 4-layer language-model backbone and the
// compression auto-encoder, with pluggable sequence mixers), and the training
// protocol (AdamW or Muon, an lr x weight-decay grid per setting, cosine
// decay per epoch, early stop at 0.999 test accuracy, the test accuracy at
// the best test perplexity, best of the grid per setting, mean over
// settings).
//
// The pieces, bottom up:
//
//   - Setting, Baseline, Sweep, Benchmark: what one task instance is.
//   - Generate: the seeded train and test sets of a setting.
//   - Layer and RegisterMixer: a residual branch with an explicit forward and
//     backward; the built-in mixers are "softmax", "parallax", "linear" and
//     "affine", the channel mixer is SwiGLU.
//   - Model: embedding, layers, (decoder,) RMSNorm and a biased head, written
//     against the engine's op set, llm.c style.
//   - Train: one training run (one setting, mixer, optimizer, lr, wd).
//   - RunSuite: a whole benchmark (plan, resume, parallel runs, aggregation,
//     table, JSON and a bar chart).
package mad
