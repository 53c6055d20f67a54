//go:build !cgo

package cuda

import (
	"errors"

	"github.com/parallax-engine/parallax/engine"
)

func init() { engine.Register(backend{}) }

type backend struct{}

var errNoCgo = errors.New("the CUDA backend needs cgo (this program was built with CGO_ENABLED=0)")

func (backend) Name() string                          { return "cuda" }
func (backend) Devices() ([]engine.DeviceInfo, error) { return nil, errNoCgo }
func (backend) Open(int) (engine.Device, error)       { return nil, errNoCgo }
