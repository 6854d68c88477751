package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"openxet/store/index"
	"openxet/store/objects"
)

// deploymentKey is the bucket object that names the deployment the bucket
// belongs to. The index keeps the same id (table deployment), so an index
// and a bucket of different deployments are told apart at Open.
const deploymentKey = "deployment.json"

type deploymentRecord struct {
	ID string `json:"id"`
}

// ErrDeploymentMismatch is the sentinel of *DeploymentMismatchError.
var ErrDeploymentMismatch = errors.New("the index and the bucket belong to different deployments")

// DeploymentMismatchError is returned by Open when the index and the bucket
// carry different deployment markers: the index was built from (or used
// with) another bucket. Nothing was changed.
type DeploymentMismatchError struct {
	IndexPath string
	BucketURL string
	// IndexID and BucketID are the two deployment ids; BucketID is ""
	// when the bucket has no marker (an empty or foreign bucket).
	IndexID, BucketID string
}

func (e *DeploymentMismatchError) Error() string {
	bucket := "has no deployment marker"
	if e.BucketID != "" {
		bucket = "belongs to deployment " + e.BucketID
	}
	return fmt.Sprintf("%s: index %s belongs to deployment %s, bucket %s %s", ErrDeploymentMismatch, e.IndexPath, e.IndexID, e.BucketURL, bucket)
}

func (e *DeploymentMismatchError) Unwrap() error { return ErrDeploymentMismatch }

// Deployment returns the id of the deployment the store belongs to (set by
// Open).
func (s *Store) Deployment() string { return s.deployment }

// openDeployment checks, at Open, that the index and the bucket belong to
// the same deployment, and marks them when they are new:
//   - both carry the same id: fine;
//   - the index has none (empty, or made before markers): it adopts the
//     bucket's id, which is first created in the bucket when the bucket has
//     none either (create-if-absent and read back, so processes starting at
//     once agree on one id);
//   - they differ, or the index has one and the bucket none: a
//     *DeploymentMismatchError, and nothing changes.
func (s *Store) openDeployment(ctx context.Context) error {
	indexID, err := indexDeployment(ctx, s.db)
	if err != nil {
		return err
	}
	bucketID, err := bucketDeployment(ctx, s.bucket)
	if err != nil {
		return err
	}
	if indexID != "" {
		if indexID != bucketID {
			return &DeploymentMismatchError{IndexPath: index.Redact(s.cfg.IndexPath), BucketURL: s.cfg.BucketURL, IndexID: indexID, BucketID: bucketID}
		}
		s.deployment = indexID
		return nil
	}
	if bucketID == "" {
		rec, _ := json.Marshal(deploymentRecord{ID: randomHex(16)})
		if _, err := s.writeObject(ctx, deploymentKey, rec, typeJSON, true); err != nil {
			return fmt.Errorf("deployment marker: %w", err)
		}
		if bucketID, err = bucketDeployment(ctx, s.bucket); err != nil {
			return err
		}
		if bucketID == "" {
			return fmt.Errorf("deployment marker: %s is absent right after it was written: %w", deploymentKey, ErrUnavailable)
		}
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		return setDeployment(ctx, tx, bucketID)
	})
	if err != nil {
		return fmt.Errorf("deployment marker: %w", err)
	}
	// Another process may have adopted at the same moment, from the same
	// bucket: read back what the index holds.
	if indexID, err = indexDeployment(ctx, s.db); err != nil {
		return err
	}
	if indexID != bucketID {
		return &DeploymentMismatchError{IndexPath: index.Redact(s.cfg.IndexPath), BucketURL: s.cfg.BucketURL, IndexID: indexID, BucketID: bucketID}
	}
	s.deployment = indexID
	return nil
}

// setDeployment records id in the index unless it already has one.
func setDeployment(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO deployment(one, id) VALUES (1, ?) ON CONFLICT DO NOTHING`, id)
	return err
}

// indexDeployment returns the index's deployment id, "" when it has none.
func indexDeployment(ctx context.Context, db *sql.DB) (string, error) {
	var id string
	err := db.QueryRowContext(ctx, `SELECT id FROM deployment WHERE one = 1`).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("deployment marker in the index: %w", dbErr(err))
	}
	return id, nil
}

// bucketDeployment returns the bucket's deployment id, "" when it has none.
func bucketDeployment(ctx context.Context, b *objects.Bucket) (string, error) {
	data, err := b.ReadAll(ctx, deploymentKey)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", deploymentKey, bucketErr(err))
	}
	var rec deploymentRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.ID == "" || !isHex(rec.ID) {
		return "", fmt.Errorf("the bucket's deployment marker %s is damaged (%q): restore it from a backup", deploymentKey, data)
	}
	return rec.ID, nil
}

// copyDeployment gives a rebuilt index the bucket's deployment marker (none
// when the bucket has none: the next Open creates it).
func copyDeployment(ctx context.Context, b *objects.Bucket, db *sql.DB) error {
	id, err := bucketDeployment(ctx, b)
	if err != nil || id == "" {
		return err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO deployment(one, id) VALUES (1, ?) ON CONFLICT DO NOTHING`, id); err != nil {
		return fmt.Errorf("deployment marker: %w", err)
	}
	return nil
}
