package oci

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCapturesKeepOrder: a write to one stream and then one to the other,
// microseconds apart, come out of the live output in the order written,
// whichever stream wrote first, each round (the reader idle before it):
// the order Piston's "output" shows. Two goroutines, one per pipe, raced
// for it.
func TestCapturesKeepOrder(t *testing.T) {
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got strings.Builder
	emit := func(s string) {
		mu.Lock()
		got.WriteString(s)
		mu.Unlock()
	}
	length := func() int {
		mu.Lock()
		defer mu.Unlock()
		return got.Len()
	}
	stdout, stderr := StartCaptures(outR, errR, 1<<20, func() {}, emit, emit)
	var want strings.Builder
	const rounds = 1000
	for i := range rounds {
		first, second, a, b := outW, errW, "o", "e"
		if i%2 == 1 {
			first, second, a, b = errW, outW, "E", "O"
		}
		first.WriteString(a)
		second.WriteString(b)
		want.WriteString(a + b)
		deadline := time.Now().Add(10 * time.Second)
		for length() < want.Len() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d bytes of %d emitted", i, length(), want.Len())
			}
			time.Sleep(20 * time.Microsecond)
		}
	}
	outW.Close()
	errW.Close()
	stdout.Wait()
	stderr.Wait()
	if g, w := got.String(), want.String(); g != w {
		bad := 0
		for i := 0; i+1 < len(w); i += 2 {
			if g[i:i+2] != w[i:i+2] {
				bad++
			}
		}
		t.Errorf("%d of %d rounds out of order", bad, rounds)
	}
	if o, _ := stdout.Wait(); len(o) != rounds {
		t.Errorf("stdout kept %d bytes, want %d", len(o), rounds)
	}
}
