package index

// Reindex's scratch indexes and the swap of a rebuilt index, on each
// engine: a file beside a SQLite index, a schema beside a PostgreSQL one.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"
)

// Scratch is where a rebuild of the index at loc goes, under name: a file
// beside a SQLite index, a schema beside a PostgreSQL one.
func Scratch(loc, name string) string {
	if !IsPostgres(loc) {
		return loc + "." + name
	}
	_, schema, err := pgLocation(loc)
	if err != nil {
		return loc
	}
	return withSchema(loc, schema+"_"+strings.ReplaceAll(name, "-", "_"))
}

// Remove deletes a scratch index.
func Remove(ctx context.Context, loc string) error {
	if IsPostgres(loc) {
		return dropPostgresSchema(ctx, loc)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(loc + suffix)
	}
	return nil
}

// Swap makes the rebuilt index the index at loc: in one transaction on
// PostgreSQL, so a node sees the old index or the new one.
func Swap(ctx context.Context, rebuilt, loc string) error {
	if IsPostgres(loc) {
		return swapPostgresSchema(ctx, rebuilt, loc)
	}
	Remove(ctx, loc)
	if err := os.Rename(rebuilt, loc); err != nil {
		return fmt.Errorf("swap in the new index: %w", err)
	}
	return nil
}

// ComparedSchemas are the names that qualify the live (at live) and the
// rebuilt (at fresh) tables in one query on a connection to the live
// index, and the statements that make the rebuilt ones visible on that
// connection (and undo that).
func ComparedSchemas(live, fresh string) (liveName, freshName string, attach, detach []string, err error) {
	if !IsPostgres(live) {
		return "main", "fresh", []string{`ATTACH DATABASE '` + strings.ReplaceAll("file:"+fresh+"?mode=ro", "'", "''") + `' AS fresh`}, []string{`DETACH DATABASE fresh`}, nil
	}
	_, ls, err := pgLocation(live)
	if err != nil {
		return "", "", nil, nil, err
	}
	_, fs, err := pgLocation(fresh)
	if err != nil {
		return "", "", nil, nil, err
	}
	return QuoteIdent(ls), QuoteIdent(fs), nil, nil, nil
}

// dropPostgresSchema removes a scratch schema of reindex.
func dropPostgresSchema(ctx context.Context, loc string) error {
	db, schema, err := pgAdmin(loc)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `DROP SCHEMA IF EXISTS `+QuoteIdent(schema)+` CASCADE`)
	return pgErr(err)
}

// swapPostgresSchema replaces the index's schema by the rebuilt one, in
// one transaction: a node sees the old index or the new one.
func swapPostgresSchema(ctx context.Context, rebuilt, loc string) error {
	db, schema, err := pgAdmin(loc)
	if err != nil {
		return err
	}
	defer db.Close()
	_, fresh, err := pgLocation(rebuilt)
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return pgErr(err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`DROP SCHEMA IF EXISTS ` + QuoteIdent(schema) + ` CASCADE`,
		`ALTER SCHEMA ` + QuoteIdent(fresh) + ` RENAME TO ` + QuoteIdent(schema),
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("swap in the new index: %w", pgErr(err))
		}
	}
	return pgErr(tx.Commit())
}

// pgAdmin is a one-connection pool to the index's database, outside any
// schema, and the index's schema.
func pgAdmin(loc string) (*sql.DB, string, error) {
	cfg, schema, err := pgConfig(loc, DefaultBusyTimeout)
	if err != nil {
		return nil, "", err
	}
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	db.SetMaxOpenConns(1)
	return db, schema, nil
}
