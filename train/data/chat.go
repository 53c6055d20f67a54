package data

import (
	"fmt"
	"strings"
)

// Renderer renders a conversation as the model's chat template does: with
// addGenerationPrompt, the text ends with the opening of an assistant turn.
type Renderer interface {
	Render(msgs []Message, addGenerationPrompt bool) (string, error)
}

// ChatTokens renders msgs through r and tokenizes the result with enc (an
// encoder that turns the template's special-token text into their ids),
// returning the tokens and the loss mask: true for exactly the tokens of
// the assistant turns, as the template writes them after the generation
// prompt (the content and the turn's closing, so the model learns to stop).
//
// Each assistant turn i is located by rendering prefixes: the conversation
// up to turn i with the generation prompt ends where the turn starts, the
// conversation through turn i ends where it ends, and both must be
// prefixes of the whole rendering (a template that rewrites earlier turns
// is refused). The text is tokenized span by span, so no token crosses the
// start or end of an assistant turn.
func ChatTokens(r Renderer, enc EncodeFunc, msgs []Message) ([]int32, []bool, error) {
	full, err := r.Render(msgs, false)
	if err != nil {
		return nil, nil, fmt.Errorf("chat template: %w", err)
	}
	type span struct {
		lo, hi int
		train  bool
	}
	var spans []span
	at := 0
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		pre, err := r.Render(msgs[:i], true)
		if err != nil {
			return nil, nil, fmt.Errorf("chat template (messages 0..%d with the generation prompt): %w", i-1, err)
		}
		post, err := r.Render(msgs[:i+1], false)
		if err != nil {
			return nil, nil, fmt.Errorf("chat template (messages 0..%d): %w", i, err)
		}
		if !strings.HasPrefix(post, pre) || !strings.HasPrefix(full, post) || len(pre) < at {
			return nil, nil, fmt.Errorf("chat template: the rendering of assistant turn %d does not extend the conversation before it (the template rewrites earlier turns), so its tokens cannot be located", i)
		}
		if len(pre) > at {
			spans = append(spans, span{at, len(pre), false})
		}
		if len(post) > len(pre) {
			spans = append(spans, span{len(pre), len(post), true})
		}
		at = len(post)
	}
	if at == 0 && len(spans) == 0 {
		return nil, nil, fmt.Errorf("chat sample: no assistant turn")
	}
	if len(full) > at {
		spans = append(spans, span{at, len(full), false})
	}
	var toks []int32
	var mask []bool
	trained := false
	for _, s := range spans {
		t, err := enc(full[s.lo:s.hi])
		if err != nil {
			return nil, nil, err
		}
		toks = append(toks, t...)
		for range t {
			mask = append(mask, s.train)
		}
		trained = trained || (s.train && len(t) > 0)
	}
	if !trained {
		return nil, nil, fmt.Errorf("chat sample: the assistant turns render to no tokens")
	}
	return toks, mask, nil
}
