package main

// The tail of a command's standard error, as 'azlease once' records it in
// the key's marker: why an attempt failed, for 'status' and later callers.

import (
	"strings"
	"unicode"
)

// defaultStderrTail is how much of CMD's stderr once keeps by default, in
// bytes: the marker keeps 1 KiB of error text in all.
const defaultStderrTail = 512

// maxStderrTail bounds --stderr-tail.
const maxStderrTail = 900

// cleanTail makes the last bytes of a stream fit for a one-line record:
// when the buffer was cut (cut), a partial first line is dropped if a whole
// line follows; invalid UTF-8 and control characters other than newlines
// and tabs are replaced; surrounding blank space is trimmed.
func cleanTail(b []byte, cut bool) string {
	s := string(b)
	if cut {
		if i := strings.IndexByte(s, '\n'); i >= 0 && i < len(s)-1 {
			s = s[i+1:]
		}
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' || !unicode.IsControl(r) {
			return r
		}
		return '\uFFFD'
	}, s)
	return strings.TrimSpace(s)
}
