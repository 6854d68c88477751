package refusal

import (
	"encoding/json"
	"slices"
	"strconv"

	"openxet/wirejson"
)

// AppendJSON appends the JSON body a refusal carries to dst. On CAS and
// admin routes "error" is the code; on Hub routes it is the sentence the
// stock clients print (hub true), and the code moves to "code". "message"
// and "hint" (when set) follow, then Fields, which win over those keys, and
// request_id, which wins over a field of its name ("" leaves it out).
//
// The bytes are what json.Marshal writes for that object as a map (keys
// sorted, HTML-safe escapes), without reflection or a map: refusals are
// the answer a flood gets most. Field values other than strings and
// integers go through encoding/json.
func (e *Error) AppendJSON(dst []byte, requestID string, hub bool) []byte {
	var keys [8]string
	ks := append(keys[:0], "error", "message")
	if hub {
		ks = append(ks, "code")
	}
	if e.Hint != "" {
		ks = append(ks, "hint")
	}
	if requestID != "" {
		ks = append(ks, "request_id")
	}
	for k := range e.Fields {
		if !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	slices.Sort(ks)
	dst = append(dst, '{')
	for i, k := range ks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = wirejson.String(dst, k)
		dst = append(dst, ':')
		if k == "request_id" && requestID != "" {
			dst = wirejson.String(dst, requestID)
			continue
		}
		if v, ok := e.Fields[k]; ok {
			dst = appendValue(dst, v)
			continue
		}
		switch k {
		case "error":
			if hub {
				dst = wirejson.String(dst, e.HubText())
			} else {
				dst = wirejson.String(dst, e.Code)
			}
		case "message":
			dst = wirejson.String(dst, e.Message)
		case "code":
			dst = wirejson.String(dst, e.Code)
		case "hint":
			dst = wirejson.String(dst, e.Hint)
		}
	}
	return append(dst, '}')
}

func appendValue(dst []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		return wirejson.String(dst, v)
	case int:
		return strconv.AppendInt(dst, int64(v), 10)
	case int64:
		return strconv.AppendInt(dst, v, 10)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return append(dst, "null"...)
	}
	return append(dst, b...)
}
