// Package wirejson appends JSON the way encoding/json writes it, without
// reflection, for the answers a server sends most: refusals
// (refusal.Error.AppendJSON) and reconstruction answers. What it appends
// is byte for byte what json.Marshal gives for the same value, which the
// fuzz tests check; callers put objects together from these pieces with
// their keys in the order json.Marshal gives a map's (sorted).
package wirejson

import (
	"strconv"
	"unicode/utf8"
)

// Uint appends n as a JSON number.
func Uint(dst []byte, n uint64) []byte { return strconv.AppendUint(dst, n, 10) }

// String appends s as a JSON string the way encoding/json writes it by
// default: control characters, quote, backslash and the HTML characters
// <, > and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func String(dst []byte, s string) []byte {
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
