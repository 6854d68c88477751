package hub_test

import (
	"fmt"
	"sync"
	"testing"
)

// TestCommitRacingDeleteIsNotFound commits to a repo while it is deleted,
// many times over: every commit answers 200 (it landed first) or 404
// RepoNotFound (the repo was gone), never a 500; afterwards the repo is
// gone and reindex --check finds the index and the bucket in agreement.
func TestCommitRacingDeleteIsNotFound(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("r%d", i)
		e.createRepoJSON(alice, `{"name":"`+name+`"}`)
		var wg sync.WaitGroup
		answers := make(chan response, 3)
		for k := 0; k < 3; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers <- e.commitLines(alice, "alice/"+name, regularFileLine(fmt.Sprintf("f%d.txt", k), []byte("x")))
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.Do("DELETE", "/api/repos/delete", alice, []byte(`{"type":"model","name":"`+name+`"}`))
			if r.Status != 200 {
				t.Errorf("delete %s: %d %s", name, r.Status, r.Body)
			}
		}()
		wg.Wait()
		close(answers)
		for r := range answers {
			if r.Status != 200 && (r.Status != 404 || r.Header.Get("X-Error-Code") != "RepoNotFound") {
				t.Errorf("commit racing the deletion of %s: %d %s %s, want 200 or 404 RepoNotFound", name, r.Status, r.Header.Get("X-Error-Code"), r.Body)
			}
		}
		if r := e.Do("GET", "/api/models/alice/"+name, alice, nil); r.Status != 404 {
			t.Errorf("%s after its deletion: %d", name, r.Status)
		}
	}
	e.IndexAgrees()
}

// TestCreateRacingCreate creates one repo name from four clients at once,
// many times over: exactly one answers 200, the others 409, and the index
// and the bucket agree afterwards.
func TestCreateRacingCreate(t *testing.T) {
	e := newEnv(t)
	alice := e.Credential("alice", "write")
	for i := 0; i < 30; i++ {
		name := fmt.Sprintf("c%d", i)
		var wg sync.WaitGroup
		answers := make(chan response, 4)
		for k := 0; k < 4; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				answers <- e.Do("POST", "/api/repos/create", alice, []byte(`{"name":"`+name+`"}`))
			}()
		}
		wg.Wait()
		close(answers)
		created := 0
		for r := range answers {
			switch r.Status {
			case 200:
				created++
			case 409:
			default:
				t.Errorf("create %s: %d %s, want 200 or 409", name, r.Status, r.Body)
			}
		}
		if created != 1 {
			t.Errorf("create %s from 4 clients at once: %d answered 200, want exactly 1", name, created)
		}
	}
	e.IndexAgrees()
}
