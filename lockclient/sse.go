package lockclient

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sync"
)

// maxEventBytes bounds one Server-Sent Event (a state event carries the
// whole queue of a key).
const maxEventBytes = 4 << 20

// sseEvent is one dispatched Server-Sent Event, or a comment line (which
// carries nothing but proves the stream is alive).
type sseEvent struct {
	name    string
	data    []byte
	comment bool
}

// sseReader parses a text/event-stream. Only the fields the coordinator
// sends (event, data, comments) are interpreted; id and retry are ignored.
type sseReader struct {
	r *bufio.Reader
}

// sseBuffers holds the read buffers of streams that ended: a stream lasts
// for one wait, and a node waits for many locks.
var sseBuffers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1024) }}

// newSSEReader returns a reader of r. Call close when the stream is done.
func newSSEReader(r io.Reader) *sseReader {
	br := sseBuffers.Get().(*bufio.Reader)
	br.Reset(r)
	return &sseReader{r: br}
}

// close gives the read buffer back; the reader must not be used after.
func (s *sseReader) close() {
	s.r.Reset(nil)
	sseBuffers.Put(s.r)
	s.r = nil
}

// next returns the next event or comment. It returns io.EOF (or the read
// error) when the stream ends, also in the middle of an event.
func (s *sseReader) next() (sseEvent, error) {
	var (
		ev   sseEvent
		data bytes.Buffer
		seen bool
	)
	for {
		line, err := s.line()
		if err != nil {
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if !seen {
				continue
			}
			if ev.name == "" {
				ev.name = "message"
			}
			ev.data = data.Bytes()
			return ev, nil
		}
		if line[0] == ':' {
			if !seen {
				return sseEvent{comment: true}, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.name, seen = string(value), true
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.Write(value)
			seen = true
		}
		if data.Len() > maxEventBytes {
			return sseEvent{}, fmt.Errorf("event stream: event larger than %d bytes", maxEventBytes)
		}
	}
}

// line reads one line without its end (\n or \r\n).
func (s *sseReader) line() ([]byte, error) {
	var long []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		switch err {
		case nil:
			if long != nil {
				chunk = append(long, chunk...)
			}
			chunk = bytes.TrimSuffix(chunk, []byte("\n"))
			return bytes.TrimSuffix(chunk, []byte("\r")), nil
		case bufio.ErrBufferFull:
			long = append(long, chunk...)
			if len(long) > maxEventBytes {
				return nil, fmt.Errorf("event stream: line longer than %d bytes", maxEventBytes)
			}
		default:
			return nil, err
		}
	}
}
