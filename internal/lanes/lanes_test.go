package lanes

import (
	"crypto/md5"
	"fmt"
	"math/big"
	"testing"
)

func TestOf(t *testing.T) {
	for _, tt := range []struct {
		key string
		n   int
	}{{"k0", 3}, {"order-17", 10}, {"", 2}, {"x", 1}, {"x", 0}} {
		want := 0
		if tt.n > 1 {
			sum := md5.Sum([]byte(tt.key))
			want = int(new(big.Int).Mod(new(big.Int).SetBytes(sum[:]), big.NewInt(int64(tt.n))).Int64())
		}
		if got := Of(tt.key, tt.n); got != want {
			t.Errorf("Of(%q, %d) = %d, want %d", tt.key, tt.n, got, want)
		}
	}
	seen := map[int]bool{}
	for i := range 200 {
		seen[Of(fmt.Sprint(i), 10)] = true
	}
	if len(seen) != 10 {
		t.Errorf("200 keys reach %d of 10 lanes", len(seen))
	}
}
