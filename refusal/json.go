package refusal

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
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
		dst = appendString(dst, k)
		dst = append(dst, ':')
		if k == "request_id" && requestID != "" {
			dst = appendString(dst, requestID)
			continue
		}
		if v, ok := e.Fields[k]; ok {
			dst = appendValue(dst, v)
			continue
		}
		switch k {
		case "error":
			if hub {
				dst = appendString(dst, e.HubText())
			} else {
				dst = appendString(dst, e.Code)
			}
		case "message":
			dst = appendString(dst, e.Message)
		case "code":
			dst = appendString(dst, e.Code)
		case "hint":
			dst = appendString(dst, e.Hint)
		}
	}
	return append(dst, '}')
}

func appendValue(dst []byte, v any) []byte {
	switch v := v.(type) {
	case string:
		return appendString(dst, v)
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

// appendString writes s as a JSON string the way encoding/json does by
// default: control characters, quote, backslash and the HTML characters
// <, > and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
