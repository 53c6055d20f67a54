// Package train trains Parallax-Qwen3 models: the optimizers (Muon for the
// hidden matrices, AdamW for the rest, or AdamW alone; docs/MATH.md section
// 10), learning-rate schedules (WSD, cosine), gradient
// clipping and accumulation, the training loop with evaluation, checkpoints
// that resume bit for bit, and reporting (a progress bar, metrics.jsonl and a
// PNG of the curves).
//
// Run is the entry point:
//
//	res, err := train.Run(ctx, train.Config{Out: "run", Model: "tiny", Steps: 500})
//
// A run's output directory holds the model checkpoint (config.json,
// model.safetensors), the training state (optimizer.safetensors: optimizer
// tensors, step, data position, the run's settings), the manifest that
// makes a save one atomic step (checkpoint.json: every checkpoint file's
// size and checksum), tokenizer.json, the tokenized data (data/),
// metrics.jsonl and curves.png.
//
// Subpackages: data (token shards and the resumable sampler) and plot (PNG
// line charts).
package train
