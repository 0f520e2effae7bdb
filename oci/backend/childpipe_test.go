package backend

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestChildPipe: sandcell's end of a run's pipe is non-blocking and in the
// runtime's poller (its deadlines work), the program's end is blocking and
// never entered the poller; for the program's input the ends swap.
func TestChildPipe(t *testing.T) {
	for _, input := range []bool{false, true} {
		ours, theirs, err := childPipe(input)
		if err != nil {
			t.Fatal(err)
		}
		nonblock := func(f *os.File) bool {
			rc, err := f.SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var fl int
			var ferr error
			if err := rc.Control(func(fd uintptr) { fl, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
				t.Fatal(err, ferr)
			}
			return fl&unix.O_NONBLOCK != 0
		}
		if !nonblock(ours) {
			t.Errorf("input %v: sandcell's end is blocking", input)
		}
		if nonblock(theirs) {
			t.Errorf("input %v: the program's end is non-blocking", input)
		}
		if err := ours.SetDeadline(time.Now().Add(time.Hour)); err != nil {
			t.Errorf("input %v: sandcell's end is not in the poller: %v", input, err)
		}
		if err := theirs.SetDeadline(time.Now().Add(time.Hour)); !errors.Is(err, os.ErrNoDeadline) {
			t.Errorf("input %v: the program's end: SetDeadline = %v, want ErrNoDeadline (not in the poller)", input, err)
		}
		// The direction: input pipes are written by sandcell.
		w, r := theirs, ours
		if input {
			w, r = ours, theirs
		}
		if _, err := w.Write([]byte("x")); err != nil {
			t.Errorf("input %v: write: %v", input, err)
		}
		buf := make([]byte, 1)
		if n, err := r.Read(buf); n != 1 || err != nil {
			t.Errorf("input %v: read %d, %v", input, n, err)
		}
		ours.Close()
		theirs.Close()
	}
}
