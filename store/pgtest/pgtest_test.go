package pgtest

import (
	"database/sql"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t)
	u := s.NewIndex(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v string
	if err := db.QueryRow(`SELECT current_database() || ' ' || current_user`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	t.Log(v)
}
