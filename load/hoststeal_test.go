package load

import "testing"

func TestParseHostCPU(t *testing.T) {
	steal, total, ok := parseHostCPU("cpu  993876 1453 453278 1423578 20240 0 32746 76510 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if !ok || steal != 76510 || total != 993876+1453+453278+1423578+20240+0+32746+76510 {
		t.Fatalf("parseHostCPU = %v, %v, %v", steal, total, ok)
	}
	for _, bad := range []string{"", "cpu 1 2 3", "intr 1 2 3 4 5 6 7 8 9", "cpu 1 2 3 4 5 6 7 x 0 0", "cpu -1 2 3 4 5 6 7 8"} {
		if _, _, ok := parseHostCPU(bad); ok {
			t.Errorf("parseHostCPU(%q) read a line it should refuse", bad)
		}
	}
	if got := stealShare(10, 1000, true, 60, 1500, true); got != 0.1 {
		t.Errorf("stealShare = %v, want 0.1", got)
	}
	if got := stealShare(10, 1000, true, 10, 1000, true); got != -1 {
		t.Errorf("stealShare over no time = %v, want -1", got)
	}
	if got := stealShare(0, 0, false, 10, 1000, true); got != -1 {
		t.Errorf("stealShare with an unread start = %v, want -1", got)
	}
}

func FuzzParseHostCPU(f *testing.F) {
	f.Add("cpu  993876 1453 453278 1423578 20240 0 32746 76510 0 0\n")
	f.Fuzz(func(t *testing.T, s string) {
		steal, total, ok := parseHostCPU(s)
		if ok && (steal < 0 || steal > total) {
			t.Fatalf("parseHostCPU(%q) = %v of %v", s, steal, total)
		}
	})
}
