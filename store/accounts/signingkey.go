package accounts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"openxet/store/fault"
	"openxet/store/objects"
)

// SigningKeyKey is the bucket object holding the deployment's signing key
// (hex), which signs CAS tokens and fetch URLs on every node.
const SigningKeyKey = "secrets/signing-key"

// MinSigningKeyBytes is the shortest signing key SigningKey accepts.
const MinSigningKeyBytes = 32

// SigningKey returns the deployment's signing key, kept in the bucket at
// secrets/signing-key so that every node sharing the bucket signs and
// verifies with the same key.
//
// When the bucket has no key yet, it stores candidate (at least
// MinSigningKeyBytes; nil means 32 fresh random bytes) create-if-absent and
// then reads the object back: of several nodes starting at once, all end
// with the one key that was written first. stored reports whether candidate
// is that key. A key already in the bucket always wins over candidate.
//
// A key in the bucket that is not hex of at least MinSigningKeyBytes is an
// error naming the object; nothing is replaced.
func (a *Accounts) SigningKey(ctx context.Context, candidate []byte) (key []byte, stored bool, err error) {
	key, err = a.readSigningKey(ctx)
	if err != nil || key != nil {
		return key, false, err
	}
	if candidate == nil {
		candidate = make([]byte, 32)
		rand.Read(candidate)
	}
	if len(candidate) < MinSigningKeyBytes {
		return nil, false, fmt.Errorf("signing key: %d bytes is too short (want at least %d)", len(candidate), MinSigningKeyBytes)
	}
	if _, err := a.writeIfAbsent(ctx, SigningKeyKey, []byte(hex.EncodeToString(candidate)+"\n")); err != nil {
		return nil, false, fmt.Errorf("signing key: %w", err)
	}
	if key, err = a.readSigningKey(ctx); err != nil {
		return nil, false, err
	}
	if key == nil {
		return nil, false, fmt.Errorf("signing key: %s is absent right after it was written: %w", SigningKeyKey, fault.ErrUnavailable)
	}
	return key, bytes.Equal(key, candidate), nil
}

// readSigningKey returns the key in the bucket, nil when there is none.
func (a *Accounts) readSigningKey(ctx context.Context) ([]byte, error) {
	data, err := a.bucket.ReadAll(ctx, SigningKeyKey)
	if objects.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read signing key %s: %w", SigningKeyKey, objects.Err(err))
	}
	key, err := hex.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil || len(key) < MinSigningKeyBytes {
		return nil, fmt.Errorf("the signing key %s in the bucket is damaged: restore it from a backup, or delete it to make a new one (outstanding CAS tokens and fetch URLs stop working)", SigningKeyKey)
	}
	return key, nil
}
