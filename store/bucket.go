package store

import (
	"context"
	"fmt"
)

// Content types of the objects the store writes.
const (
	typeBinary = "application/octet-stream"
	typeJSON   = "application/json"
)

// writeObject is the one way the store writes an object
// (objects.Bucket.Write: data under key, replacing any object there, or
// with ifAbsent only when the key is free; written reports which), once
// this process may write (writable).
func (s *Store) writeObject(ctx context.Context, key string, data []byte, contentType string, ifAbsent bool) (written bool, err error) {
	return s.writeObjectCRC(ctx, key, data, contentType, ifAbsent, nil)
}

// writeObjectCRC is writeObject for data whose CRC-32 (IEEE) the caller
// already has (crc nil: it has not; objects.Bucket.WriteCRC).
func (s *Store) writeObjectCRC(ctx context.Context, key string, data []byte, contentType string, ifAbsent bool, crc *uint32) (written bool, err error) {
	if err := s.writable(); err != nil {
		return false, fmt.Errorf("write %s: %w", key, err)
	}
	return s.bucket.WriteCRC(ctx, key, data, contentType, ifAbsent, crc)
}

// sameObject reports whether the object at key holds exactly data
// (objects.Bucket.Same).
func (s *Store) sameObject(ctx context.Context, key string, data []byte) (bool, error) {
	return s.bucket.Same(ctx, key, data)
}
