package oci

import (
	"unicode/utf8"
)

// maxSequence bounds an escape sequence, in bytes from its introducer on.
// A longer one is dropped up to here and what follows is text again: a
// stray "ESC ]" or U+009D (binary output, a hostile program) must not hide
// the rest of the output from the model.
const maxSequence = 4 << 10

// TextCleaner turns program output into text safe to show a model or a
// terminal. The program is hostile: an escape sequence in its output can
// recolour, move the cursor over or hide earlier text, retitle the window,
// plant a hyperlink whose target is not the text shown (OSC 8), or write the
// user's clipboard (OSC 52) when the output reaches a terminal (see
// CVE-2021-25743, kubectl printing escape sequences of object names).
//
//   - ANSI/VT escape sequences are removed: CSI ("ESC [" parameters, a final
//     byte), OSC ("ESC ]" up to BEL or ST), DCS, SOS, PM and APC strings
//     (up to ST, "ESC \"), two-byte ESC sequences (with intermediates, such
//     as "ESC ( B"), and the 8-bit C1 forms of the introducers (U+009B CSI,
//     U+009D OSC, U+0090 DCS, U+0098 SOS, U+009E PM, U+009F APC, U+009C ST).
//     CAN and SUB abort a sequence, as on a VT100. A sequence longer than
//     4 KiB is dropped up to there and what follows is text again.
//   - Other control characters are removed, except newline and tab: NUL,
//     BEL, BS, CR, DEL and the C1 controls U+0080-U+009F. Removing CR turns
//     "\r\n" into "\n"; a progress bar redrawn with a lone "\r" is not
//     overwritten as on a terminal: its frames run together on one line.
//   - Invalid UTF-8 becomes U+FFFD, one for each run of invalid bytes (as
//     strings.ToValidUTF8 does). A raw byte 0x9b is invalid UTF-8, not a
//     CSI: the output is read as UTF-8, and U+FFFD is inert everywhere.
//
// Other Unicode (bidirectional overrides, zero-width characters) is kept.
//
// It is streaming: a sequence or a UTF-8 character split across two writes
// is handled as if it came in one, so the concatenation of what Write and
// Flush return equals CleanText of the concatenated input. Between writes it
// holds at most an incomplete UTF-8 character (three bytes) and its state:
// the bytes of an escape sequence are dropped as they come, never buffered.
// The zero value is ready to use; a TextCleaner is not safe for concurrent
// use.
type TextCleaner struct {
	pending [utf8.UTFMax]byte // the start of a UTF-8 character cut by the end of a write
	npend   int
	state   seqState
	seqLen  int  // bytes of the current escape sequence so far
	bad     bool // the last thing seen was invalid UTF-8 (already shown as one U+FFFD)
}

// seqState is where the cleaner is in an escape sequence.
type seqState uint8

const (
	inText   seqState = iota
	inEsc             // after ESC
	inEscInt          // after ESC and intermediate bytes (0x20-0x2f), before the final byte
	inCSI             // after CSI, in its parameters and intermediates
	inOSC             // in an OSC string: ends with BEL or ST
	inString          // in a DCS, SOS, PM or APC string: ends with ST
)

// The control characters the cleaner acts on.
const (
	bel = 0x07
	can = 0x18
	sub = 0x1a
	esc = 0x1b
	del = 0x7f

	c1DCS = 0x90
	c1SOS = 0x98
	c1CSI = 0x9b
	c1ST  = 0x9c
	c1OSC = 0x9d
	c1PM  = 0x9e
	c1APC = 0x9f
)

// CleanText cleans a whole output at once (see TextCleaner).
func CleanText(b []byte) string {
	if isPlain(b) {
		return string(b)
	}
	var c TextCleaner
	out := c.appendClean(make([]byte, 0, len(b)), b)
	return string(c.appendFlush(out))
}

// isPlain reports whether b is printable ASCII, newlines and tabs: the
// common case, which needs no cleaning.
func isPlain(b []byte) bool {
	for _, x := range b {
		if (x < 0x20 && x != '\n' && x != '\t') || x >= del {
			return false
		}
	}
	return true
}

// Write cleans the next part of the stream and returns the text it could
// decide so far (an incomplete UTF-8 character at the end waits for the
// next write).
func (c *TextCleaner) Write(p []byte) string {
	return string(c.appendClean(make([]byte, 0, len(p)+c.npend), p))
}

// Flush ends the stream and returns the rest: an incomplete UTF-8 character
// becomes U+FFFD and an unterminated escape sequence is dropped. The cleaner
// is then ready for a new stream.
func (c *TextCleaner) Flush() string {
	return string(c.appendFlush(nil))
}

func (c *TextCleaner) appendFlush(out []byte) []byte {
	for i := 0; i < c.npend; i++ {
		out = c.step(out, utf8.RuneError, 1) // each byte is invalid on its own now
	}
	*c = TextCleaner{}
	return out
}

// appendClean appends the cleaned text of p to out.
func (c *TextCleaner) appendClean(out, p []byte) []byte {
	// Complete the character the previous write cut, byte by byte: once
	// it is decided, the rest of p is read in place.
	for c.npend > 0 && len(p) > 0 {
		c.pending[c.npend] = p[0]
		c.npend++
		p = p[1:]
		buf := c.pending[:c.npend]
		if !utf8.FullRune(buf) {
			continue
		}
		r, size := utf8.DecodeRune(buf)
		out = c.step(out, r, size)
		// An invalid start byte: the bytes after it are read again.
		rest := append([]byte(nil), buf[size:]...)
		c.npend = 0
		out = c.appendClean(out, rest)
	}
	for len(p) > 0 {
		if x := p[0]; x < utf8.RuneSelf {
			out = c.step(out, rune(x), 1)
			p = p[1:]
			continue
		}
		if !utf8.FullRune(p) {
			c.npend = copy(c.pending[:], p)
			break
		}
		r, size := utf8.DecodeRune(p)
		out = c.step(out, r, size)
		p = p[size:]
	}
	return out
}

// step feeds one decoded character (size bytes of input; utf8.RuneError
// with size 1 for an invalid byte) through the sequence state machine. It
// follows the VT500 parser of Paul Williams (vt100.net/emu/dec_ansi_parser)
// with every action but printing reduced to dropping.
func (c *TextCleaner) step(out []byte, r rune, size int) []byte {
	invalid := r == utf8.RuneError && size == 1
	if c.state != inText {
		c.seqLen += size
		if c.seqLen > maxSequence {
			c.state = inText // too long: dropped so far, text from here
		}
	}
	if !invalid {
		c.bad = false
	}
	// What acts anywhere, inside a sequence or not.
	switch {
	case r == can || r == sub:
		c.state = inText
		return out
	case r == esc:
		c.enter(inEsc, size)
		return out
	case r >= 0x80 && r <= 0x9f:
		switch r {
		case c1CSI:
			c.enter(inCSI, size)
		case c1OSC:
			c.enter(inOSC, size)
		case c1DCS, c1SOS, c1PM, c1APC:
			c.enter(inString, size)
		default: // ST and the other C1 controls
			c.state = inText
		}
		return out
	}
	switch c.state {
	case inEsc, inEscInt:
		switch {
		case r < 0x20:
			return c.execute(out, r)
		case r == del:
		case r <= 0x2f:
			c.state = inEscInt
		case r > del:
			return c.abort(out, r, size)
		case c.state == inEscInt:
			c.state = inText // the final byte
		case r == '[':
			c.state = inCSI
		case r == ']':
			c.state = inOSC
		case r == 'P' || r == 'X' || r == '^' || r == '_':
			c.state = inString
		default:
			c.state = inText // a two-byte sequence (ESC \ is ST)
		}
		return out
	case inCSI:
		switch {
		case r < 0x20:
			return c.execute(out, r)
		case r == del || r <= 0x3f: // a parameter or an intermediate
		case r <= 0x7e:
			c.state = inText // the final byte
		default:
			return c.abort(out, r, size)
		}
		return out
	case inOSC:
		if r == bel {
			c.state = inText
		}
		return out
	case inString:
		return out
	}
	// Text.
	switch {
	case invalid:
		if !c.bad {
			out = utf8.AppendRune(out, utf8.RuneError)
			c.bad = true
		}
	case r == '\n' || r == '\t':
		out = append(out, byte(r))
	case r < 0x20 || r == del:
	default:
		out = utf8.AppendRune(out, r)
	}
	return out
}

// execute is what a VT parser does with a C0 control inside an escape or
// control sequence: it takes effect and the sequence goes on. Newline and
// tab are kept, the others dropped.
func (c *TextCleaner) execute(out []byte, r rune) []byte {
	if r == '\n' || r == '\t' {
		out = append(out, byte(r))
	}
	return out
}

// enter starts a new escape sequence (one that was open is dropped).
func (c *TextCleaner) enter(s seqState, size int) {
	c.state, c.seqLen = s, size
}

// abort ends a malformed sequence at a character that cannot be part of
// it; the character is then read as text (VT parsers differ here; dropping
// the sequence and keeping the text hides the least).
func (c *TextCleaner) abort(out []byte, r rune, size int) []byte {
	c.state = inText
	return c.step(out, r, size)
}
