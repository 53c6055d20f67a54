// Package engine defines what every Parallax compute backend provides: a
// Device that owns memory, Tensors resident on it, and Ops, the typed op set
// the model and optimizer layers are written against.
//
// Backends (engine/cpu, engine/vulkan, engine/cuda) register themselves in
// their init functions, like database/sql drivers; a program selects one by
// importing it and calling Open with "auto", "cpu", "vulkan:N" or "cuda:N".
// The engine package never imports a backend.
//
// Ops are enqueued on the device, not necessarily executed when the call
// returns: a GPU backend records them into a command buffer or stream. Host
// access is explicit (Device.Read, Device.Write, and the Float32s/Upload
// helpers) and Device.Sync waits for everything enqueued so far.
//
// Conventions shared by every op:
//   - Tensors are dense and row-major; shapes are listed outermost first.
//   - Parameter gradients (dW, dTable, dGain) are accumulated into (+=), so
//     gradient accumulation over micro-batches needs no extra pass; activation
//     gradients (dX, dQ, ...) are overwritten.
//   - Floating inputs may be f32, bf16 or f16; arithmetic accumulates in f32
//     (the CPU backend) or better. Statistics (log-sum-exp, tbar, rstd) are f32.
//   - Every op validates its arguments with the Check* functions of this
//     package before touching memory, so every backend reports the same error
//     for the same mistake.
//
// The attention family follows docs/MATH.md: softmax attention,
// Parallax (softmax attention with a learned covariance correction,
// o = o_SA - Sigma_KV r), decode over a KV cache, exact local linear attention
// (LLA) and the uniform-weight linear attentions.
package engine
