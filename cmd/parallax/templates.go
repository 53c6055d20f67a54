package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/parallax-engine/parallax/internal/serve"
	"github.com/parallax-engine/parallax/model/chat"
	"github.com/parallax-engine/parallax/train"
	"github.com/parallax-engine/parallax/train/data"
)

// The model's chat template (model/chat) for the commands that render
// conversations: the server's requests and the SFT data's samples.

func init() { train.ChatTemplateLoader = loadTrainTemplate }

// noTemplate reports whether err is chat.LoadTemplate's "this folder has no
// template" (as opposed to a broken one).
func noTemplate(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no chat template")
}

// serveTemplate renders the server's conversations through a model's
// template, ending with the opening of the assistant's turn.
type serveTemplate struct{ t *chat.Template }

func (s serveTemplate) Render(msgs []serve.Message) (string, error) {
	conv := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		conv[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return s.t.Render(conv, chat.RenderOptions{AddGenerationPrompt: true})
}

// chatTemplate is the server's template for the model folder dir: its own
// chat template, or (for a folder without one, such as a checkpoint of
// ours) the plain "role: content" one, said in the log. A template that
// does not parse is an error.
func chatTemplate(dir string, logf func(string, ...any)) (serve.Template, error) {
	t, err := chat.LoadTemplate(dir)
	switch {
	case noTemplate(err):
		logf("no chat template in %s: chat requests use the plain \"role: content\" template", dir)
		return serve.PlainTemplate{}, nil
	case err != nil:
		return nil, err
	}
	return serveTemplate{t}, nil
}

// trainRenderer renders SFT samples through a model's template.
type trainRenderer struct{ t *chat.Template }

func (r trainRenderer) Render(msgs []data.Message, addGenerationPrompt bool) (string, error) {
	conv := make([]chat.Message, len(msgs))
	for i, m := range msgs {
		conv[i] = chat.Message{Role: m.Role, Content: m.Content}
	}
	return r.t.Render(conv, chat.RenderOptions{AddGenerationPrompt: addGenerationPrompt})
}

// loadTrainTemplate is train.ChatTemplateLoader: a folder without a
// template is os.ErrNotExist (chat samples then cannot be rendered).
func loadTrainTemplate(dir string) (data.Renderer, error) {
	t, err := chat.LoadTemplate(dir)
	if noTemplate(err) {
		return nil, fmt.Errorf("%w: %v", os.ErrNotExist, err)
	}
	if err != nil {
		return nil, err
	}
	return trainRenderer{t}, nil
}
