package model

import (
	"errors"
	"fmt"
	"os"

	"github.com/parallax-engine/parallax/engine"
)

// Decode steps on a device that records graphs (engine.GraphRecorder) are
// recorded once per KV cache and activation set and replayed for every
// later token: a step of a 28-layer model is some 400 kernels of a few
// microseconds each, which the host cannot launch as fast as the device
// runs them. Everything a step varies (token ids, positions, the cache
// lengths and append starts) lives in tensors written before the replay,
// so the recorded kernels are the same every token.
//
// The first decode step of a shape runs eagerly (it loads kernels and
// allocates scratch, which a recording must not be the first to do), the
// second is recorded and replayed, and later ones replay. A recording
// that fails (a backend op that cannot be recorded) falls back to eager
// steps for that cache; a stale graph (device scratch reallocated) is
// recorded again.

// graphsDisabled turns recording off for every model of the process
// (PARALLAX_GRAPHS=0), to compare with eager steps or to rule graphs out.
var graphsDisabled = os.Getenv("PARALLAX_GRAPHS") == "0"

// SetGraphs turns the recording of decode steps on (the default where the
// device supports it) or off for this model.
func (m *Model) SetGraphs(on bool) { m.noGraphs = !on }

// replayDecode runs the uploaded one-token decode step through the cache's
// recorded graph, recording it first when it is due. It reports whether it
// ran the step; false means the caller runs it eagerly.
func (m *Model) replayDecode(kv *KVCache, a *Activations) (bool, error) {
	gr, ok := m.Dev.(engine.GraphRecorder)
	if !ok || m.noGraphs || graphsDisabled || kv.noGraphs || m.inspect != nil {
		return false, nil
	}
	// Weight refreshes are not part of a step's recording: do them now.
	r := &rec{dev: m.Dev}
	m.refreshCompute(r)
	if r.err != nil {
		return true, fmt.Errorf("step: %w", r.err)
	}
	k := a // one recorded step per activation set of the cache
	g := kv.graphs[k]
	if g == nil {
		if kv.warm == nil {
			kv.warm = map[*Activations]bool{}
		}
		if !kv.warm[k] {
			kv.warm[k] = true
			return false, nil
		}
		if err := gr.BeginGraph(); err != nil {
			kv.noGraphs = true
			return false, nil
		}
		ferr := m.forward(a, kv, false)
		ng, err := gr.EndGraph()
		switch {
		case ferr != nil && ng != nil:
			ng.Free()
			fallthrough
		case ferr != nil || err != nil:
			// Nothing recorded ran: the step is still to do, eagerly.
			kv.noGraphs = true
			return false, nil
		}
		if kv.graphs == nil {
			kv.graphs = map[*Activations]engine.Graph{}
		}
		kv.graphs[k], g = ng, ng
	}
	if err := g.Replay(); err != nil {
		g.Free()
		delete(kv.graphs, k)
		if errors.Is(err, engine.ErrGraphStale) {
			delete(kv.warm, k)
			return false, nil
		}
		return true, fmt.Errorf("step: %w", err)
	}
	return true, nil
}

// freeGraphs releases a cache's recorded steps.
func (kv *KVCache) freeGraphs() {
	for k, g := range kv.graphs {
		g.Free()
		delete(kv.graphs, k)
	}
	kv.warm = nil
}
