package load

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseCPUSet(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means an error
	}{
		{"0", "0"},
		{"1", "1"},
		{"0-1", "0-1"},
		{"3,1,2", "1-3"},
		{" 0 , 4-5,5,7 ", "0,4-5,7"},
		{"", ""},
		{"x", ""},
		{"1-0", ""},
		{"-1", ""},
		{"0-4096", ""},
		{"1,,2", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseCPUSet(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("ParseCPUSet(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("ParseCPUSet(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	zero, one, both := CPUSet{0}, CPUSet{1}, CPUSet{0, 1}
	for _, tc := range []struct {
		server, load CPUSet
		pinned       bool
		says         string
	}{
		{zero, one, true, "server on CPUs 0, load on CPUs 1 (pinned apart)"},
		{both, one, false, "server on CPUs 0-1, load on CPUs 1 (not pinned apart"},
		{nil, one, false, "server on unknown CPUs, load on CPUs 1 (not pinned apart"},
		{zero, nil, false, "server on CPUs 0, load on unknown CPUs (not pinned apart"},
	} {
		l := newLayout(tc.server, tc.load)
		if l.Pinned != tc.pinned || !strings.HasPrefix(l.String(), tc.says) {
			t.Errorf("layout of server %v, load %v: %+v %q; want pinned %v, %q", tc.server, tc.load, l, l, tc.pinned, tc.says)
		}
	}
}

func TestCheckServerCPUs(t *testing.T) {
	for _, tc := range []struct {
		reported string
		known    bool
		want     CPUSet
		got      string
		says     string // "" means no error
	}{
		{"0", true, CPUSet{0}, "0", ""},
		{"0-1", true, nil, "0-1", ""},
		{"", false, nil, "", ""},
		{"0-1", true, CPUSet{0}, "", "runs on CPUs 0-1, not 0; start it with `taskset -c 0"},
		{"", false, CPUSet{0}, "", "does not report its CPUs"},
		{"zero", true, nil, "", "the server reports CPU list"},
	} {
		t.Run(fmt.Sprintf("%s/%v/%v", tc.reported, tc.known, tc.want), func(t *testing.T) {
			got, err := checkServerCPUs(tc.reported, tc.known, tc.want)
			if tc.says == "" {
				if err != nil || got.String() != tc.got {
					t.Fatalf("= %v, %v; want %s", got, err, tc.got)
				}
				return
			}
			if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %v; want ErrLayout saying %q", err, tc.says)
			}
		})
	}
}

// TestCheckNodeCPUs: with several nodes, --server-cpus is compared with
// the CPUs they run on together.
func TestCheckNodeCPUs(t *testing.T) {
	ns := []string{"http://a", "http://b"}
	got, err := checkNodeCPUs(ns, []string{"0", "1"}, []bool{true, true}, CPUSet{0, 1})
	if err != nil || got.String() != "0-1" {
		t.Errorf("nodes on 0 and 1, want 0-1: %v %v", got, err)
	}
	if _, err := checkNodeCPUs(ns, []string{"0", "1"}, []bool{true, true}, CPUSet{0}); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "CPUs 0-1 together, not 0") {
		t.Errorf("nodes on 0 and 1, want 0: %v", err)
	}
	if _, err := checkNodeCPUs(ns, []string{"0", ""}, []bool{true, false}, CPUSet{0}); !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "http://b does not report") {
		t.Errorf("node b silent, want 0: %v", err)
	}
	if got, err := checkNodeCPUs(ns, []string{"0", ""}, []bool{true, false}, nil); err != nil || got != nil {
		t.Errorf("node b silent, nothing wanted: %v %v", got, err)
	}
}
