package serve

import (
	"errors"
	"strings"
)

// Message is one chat message of a request: its role ("system", "user",
// "assistant", ...) and its text.
type Message struct {
	Role, Content string
}

// Template renders a conversation into the prompt text the model
// continues, ending where the assistant's reply begins.
type Template interface {
	Render(msgs []Message) (string, error)
}

// PlainTemplate is the template of a model without one of its own: one
// "role: content" line per message, then "assistant:" for the reply to
// follow:
//
//	system: You are terse.
//	user: Hello
//	assistant:
type PlainTemplate struct{}

// Render implements Template.
func (PlainTemplate) Render(msgs []Message) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("no messages")
	}
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	b.WriteString("assistant:")
	return b.String(), nil
}

// TemplateFunc adapts a function to Template.
type TemplateFunc func(msgs []Message) (string, error)

// Render implements Template.
func (f TemplateFunc) Render(msgs []Message) (string, error) { return f(msgs) }
