package data

import (
	"encoding/binary"
	"unsafe"
)

// littleEndian reports whether the host stores integers little-endian, as
// shard files do.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// viewTokens sets s's token slice to body (width bytes per token): a view
// of body itself on a little-endian host when it is aligned, else a copy.
func viewTokens(s *Shard, body []byte, width int) {
	n := len(body) / width
	aligned := n == 0 || uintptr(unsafe.Pointer(&body[0]))%uintptr(width) == 0
	if littleEndian && aligned && n > 0 {
		if width == 2 {
			s.u16 = unsafe.Slice((*uint16)(unsafe.Pointer(&body[0])), n)
		} else {
			s.u32 = unsafe.Slice((*uint32)(unsafe.Pointer(&body[0])), n)
		}
		return
	}
	if width == 2 {
		s.u16 = make([]uint16, n)
		for i := range s.u16 {
			s.u16[i] = binary.LittleEndian.Uint16(body[2*i:])
		}
	} else {
		s.u32 = make([]uint32, n)
		for i := range s.u32 {
			s.u32[i] = binary.LittleEndian.Uint32(body[4*i:])
		}
	}
}
