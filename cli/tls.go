package cli

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// certCheckInterval is how often, at most, a TLS handshake reads the
// certificate and key files to see whether they changed.
const certCheckInterval = 5 * time.Second

// certReloader hands the certificate of server.tls_cert / server.tls_key to
// TLS handshakes. It loads the pair again on Reload (SIGHUP) and when a
// handshake finds that the contents of either file changed (read at most
// once per certCheckInterval). A pair that fails to load is logged and the
// previous one stays in use. Safe for concurrent use.
type certReloader struct {
	certPath, keyPath string
	log               *slog.Logger
	// Now reads the clock; time.Now unless a test sets it before use.
	Now func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	seen    [sha256.Size]byte // of the files the last load attempt read
	checked time.Time         // when the files were last read
}

// newCertReloader loads the pair once; an error names the key at fault.
func newCertReloader(certPath, keyPath string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certPath: certPath, keyPath: keyPath, log: log, Now: time.Now}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// readPair reads both files and a digest of their contents.
func readPair(certPath, keyPath string) (certPEM, keyPEM []byte, sum [sha256.Size]byte, err error) {
	if certPEM, err = os.ReadFile(certPath); err != nil {
		return nil, nil, sum, fmt.Errorf("config server.tls_cert: %w", err)
	}
	if keyPEM, err = os.ReadFile(keyPath); err != nil {
		return nil, nil, sum, fmt.Errorf("config server.tls_key: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%d:", len(certPEM))
	h.Write(certPEM)
	h.Write(keyPEM)
	copy(sum[:], h.Sum(nil))
	return certPEM, keyPEM, sum, nil
}

// parsePair checks a certificate and its key.
func parsePair(certPath, keyPath string, certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("config server.tls_cert, server.tls_key (%s, %s): %w", certPath, keyPath, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("config server.tls_cert (%s): %w", certPath, err)
		}
	}
	return &cert, nil
}

// loadPair reads and checks the pair.
func loadPair(certPath, keyPath string) (*tls.Certificate, error) {
	certPEM, keyPEM, _, err := readPair(certPath, keyPath)
	if err != nil {
		return nil, err
	}
	return parsePair(certPath, keyPath, certPEM, keyPEM)
}

// Reload loads the pair now. On error the certificate in use stays.
func (r *certReloader) Reload() error {
	certPEM, keyPEM, sum, err := readPair(r.certPath, r.keyPath)
	var cert *tls.Certificate
	if err == nil {
		cert, err = parsePair(r.certPath, r.keyPath, certPEM, keyPEM)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = sum
	r.checked = r.Now()
	if err != nil {
		return err
	}
	r.cert = cert
	return nil
}

// GetCertificate is the tls.Config hook: the current certificate, loaded
// again first when the files changed since they were last read.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	due := r.Now().Sub(r.checked) >= certCheckInterval
	if due {
		r.checked = r.Now()
	}
	seen := r.seen
	r.mu.Unlock()
	if due {
		if _, _, sum, err := readPair(r.certPath, r.keyPath); err != nil || sum != seen {
			r.reloadAndLog("files changed")
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert, nil
}

func (r *certReloader) reloadAndLog(why string) {
	if err := r.Reload(); err != nil {
		r.log.Error("tls certificate not reloaded; the previous one stays in use", "reason", why, "err", err)
		return
	}
	r.mu.Lock()
	leaf := r.cert.Leaf
	r.mu.Unlock()
	r.log.Info("tls certificate reloaded", "reason", why, "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(),
		"not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
}

// watch reloads the pair on every value of hup until ctx is done.
func (r *certReloader) watch(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.reloadAndLog("SIGHUP")
		}
	}
}

// serverTLSConfig is the TLS configuration of the main listener. It offers
// HTTP/1.1 only, the protocol every route and its body timeouts are tested
// with.
func serverTLSConfig(r *certReloader) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
		NextProtos:     []string{"http/1.1"},
	}
}

// checkTLSFiles loads the configured pair once, as serve does at start-up.
func checkTLSFiles(cfg Config) error {
	if cfg.TLSCert == "" {
		return nil
	}
	_, err := loadPair(cfg.TLSCert, cfg.TLSKey)
	return err
}

// startTLS loads the configured pair and reloads it on SIGHUP until stop
// is called; it returns a nil config when TLS is off. SIGHUP never stops
// the server (systemctl reload sends it): without TLS it is logged and
// ignored.
func startTLS(cfg Config, log *slog.Logger) (conf *tls.Config, stop func(), err error) {
	var r *certReloader
	if cfg.TLSCert != "" {
		if r, err = newCertReloader(cfg.TLSCert, cfg.TLSKey, log); err != nil {
			return nil, nil, err
		}
		conf = serverTLSConfig(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if r != nil {
			r.watch(ctx, hup)
			return
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: nothing to reload (server.tls_cert is not set)")
			}
		}
	}()
	return conf, func() {
		signal.Stop(hup)
		cancel()
		<-done
	}, nil
}

// listenerScheme is the scheme clients use on the main listener.
func listenerScheme(cfg Config) string {
	if cfg.TLSCert != "" {
		return "https"
	}
	return "http"
}
