package backend

import (
	"strings"
	"sync"
	"testing"

	"github.com/sandcell/sandcell/oci"
)

// The stream of a kernel is split at each cell's mark, wherever the reads
// cut it; output between cells goes to the next cell; a cell's output
// past its cap is cut and reported once.
func TestKernelStreamSplit(t *testing.T) {
	mark := newMark()
	for _, chunk := range []int{1, 2, 3, 7, len(mark) - 1, len(mark), len(mark) + 1, 1000} {
		s := &kernelStream{eof: make(chan struct{})}
		var live strings.Builder
		c := s.begin(mark, 1<<20, nil, func(t string) { live.WriteString(t) })
		data := []byte("one\n\x1b[31mred\x1b[0m\n" + string(mark) + "between\n")
		for i := 0; i < len(data); i += chunk {
			s.feed(data[i:min(i+chunk, len(data))])
		}
		select {
		case <-c.marked:
		default:
			t.Fatalf("chunk %d: the mark was not seen", chunk)
		}
		s.end(c)
		if got := c.text(); got != "one\nred\n" {
			t.Errorf("chunk %d: cell text %q, want %q", chunk, got, "one\nred\n")
		}
		if live.String() != "one\nred\n" {
			t.Errorf("chunk %d: live output %q", chunk, live.String())
		}
		next := s.begin(newMark(), 1<<20, nil, nil)
		s.end(next)
		if got := next.text(); got != "between\n" {
			t.Errorf("chunk %d: next cell %q, want the output between the cells", chunk, got)
		}
	}
}

// A prefix of the mark that is not the mark is output, not held back for
// ever; a stale mark (another cell's) is removed from the text as the OSC
// sequence it is.
func TestKernelStreamNearMark(t *testing.T) {
	mark := newMark()
	s := &kernelStream{eof: make(chan struct{})}
	c := s.begin(mark, 1<<20, nil, nil)
	stale := newMark()
	s.feed(mark[:5])
	s.feed([]byte("x"))
	s.feed(stale)
	s.feed([]byte("y"))
	s.feed(mark[:len(mark)-1])
	s.end(c) // the cell gave up waiting: what is held back is its output
	want := string(mark[:5]) + "x" + string(stale) + "y" + string(mark[:len(mark)-1])
	if string(c.buf) != want {
		t.Errorf("raw output %q, want %q", c.buf, want)
	}
	if got := oci.CleanText(append(stale, 'z')); got != "z" {
		t.Errorf("a stale mark cleans to %q, want nothing", got)
	}
}

func TestKernelStreamCap(t *testing.T) {
	mark := newMark()
	s := &kernelStream{eof: make(chan struct{})}
	var mu sync.Mutex
	overs := 0
	c := s.begin(mark, 10, func() { mu.Lock(); overs++; mu.Unlock() }, nil)
	for range 5 {
		s.feed([]byte("0123456"))
	}
	s.feed(mark)
	s.end(c)
	if c.text() != "0123456012" || !c.truncated || overs != 1 {
		t.Errorf("text %q truncated %v overs %d, want 10 bytes, truncated, one call", c.text(), c.truncated, overs)
	}
	// Between cells the stream keeps at most kernelIdleBytes.
	s.feed(make([]byte, 2*kernelIdleBytes))
	if len(s.idle) != kernelIdleBytes {
		t.Errorf("idle %d bytes, want %d", len(s.idle), kernelIdleBytes)
	}
}
