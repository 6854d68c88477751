package hub

import (
	"bytes"
	"context"
	"encoding/json"

	"go.yaml.in/yaml/v3"

	"openxet/store"
)

// The repo card: the YAML front matter of README.md at a revision, which
// the Hub answers as cardData in repo info (huggingface_hub's
// ModelInfo.card_data / DatasetInfo.card_data), with library_name and
// pipeline_tag beside it for models and its tags as the repo's tags.

const (
	readmePath = "README.md"
	// maxCardBytes bounds the README.md read for its front matter.
	maxCardBytes = 1 << 20
)

// frontMatter returns the YAML front matter of content (a README.md): the
// text between its leading "---" line and the next "---" line, nil for an
// empty one. ok is false when content has none (no leading "---" line, or
// no closing one).
func frontMatter(content []byte) (front []byte, ok bool) {
	content = bytes.TrimPrefix(content, []byte("\xef\xbb\xbf"))
	content = bytes.ReplaceAll(content, []byte("\r\n"), []byte("\n"))
	rest, ok := bytes.CutPrefix(content, []byte("---\n"))
	if !ok {
		return nil, false
	}
	if bytes.HasPrefix(rest, []byte("---\n")) || bytes.Equal(rest, []byte("---")) {
		return nil, true // empty front matter
	}
	i := bytes.Index(rest, []byte("\n---\n"))
	switch {
	case i >= 0:
		return rest[:i+1], true
	case bytes.HasSuffix(rest, []byte("\n---")):
		return rest[:len(rest)-3], true
	}
	return nil, false
}

// cardData returns the front matter of content (a README.md), nil when it
// has none or it is not a YAML mapping that JSON can carry.
func cardData(content []byte) map[string]any {
	front, ok := frontMatter(content)
	if !ok || front == nil {
		return nil
	}
	var m map[string]any
	if err := yaml.Unmarshal(front, &m); err != nil || len(m) == 0 {
		return nil
	}
	// A mapping with keys JSON cannot carry (numbers, lists) is not shown.
	if _, err := json.Marshal(m); err != nil {
		return nil
	}
	return m
}

// readCard reads the card of a commit; nil when it has none.
func (h *Hub) readCard(ctx context.Context, cm store.Commit) (map[string]any, error) {
	e, ok := cm.Entry(readmePath)
	if !ok || e.XetHash != "" || e.SizeBytes > maxCardBytes {
		return nil, nil
	}
	b, err := h.readRuleFile(ctx, cm, readmePath)
	if err != nil || b == nil {
		return nil, err
	}
	return cardData(b), nil
}

// cardTags are the card's tags (strings only).
func cardTags(card map[string]any) []string {
	tags := []string{}
	list, _ := card["tags"].([]any)
	for _, t := range list {
		if s, ok := t.(string); ok {
			tags = append(tags, s)
		}
	}
	return tags
}
