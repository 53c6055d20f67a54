package dist

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The control connection carries frames: one type byte, the payload length
// (uint64, little-endian), the payload.
const (
	frameHello     byte = 1 + iota // a joining rank introduces itself (JSON hello)
	frameWelcome                   // rank 0 accepts: every rank has joined (JSON welcome)
	frameRefuse                    // rank 0 refuses a joining process (text)
	frameHeartbeat                 // alive, with the sender's progress (progress)
	frameData                      // one step of a collective (see Group.round)
	frameAbort                     // the job failed (JSON abort)
	frameBye                       // the sender finished and closes
)

// protocol names this wire format in the hello.
const protocol = "parallax-dist/1"

// Frames larger than these are refused as garbage: a hello before the
// peer is known to speak this protocol, and anything after.
const (
	maxHello = 64 << 10
	maxFrame = 1 << 40
)

func writeFrame(w io.Writer, typ byte, parts ...[]byte) error {
	var hdr [9]byte
	hdr[0] = typ
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	binary.LittleEndian.PutUint64(hdr[1:], uint64(n))
	bufs := net.Buffers{hdr[:]}
	for _, p := range parts {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}
	_, err := bufs.WriteTo(w)
	return err
}

func readFrame(r io.Reader, limit uint64) (byte, []byte, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[1:])
	if hdr[0] < frameHello || hdr[0] > frameBye || n > limit {
		return 0, nil, fmt.Errorf("not a %s frame (type %d, length %d)", protocol, hdr[0], n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return hdr[0], b, nil
}

// link is one control connection, seen from this end.
type link struct {
	rank int
	desc string // "rank 1 (pid 4242 on node7)"
	conn net.Conn
	wmu  sync.Mutex
	data chan []byte // data frames, in order; closed when the reader stops

	lastSeen atomic.Int64 // unix nanoseconds of the last byte received
	left     atomic.Bool  // the peer said goodbye

	pmu    sync.Mutex
	prog   int64 // the peer's progress mark, activity count and label
	touch  int64
	label  string
	progAt time.Time // when prog or touch last changed
}

func newLink(rank int, desc string, conn net.Conn) *link {
	l := &link{rank: rank, desc: desc, conn: conn, data: make(chan []byte, 4)}
	l.lastSeen.Store(time.Now().UnixNano())
	l.progAt = time.Now()
	return l
}

// send writes one frame; concurrent senders take turns.
func (l *link) send(typ byte, parts ...[]byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return writeFrame(l.conn, typ, parts...)
}

// trySend writes one frame within d unless another write is under way
// (which proves liveness by itself); it reports whether it wrote.
func (l *link) trySend(d time.Duration, typ byte, parts ...[]byte) (bool, error) {
	if !l.wmu.TryLock() {
		return false, nil
	}
	defer l.wmu.Unlock()
	l.conn.SetWriteDeadline(time.Now().Add(d))
	err := writeFrame(l.conn, typ, parts...)
	l.conn.SetWriteDeadline(time.Time{})
	return true, err
}

// seenReader records the arrival time of every byte read.
type seenReader struct{ l *link }

func (s seenReader) Read(p []byte) (int, error) {
	n, err := s.l.conn.Read(p)
	if n > 0 {
		s.l.lastSeen.Store(time.Now().UnixNano())
	}
	return n, err
}

// progress payload: the mark and the activity count (int64 each), then
// the mark's label.
func encodeProgress(mark, touch int64, label string) []byte {
	b := make([]byte, 16+len(label))
	binary.LittleEndian.PutUint64(b, uint64(mark))
	binary.LittleEndian.PutUint64(b[8:], uint64(touch))
	copy(b[16:], label)
	return b
}

func decodeProgress(b []byte) (mark, touch int64, label string, ok bool) {
	if len(b) < 16 {
		return 0, 0, "", false
	}
	return int64(binary.LittleEndian.Uint64(b)), int64(binary.LittleEndian.Uint64(b[8:])), string(b[16:]), true
}
