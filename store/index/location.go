package index

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Where an index is: a SQLite file (any path) or a PostgreSQL URL
// (postgres:// or postgresql://) whose schema parameter names the schema
// of the tables.

// DefaultPostgresSchema is the schema of the index tables when a
// postgres:// URL names none.
const DefaultPostgresSchema = "openxet"

// DefaultBusyTimeout is Config.Busy's default: how long a call waits for
// the index (SQLite's write lock, this process's write connection, a
// PostgreSQL row lock) before it fails with fault.ErrUnavailable.
const DefaultBusyTimeout = 5 * time.Second

// IsPostgres reports whether an index location is a PostgreSQL URL rather
// than a SQLite file.
func IsPostgres(loc string) bool {
	return strings.HasPrefix(loc, "postgres://") || strings.HasPrefix(loc, "postgresql://")
}

// CheckLocation reports what is wrong with an index location before
// anything is opened: for a PostgreSQL URL, its syntax, its parameters and
// its schema name. Any file path is a valid SQLite location.
func CheckLocation(loc string) error {
	if !IsPostgres(loc) {
		return nil
	}
	_, _, err := pgConfig(loc, DefaultBusyTimeout)
	return err
}

var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// pgLocation splits a postgres:// index URL into the URL pgx connects
// with (without openxet's own parameter) and the schema of the tables.
func pgLocation(loc string) (dsn, schema string, err error) {
	u, err := url.Parse(loc)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep only
		// what is wrong with it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", "", fmt.Errorf("index URL: not a valid URL: %w", err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return "", "", fmt.Errorf("index URL %s: %w", Redact(loc), err)
	}
	schema = q.Get("schema")
	if schema == "" {
		schema = DefaultPostgresSchema
	}
	if !schemaName.MatchString(schema) {
		return "", "", fmt.Errorf("index URL: schema %q: want lower-case letters, digits and _ (at most 63), not starting with a digit", schema)
	}
	q.Del("schema")
	u.RawQuery = q.Encode()
	return u.String(), schema, nil
}

// PostgresConfig is pgx's configuration of a postgres:// index URL
// (connecting for at most DefaultBusyTimeout unless the URL says) and the
// index's schema: for tools and tests that talk to the index's database
// beside a DB.
func PostgresConfig(loc string) (*pgx.ConnConfig, string, error) {
	return pgConfig(loc, DefaultBusyTimeout)
}

// pgConfig is pgx's configuration of loc (connecting for at most busy, at
// least DefaultBusyTimeout, unless the URL says) and the index's schema.
func pgConfig(loc string, busy time.Duration) (*pgx.ConnConfig, string, error) {
	dsn, schema, err := pgLocation(loc)
	if err != nil {
		return nil, "", err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("index URL %s: %w", Redact(loc), err)
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = max(busy, DefaultBusyTimeout)
	}
	return cfg, schema, nil
}

// withSchema is loc with its schema parameter set to schema.
func withSchema(loc, schema string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return loc
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Redact is an index location fit for messages: no password.
func Redact(loc string) string {
	if !IsPostgres(loc) {
		return loc
	}
	if u, err := url.Parse(loc); err == nil {
		return u.Redacted()
	}
	return "postgres://…"
}

// OpenRaw opens the index at loc without migrating it, taking no lock and
// starting nothing: a pool whose PostgreSQL connections rebind every query
// and search the index's schema, and that schema ("" for SQLite). For tests
// and tools that must see or make an index at an older schema version
// (MigrateTo). The caller closes it.
func OpenRaw(loc string) (*sql.DB, string, error) {
	if !IsPostgres(loc) {
		db, err := OpenSQLite("file:" + loc + "?_pragma=journal_mode(WAL)")
		return db, "", err
	}
	cfg, schema, err := pgConfig(loc, DefaultBusyTimeout)
	if err != nil {
		return nil, "", err
	}
	cfg.RuntimeParams["search_path"] = schema
	return sql.OpenDB(pgConnector{stdlib.GetConnector(*cfg)}), schema, nil
}
