package objects

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	"gocloud.dev/blob"
)

// What openxet does differently for s3:// buckets, and why:
//
//   - Writes are one PutObject each, the body read in place from the
//     caller's slice (s3Writer) and written to the socket from there in
//     one call (s3body.go). gocloud's writer goes through the AWS
//     transfer manager, which copies the first 16 MiB of every object into
//     a buffer of its own and, above that, allocates (concurrency+1) part
//     buffers: a 64 MiB xorb cost another 65 MiB of heap (45 MiB with 5 MiB
//     parts and no concurrency), outside the memory budget that reserved
//     the body. A single PutObject takes objects up to 5 GiB; xorbs are at
//     most 64 MiB.
//   - Response checksum validation defaults to when_required (the URL's
//     response_checksum_validation wins when set): xorb reads are byte
//     ranges, for which S3 has no checksum to validate, and the SDK then
//     logs a line to stderr for every read. Content is verified by hash
//     anyway (reindex parses and hashes every xorb; clients hash chunks).
//   - Over a plain-HTTP endpoint, a write's payload is signed as
//     UNSIGNED-PAYLOAD, as the SDK itself does over HTTPS (where it streams
//     the body with a trailing checksum). Otherwise SigV4 puts the body's
//     SHA-256 in the signature: a second pass over every byte, at about
//     1.4 GB/s with SHA-NI, 66 % of a 64 MiB write's CPU (the upload's
//     BLAKE3 validation is the other necessary pass). The request checksum
//     (CRC32, about 10 GB/s) is still sent and checked by the server; a URL
//     that turns it off (request_checksum_calculation=when_required) keeps
//     the signed SHA-256.
//   - A xorb's CRC32 is the one ParseXorb computed chunk by chunk while the
//     bytes were in the CPU's cache (xet.XorbInfo.StreamCRC32); the write
//     sends it, and the SDK skips its own pass over the cold body (about a
//     tenth of an S3 upload's CPU). The service still checks it.

// s3DefaultParams are the URL parameters Open adds to an s3:// URL
// that does not set them.
var s3DefaultParams = map[string]string{"response_checksum_validation": "when_required"}

// withS3Defaults returns u with s3DefaultParams added where absent.
func withS3Defaults(u *url.URL) string {
	q := u.Query()
	for k, v := range s3DefaultParams {
		if !q.Has(k) {
			q.Set(k, v)
		}
	}
	v := *u
	v.RawQuery = q.Encode()
	return v.String()
}

// s3Writer writes objects of an s3:// bucket with PutObject, through the
// client gocloud made from the bucket URL (endpoint, region, path style,
// credentials, request checksums), with the URL's server-side encryption.
type s3Writer struct {
	client *s3.Client
	bucket string
	sse    types.ServerSideEncryption
	kmsKey string
	// opts are the options of every PutObject (unsignedPayload over a
	// plain-HTTP endpoint).
	opts []func(*s3.Options)
	// knownCRC: a write whose CRC32 the caller has sends it (not when the
	// URL sets request_checksum_calculation=when_required).
	knownCRC bool
	// conflictWait is how long a create-if-absent write waits before it
	// retries after 409 ConditionalRequestConflict (another conditional
	// write of the key in progress), times the attempt.
	conflictWait time.Duration
}

// newS3Writer returns the writer of an s3:// bucket, or nil for other
// buckets.
func newS3Writer(b *blob.Bucket, bucketURL string) (*s3Writer, error) {
	u, err := url.Parse(bucketURL)
	if err != nil || u.Scheme != "s3" {
		return nil, nil
	}
	q := u.Query()
	w := &s3Writer{bucket: u.Host, kmsKey: q.Get("kmskeyid"), conflictWait: 50 * time.Millisecond}
	if !b.As(&w.client) {
		return nil, fmt.Errorf("bucket %s: no S3 client", u.Host)
	}
	if h := newInPlaceHTTP(w.client.Options().HTTPClient); h != nil {
		w.opts = append(w.opts, func(o *s3.Options) { o.HTTPClient = h })
	}
	// Without the CRC32 (request_checksum_calculation=when_required) the
	// signature's SHA-256 is the only check of the body, and it stays.
	w.knownCRC = !strings.EqualFold(q.Get("request_checksum_calculation"), "when_required")
	if strings.HasPrefix(strings.ToLower(q.Get("endpoint")), "http://") && w.knownCRC {
		w.opts = append(w.opts, s3.WithAPIOptions(unsignedPayload))
	}
	if v := q.Get("ssetype"); v != "" {
		for _, t := range types.ServerSideEncryptionAes256.Values() {
			if strings.EqualFold(string(t), v) {
				w.sse = t
			}
		}
		if w.sse == "" {
			return nil, fmt.Errorf("bucket %s: unknown ssetype %q", u.Host, v)
		}
	}
	return w, nil
}

// plainKey reports whether gocloud's s3blob stores key under itself
// (it escapes control characters, "../" and "__0x" forms); only such keys
// are written here, so that gocloud reads them back where they were put.
// Every key the store makes is plain.
func plainKey(key string) bool {
	for _, c := range []byte(key) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '/' || c == '.' || c == '-') {
			return false
		}
	}
	return !strings.Contains(key, "../")
}

// put writes data under key; with ifAbsent only when no object is there
// (If-None-Match: *), and written reports which. crc, when not nil, is
// data's CRC-32 (IEEE), sent as the request checksum.
func (w *s3Writer) put(ctx context.Context, key string, data []byte, contentType string, ifAbsent bool, crc *uint32) (written bool, err error) {
	in := &s3.PutObjectInput{
		Bucket:        aws.String(w.bucket),
		Key:           aws.String(key),
		ContentType:   aws.String(contentType),
		ContentLength: aws.Int64(int64(len(data))),
	}
	if crc != nil && w.knownCRC {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], *crc)
		in.ChecksumCRC32 = aws.String(base64.StdEncoding.EncodeToString(b[:]))
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	if w.sse != "" {
		in.ServerSideEncryption = w.sse
	}
	if w.kmsKey != "" {
		in.SSEKMSKeyId = aws.String(w.kmsKey)
	}
	for attempt := 1; ; attempt++ {
		in.Body = bytes.NewReader(data)
		_, err := w.client.PutObject(withPutBody(ctx, data), in, w.opts...)
		if err == nil {
			return true, nil
		}
		switch code := s3ErrorCode(err); {
		case ifAbsent && code == "PreconditionFailed":
			return false, nil
		case ifAbsent && code == "ConditionalRequestConflict" && attempt < 5:
			t := time.NewTimer(time.Duration(attempt) * w.conflictWait)
			select {
			case <-ctx.Done():
				t.Stop()
				return false, fmt.Errorf("write %s: %w", key, ctx.Err())
			case <-t.C:
			}
		default:
			return false, fmt.Errorf("write %s: %w", key, s3Err(err))
		}
	}
}

// unsignedPayload signs a request's payload as UNSIGNED-PAYLOAD. It must
// set the hash before the SDK's checksum step, which otherwise computes the
// body's SHA-256 beside its CRC32 to sign it.
func unsignedPayload(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("openxetUnsignedPayload",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
		}), middleware.After)
}
