package server

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"openxet/store"

	"openxet/store/accounts"
)

// identity is who a request acts as, set by the auth middleware.
type identity struct {
	CredentialID  string
	CredentialKey string // sha256(id), the limiter and log key
	Tenant        string
	Scopes        []string
	viaCASToken   bool
	// shared is the repo of another tenant a CAS token was minted for
	// (xet-read-token of a Shared repo): the files it reconstructs are
	// that repo's, looked up in its tenant (docs/sharing.md); nil for a
	// credential, or a token of its own tenant.
	shared *store.RepoID
	// anonymous is a reader without a token (guardPublic): no credential,
	// keyed by its client address.
	anonymous bool
}

func (id *identity) has(scope string) bool {
	return accounts.Credential{Scopes: id.Scopes}.Has(scope)
}

const identityKey = "openxet.identity"

func identityOf(c echo.Context) *identity {
	id, _ := c.Get(identityKey).(*identity)
	return id
}

// credentialSource is what auth needs of the store.
type credentialSource interface {
	Credential(ctx context.Context, id string) (accounts.Credential, error)
}

// credentialCache keeps credential lookups off the database on the hot path.
// Entries live ttl; Forget drops one at once (revocation on this node).
type credentialCache struct {
	src credentialSource
	ttl time.Duration
	now func() time.Time
	max int

	mu sync.Mutex
	m  map[string]cachedCredential
}

type cachedCredential struct {
	cred    accounts.Credential
	key     string
	fetched time.Time
}

func newCredentialCache(src credentialSource, ttl time.Duration, now func() time.Time) *credentialCache {
	return &credentialCache{src: src, ttl: ttl, now: now, max: 100_000, m: map[string]cachedCredential{}}
}

func (cc *credentialCache) get(ctx context.Context, id string) (cachedCredential, error) {
	now := cc.now()
	cc.mu.Lock()
	e, ok := cc.m[id]
	cc.mu.Unlock()
	if ok && now.Sub(e.fetched) < cc.ttl {
		return e, nil
	}
	cred, err := cc.src.Credential(ctx, id)
	if err != nil {
		return cachedCredential{}, err
	}
	e = cachedCredential{cred: cred, key: store.HashName(cred.ID), fetched: now}
	cc.mu.Lock()
	if len(cc.m) >= cc.max {
		for k := range cc.m {
			delete(cc.m, k)
			break
		}
	}
	cc.m[id] = e
	cc.mu.Unlock()
	return e, nil
}

func (cc *credentialCache) forget(id string) {
	cc.mu.Lock()
	delete(cc.m, id)
	cc.mu.Unlock()
}

// signer makes and checks the HMAC-signed CAS tokens and fetch URLs.
// Build it with newSigner; a bare signer{key: k} works too, without reusing
// its HMAC state.
type signer struct {
	key []byte
	// macs pools keyed HMAC states: a reconstruction signs one fetch URL
	// per range, and keying an HMAC costs two hash blocks and allocations.
	macs *sync.Pool // of *macState
}

// macState is a keyed HMAC and the buffer its message is put together in.
type macState struct {
	h   hash.Hash
	msg []byte
}

func newSigner(key []byte) signer {
	return signer{key: key, macs: &sync.Pool{New: func() any {
		return &macState{h: hmac.New(sha256.New, key)}
	}}}
}

// mac is the HMAC-SHA256 of parts, each followed by a zero byte.
func (s signer) mac(parts ...string) []byte {
	return s.macOf(func(msg []byte) []byte {
		for _, p := range parts {
			msg = append(append(msg, p...), 0)
		}
		return msg
	})
}

// macOf is the HMAC-SHA256 of the message build appends to its argument.
func (s signer) macOf(build func(msg []byte) []byte) []byte {
	if s.macs == nil {
		m := hmac.New(sha256.New, s.key)
		m.Write(build(nil))
		return m.Sum(nil)
	}
	st := s.macs.Get().(*macState)
	st.h.Reset()
	st.msg = build(st.msg[:0])
	st.h.Write(st.msg)
	sum := st.h.Sum(nil)
	s.macs.Put(st)
	return sum
}

// casTokenPrefix starts the short-lived CAS tokens handed out by the Hub
// token endpoints.
const casTokenPrefix = "oxc1."

type casClaims struct {
	CredentialID string   `json:"c"`
	Tenant       string   `json:"t"`
	Scopes       []string `json:"s"`
	Expiry       int64    `json:"e"`
	// Repo is the repo of another tenant a read token is for; absent for
	// a token of the credential's own tenant.
	Repo *store.RepoID `json:"r,omitempty"`
}

// casToken signs a CAS token for a credential.
func (s signer) casToken(cl casClaims) string {
	payload, _ := json.Marshal(cl)
	p := base64.RawURLEncoding.EncodeToString(payload)
	return casTokenPrefix + p + "." + base64.RawURLEncoding.EncodeToString(s.mac("cas", p))
}

// parseCASToken checks a CAS token's signature and expiry.
func (s signer) parseCASToken(tok string, now time.Time) (casClaims, error) {
	rest := strings.TrimPrefix(tok, casTokenPrefix)
	p, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return casClaims{}, errors.New("malformed CAS token")
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac("cas", p)) {
		return casClaims{}, errors.New("CAS token signature does not verify")
	}
	payload, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return casClaims{}, errors.New("malformed CAS token")
	}
	var cl casClaims
	if err := json.Unmarshal(payload, &cl); err != nil {
		return casClaims{}, errors.New("malformed CAS token")
	}
	if now.Unix() >= cl.Expiry {
		return casClaims{}, errors.New("CAS token expired")
	}
	return cl, nil
}

// fetchGrant is what a fetch URL authorises: one byte range of one xorb, for
// one credential and tenant, until an expiry.
type fetchGrant struct {
	Xorb         string
	Start, End   uint64 // inclusive
	CredentialID string
	Tenant       string
	Expiry       int64
	// Repo is "" for a grant of the tenant's own file, else the Shared
	// repo of another tenant the file was reconstructed through, as
	// "type/tenant/name" (sharedRepoKey): the fetch checks that it is
	// still Shared.
	Repo string
	// Relay is "" for a range of a stored xorb, else the Xet hash of the
	// mirrored file whose relay serves this range of an upstream xorb
	// (mirror.RelayPlan).
	Relay string
}

// fetchSig signs a grant: the HMAC of "fetch", the xorb, the range's
// start and end, the credential id, the tenant and the expiry, then the
// repo when there is one, then "relay" and the file when there is one,
// each followed by a zero byte, in hex.
func (s signer) fetchSig(g fetchGrant) string {
	return hex.EncodeToString(s.macOf(func(m []byte) []byte {
		m = append(append(m, "fetch"...), 0)
		m = append(append(m, g.Xorb...), 0)
		m = append(strconv.AppendUint(m, g.Start, 10), 0)
		m = append(strconv.AppendUint(m, g.End, 10), 0)
		m = append(append(m, g.CredentialID...), 0)
		m = append(append(m, g.Tenant...), 0)
		m = append(strconv.AppendInt(m, g.Expiry, 10), 0)
		if g.Repo != "" {
			m = append(append(m, g.Repo...), 0)
		}
		if g.Relay != "" {
			m = append(append(m, "relay"...), 0)
			m = append(append(m, g.Relay...), 0)
		}
		return m
	}))
}

// fetchURL returns the absolute signed URL of a grant. The query is what
// url.Values.Encode gives for c, f (only with a relay), p (only with a
// repo), r, s, t and x (keys in that order), put together without the map.
func (s signer) fetchURL(base string, g fetchGrant) string {
	var b strings.Builder
	b.Grow(len(base) + 256)
	b.WriteString(base)
	b.WriteString("/v1/fetch/")
	b.WriteString(g.Xorb)
	b.WriteString("?c=")
	b.WriteString(url.QueryEscape(g.CredentialID))
	if g.Relay != "" {
		b.WriteString("&f=")
		b.WriteString(url.QueryEscape(g.Relay))
	}
	if g.Repo != "" {
		b.WriteString("&p=")
		b.WriteString(url.QueryEscape(g.Repo))
	}
	b.WriteString("&r=")
	var num [20]byte
	b.Write(strconv.AppendUint(num[:0], g.Start, 10))
	b.WriteString("-")
	b.Write(strconv.AppendUint(num[:0], g.End, 10))
	b.WriteString("&s=")
	b.WriteString(s.fetchSig(g))
	b.WriteString("&t=")
	b.WriteString(url.QueryEscape(g.Tenant))
	b.WriteString("&x=")
	b.Write(strconv.AppendInt(num[:0], g.Expiry, 10))
	return b.String()
}

// parseFetchURL checks a fetch URL's query against its signature and expiry.
// A parameter given more than once is refused, whatever its values: the URL
// the server signed has each one once.
func (s signer) parseFetchURL(xorb string, q url.Values, now time.Time) (fetchGrant, error) {
	for k, v := range q {
		if len(v) > 1 {
			return fetchGrant{}, refuse(errFetchURLInvalid, "fetch URL parameter %q given %d times", k, len(v))
		}
	}
	g := fetchGrant{Xorb: xorb, CredentialID: q.Get("c"), Tenant: q.Get("t"), Repo: q.Get("p"), Relay: q.Get("f")}
	a, b, ok := strings.Cut(q.Get("r"), "-")
	var err1, err2, err3 error
	g.Start, err1 = strconv.ParseUint(a, 10, 64)
	g.End, err2 = strconv.ParseUint(b, 10, 64)
	g.Expiry, err3 = strconv.ParseInt(q.Get("x"), 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil || g.Start > g.End {
		return fetchGrant{}, refuse(errFetchURLInvalid, "malformed fetch URL")
	}
	want := s.fetchSig(g)
	if !hmac.Equal([]byte(q.Get("s")), []byte(want)) {
		return fetchGrant{}, refuse(errFetchURLInvalid, "fetch URL signature does not verify")
	}
	if now.Unix() >= g.Expiry {
		return fetchGrant{}, refuse(errFetchURLInvalid, "fetch URL expired")
	}
	return g, nil
}

// sharedRepoKey is a repo as a fetch grant names it: type/tenant/name
// (none of the three holds a "/").
func sharedRepoKey(r store.RepoID) string { return r.Type + "/" + r.Tenant + "/" + r.Name }

// parseSharedRepoKey is sharedRepoKey's inverse.
func parseSharedRepoKey(k string) (store.RepoID, bool) {
	parts := strings.Split(k, "/")
	if len(parts) != 3 {
		return store.RepoID{}, false
	}
	return store.RepoID{Type: parts[0], Tenant: parts[1], Name: parts[2]}, true
}

// bearer returns the token of an Authorization header: Bearer, or Basic
// with the token as the password and any user name (what git's credential
// helpers and git-lfs send; `hf auth login --add-to-git-credential` stores
// the token so).
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok {
		return "", false
	}
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		tok = strings.TrimSpace(tok)
		return tok, tok != ""
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(tok))
		if err != nil {
			return "", false
		}
		_, pass, ok := strings.Cut(string(raw), ":")
		return pass, ok && pass != ""
	}
	return "", false
}

// authenticate resolves a bearer token to an identity.
func (s *Server) authenticate(ctx context.Context, tok string) (*identity, error) {
	if strings.HasPrefix(tok, casTokenPrefix) {
		cl, err := s.signer.parseCASToken(tok, s.now())
		if err != nil {
			return nil, refuse(errUnauthorized, "%s", err.Error())
		}
		e, err := s.creds.get(ctx, cl.CredentialID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return nil, refuse(errUnauthorized, "the credential of this CAS token no longer exists")
			}
			return nil, err
		}
		if e.cred.IsRevoked() {
			return nil, refuse(errUnauthorized, "the credential of this CAS token was revoked")
		}
		return &identity{CredentialID: cl.CredentialID, CredentialKey: e.key, Tenant: cl.Tenant, Scopes: cl.Scopes, viaCASToken: true, shared: cl.Repo}, nil
	}
	id, secret, err := accounts.ParseToken(tok)
	if err != nil {
		return nil, refuse(errUnauthorized, "the token is not an openxet credential (hf_oxt_…) or CAS token")
	}
	e, err := s.creds.get(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, refuse(errUnauthorized, "unknown credential")
		}
		return nil, err
	}
	if !e.cred.CheckSecret(secret) {
		return nil, refuse(errUnauthorized, "wrong credential secret")
	}
	if e.cred.IsRevoked() {
		return nil, refuse(errUnauthorized, "the credential was revoked")
	}
	if e.cred.Personal() {
		// Fail closed until requests resolve a personal token's rights
		// through its owner's roles (accounts.Access; docs/people.md,
		// "Not yet"): read as a robot credential, a fine-grained token
		// would act on its owner's whole namespace.
		return nil, refuse(errUnauthorized, "personal access tokens are not accepted by this server yet; use a robot credential of the organization")
	}
	return &identity{CredentialID: e.cred.ID, CredentialKey: e.key, Tenant: e.cred.Tenant, Scopes: e.cred.Scopes}, nil
}
