package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"

	"openxet/store/accounts"
	"openxet/xet"
)

// Copying a file of a repo into another tenant's files (docs/sharing.md,
// "Copying files between tenants"): what huggingface_hub's
// lfs-files/duplicate asks for before a commit that names the file by its
// SHA-256. The tenant that copies gets the file as if it had uploaded the
// same bytes with hf_xet: a shard of its own registers the file (the
// source's term list, so the bytes are not stored again), and the xorbs
// are charged as server.dedup_scope charges an upload that finds them
// stored (CopyOptions.Own).

// FileCopy names one file to copy: its Xet hash and the SHA-256 (lowercase
// hex) the caller expects it to have.
type FileCopy struct {
	Hash   xet.Hash
	SHA256 string
}

// CopyRefusal is a file of a copy that the source does not offer, and why
// (a sentence for the caller).
type CopyRefusal struct {
	File   FileCopy
	Reason string
}

// CopyRefusedError means some files of a copy are not files the source
// repo offers: no revision of it names the Xet hash, the file is not
// stored, or its SHA-256 is not the one asked for. Nothing was copied. It
// unwraps to ErrNotFound.
type CopyRefusedError struct {
	From    RepoID
	Refused []CopyRefusal
}

func (e *CopyRefusedError) Error() string {
	reasons := make([]string, len(e.Refused))
	for i, r := range e.Refused {
		reasons[i] = r.Reason
	}
	return fmt.Sprintf("copy from %s: %s", e.From, strings.Join(reasons, "; "))
}

func (e *CopyRefusedError) Unwrap() error { return ErrNotFound }

// CopyOptions says how CopyFiles charges the tenant that copies.
type CopyOptions struct {
	// Own makes the tenant an owner of every xorb the files reference that
	// it does not own yet, charged the xorb's stored size and held to its
	// quota, as an upload of the xorb is (server.dedup_scope = "tenant",
	// where an upload may only name xorbs the tenant owns). Without it the
	// files reference the xorbs where they are stored, as a dedup hit of
	// server.dedup_scope = "global" does: no charge, except a xorb nobody
	// owns, which the tenant adopts as any shard's tenant does.
	Own bool
	// DefaultQuotaBytes is the quota of a tenant without an override
	// (Unlimited for none), as PutXorb takes it.
	DefaultQuotaBytes int64
	// Reserve, when not nil, takes the memory of each file's copy
	// (CopyMemoryBytes of its term count) before its term list is read,
	// once a revision of the source is found to name it; CopyFiles
	// releases it all before it returns. An error of Reserve ends the copy
	// with it, nothing changed.
	Reserve func(bytes int64) (release func(), err error)
}

// CopyMemoryBytes is the most memory CopyFiles holds for a file of terms
// terms while the copy runs: its term list as FileTerms reads it, and its
// shard as built and serialized.
func CopyMemoryBytes(terms int) int64 {
	return FileTermListBytes(terms) + int64(terms+8)*xet.ShardEntryBytes
}

// CopyResult is what CopyFiles registered and charged.
type CopyResult struct {
	Files    int   // files registered (a file the tenant had already counts too)
	NewXorbs int   // xorbs the tenant came to own (with Own)
	NewBytes int64 // their stored bytes: what the copy cost its quota
}

// copyShard is one file of a copy as the shard that registers it for the
// tenant: the file's own term list, no CAS blocks.
type copyShard struct {
	file FileCopy
	sh   *xet.Shard
	body []byte
	hash string // ShardHash(body)
}

// CopyFiles registers for tenant to the Xet files that a revision of repo
// from references, when each has the SHA-256 asked for. The source is
// from's tenant's files: a repo of another tenant must be Shared (internal
// or public); the caller has checked that the tenant may read it. A file
// that no revision of from names (never by hash alone: not another file of
// from's tenant, not one from's revisions no longer name) is refused, and
// so is the whole copy: *CopyRefusedError, nothing changed.
//
// The order is the uploads' (docs/design.md §3): the quota check, with
// Own, before anything is written (*OverQuotaError); then the bucket (the
// tenant's xorb owner records, each file's shard object and shard owner
// record); then one index transaction that checks the source again, records
// the owners, charging only the new ones and refusing past the quota, and
// registers the files. When the transaction fails, the owner records it
// would have matched are withdrawn; a shard object stays, owned by nobody,
// for collection. Copying a file the tenant already has registers it again
// and costs nothing.
func (s *Store) CopyFiles(ctx context.Context, from RepoID, to string, files []FileCopy, opt CopyOptions) (CopyResult, error) {
	if err := accounts.ValidTenant(to); err != nil {
		return CopyResult{}, err
	}
	var releases []func()
	defer func() {
		for _, release := range releases {
			release()
		}
	}()
	reserve := func(n int64) error {
		if opt.Reserve == nil {
			return nil
		}
		release, err := opt.Reserve(n)
		if err != nil {
			return err
		}
		releases = append(releases, release)
		return nil
	}
	shards, err := s.copyOffered(ctx, from, to, files, reserve)
	if err != nil {
		return CopyResult{}, err
	}
	w := copyWrites{s: s, to: to}
	if opt.Own {
		if w.own, err = s.copyCharge(ctx, to, shards, opt.DefaultQuotaBytes); err != nil {
			return CopyResult{}, err
		}
	}
	// The bucket first: what the index will say is there before it says so.
	preps, err := w.write(ctx, shards)
	if err == nil {
		err = s.step("copy: written")
	}
	if err != nil {
		w.withdraw(ctx)
		return CopyResult{}, err
	}
	res, err := s.copyRecord(ctx, from, to, shards, preps, w.own, opt.DefaultQuotaBytes)
	if err != nil {
		w.withdraw(ctx)
		return CopyResult{}, fmt.Errorf("copy from %s: %w", from, err)
	}
	return res, nil
}

// copyWrites is what a copy wrote to the bucket before its transaction, so
// that a refusal can withdraw it: the xorb owner records it made (of own,
// xorb → stored size, the xorbs the tenant does not own yet) and the shard
// owner records.
type copyWrites struct {
	s                         *Store
	to                        string
	own                       map[string]int64
	ownerKeys, shardOwnerKeys []string
}

// write makes the tenant's xorb owner records, then each file's shard object
// and shard owner record, and returns each shard's preparation for the
// transaction.
func (w *copyWrites) write(ctx context.Context, shards []copyShard) ([]*shardPrep, error) {
	s, to := w.s, w.to
	for _, x := range sortedKeys(w.own) {
		if ok, err := s.bucket.Exists(ctx, xorbOwnerKey(x, to)); err != nil {
			return nil, fmt.Errorf("copy: xorb owner %s: %w", x, bucketErr(err))
		} else if ok {
			continue // a record without its row: this copy completes it
		}
		if err := s.writeOwnerRecord(ctx, to, x, w.own[x]); err != nil {
			return nil, fmt.Errorf("copy: %w", err)
		}
		w.ownerKeys = append(w.ownerKeys, x)
	}
	preps := make([]*shardPrep, len(shards))
	for i, cs := range shards {
		var err error
		if preps[i], err = s.prepareShard(ctx, to, cs.hash, cs.sh); err != nil {
			return nil, fmt.Errorf("copy: shard of %s: %w", cs.file.Hash, err)
		}
		wrote, err := s.writeShardObjects(ctx, to, cs.hash, cs.body, s.now().Unix())
		if err != nil {
			return nil, fmt.Errorf("copy: shard of %s: %w", cs.file.Hash, err)
		}
		if wrote {
			w.shardOwnerKeys = append(w.shardOwnerKeys, cs.hash)
		}
	}
	return preps, nil
}

// withdraw removes the owner records write made, even after ctx ended.
func (w *copyWrites) withdraw(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for _, x := range w.ownerKeys {
		h, _ := xet.ParseHash(x)
		w.s.withdrawOwnerRecord(ctx, w.to, h, w.own[x])
	}
	for _, sh := range w.shardOwnerKeys {
		w.s.withdrawShardOwnerRecord(ctx, w.to, sh)
	}
}

// copyRecord is a copy's one index transaction: the source still offers
// every file, the tenant owns the xorbs of own (charging only the new ones,
// refused past the quota), and the files are registered.
func (s *Store) copyRecord(ctx context.Context, from RepoID, to string, shards []copyShard, preps []*shardPrep, own map[string]int64, defaultQuota int64) (CopyResult, error) {
	var res CopyResult
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res = CopyResult{Files: len(shards)}
		now := s.now().Unix()
		if err := copySourceStill(ctx, tx, from, to, shards); err != nil {
			return err
		}
		for _, x := range sortedKeys(own) {
			inserted, size, err := ownCopiedXorb(ctx, tx, to, x, defaultQuota, now)
			if err != nil {
				return err
			}
			if inserted {
				res.NewXorbs++
				res.NewBytes += size
			}
		}
		for i, cs := range shards {
			if err := preps[i].apply(ctx, tx, now); err != nil {
				return err
			}
			if _, err := recordShard(ctx, tx, to, cs.hash, int64(len(cs.body)), cs.sh, now); err != nil {
				return err
			}
		}
		return nil
	})
	return res, err
}

// copyOffered finds each file in from and builds the shard that registers
// it for tenant to; a *CopyRefusedError lists those from does not offer.
func (s *Store) copyOffered(ctx context.Context, from RepoID, to string, files []FileCopy, reserve func(n int64) error) ([]copyShard, error) {
	repo, err := s.Repo(ctx, from)
	if err != nil {
		return nil, err
	}
	if from.Tenant != to && !repo.Shared() {
		return nil, fmt.Errorf("repo %s is not shared: %w", from, ErrNotFound)
	}
	named, err := treeFiles(s.lookupCtx(ctx), s.db, from, nil)
	if err != nil {
		return nil, err
	}
	var (
		shards  []copyShard
		refused []CopyRefusal
		seen    = map[xet.Hash]bool{}
	)
	for _, fc := range files {
		if seen[fc.Hash] {
			continue
		}
		seen[fc.Hash] = true
		cs, reason, err := s.copyShardOf(ctx, from, named, fc, reserve)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			refused = append(refused, CopyRefusal{File: fc, Reason: reason})
			continue
		}
		shards = append(shards, cs)
	}
	if len(refused) > 0 {
		return nil, &CopyRefusedError{From: from, Refused: refused}
	}
	return shards, nil
}

// notNamed is the refusal of a file that no revision of from names.
func notNamed(from RepoID, h xet.Hash) string {
	return fmt.Sprintf("no revision of %s has a Xet file of hash %s", from, h)
}

// copyShardOf builds the shard of one file of a copy, or says why from
// does not offer it.
func (s *Store) copyShardOf(ctx context.Context, from RepoID, named map[string]bool, fc FileCopy, reserve func(n int64) error) (copyShard, string, error) {
	if !named[fc.Hash.String()] {
		return copyShard{}, notNamed(from, fc.Hash), nil
	}
	f, err := s.File(ctx, from.Tenant, fc.Hash)
	if errors.Is(err, ErrNotFound) {
		return copyShard{}, fmt.Sprintf("the Xet file %s of %s is not stored on this server", fc.Hash, from), nil
	}
	if err != nil {
		return copyShard{}, "", err
	}
	if f.SHA256 != fc.SHA256 {
		have := f.SHA256
		if have == "" {
			have = "none (its shard carried no SHA-256)"
		}
		return copyShard{}, fmt.Sprintf("the Xet file %s of %s has SHA-256 %s, not %s", fc.Hash, from, have, fc.SHA256), nil
	}
	sha, err := xet.ParseHash(f.SHA256) // hash byte order (xet.FileInfo.SHA256)
	if err != nil {
		return copyShard{}, "", fmt.Errorf("file %s: %w", fc.Hash, err)
	}
	if err := reserve(CopyMemoryBytes(f.TermCount)); err != nil {
		return copyShard{}, "", err
	}
	terms, _, err := s.FileTerms(ctx, from.Tenant, fc.Hash, 0, f.SizeBytes)
	if err != nil {
		return copyShard{}, "", err
	}
	sh := &xet.Shard{Files: []xet.FileInfo{{Hash: fc.Hash, SHA256: &sha, Terms: terms}}}
	// The terms are the index's; the check still proves they make the file
	// from xorbs stored now.
	if err := s.VerifyShard(ctx, sh); err != nil {
		return copyShard{}, "", fmt.Errorf("file %s: %w", fc.Hash, err)
	}
	body := sh.MarshalUpload()
	return copyShard{file: fc, sh: sh, body: body, hash: ShardHash(body)}, "", nil
}

// copyCharge returns the xorbs the files reference that tenant does not
// own yet, with their stored sizes, and refuses with *OverQuotaError when
// they would take tenant past its quota (its override, else
// defaultQuotaBytes). The index transaction checks again.
func (s *Store) copyCharge(ctx context.Context, tenant string, shards []copyShard, defaultQuotaBytes int64) (map[string]int64, error) {
	own := map[string]int64{}
	checked := map[xet.Hash]bool{} // a file's terms name each xorb many times
	var total int64
	for _, cs := range shards {
		for _, t := range cs.sh.Files[0].Terms {
			if checked[t.Xorb] {
				continue
			}
			checked[t.Xorb] = true
			x := t.Xorb.String()
			owned, err := s.OwnsXorb(ctx, tenant, t.Xorb)
			if err != nil {
				return nil, err
			}
			if owned {
				continue
			}
			row, ok, err := s.xorbRow(ctx, x)
			if err != nil {
				return nil, fmt.Errorf("xorb %s: %w", x, err)
			}
			if !ok {
				return nil, &ShardError{Kind: ErrMissingXorb, Reason: fmt.Sprintf("xorb %s is not stored", x)}
			}
			own[x] = row.size
			total += row.size
		}
	}
	if total == 0 {
		return own, nil
	}
	usage, quota, err := s.usageAndQuota(s.lookupCtx(ctx), tenant, defaultQuotaBytes)
	if err != nil {
		return nil, fmt.Errorf("quota of %s: %w", tenant, err)
	}
	if quota >= 0 && usage+total > quota {
		return nil, &OverQuotaError{Tenant: tenant, QuotaBytes: quota, UsageBytes: usage, SizeBytes: total}
	}
	return own, nil
}

// withdrawShardOwnerRecord removes the shard owner record a failed copy
// wrote, unless the index shows the ownership committed after all (or
// cannot tell), as withdrawOwnerRecord does for xorbs: without the record,
// reindex would register the shard's files for tenant.
func (s *Store) withdrawShardOwnerRecord(ctx context.Context, tenant, shard string) {
	var one int
	err := s.queryRow(ctx, `SELECT 1 FROM shard_owners WHERE shard = ? AND tenant = ?`, shard, tenant).Scan(&one)
	if !errors.Is(err, sql.ErrNoRows) {
		return
	}
	s.bucket.Delete(ctx, shardOwnerKey(shard, tenant))
}

// copySourceStill checks, in the copy's transaction, that from still
// offers every file: shared (for another tenant) and named by a revision.
func copySourceStill(ctx context.Context, tx *sql.Tx, from RepoID, to string, shards []copyShard) error {
	if from.Tenant != to {
		var vis sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT visibility FROM repos WHERE tenant = ? AND type = ? AND name = ?`, from.Tenant, from.Type, from.Name).Scan(&vis)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !(Repo{Visibility: vis.String}).Shared()) {
			return fmt.Errorf("repo %s: %w", from, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("repo %s: %w", from, err)
		}
	}
	named, err := treeFiles(ctx, tx, from, nil)
	if err != nil {
		return err
	}
	var refused []CopyRefusal
	for _, cs := range shards {
		if !named[cs.file.Hash.String()] {
			refused = append(refused, CopyRefusal{File: cs.file, Reason: notNamed(from, cs.file.Hash)})
		}
	}
	if len(refused) > 0 {
		sort.Slice(refused, func(i, j int) bool { return refused[i].File.Hash.String() < refused[j].File.Hash.String() })
		return &CopyRefusedError{From: from, Refused: refused}
	}
	return nil
}

// ownCopiedXorb records tenant as an owner of xorb x in the copy's
// transaction, charged and held to its quota (recordXorbOwner with
// enforceQuota), after the checks PutXorb's touch makes: the xorb is still
// in the index, not being deleted, and tenant's owner record not being
// released.
func ownCopiedXorb(ctx context.Context, tx *sql.Tx, tenant, x string, defaultQuotaBytes, now int64) (bool, int64, error) {
	var rec xorbRecord
	err := tx.QueryRowContext(ctx, `SELECT stream_len, chunks FROM xorbs WHERE hash = ?`, x).Scan(&rec.size, &rec.chunks)
	if errors.Is(err, sql.ErrNoRows) {
		return false, 0, &ShardError{Kind: ErrMissingXorb, Reason: fmt.Sprintf("xorb %s is not stored (it was collected since the copy began)", x)}
	}
	if err != nil {
		return false, 0, fmt.Errorf("xorb %s: %w", x, err)
	}
	if err := pendingTx(ctx, tx, xorbOwnerKey(x, tenant)); err != nil {
		return false, 0, err
	}
	if err := touchTx(ctx, tx, now, xorbKey(x)); err != nil {
		return false, 0, err
	}
	inserted, rec, err := recordXorbOwner(ctx, tx, tenant, x, rec, enforceQuota, defaultQuotaBytes, now)
	return inserted, rec.size, err
}
