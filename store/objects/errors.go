package objects

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/aws/smithy-go"
	"gocloud.dev/gcerrors"

	"openxet/store/fault"
)

// ErrNotFound means the thing asked for is not there: here, no object
// under the key. Package store re-exports it as store.ErrNotFound, the
// answer of an index miss too (for a tenant, "not visible to that tenant"
// is the same answer).
var ErrNotFound = errors.New("not found")

// ErrUnavailable means the bucket (or the index) could not be read or
// written right now; see fault.ErrUnavailable, which it is (the same
// value). Package store re-exports it as store.ErrUnavailable.
var ErrUnavailable = fault.ErrUnavailable

// ErrNoSpace means the bucket (or the index) has no room left for a write;
// see fault.ErrNoSpace, which it is (the same value). Package store
// re-exports it as store.ErrNoSpace.
var ErrNoSpace = fault.ErrNoSpace

// NoSpace reports whether err says the storage under it is full, as far
// as a file or a bucket can say it: ENOSPC, EDQUOT, MinIO's storage full.
// Package store adds what its index engines say.
func NoSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	switch s3ErrorCode(err) {
	case "XMinioStorageFull", "XMinioAdminBucketQuotaExceeded":
		return true
	}
	return false
}

// IsNotFound reports whether err is a bucket's answer that no object is
// under the key.
func IsNotFound(err error) bool { return gcerrors.Code(err) == gcerrors.NotFound }

// Err marks an error of a bucket call with ErrUnavailable when it is a
// transport or service failure (not NotFound, not a refused precondition,
// argument or permission), and with ErrNoSpace when the bucket is full.
// Err(nil) is nil.
func Err(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoSpace) {
		return err
	}
	if NoSpace(err) {
		return fmt.Errorf("%w: bucket: %w", ErrNoSpace, err)
	}
	if s3ErrorCode(err) != "" { // gocloud calls most S3 refusals Unknown (s3.go)
		return s3Err(err)
	}
	switch gcerrors.Code(err) {
	case gcerrors.Unknown, gcerrors.Internal, gcerrors.ResourceExhausted, gcerrors.DeadlineExceeded:
		return fmt.Errorf("%w: bucket: %w", ErrUnavailable, err)
	}
	return err
}

// s3ErrorCode is the S3 error code of err ("" when it has none).
func s3ErrorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// s3Err marks an error of a direct S3 call as Err does gocloud's:
// ErrUnavailable unless the service refused the request for a reason a
// retry does not cure (a missing bucket or key, a refused precondition, an
// argument, the credentials) or the caller's context ended.
func s3Err(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNoSpace) {
		return err
	}
	if NoSpace(err) {
		return fmt.Errorf("%w: bucket: %w", ErrNoSpace, err)
	}
	switch s3ErrorCode(err) {
	case "NoSuchBucket", "NoSuchKey", "NotFound", "PreconditionFailed", "InvalidRange",
		// credentials, permissions, region, a request the store does not support:
		// configuration to fix, not load to wait out
		"AccessDenied", "Forbidden", "AllAccessDisabled", "AccountProblem", "InvalidAccessKeyId",
		"SignatureDoesNotMatch", "ExpiredToken", "InvalidToken", "InvalidSecurity",
		"AuthorizationHeaderMalformed", "PermanentRedirect", "InvalidArgument", "InvalidRequest",
		"InvalidBucketName", "MethodNotAllowed", "NotImplemented":
		return err
	}
	return fmt.Errorf("%w: bucket: %w", ErrUnavailable, err)
}
