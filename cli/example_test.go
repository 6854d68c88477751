package cli

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite openxet.example.toml from the settings table")

const examplePath = "../openxet.example.toml"

// TestExampleConfigIsCurrent keeps the shipped openxet.example.toml equal
// to what the settings table generates: a key added to the table without
// rewriting the example (go test ./cli -run TestExampleConfigIsCurrent
// -update) fails here, naming the key.
func TestExampleConfigIsCurrent(t *testing.T) {
	want := ExampleTOML()
	if *update {
		if err := os.WriteFile(examplePath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatalf("%v (rewrite it with -update)", err)
	}
	file, err := readTOML(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if _, ok := file[s.key]; !ok {
			t.Errorf("openxet.example.toml lacks %s (rewrite it with -update)", s.key)
		}
	}
	if diff := cmp.Diff(want, string(got)); diff != "" {
		t.Errorf("openxet.example.toml is stale (rewrite it with -update); -want +got:\n%s", diff)
	}
}

// TestExampleConfigParsesToDefaults: the example, used as it is, gives the
// same configuration as no file at all, and every value in it is the
// key's default.
func TestExampleConfigParsesToDefaults(t *testing.T) {
	fromExample, err := LoadConfig(examplePath, nil, nil)
	if err != nil {
		t.Fatalf("the example does not load: %v", err)
	}
	defaults, err := LoadConfig("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(defaults, fromExample); diff != "" {
		t.Errorf("example differs from the defaults; -defaults +example:\n%s", diff)
	}
	file, _ := readTOML(examplePath)
	for _, s := range settings {
		if v, ok := file[s.key]; ok && v != s.def {
			t.Errorf("example sets %s = %q, default is %q", s.key, v, s.def)
		}
	}
}

func TestTOMLValue(t *testing.T) {
	for in, want := range map[string]string{
		"2000": "2000", "0.25": "0.25", "0": "0", "-1": "-1",
		"007": `"007"`, ".5": `".5"`, "1e3": `"1e3"`, "10s": `"10s"`, "": `""`, "inf": `"inf"`,
		`a"b\c`: `"a\"b\\c"`, "tab\there": `"tab\u0009here"`,
	} {
		got := tomlValue(in)
		if got != want {
			t.Errorf("tomlValue(%q) = %s, want %s", in, got, want)
		}
		// What is written reads back as the same text.
		p := writeFile(t, "v.toml", "[server]\nk = "+got+"\n")
		back, err := readTOML(p)
		if err != nil || back["server.k"] != strings.TrimSpace(in) && back["server.k"] != in {
			t.Errorf("tomlValue(%q) reads back as %q, %v", in, back["server.k"], err)
		}
	}
}
