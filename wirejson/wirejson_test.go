package wirejson

import (
	"encoding/json"
	"math"
	"testing"
)

// FuzzString: String appends what json.Marshal writes for the string,
// whatever it holds (escapes, HTML characters, invalid UTF-8, U+2028).
func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", "https://h/v1/fetch/x?c=1&r=0-9&s=ab", "<&>\"\\", "\x00\x1f\t\n\r\b\f", "\xff\xfe", "\u2028\u2029", "é中\U0001F600"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := String([]byte("x"), s); string(got) != "x"+string(want) {
			t.Fatalf("String(%q) = %s, want %s", s, got[1:], want)
		}
	})
}

func TestUint(t *testing.T) {
	for _, n := range []uint64{0, 7, 1 << 32, math.MaxUint64} {
		want, _ := json.Marshal(n)
		if got := Uint(nil, n); string(got) != string(want) {
			t.Errorf("Uint(%d) = %s, want %s", n, got, want)
		}
	}
}
