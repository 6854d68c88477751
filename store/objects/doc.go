// Package objects owns openxet's bucket: opening a gocloud.dev/blob bucket
// URL (file://, s3://, mem://), the one way to write an object (Bucket.Write:
// create-if-absent, atomic across processes, one PutObject per S3 write,
// O_DIRECT for large file:// objects), reads, deletes, listings, and the
// meaning of a bucket's errors (Err: a transport or service failure is
// ErrUnavailable, a full bucket ErrNoSpace).
//
// It knows nothing of keys, records, tenants or the index: package store
// says what goes under which key and keeps the index beside the bucket. It
// must not import openxet/store, nor any openxet package but
// openxet/store/fault: dependencies point one way, store → objects → fault
// (docs/design.md §1). Only it (and the
// test helpers under store) imports gocloud.dev and the AWS SDK.
//
// The sentinel ErrNotFound lives here, the lowest package that returns it;
// ErrUnavailable and ErrNoSpace, which the index returns too, live in
// store/fault and are re-exported here. store re-exports all three under
// the same names (the same values), so errors.Is matches any of them.
package objects
