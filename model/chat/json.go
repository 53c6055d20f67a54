package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of JSON values given to templates.
const maxJSONDepth = 200

// ParseJSONValue converts JSON to a template value, keeping the order of
// object keys (tojson writes them back in that order, as Python does) and
// integers apart from floats.
func ParseJSONValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("data after the JSON value")
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Value{}, fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return jinja.Value{}, errors.New("unexpected end of JSON")
		}
		return jinja.Value{}, err
	}
	switch x := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(x), nil
	case string:
		return jinja.NewString(x), nil
	case json.Number:
		return jinja.FromGoValue(x), nil
	case json.Delim:
		switch x {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := readValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			if items == nil {
				items = []jinja.Value{}
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				key, _ := k.(string)
				v, err := readValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(key, v)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return d, nil
		}
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// tojson is transformers' tojson filter, Python's json.dumps(x,
// ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys).
func tojson(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Value{}, errors.New("tojson: no value")
	}
	e := pyEncoder{item: ", ", key: ": "}
	if v, ok := kwargs["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		switch {
		case v.IsInt():
			e.indent = strings.Repeat(" ", int(min(max(v.AsInt(), 0), 64)))
		case v.IsString():
			e.indent = v.AsString()
		default:
			return jinja.Value{}, fmt.Errorf("tojson: indent %s is neither an integer nor a string", v)
		}
		e.indented = true
		e.item = ","
	}
	if v, ok := kwargs["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Value{}, errors.New("tojson: separators must be two strings")
		}
		e.item, e.key = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	if v, ok := kwargs["sort_keys"]; ok {
		e.sort = v.IsTruthy()
	}
	if v, ok := kwargs["ensure_ascii"]; ok {
		e.ascii = v.IsTruthy()
	}
	var b strings.Builder
	if err := e.encode(&b, args[0], 0); err != nil {
		return jinja.Value{}, err
	}
	return jinja.NewString(b.String()), nil
}

type pyEncoder struct {
	item, key string
	indent    string
	indented  bool
	sort      bool
	ascii     bool
}

func (e *pyEncoder) newline(b *strings.Builder, level int) {
	if e.indented {
		b.WriteByte('\n')
		for range level {
			b.WriteString(e.indent)
		}
	}
}

func (e *pyEncoder) encode(b *strings.Builder, v jinja.Value, level int) error {
	if level > maxJSONDepth {
		return errors.New("tojson: value nested too deep")
	}
	switch {
	case v.IsNone(), v.IsUndefined():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		e.str(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, x := range items {
			if i > 0 {
				b.WriteString(e.item)
			}
			e.newline(b, level+1)
			if err := e.encode(b, x, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		keys := d.OrderedKeys()
		if len(keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		if e.sort {
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(e.item)
			}
			e.newline(b, level+1)
			e.str(b, k)
			b.WriteString(e.key)
			x, _ := d.Get(k)
			if err := e.encode(b, x, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: cannot encode %s", v)
	}
	return nil
}

// pyFloat formats a float as Python's repr does.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e16 {
		return strconv.FormatFloat(f, 'f', 1, 64)
	}
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if a := math.Abs(f); a >= 1e-4 && a < 1e16 {
		s = strconv.FormatFloat(f, 'f', -1, 64)
	}
	if i := strings.Index(s, "e"); i >= 0 {
		// Python writes at least two exponent digits: 1e-05, 1e+16.
		mant, exp := s[:i], s[i+1:]
		sign := exp[0]
		digits := strings.TrimLeft(exp[1:], "0")
		if len(digits) < 2 {
			digits = strings.Repeat("0", 2-len(digits)) + digits
		}
		s = mant + "e" + string(sign) + digits
	}
	return s
}

// str writes a JSON string as Python does: only ", \ and control
// characters escaped (and, with ensure_ascii, everything past ASCII).
func (e *pyEncoder) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case e.ascii && r > 0x7f:
				if r > 0xffff {
					r -= 0x10000
					fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}
