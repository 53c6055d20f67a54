package tokenizer_test

import (
	"fmt"
	"strings"

	"github.com/parallax-engine/parallax/model/tokenizer"
)

func Example() {
	text := strings.Repeat("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.\n", 20)
	tok, err := tokenizer.Train([]string{text}, 320, []string{"<|endoftext|>"})
	if err != nil {
		panic(err)
	}
	ids := tok.EncodeWithSpecials("a good wife<|endoftext|>")
	back, err := tok.Decode(ids)
	if err != nil {
		panic(err)
	}
	fmt.Println(tok.VocabSize(), len(ids), back)
	for _, id := range ids {
		fmt.Printf("%q ", tok.Token(id))
	}
	fmt.Println()
	// Output:
	// 320 5 a good wife<|endoftext|>
	// "a" "Ġgo" "od" "Ġwife" "<|endoftext|>"
}
