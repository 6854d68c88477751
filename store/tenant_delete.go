package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"openxet/store/accounts"
)

// TenantDeletion says what DeleteTenant removed.
type TenantDeletion struct {
	Tenant        string   `json:"tenant"`
	Credentials   int      `json:"credentials"`
	CredentialIDs []string `json:"credential_ids"`
	Repos         []string `json:"repos"`
	ReleasedFiles int      `json:"released_files"`
	LimitsRemoved bool     `json:"limits_removed"`
	// OwnedBytes is the usage the next collection pass gives back (every
	// owner of the tenant is marked for release without grace).
	OwnedBytes int64 `json:"owned_bytes"`
}

// DeleteTenant removes a tenant: its credentials (revoked, then deleted),
// its repos, every file it registered (released), and its limits; and it
// marks every xorb it owns for release at the next collection pass (which
// gives the usage back and drops the tenant's row). Other tenants' files
// that reference its xorbs through dedup keep those xorbs stored (they
// become unowned but referenced; see UsageReport). ErrNotFound when the
// index knows nothing of the tenant. Deleting again finishes an
// interrupted deletion.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) (TenantDeletion, error) {
	out := TenantDeletion{Tenant: tenant, Repos: []string{}, CredentialIDs: []string{}}
	if err := accounts.ValidTenant(tenant); err != nil {
		return out, err
	}
	if known, err := s.TenantKnown(ctx, tenant); err != nil {
		return out, err
	} else if !known {
		return out, fmt.Errorf("tenant %s: %w", tenant, ErrNotFound)
	}
	// Credentials first: nothing new arrives once they are gone (caches
	// forget them within their lifetime, at most 10s).
	creds, err := s.Credentials(ctx, tenant)
	if err != nil {
		return out, err
	}
	for _, c := range creds {
		if err := s.deleteCredential(ctx, c); err != nil {
			return out, err
		}
		out.Credentials++
		out.CredentialIDs = append(out.CredentialIDs, c.ID)
	}
	var filesBefore int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM files WHERE tenant = ?`, tenant).Scan(&filesBefore); err != nil {
		return out, err
	}
	repos, err := s.RepoIDs(ctx, tenant)
	if err != nil {
		return out, err
	}
	for _, r := range repos {
		if err := s.DeleteRepo(ctx, r); err != nil && !errors.Is(err, ErrNotFound) {
			return out, err
		}
		out.Repos = append(out.Repos, r.Type+"/"+r.Name)
	}
	// The records of names its repos were moved from.
	moved, err := s.bucket.ListKeys(ctx, "repos/"+HashName(tenant)+"/")
	if err != nil {
		return out, err
	}
	for _, k := range moved {
		if strings.HasSuffix(k, "/"+movedRecord) {
			if err := s.bucket.Delete(ctx, k); err != nil && !isNotFound(err) {
				return out, fmt.Errorf("delete %s: %w", k, bucketErr(err))
			}
		}
	}
	files, err := queryStrings(ctx, s.db, `SELECT hash FROM files WHERE tenant = ?`, tenant)
	if err != nil {
		return out, err
	}
	cands := map[string]bool{}
	for _, f := range files {
		cands[f] = true
	}
	released, err := s.changeRevisions(ctx, revisionChange{tenant: tenant, candidates: cands})
	if err != nil {
		return out, err
	}
	out.ReleasedFiles = filesBefore - len(files) + len(released)
	if _, ok, err := s.TenantLimits(ctx, tenant); err != nil {
		return out, err
	} else if ok {
		if err := s.PutTenantLimits(ctx, tenant, nil, nil); err != nil {
			return out, err
		}
		out.LimitsRemoved = true
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO gc_dropped(tenant, xorb) SELECT tenant, xorb FROM xorb_owners WHERE tenant = ? ON CONFLICT DO NOTHING`, tenant); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM repo_moves WHERE tenant = ?`, tenant); err != nil {
			return err
		}
		return tidyTenantTx(ctx, tx, tenant)
	})
	if err != nil {
		return out, fmt.Errorf("delete tenant %s: %w", tenant, err)
	}
	out.OwnedBytes, err = s.Usage(ctx, tenant)
	return out, err
}

// deleteCredential revokes a credential (so a crash leaves it unusable),
// then deletes its bucket record and its index row.
func (s *Store) deleteCredential(ctx context.Context, c accounts.Credential) error {
	if !c.IsRevoked() {
		if _, err := s.RevokeCredential(ctx, c.ID); err != nil {
			return err
		}
	}
	if err := s.bucket.Delete(ctx, accounts.CredentialKey(c.ID)); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete credential %s: %w", c.ID, err)
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM credentials WHERE id = ?`, c.ID)
		return err
	})
}

// TenantKnown reports whether the index knows anything of a tenant: a
// row, credentials, files, owners or repos.
func (s *Store) TenantKnown(ctx context.Context, tenant string) (bool, error) {
	for _, q := range []string{
		`SELECT 1 FROM tenants WHERE name = ?`, `SELECT 1 FROM credentials WHERE tenant = ?`, `SELECT 1 FROM files WHERE tenant = ?`,
		`SELECT 1 FROM xorb_owners WHERE tenant = ?`, `SELECT 1 FROM shard_owners WHERE tenant = ?`, `SELECT 1 FROM repos WHERE tenant = ?`,
	} {
		var one int
		err := s.queryRow(ctx, q+` LIMIT 1`, tenant).Scan(&one)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return false, fmt.Errorf("tenant %s: %w", tenant, err)
		}
	}
	return false, nil
}

// ReleasesWaiting reports whether files were released whose xorbs a
// collection pass has not released yet (a cheap check for a collector
// loop that wants to give quota back soon after a deletion).
func (s *Store) ReleasesWaiting(ctx context.Context) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, `SELECT 1 FROM gc_dropped LIMIT 1`).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
