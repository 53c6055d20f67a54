package train

import "testing"

func TestFrozen(t *testing.T) {
	probeOnly := []string{"*", "!*.r_proj.*", "!*.r_norm.*"}
	cases := []struct {
		pats []string
		name string
		want bool
	}{
		{probeOnly, "model.layers.0.self_attn.q_proj.weight", true},
		{probeOnly, "model.layers.3.self_attn.r_proj.weight", false},
		{probeOnly, "model.layers.3.self_attn.r_norm.weight", false},
		{probeOnly, "model.embed_tokens.weight", true},
		{[]string{"embed_tokens"}, "model.embed_tokens.weight", true},
		{[]string{"mlp"}, "model.layers.1.mlp.up_proj.weight", true},
		{[]string{"mlp"}, "model.layers.1.self_attn.q_proj.weight", false},
		{[]string{"model.layers.0.*"}, "model.layers.0.mlp.up_proj.weight", true},
		{[]string{"model.layers.0.*"}, "model.layers.10.mlp.up_proj.weight", false},
		{nil, "model.norm.weight", false},
	}
	for _, c := range cases {
		if got := Frozen(c.pats, c.name); got != c.want {
			t.Errorf("Frozen(%q, %s) = %v, want %v", c.pats, c.name, got, c.want)
		}
	}
	if err := checkPatterns([]string{"["}); err == nil {
		t.Error("a malformed pattern was accepted")
	}
	if err := checkPatterns([]string{"!"}); err == nil {
		t.Error("an empty exception was accepted")
	}
}
