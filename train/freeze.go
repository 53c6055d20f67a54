package train

import (
	"fmt"
	"path"
	"strings"

	"github.com/parallax-engine/parallax/model"
)

// Freezing (Config.Freeze): each pattern is a glob over parameter names
// (path.Match syntax, where "*" does not cross a "."), or, when it starts
// with "!", an exception: a parameter is frozen when the last pattern it
// matches is not an exception. So "*", "!*.r_proj.*", "!*.r_norm.*"
// freezes everything but the probe. For convenience a pattern without a
// glob character that names no parameter also matches any name that
// contains it between dots ("embed_tokens", "mlp"), and "*" alone matches
// every name. A frozen parameter gets no optimizer update and no optimizer
// state; it still has a gradient, which neither enters the clipping norm
// nor, in a data-parallel job, is reduced.

// checkPatterns refuses malformed patterns.
func checkPatterns(pats []string) error {
	for _, p := range pats {
		q := strings.TrimPrefix(p, "!")
		if q == "" {
			return fmt.Errorf("train: freeze pattern %q is empty", p)
		}
		if _, err := path.Match(q, ""); err != nil {
			return fmt.Errorf("train: freeze pattern %q: %w", p, err)
		}
	}
	return nil
}

// matchName reports whether the pattern (without "!") matches name.
func matchName(pat, name string) bool {
	if pat == "*" {
		return true
	}
	if ok, _ := path.Match(pat, name); ok {
		return true
	}
	if !strings.ContainsAny(pat, "*?[") {
		return strings.Contains("."+name+".", "."+strings.Trim(pat, ".")+".")
	}
	// "*" in path.Match stops at "/" only; our names use ".", so a
	// pattern like "*.r_proj.*" already spans dots.
	return false
}

// Frozen reports whether name is frozen by pats.
func Frozen(pats []string, name string) bool {
	frozen := false
	for _, p := range pats {
		neg := strings.HasPrefix(p, "!")
		if matchName(strings.TrimPrefix(p, "!"), name) {
			frozen = !neg
		}
	}
	return frozen
}

// SplitFrozen separates params into those trained and those frozen by
// pats; a pattern that matches no parameter is an error (a typo would
// otherwise train what was meant to be frozen).
func SplitFrozen(params []*model.Param, pats []string) (trained, frozen []*model.Param, err error) {
	for _, p := range pats {
		q := strings.TrimPrefix(p, "!")
		hit := false
		for _, prm := range params {
			if matchName(q, prm.Name) {
				hit = true
				break
			}
		}
		if !hit {
			return nil, nil, fmt.Errorf("freeze pattern %q matches no parameter of the model (names look like model.layers.0.self_attn.q_proj.weight)", p)
		}
	}
	for _, prm := range params {
		if Frozen(pats, prm.Name) {
			frozen = append(frozen, prm)
		} else {
			trained = append(trained, prm)
		}
	}
	if len(trained) == 0 {
		return nil, nil, fmt.Errorf("the freeze patterns %q freeze every parameter: nothing would train", pats)
	}
	return trained, frozen, nil
}

// trainable returns the parameters the run's optimizer trains.
func (r *runner) trainable() ([]*model.Param, error) {
	if len(r.cfg.Freeze) == 0 {
		return r.m.Params(), nil
	}
	trained, frozen, err := SplitFrozen(r.m.Params(), r.cfg.Freeze)
	if err != nil {
		return nil, fmt.Errorf("--freeze: %w", err)
	}
	n := 0
	for _, p := range frozen {
		n += p.W.Numel()
	}
	r.logf("frozen: %d tensors (%s parameters); training %d tensors", len(frozen), HumanCount(float64(n)), len(trained))
	return trained, nil
}
