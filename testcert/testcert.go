// Package testcert makes throwaway certificates for TLS tests: a
// certificate authority, server certificates it issues for localhost and
// 127.0.0.1, and an HTTP client that trusts only it. Only tests and test
// helpers (store/s3test) import it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// PEMFile holds the CA certificate, for clients to trust.
	PEMFile string
}

// NewCA makes a CA valid from an hour ago for a day, its certificate in a
// temporary directory of tb.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "openxet test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := filepath.Join(tb.TempDir(), "ca.pem")
	writePEM(tb, p, "CERTIFICATE", der)
	return &CA{cert: cert, key: key, PEMFile: p}
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	tb.Helper()
	// Write beside and rename, as certificate tools do, so a reader never
	// sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// Issue writes a server certificate for localhost and 127.0.0.1 with the
// given serial, and its key, to certFile and keyFile.
func (ca *CA) Issue(tb testing.TB, serial int64, certFile, keyFile string) {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	writePEM(tb, keyFile, "PRIVATE KEY", kder)
	writePEM(tb, certFile, "CERTIFICATE", der)
}

// Client trusts only the CA and opens a new connection per request, so
// each request sees the certificate served at that moment.
func (ca *CA) Client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
}
