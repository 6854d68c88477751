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
	// Tenant is the namespace the request acts in when it names none, and
	// the one a CAS request's xorbs, shards and quota are of: a robot
	// credential's organization, a personal token's owner, a CAS token's
	// namespace.
	Tenant string
	// Account is whose limits, in-flight cap and memory share the request
	// spends (docs/design.md §13): the credential's owner, an organization
	// for a robot credential, the user for a personal token (its CAS
	// tokens included, whatever namespace they act in).
	Account     string
	Scopes      []string
	viaCASToken bool
	// access is a personal token's level in a namespace or repo
	// (accounts.Access with its owner's roles, read through the cache);
	// nil for a robot credential (hub.Principal.Level's rule).
	access func(ns, typ, name string) accounts.Level
	// person is a personal token's owner; fineGrained a token of a list of
	// grants.
	person      *accounts.Person
	fineGrained bool
	// forRepo is the one repo a CAS token of a personal token whose grant
	// reaches that repo alone was handed out for: its reconstructions are
	// of files the repo references, and its shards must prove every chunk
	// they name (docs/people.md).
	forRepo *store.RepoID
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

// personSource is what auth needs of the store for a personal token: its
// owner as an access decision sees them now (accounts.Accounts.Person).
type personSource interface {
	Person(ctx context.Context, name string) (accounts.Person, error)
}

// ttlCache keeps lookups (credentials, personal tokens' owners) off the
// database on the hot path. Entries live ttl, the bound within which a
// revocation, a suspension or a change of roles reaches every node
// (docs/people.md); forget drops one at once (on this node). A failed
// lookup is not kept.
type ttlCache[V any] struct {
	load func(ctx context.Context, key string) (V, error)
	ttl  time.Duration
	now  func() time.Time
	max  int

	mu sync.Mutex
	m  map[string]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	fetched time.Time
}

type cachedCredential struct {
	cred accounts.Credential
	key  string
}

type credentialCache = ttlCache[cachedCredential]

func newCredentialCache(src credentialSource, ttl time.Duration, now func() time.Time) *credentialCache {
	return newTTLCache(func(ctx context.Context, id string) (cachedCredential, error) {
		cred, err := src.Credential(ctx, id)
		return cachedCredential{cred: cred, key: store.HashName(cred.ID)}, err
	}, ttl, now)
}

func newTTLCache[V any](load func(context.Context, string) (V, error), ttl time.Duration, now func() time.Time) *ttlCache[V] {
	return &ttlCache[V]{load: load, ttl: ttl, now: now, max: 100_000, m: map[string]ttlEntry[V]{}}
}

func (cc *ttlCache[V]) get(ctx context.Context, key string) (V, error) {
	now := cc.now()
	cc.mu.Lock()
	e, ok := cc.m[key]
	cc.mu.Unlock()
	if ok && now.Sub(e.fetched) < cc.ttl {
		return e.v, nil
	}
	v, err := cc.load(ctx, key)
	if err != nil {
		var zero V
		return zero, err
	}
	cc.mu.Lock()
	if len(cc.m) >= cc.max {
		for k := range cc.m {
			delete(cc.m, k)
			break
		}
	}
	cc.m[key] = ttlEntry[V]{v: v, fetched: now}
	cc.mu.Unlock()
	return v, nil
}

func (cc *ttlCache[V]) forget(key string) {
	cc.mu.Lock()
	delete(cc.m, key)
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
	// For is the repo of Tenant a personal token's CAS token acts on
	// when the token's grant reaches that repo but not its namespace.
	For *store.RepoID `json:"f,omitempty"`
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
		id := &identity{CredentialID: cl.CredentialID, CredentialKey: e.key, Tenant: cl.Tenant, Account: cl.Tenant, Scopes: cl.Scopes,
			viaCASToken: true, shared: cl.Repo, forRepo: cl.For}
		if e.cred.Personal() {
			return s.personalCASIdentity(ctx, id, e.cred)
		}
		return id, nil
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
	ident := &identity{CredentialID: e.cred.ID, CredentialKey: e.key, Tenant: e.cred.Tenant, Account: e.cred.Tenant, Scopes: e.cred.Scopes}
	if e.cred.Personal() {
		return s.personalIdentity(ctx, ident, e.cred)
	}
	return ident, nil
}
