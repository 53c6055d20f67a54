package chat

import "strings"

// The template engine applies trim_blocks, lstrip_blocks and the "-" trim
// markers to the nearest text of the template even when other tags stand
// between it and the block tag, where Jinja applies them to the text right
// beside the tag only: in "{% for %}{{ m }}\n{% endfor %}" it would drop the
// newline. guardAdjacentTags puts a guard character between every two
// adjacent tags, so that the nearest text is always right beside the tag;
// the guards are removed from the output.
const guard = "\U0010FFFD"

// guardAdjacentTags inserts guard between adjacent tags of src.
func guardAdjacentTags(src string) string {
	var b strings.Builder
	b.Grow(len(src) + len(src)/16)
	if nextOpener(src, 0) == 0 {
		// The engine takes the first text for the start of a line.
		b.WriteString(guard)
	}
	i := 0
	for i < len(src) {
		open := nextOpener(src, i)
		if open < 0 {
			b.WriteString(src[i:])
			break
		}
		b.WriteString(src[i:open])
		end := tagEnd(src, open)
		b.WriteString(src[open:end])
		i = end
		if isRawTag(src[open:end]) {
			// {% raw %}: everything up to {% endraw %} is text.
			if j := strings.Index(src[i:], "endraw"); j >= 0 {
				if k := strings.Index(src[i+j:], "%}"); k >= 0 {
					b.WriteString(src[i : i+j+k+2])
					i += j + k + 2
				}
			}
		}
		if i < len(src) && nextOpener(src, i) == i {
			b.WriteString(guard)
		}
	}
	return b.String()
}

// nextOpener returns where the next tag ({{, {% or {#) starts at or after
// i, -1 if none does.
func nextOpener(s string, i int) int {
	for {
		j := strings.IndexByte(s[i:], '{')
		if j < 0 || i+j+1 >= len(s) {
			return -1
		}
		if c := s[i+j+1]; c == '{' || c == '%' || c == '#' {
			return i + j
		}
		i += j + 1
	}
}

// tagEnd returns the end of the tag that starts at s[open], skipping quoted
// strings; len(s) for an unclosed tag (which the engine reports).
func tagEnd(s string, open int) int {
	kind := s[open+1]
	closer := "}}"
	switch kind {
	case '%':
		closer = "%}"
	case '#':
		if j := strings.Index(s[open+2:], "#}"); j >= 0 {
			return open + 2 + j + 2
		}
		return len(s)
	}
	for i := open + 2; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		case strings.HasPrefix(s[i:], closer):
			return i + 2
		}
	}
	return len(s)
}

func isRawTag(tag string) bool {
	t := strings.Trim(tag, "{%}-+ \t\r\n")
	return t == "raw"
}
