package engine

import "errors"

// GraphRecorder is implemented by a Device that can record a sequence of
// ops once and replay it with a single submission, so that work made of
// many small kernels (a decode step: hundreds of launches over a few
// megabytes each) costs the device's time instead of the host's.
//
// Between BeginGraph and EndGraph the ops a caller enqueues are recorded,
// not run: nothing they write is computed until the graph is replayed.
// What is recorded is the ops with their operands' device addresses and
// every scalar argument, so a replay computes from whatever those tensors
// hold at that time: inputs that change between replays (token ids,
// positions, lengths) must live in tensors written before Replay, never in
// scalar arguments. Reading a tensor, Sync, writing from the host and
// freeing a tensor are refused while recording. The tensors a graph uses
// must outlive it.
type GraphRecorder interface {
	// BeginGraph starts recording on the device's queue. It fails if the
	// device cannot record now (recording or profiling already, or the
	// driver lacks graphs).
	BeginGraph() error
	// EndGraph stops recording and returns the graph. If an op failed or
	// was not recordable while recording, it returns that error and no
	// graph; the device is then usable again.
	EndGraph() (Graph, error)
}

// Graph is a recorded sequence of ops (see GraphRecorder).
type Graph interface {
	// Replay enqueues the recorded ops once, ordered after the work
	// enqueued before it. It returns ErrGraphStale if device memory the
	// graph depends on has been reallocated since it was recorded; the
	// caller then frees it and records again.
	Replay() error
	// Free releases the graph (once; later calls do nothing).
	Free()
}

// ErrGraphStale is returned by Graph.Replay when the graph was recorded
// over device scratch memory that has since been reallocated.
var ErrGraphStale = errors.New("graph: recorded over device scratch memory that has since been reallocated")
