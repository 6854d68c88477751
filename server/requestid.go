package server

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/labstack/echo/v4"
)

// Every answer carries an X-Request-Id, and the request's log line and
// every refusal body carry the same id (field request_id), so an operator
// can find the request a user reports. The clients print it:
// huggingface_hub adds "(Request ID: …)" to its error messages and
// @huggingface/hub ends them with "Request ID: …".

const (
	headerRequestID = "X-Request-Id"
	requestIDKey    = "openxet.request_id"
	// maxRequestIDLen bounds an id a client sends; a longer one is replaced.
	maxRequestIDLen = 128
)

// requestID takes the client's X-Request-Id when it is sane (1 to 128
// visible ASCII characters), else makes a fresh one, and sets it on the
// answer before anything else runs.
func (s *Server) requestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(headerRequestID)
		if !saneRequestID(id) {
			id = randomID()
		}
		c.Set(requestIDKey, id)
		c.Response().Header().Set(headerRequestID, id)
		return next(c)
	}
}

// requestIDOf returns the request's id ("" outside the middleware).
func requestIDOf(c echo.Context) string {
	id, _ := c.Get(requestIDKey).(string)
	return id
}

// saneRequestID accepts what can go into a header, a log line and a JSON
// body unchanged: 1 to maxRequestIDLen characters from '!' to '~'.
func saneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '!' || id[i] > '~' {
			return false
		}
	}
	return true
}

// randomID is a fresh 128-bit id in hex.
func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
