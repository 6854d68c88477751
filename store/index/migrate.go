package index

import (
	"context"
	"database/sql"
	"fmt"
	"hash/fnv"
	"io"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// migrations are applied in order; a migration never changes once released.
var migrations = []string{
	// 1: the index of docs/design.md §3.
	`
CREATE TABLE xorbs (
	hash       TEXT PRIMARY KEY,
	stream_len INTEGER NOT NULL,
	chunks     BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE tenants (
	name        TEXT PRIMARY KEY,
	usage_bytes INTEGER NOT NULL DEFAULT 0,
	limits      TEXT
) WITHOUT ROWID;
CREATE TABLE xorb_owners (
	xorb    TEXT NOT NULL,
	tenant  TEXT NOT NULL,
	size    INTEGER NOT NULL,
	created INTEGER NOT NULL,
	PRIMARY KEY (xorb, tenant)
) WITHOUT ROWID;
CREATE INDEX xorb_owners_tenant ON xorb_owners(tenant);
CREATE TABLE shards (
	hash TEXT PRIMARY KEY,
	size INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE shard_owners (
	shard   TEXT NOT NULL,
	tenant  TEXT NOT NULL,
	created INTEGER NOT NULL,
	PRIMARY KEY (shard, tenant)
) WITHOUT ROWID;
CREATE TABLE shard_xorbs (
	shard TEXT NOT NULL,
	xorb  TEXT NOT NULL,
	PRIMARY KEY (shard, xorb)
) WITHOUT ROWID;
CREATE TABLE files (
	tenant TEXT NOT NULL,
	hash   TEXT NOT NULL,
	size   INTEGER NOT NULL,
	sha256 TEXT,
	terms  BLOB NOT NULL,
	nterms INTEGER NOT NULL,
	shard  TEXT NOT NULL,
	PRIMARY KEY (tenant, hash)
) WITHOUT ROWID;
CREATE INDEX files_sha256 ON files(tenant, sha256);
CREATE TABLE dedup (
	chunk  TEXT NOT NULL,
	tenant TEXT NOT NULL,
	xorb   TEXT NOT NULL,
	shard  TEXT NOT NULL,
	PRIMARY KEY (chunk, tenant)
) WITHOUT ROWID;
CREATE TABLE credentials (
	id            TEXT PRIMARY KEY,
	tenant        TEXT NOT NULL,
	scopes        TEXT NOT NULL,
	secret_sha256 TEXT NOT NULL,
	created       INTEGER NOT NULL,
	revoked       INTEGER
) WITHOUT ROWID;
CREATE INDEX credentials_tenant ON credentials(tenant);
`,
	// 2: Hub repos, their commits (with whole trees) and refs.
	`
CREATE TABLE repos (
	tenant  TEXT NOT NULL,
	type    TEXT NOT NULL,
	name    TEXT NOT NULL,
	private INTEGER NOT NULL,
	created INTEGER NOT NULL,
	PRIMARY KEY (tenant, type, name)
) WITHOUT ROWID;
CREATE TABLE commits (
	tenant      TEXT NOT NULL,
	type        TEXT NOT NULL,
	name        TEXT NOT NULL,
	sha         TEXT NOT NULL,
	parent      TEXT NOT NULL,
	summary     TEXT NOT NULL,
	description TEXT NOT NULL,
	created     INTEGER NOT NULL,
	tree        BLOB NOT NULL,
	PRIMARY KEY (tenant, type, name, sha)
) WITHOUT ROWID;
CREATE TABLE refs (
	tenant     TEXT NOT NULL,
	type       TEXT NOT NULL,
	name       TEXT NOT NULL,
	ref        TEXT NOT NULL,
	commit_sha TEXT NOT NULL,
	PRIMARY KEY (tenant, type, name, ref)
) WITHOUT ROWID;
`,
	// 3: the quota override the owner transaction enforces (NULL: default).
	`ALTER TABLE tenants ADD COLUMN quota_bytes INTEGER;`,
	// 4 (lifecycle, issue 13): release and collection
	// state (store/retention.go, store/gc.go). None of it is derived from
	// the bucket except file_releases (the file-releases/ records); the rest
	// only delays or resumes work, and is empty after a reindex.
	`
CREATE TABLE file_releases (
	tenant   TEXT NOT NULL,
	hash     TEXT NOT NULL,
	released INTEGER NOT NULL,
	PRIMARY KEY (tenant, hash)
) WITHOUT ROWID;
CREATE INDEX files_shard ON files(tenant, shard);
CREATE INDEX shard_owners_tenant ON shard_owners(tenant);
CREATE INDEX shard_xorbs_xorb ON shard_xorbs(xorb);
CREATE INDEX dedup_shard ON dedup(tenant, shard);
CREATE INDEX dedup_xorb ON dedup(xorb);
CREATE TABLE gc_objects (
	key      TEXT PRIMARY KEY,
	touched  INTEGER NOT NULL DEFAULT 0,
	released INTEGER NOT NULL DEFAULT 0,
	doomed   INTEGER
) WITHOUT ROWID;
CREATE TABLE gc_pending (
	key   TEXT PRIMARY KEY,
	since INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE gc_dropped (
	tenant TEXT NOT NULL,
	xorb   TEXT NOT NULL,
	PRIMARY KEY (tenant, xorb)
) WITHOUT ROWID;
CREATE TABLE gc_dedup_gaps (
	tenant TEXT NOT NULL,
	chunk  TEXT NOT NULL,
	PRIMARY KEY (tenant, chunk)
) WITHOUT ROWID;
CREATE TABLE gc_lease (
	id      INTEGER PRIMARY KEY CHECK (id = 1),
	holder  TEXT NOT NULL,
	expires INTEGER NOT NULL
);
CREATE TABLE gc_state (
	name  TEXT PRIMARY KEY,
	value INTEGER NOT NULL
) WITHOUT ROWID;
`,
	// 5 (scale-out, issue 14): the deployment marker,
	// the id the bucket's deployment.json holds (store/deployment.go).
	`CREATE TABLE deployment (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	id  TEXT NOT NULL
);`,
	// 6 (issue 34): a condemned xorb's gc_dropped rows are deleted by xorb
	// (forgetTx), which the (tenant, xorb) key cannot serve; a pass's
	// start reads the objects touched since the last pass's (gc.go, leaseTx).
	`CREATE INDEX gc_dropped_xorb ON gc_dropped(xorb);
CREATE INDEX gc_objects_touched ON gc_objects(touched);`,
	// 7 (Hub parity, issue 30): a repo's settings (store/reposettings.go),
	// from its repo.json ('' is "as private says" and "not gated"), and the
	// names repos were moved from (the moved.json records).
	`ALTER TABLE repos ADD COLUMN visibility TEXT NOT NULL DEFAULT '';
ALTER TABLE repos ADD COLUMN gated TEXT NOT NULL DEFAULT '';
CREATE TABLE repo_moves (
	tenant   TEXT NOT NULL,
	type     TEXT NOT NULL,
	name     TEXT NOT NULL,
	moved_to TEXT NOT NULL,
	PRIMARY KEY (tenant, type, name)
) WITHOUT ROWID;`,
	// 8 (git, issue 48): a commit's id is its git commit object's
	// (store/gitcommit.go). object is that object's body (NULL for a
	// mirrored commit, whose object is the upstream's, and for a commit of
	// the older format not upgraded yet); commit_aliases maps the ids
	// commits had before to the new ones; upgrades lists the upgrades the
	// store still has to make in Go at its next open (store.Open).
	`ALTER TABLE commits ADD COLUMN object BLOB;
CREATE TABLE commit_aliases (
	tenant  TEXT NOT NULL,
	type    TEXT NOT NULL,
	name    TEXT NOT NULL,
	old_sha TEXT NOT NULL,
	sha     TEXT NOT NULL,
	PRIMARY KEY (tenant, type, name, old_sha)
) WITHOUT ROWID;
CREATE TABLE upgrades (name TEXT PRIMARY KEY);
INSERT INTO upgrades(name) VALUES ('git-commit-ids');`,
	// 9: the git trees of commits, kept once the git server has built
	// them (store/gittrees.go): a cache of values derived from commits,
	// content-addressed, shared by every repo and left out of reindex.
	`CREATE TABLE git_trees (
	id    TEXT PRIMARY KEY,
	body  BLOB NOT NULL,
	files BLOB NOT NULL
) WITHOUT ROWID;`,
	// 10 (people, issue 47; store/accounts/people.go): users and
	// organizations share the tenants' one name space (a tenant that is no
	// user is an organization, so today's tenants become organizations
	// with no row changed); memberships with roles; and personal access
	// tokens as credentials owned by a user (kind 'user', '' for a robot
	// credential of an organization), with a display name, fine-grained
	// grants (JSON) and an expiry. Each row is a bucket record's.
	`CREATE TABLE users (
	name      TEXT PRIMARY KEY,
	email     TEXT NOT NULL,
	admin     INTEGER NOT NULL,
	created   INTEGER NOT NULL,
	suspended INTEGER,
	deleted   INTEGER
) WITHOUT ROWID;
CREATE TABLE orgs (
	name    TEXT PRIMARY KEY,
	created INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE memberships (
	org     TEXT NOT NULL,
	member  TEXT NOT NULL,
	role    TEXT NOT NULL,
	created INTEGER NOT NULL,
	PRIMARY KEY (org, member)
) WITHOUT ROWID;
CREATE INDEX memberships_member ON memberships(member);
ALTER TABLE credentials ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE credentials ADD COLUMN name TEXT NOT NULL DEFAULT '';
ALTER TABLE credentials ADD COLUMN grants TEXT;
ALTER TABLE credentials ADD COLUMN expires INTEGER;`,
}

// SchemaVersion is the newest schema version: the number of migrations.
func SchemaVersion() int { return len(migrations) }

// Migrate brings the index on db to the newest schema in one transaction.
// schema is "" for SQLite, else the PostgreSQL schema of the tables (each
// migration is mapped to PostgreSQL by pgSchema, after pgPrelude). A
// schema newer than this binary knows is an error; the errors are the
// engine's, unmarked (the caller maps them).
func Migrate(ctx context.Context, db *sql.DB, schema string) error {
	return MigrateTo(ctx, db, schema, len(migrations))
}

// MigrateTo is Migrate up to schema version last (tests build older
// indexes with it).
func MigrateTo(ctx context.Context, db *sql.DB, schema string, last int) error {
	var opts *sql.TxOptions
	if schema != "" {
		// READ COMMITTED: each statement after the advisory lock of the
		// prelude sees what the node that held it before committed (a
		// SERIALIZABLE snapshot would predate that).
		opts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if schema != "" {
		for _, q := range pgPrelude(schema) {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)`); err != nil {
		return err
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return err
	}
	if have > len(migrations) {
		return fmt.Errorf("index schema version %d is newer than this binary knows (%d)", have, len(migrations))
	}
	for v := have + 1; v <= last; v++ {
		m := migrations[v-1]
		if schema != "" {
			m = pgSchema(m)
		}
		if _, err := tx.ExecContext(ctx, m); err != nil {
			return fmt.Errorf("migration %d: %w", v, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations(version) VALUES (?)`, v); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// OverQuotaCode is the SQLSTATE that over_quota() raises (pgPrelude): the
// PostgreSQL index's way for one statement to refuse an upload past its
// quota (store's pgRecordUpload tells it apart by this code).
const OverQuotaCode = "OXQ01"

// pgPrelude runs first in the migration transaction: one migrator at a
// time, the schema, and the functions the shared SQL uses.
func pgPrelude(schema string) []string {
	return []string{
		fmt.Sprintf(`SELECT pg_advisory_xact_lock(%d)`, LockKey(schema, "migrate")),
		`CREATE SCHEMA IF NOT EXISTS ` + QuoteIdent(schema),
		`CREATE OR REPLACE FUNCTION ` + QuoteIdent(schema) + `.hex(bytea) RETURNS text
			LANGUAGE sql IMMUTABLE STRICT AS 'SELECT upper(encode($1, ''hex''))'`,
		// instr is SQLite's byte search of one blob in another (1-based; 0
		// when absent), as store's lookups of a tree by the hashes it names
		// use it.
		`CREATE OR REPLACE FUNCTION ` + QuoteIdent(schema) + `.instr(bytea, bytea) RETURNS integer
			LANGUAGE sql IMMUTABLE STRICT AS 'SELECT position($2 in $1)'`,
		// over_quota aborts the statement that calls it (store's pgRecordUpload).
		`CREATE OR REPLACE FUNCTION ` + QuoteIdent(schema) + `.over_quota() RETURNS boolean
			LANGUAGE plpgsql VOLATILE AS 'BEGIN RAISE EXCEPTION ''over quota'' USING ERRCODE = ''` + OverQuotaCode + `''; END'`,
	}
}

var (
	ddlInteger = regexp.MustCompile(`\bINTEGER\b`)
	ddlBlob    = regexp.MustCompile(`\bBLOB\b`)
	ddlText    = regexp.MustCompile(`\bTEXT\b`)
)

// pgSchema maps a SQLite migration to PostgreSQL: 64-bit integers, bytea
// for blobs, byte-order text (as SQLite compares and sorts it), and no
// WITHOUT ROWID (a PostgreSQL table has no rowid to omit).
func pgSchema(m string) string {
	m = strings.ReplaceAll(m, ") WITHOUT ROWID;", ");")
	m = ddlInteger.ReplaceAllString(m, "BIGINT")
	m = ddlBlob.ReplaceAllString(m, "BYTEA")
	return ddlText.ReplaceAllString(m, `TEXT COLLATE "C"`)
}

// QuoteIdent quotes s as a PostgreSQL identifier.
func QuoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// LockKey is the PostgreSQL advisory lock key of one purpose ("migrate",
// "index", ...) for one schema; every process derives the same key.
func LockKey(schema, purpose string) int64 {
	h := fnv.New64a()
	io.WriteString(h, "openxet\x00"+schema+"\x00"+purpose)
	return int64(h.Sum64())
}
