//go:build cgo

package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/parallax-engine/parallax/engine"
)

var _ engine.GraphRecorder = (*Device)(nil)

// recording is the state of a graph being recorded: the scratch buffers
// handed back while recording stay out of the pool (the graph addresses
// them) until the graph is freed, and the first refused call is kept for
// EndGraph.
type recording struct {
	held []*buffer
	err  error
}

// refuse records (and returns) the error of a call that is not allowed
// while a graph is recorded.
func (d *Device) refuse(what string) error {
	err := fmt.Errorf("cuda %s: not allowed while a graph is being recorded", what)
	if d.rec.err == nil {
		d.rec.err = err
	}
	return err
}

// BeginGraph starts a stream capture in relaxed mode on the device's stream.
func (d *Device) BeginGraph() error {
	switch {
	case d.closed:
		return errors.New("cuda: begin graph: the device is closed")
	case d.rec != nil:
		return errors.New("cuda: begin graph: a graph is being recorded already")
	case d.prof.on:
		return errors.New("cuda: begin graph: a profile is being recorded")
	case C.pxcu_has_graphs() == 0:
		return errors.New("cuda: begin graph: the driver has no stream capture")
	}
	if err := cuErr("cuStreamBeginCapture", C.pxcu_capture_begin(d.ctx, d.stream)); err != nil {
		return fmt.Errorf("cuda: begin graph: %w", err)
	}
	d.rec = &recording{}
	return nil
}

// EndGraph ends the capture and instantiates the graph.
func (d *Device) EndGraph() (engine.Graph, error) {
	if d.rec == nil {
		return nil, errors.New("cuda: end graph: no graph is being recorded")
	}
	rec := d.rec
	d.rec = nil
	var exec unsafe.Pointer
	r := C.pxcu_capture_end(d.ctx, d.stream, &exec)
	err := rec.err
	if err == nil && r != 0 {
		err = cuErr("cuStreamEndCapture", r)
	}
	if err != nil {
		if r == 0 && exec != nil {
			C.pxcu_graph_free(d.ctx, exec)
		}
		d.unhold(rec.held)
		return nil, fmt.Errorf("cuda: end graph: %w", err)
	}
	return &graph{d: d, exec: exec, held: rec.held, gen: d.scratchGen}, nil
}

// graph is an instantiated CUDA graph and the scratch it addresses.
type graph struct {
	d    *Device
	exec unsafe.Pointer
	held []*buffer
	gen  uint64 // d.scratchGen when recorded
}

// Replay launches the graph on the device's stream.
func (g *graph) Replay() error {
	d := g.d
	switch {
	case g.exec == nil:
		return errors.New("cuda: replay: the graph was freed")
	case d.closed:
		return errors.New("cuda: replay: the device is closed")
	case d.rec != nil:
		return d.refuse("graph replay")
	case g.gen != d.scratchGen:
		return engine.ErrGraphStale
	}
	prof := d.prof.on
	if prof {
		if err := d.profBegin(); err != nil {
			return fmt.Errorf("cuda replay: %w", err)
		}
	}
	if err := cuErr("cuGraphLaunch", C.pxcu_graph_launch(d.ctx, g.exec, d.stream)); err != nil {
		return fmt.Errorf("cuda replay: %w", err)
	}
	if prof {
		return d.profEnd("graph replay", 0, 0)
	}
	return nil
}

// Free destroys the executable graph and returns its scratch to the pool.
func (g *graph) Free() {
	if g.exec == nil {
		return
	}
	d := g.d
	if !d.closed {
		// Work enqueued before may still be replaying the graph.
		C.pxcu_stream_sync(d.ctx, d.stream)
		C.pxcu_graph_free(d.ctx, g.exec)
		d.unhold(g.held)
	}
	g.exec, g.held = nil, nil
}

// unhold returns scratch that a recording kept out of the pool.
func (d *Device) unhold(held []*buffer) {
	for _, b := range held {
		b.freed = false
		d.alloc.put(b)
	}
}
