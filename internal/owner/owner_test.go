package owner

import (
	"os"
	"os/exec"
	"testing"
)

func TestStringParse(t *testing.T) {
	me, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if me.PID != os.Getpid() || me.Start == 0 || me.PIDNS == 0 {
		t.Fatalf("Self() = %+v, want this pid, a start time and a pid namespace", me)
	}
	if got, ok := Parse(me.String()); !ok || got != me {
		t.Errorf("Parse(%q) = %+v, %v; want %+v", me.String(), got, ok, me)
	}
	for _, bad := range []string{"", "1.2", "1.2.3.4", "a.2.3", "01.2.3", "1.2.-3", "0.2.3", "1.2. 3", "99999999.1.1", "1..3"} {
		if tok, ok := Parse(bad); ok {
			t.Errorf("Parse(%q) = %+v, want no token", bad, tok)
		}
	}
}

// A command name may hold spaces and parentheses: the fields start after
// the last ')'.
func TestParseStart(t *testing.T) {
	stat := "4242 (we ) ird (name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 777 19 20\n"
	if got, err := parseStart([]byte(stat)); err != nil || got != 777 {
		t.Errorf("parseStart = %d, %v; want 777", got, err)
	}
	if _, err := parseStart([]byte("4242 (short) S 1 2")); err == nil {
		t.Error("parseStart of a short stat line: no error")
	}
}

func TestDead(t *testing.T) {
	me, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	if me.Dead() {
		t.Error("this process's own token is dead")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	start, err := StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	child := Token{PID: cmd.Process.Pid, Start: start, PIDNS: me.PIDNS}
	if child.Dead() {
		t.Error("a live child's token is dead")
	}
	// The same pid with another start time: a process that had the pid
	// before (or will), not this one.
	if reused := (Token{PID: child.PID, Start: child.Start + 1, PIDNS: me.PIDNS}); !reused.Dead() {
		t.Error("a token whose start time differs from the pid's process is not dead")
	}
	// Another pid namespace's pid says nothing about this one's processes.
	if other := (Token{PID: 999999, Start: 1, PIDNS: me.PIDNS + 1}); other.Dead() {
		t.Error("a token of another pid namespace is dead")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !child.Dead() {
		t.Error("the token of a child that was killed and reaped is not dead")
	}
}

// TestNames: NewName's names carry this process's token and never repeat;
// NameOwner reads only such names; DeadName is true only for a token
// whose process is gone (this pid with another start time).
func TestNames(t *testing.T) {
	a, err1 := NewName()
	b, err2 := NewName()
	if err1 != nil || err2 != nil || a == b {
		t.Fatalf("NewName: %q %v, %q %v", a, err1, b, err2)
	}
	me, _ := Self()
	if tok, ok := NameOwner(a); !ok || tok != me || DeadName(a) {
		t.Errorf("NameOwner(%q) = %v %v, DeadName %v; want this process, alive", a, tok, ok, DeadName(a))
	}
	dead := me
	dead.Start++
	if !DeadName(dead.String() + ".7") {
		t.Errorf("DeadName of a reused pid's name: false")
	}
	for _, bad := range []string{"", "w1a2b3c4", me.String(), me.String() + ".0", me.String() + ".01", me.String() + ".x", "1.2.3"} {
		if _, ok := NameOwner(bad); ok || DeadName(bad) {
			t.Errorf("NameOwner(%q): ok", bad)
		}
	}
}
