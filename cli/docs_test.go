package cli

import (
	"os"
	"strings"
	"testing"
)

// TestConfigurationReferenceIsComplete keeps docs/configuration.md in step
// with the settings table: every key appears with its default, env and flag.
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
}
