package hub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"
	"go.yaml.in/yaml/v3"
)

// POST /api/validate-yaml: the check huggingface_hub makes of a repo card
// before it uploads one (ModelCard.push_to_hub, metadata_update,
// HfApi._validate_yaml), without a token. The body is the card's text, as
// JSON {"content": …, "repoType": …} or as a form with those fields. The
// answer is {"errors": [], "warnings": […]}: a card without metadata is
// valid, with a warning; metadata that is not YAML, or not a mapping, is
// a CardError (400, with the errors huggingface_hub prints).

// maxValidateYAMLBytes caps the body of validate-yaml.
const maxValidateYAMLBytes = 2 << 20

// warningNoMetadata is the warning of a card without metadata.
const warningNoMetadata = "empty or missing yaml metadata in repo card (https://huggingface.co/docs/hub/model-cards#model-card-metadata)"

func (h *Hub) validateYAML(c echo.Context) error {
	req := c.Request()
	tooLarge := &TooLargeError{Message: fmt.Sprintf("the body is over the %d-byte limit of a repo card", maxValidateYAMLBytes),
		Hint: "a README.md's metadata is its YAML front matter; send the card without large content"}
	n := req.ContentLength
	if n > maxValidateYAMLBytes {
		return tooLarge
	}
	if n < 0 {
		n = maxValidateYAMLBytes
	}
	// The body, and the card decoded from it.
	release, err := h.cfg.Reserve(c, 2*n)
	if err != nil {
		return err
	}
	defer release()
	b, err := io.ReadAll(io.LimitReader(req.Body, maxValidateYAMLBytes+1))
	if err != nil {
		return err
	}
	if len(b) > maxValidateYAMLBytes {
		return tooLarge
	}
	content, err := cardOfBody(req.Header.Get(echo.HeaderContentType), b)
	if err != nil {
		return err
	}
	warnings, err := validateCard(content)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"errors": []any{}, "warnings": warnings})
}

// cardOfBody is the card text of a validate-yaml body of media type ct.
func cardOfBody(ct string, b []byte) ([]byte, error) {
	var content *string
	var repoType string
	mt, params, _ := mime.ParseMediaType(ct)
	switch mt {
	case "application/x-www-form-urlencoded":
		q, err := url.ParseQuery(string(b))
		if err != nil {
			return nil, badRequest("the body is not a form: %v", err)
		}
		if q.Has("content") {
			s := q.Get("content")
			content = &s
		}
		repoType = q.Get("repoType")
	case "multipart/form-data":
		f, err := multipart.NewReader(bytes.NewReader(b), params["boundary"]).ReadForm(maxValidateYAMLBytes)
		if err != nil {
			return nil, badRequest("the body is not a form: %v", err)
		}
		defer f.RemoveAll()
		if v := f.Value["content"]; len(v) > 0 {
			content = &v[0]
		}
		if v := f.Value["repoType"]; len(v) > 0 {
			repoType = v[0]
		}
	default:
		var req struct {
			Content  *string `json:"content"`
			RepoType string  `json:"repoType"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, badRequest("the body is not a card to validate ({\"content\": …, \"repoType\": …}): %v", err)
		}
		content, repoType = req.Content, req.RepoType
	}
	if content == nil {
		return nil, badRequest("the body names no content (the text of the README.md)")
	}
	if _, ok := repoTypePlural[repoType+"s"]; repoType != "" && !ok {
		return nil, badRequest("unknown repo type %q (model, dataset or space)", repoType)
	}
	return []byte(*content), nil
}

// validateCard checks the metadata of a card: its warnings, or a
// CardError when the metadata is not a YAML mapping.
func validateCard(content []byte) ([]map[string]string, error) {
	none := []map[string]string{{"message": warningNoMetadata}}
	front, ok := frontMatter(content)
	if !ok || front == nil {
		return none, nil
	}
	var v any
	if err := yaml.Unmarshal(front, &v); err != nil {
		return nil, &CardError{Message: "the metadata of the card is not valid YAML: " + err.Error(), Cause: err}
	}
	switch m := v.(type) {
	case nil:
		return none, nil
	case map[string]any:
		if len(m) == 0 {
			return none, nil
		}
	case map[any]any:
		if len(m) == 0 {
			return none, nil
		}
	case []any:
		return nil, &CardError{Message: "the metadata of the card is a YAML list, not a mapping"}
	default:
		return nil, &CardError{Message: fmt.Sprintf("the metadata of the card is a YAML scalar (%v), not a mapping", m)}
	}
	return []map[string]string{}, nil
}
