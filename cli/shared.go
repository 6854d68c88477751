package cli

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"openxet/store"

	"openxet/store/accounts"
)

// localSigningKeyFile is where servers before the shared key kept it, in
// the data directory.
const localSigningKeyFile = "signing.key"

// sharedSigningKey returns the signing key of the deployment, which lives in
// the bucket so that a CAS token or fetch URL made by one node verifies on
// every other. On the first start after an upgrade, the data directory's
// old signing.key becomes the bucket's key, so tokens and URLs it signed
// keep working; on a new deployment a random key is made. When the bucket
// already has a key, a different local one is ignored (and said so).
func sharedSigningKey(ctx context.Context, st *store.Store, dataDir string, log *slog.Logger) ([]byte, error) {
	path := filepath.Join(dataDir, localSigningKeyFile)
	local, err := readLocalSigningKey(path)
	if err != nil {
		return nil, err
	}
	key, stored, err := st.SigningKey(ctx, local)
	if err != nil {
		return nil, err
	}
	switch {
	case stored && local != nil:
		log.Info("signing key moved into the bucket; every node of the deployment now uses it, and the local file is no longer read (delete it once every node runs this version)",
			"from", path, "to", "secrets/signing-key", "deployment", st.Deployment())
	case stored:
		log.Info("signing key created in the bucket", "key", "secrets/signing-key", "deployment", st.Deployment())
	case local != nil && !bytes.Equal(local, key):
		log.Warn("the bucket already holds the deployment's signing key; the local one is ignored (CAS tokens and fetch URLs it signed no longer verify)",
			"ignored", path, "deployment", st.Deployment())
	}
	return key, nil
}

// readLocalSigningKey reads an old data directory's signing.key: nil when
// there is none.
func readLocalSigningKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w", path, err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < accounts.MinSigningKeyBytes {
		return nil, fmt.Errorf("signing key %s is damaged; delete it to start with the bucket's key or a new one (outstanding CAS tokens and fetch URLs it signed stop working)", path)
	}
	return key, nil
}

// explainStoreError adds what to do to the errors of opening the store
// that an operator must act on.
func explainStoreError(err error) error {
	var me *store.DeploymentMismatchError
	if !errors.As(err, &me) {
		return err
	}
	return fmt.Errorf("%w.\n"+
		"The index was built from another bucket (or the bucket is not the one the index belongs to).\n"+
		"If %s is the right bucket, rebuild the index from it: stop every server using the index, then run\n"+
		"  openxet reindex   (with the same configuration)\n"+
		"Otherwise point server.bucket at the deployment's own bucket, or server.index at this bucket's index", err, me.BucketURL)
}
