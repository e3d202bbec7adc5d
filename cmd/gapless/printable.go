package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable escapes what a terminal could act on in text that comes from message data (record
// ids, error texts, partition keys of parked messages): control characters (C0, DEL, C1,
// including ESC, which starts terminal escape sequences), bidirectional and other format
// characters, and bytes that are not UTF-8 are written as \xNN or \uNNNN. Everything else,
// spaces included, is kept as is.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}
