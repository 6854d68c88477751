package hub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/labstack/echo/v4"
)

// hubJSONBody reserves the memory that decoding and answering a preupload
// or LFS batch body takes, before a byte of the body is read, and returns
// the body. The reservation is four times the Content-Length (the decoder's
// buffer, the decoded strings, the answer), or four times the cap for a body
// without one, plus a bound for the entries' own structures. A body over
// maxHubJSONBytes is refused 413 unread.
func (h *Hub) hubJSONBody(c echo.Context) (io.Reader, func(), error) {
	n := c.Request().ContentLength
	if n > maxHubJSONBytes {
		return nil, nil, &TooLargeError{Message: fmt.Sprintf("the body of %d bytes is over the %d-byte limit", n, maxHubJSONBytes),
			Hint: fmt.Sprintf("send at most %d files per request", MaxJSONEntries)}
	}
	if n < 0 {
		n = maxHubJSONBytes
	}
	release, err := h.cfg.Reserve(c, 4*n+MaxJSONEntries*hubJSONBytesPerEntry)
	if err != nil {
		return nil, nil, err
	}
	return io.LimitReader(c.Request().Body, n), release, nil
}

// decodeJSONObject reads one JSON object (or null) from dec, member by
// member: member gets each key and must decode its value from dec. Callers
// match keys as encoding/json matches field names, case-insensitively.
func decodeJSONObject(dec *json.Decoder, member func(key string) error) error {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want an object, found %v", tok)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := member(key); err != nil {
			return err
		}
	}
	_, err = dec.Token()
	return err
}

// decodeJSONArray reads a JSON array (or null) from dec, element by element,
// each decoded by elem; more than MaxJSONEntries elements are refused 413
// before the next one is decoded.
func decodeJSONArray(dec *json.Decoder, what string, elem func() error) error {
	if tok, err := dec.Token(); err != nil {
		return err
	} else if tok == nil {
		return nil
	} else if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("%s: want an array", what)
	}
	for n := 0; dec.More(); n++ {
		if n == MaxJSONEntries {
			return &TooLargeError{Message: fmt.Sprintf("more than %d %s in one request", MaxJSONEntries, what),
				Hint: fmt.Sprintf("send at most %d %s per request", MaxJSONEntries, what)}
		}
		if err := elem(); err != nil {
			return err
		}
	}
	_, err := dec.Token()
	return err
}

// skipJSON consumes one JSON value from dec.
func skipJSON(dec *json.Decoder) error {
	var v json.RawMessage
	return dec.Decode(&v)
}

// notARequest is the refusal of a JSON body that did not decode as what
// (decodeJSONObject's error): one with more entries than a request may
// name stays its 413, anything else is 400.
func notARequest(err error, what string) error {
	if _, ok := errors.AsType[*TooLargeError](err); ok {
		return err
	}
	return badRequest("the body is not %s: %v", what, err)
}
