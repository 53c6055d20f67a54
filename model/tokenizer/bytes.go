package tokenizer

import "unicode/utf8"

// byteRune maps each byte to the character that stands for it in vocabulary
// strings (GPT-2's bytes_to_unicode): the printable Latin-1 bytes 33..126,
// 161..172 and 174..255 stand for themselves, and the remaining 68 bytes, in
// increasing order, for U+0100, U+0101, ... U+0143. So a space is 'Ġ'
// (U+0120) and a newline 'Ċ' (U+010A).
var byteRune [256]rune

// runeByte is the inverse of byteRune, indexed by rune; -1 where a rune stands
// for no byte.
var runeByte [0x144]int16

// byteOrder lists the 256 bytes in the order of their characters, which is
// the order of GPT-2's first 256 token ids: token id i is byteOrder[i].
var byteOrder [256]byte

func init() {
	for i := range runeByte {
		runeByte[i] = -1
	}
	n := 0
	for b := 0; b < 256; b++ {
		if printableByte(b) {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = rune(256 + n)
			n++
		}
		runeByte[byteRune[b]] = int16(b)
	}
	i := 0
	for r := range runeByte {
		if runeByte[r] >= 0 {
			byteOrder[i] = byte(runeByte[r])
			i++
		}
	}
}

func printableByte(b int) bool {
	return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
}

// appendByteString appends the vocabulary form of raw bytes to dst.
func appendByteString(dst []byte, raw []byte) []byte {
	for _, b := range raw {
		dst = utf8.AppendRune(dst, byteRune[b])
	}
	return dst
}

// byteString returns the vocabulary form of raw bytes ("Ġworld" for " world").
func byteString(raw []byte) string {
	return string(appendByteString(make([]byte, 0, 2*len(raw)), raw))
}

// unbyteString turns a vocabulary string back into raw bytes. ok is false when
// the string holds a character that stands for no byte.
func unbyteString(s string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(s))
	for _, r := range s {
		if r < 0 || int(r) >= len(runeByte) || runeByte[r] < 0 {
			return nil, false
		}
		raw = append(raw, byte(runeByte[r]))
	}
	return raw, true
}
