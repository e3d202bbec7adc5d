package recordid

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestValidNameMatchesPattern: the loop that replaced the compiled regexp accepts exactly what
// namePattern matches.
func TestValidNameMatchesPattern(t *testing.T) {
	re := regexp.MustCompile(namePattern)
	check := func(s string) {
		t.Helper()
		if got, want := validName(s), re.MatchString(s); got != want {
			t.Errorf("validName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
	for _, s := range []string{
		"", "a", "shardId-000000000000", "my.stream_1:x", "A-Z", "a|b", "a b", " a", "a\n", "é", "a\x00",
		"a/b", "a+b", "a@b", "a#b", "[", "`", "{", "~", "\xff",
		strings.Repeat("a", 255), strings.Repeat("a", 256), strings.Repeat("a", 257), strings.Repeat("é", 100),
	} {
		check(s)
	}
	for c := range 256 { // every byte alone and inside a valid name
		check(string(rune(c)))
		check("ab" + string([]byte{byte(c)}) + "cd")
	}
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("aZ09_.:-|/ é\x7f")
	for range 2000 {
		b := make([]byte, r.IntN(260))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		check(string(b))
	}
}
