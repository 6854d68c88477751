package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestConfigurationReferenceIsComplete keeps docs/configuration.md in step
// with the settings table: every key appears with its default, env and
// flag, and every key the reference's table lists exists.
func TestConfigurationReferenceIsComplete(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(KeysDoc()), "\n") {
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/configuration.md lacks or differs on:\n%s", line)
		}
	}
	known := map[string]bool{}
	for _, s := range settings {
		known[s.key] = true
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+\\.[a-z_]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		if !known[m[1]] {
			t.Errorf("docs/configuration.md lists %s, which is not a configuration key", m[1])
		}
	}
}
