package cli

import (
	"fmt"
	"regexp"
	"strings"
)

// ExampleTOML is openxet.example.toml: every configuration key with its
// default and a one-line comment, grouped by section in the order of the
// settings table. It parses to the defaults.
func ExampleTOML() string {
	var b strings.Builder
	b.WriteString(`# openxet.example.toml: every configuration key of "openxet serve" with its default.
#
# Generated from the settings table in cli/config.go; do not edit by hand. To rewrite it:
#   go test ./cli -run TestExampleConfigIsCurrent -update
# The reference with the rules that tie keys together is docs/configuration.md.
# Use it with "openxet serve --config FILE"; keep only the keys you change, so that
# new defaults of later releases apply to the rest. Each comment names the key's
# environment variable and flag, which win over the file.
`)
	for _, section := range sections() {
		fmt.Fprintf(&b, "\n[%s]\n", section)
		for _, s := range settings {
			sec, name, _ := strings.Cut(s.key, ".")
			if sec != section {
				continue
			}
			fmt.Fprintf(&b, "\n# %s; env %s, flag --%s\n%s = %s\n", s.usage, s.envName(), s.flagName(), name, tomlValue(s.def))
		}
	}
	return b.String()
}

// sections lists the settings' sections in order of first appearance.
func sections() []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range settings {
		sec, _, _ := strings.Cut(s.key, ".")
		if !seen[sec] {
			seen[sec] = true
			out = append(out, sec)
		}
	}
	return out
}

// tomlValue writes a setting's text as TOML: numbers bare, the rest as
// strings (readTOML reads both back to the same text).
func tomlValue(v string) string {
	if tomlNumber.MatchString(v) {
		return v
	}
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

var tomlNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?$`)
