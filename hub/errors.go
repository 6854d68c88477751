package hub

import "fmt"

// The refusals the Hub routes decide themselves, beside the sentinels of
// package refusal they wrap (bad request, not found, forbidden, length
// required). hub gives each its sentence; the server's one table
// (server/errors.go) gives it its status, wire code and headers.

// TooLargeError refuses a request over one of the Hub's caps: a body's
// bytes, its number of entries, a regular file in a commit. Message says
// which, Hint what to send instead.
type TooLargeError struct {
	Message string
	Hint    string
}

func (e *TooLargeError) Error() string { return e.Message }

// NotFoundError is a repo, revision or entry the caller cannot see. Kind is
// the X-Error-Code huggingface_hub maps to its exceptions: RepoNotFound,
// RevisionNotFound or EntryNotFound. MovedTo is, for a RepoNotFound of a
// name a repo was moved from, the repo's new name ("" otherwise).
type NotFoundError struct {
	Kind    string
	Message string
	MovedTo string
}

func (e *NotFoundError) Error() string { return e.Message }

// Kinds of NotFoundError.
const (
	RepoNotFound     = "RepoNotFound"
	RevisionNotFound = "RevisionNotFound"
	EntryNotFound    = "EntryNotFound"
)

// NamespaceError refuses a credential of one tenant that asks for a repo in
// another tenant's namespace (a namespace is a tenant), or that would change
// another tenant's repo it may only read (a shared repo). Message says which,
// Hint what to do instead.
type NamespaceError struct {
	Message string
	Hint    string
}

func (e *NamespaceError) Error() string { return e.Message }

// ExistsError refuses to create what exists already: a repo (by creation,
// move or duplicate) or a branch. Fields are the body fields a client
// reads from the refusal (create_repo(exist_ok=True) reads the url); Cause
// is the store's error, if any.
type ExistsError struct {
	Message string
	Hint    string
	Fields  map[string]any
	Cause   error
}

func (e *ExistsError) Error() string { return e.Message }
func (e *ExistsError) Unwrap() error { return e.Cause }

// NotServedError is a request for a Hub feature openxet deliberately does
// not serve (notserved.go). What names the feature, Hint what to do instead.
type NotServedError struct {
	What string
	Hint string
}

func (e *NotServedError) Error() string { return "openxet does not serve " + e.What }

// StaleParentError refuses a commit whose parentCommit is not the head of
// its branch any more. Cause is the store's error.
type StaleParentError struct {
	Parent string
	Branch string
	Cause  error
}

func (e *StaleParentError) Error() string {
	return fmt.Sprintf("parent commit %s is not the head of %s", e.Parent, e.Branch)
}

func (e *StaleParentError) Unwrap() error { return e.Cause }

// AnonymousError refuses a request without a token on a repo route it may
// not read anonymously (anonymous reads off, or a repo that is not
// public): the answer of a request without a token, with the X-Error-Code
// RepoNotFound that huggingface_hub maps to RepositoryNotFoundError, so
// that repo_exists and file_exists say False.
type AnonymousError struct{}

func (e *AnonymousError) Error() string { return "missing Authorization: Bearer token" }

// CardError refuses a repo card whose metadata (the YAML front matter of
// its README.md) is not valid: YAML that does not parse, or that is not a
// mapping. Message says which; Cause is the YAML parser's error, if any.
type CardError struct {
	Message string
	Cause   error
}

func (e *CardError) Error() string { return e.Message }
func (e *CardError) Unwrap() error { return e.Cause }
