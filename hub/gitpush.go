package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"openxet/gitobj"
	"openxet/gitserve"
	"openxet/refusal"
	"openxet/store"
	"openxet/store/accounts"
)

// git push (docs/git.md): taken as the Hub takes it. The pack is read
// within pushLimits; gitserve reads the updates (refusing what git's
// formats allow but a repo here cannot hold); checkPush applies the Hub's
// rules (binary files and text over 10 MB must be LFS pointers, every
// pointer names a file the tenant uploaded, with its size; branch and tag
// names as the API takes them; main is not deleted; tags do not move);
// store.Push moves every ref or none, a forced update (git push --force)
// too. A refusal reaches git as every ref's reason.

// pushLimits bound one push; a push reserves PackBytes + Total of the
// memory budget while it is read.
var pushLimits = gitserve.Limits{
	Objects:      200_000,
	Object:       16 << 20,
	Total:        64 << 20,
	Commits:      2_000,
	PackBytes:    32 << 20,
	HistoryReads: 10_000,
}

// maxTextBytes is the largest file the Hub takes outside LFS.
const maxTextBytes = 10 << 20

func (h *Hub) gitReceivePack(c echo.Context) error {
	r, err := h.gitPushRepo(c)
	if err != nil {
		return err
	}
	body, err := gitRequestBody(c, gitserve.ReceivePack)
	if err != nil {
		return err
	}
	return h.gitAnswer(c, pushLimits.PackBytes+pushLimits.Total, "application/x-git-receive-pack-result", func(w io.Writer) error {
		checkRef := func(ref string) error { _, err := storeRef(ref); return err }
		err := gitserve.ServeReceivePack(c.Request().Context(), body, w, h.gitSource(r), c.Request().Header.Get("Git-Protocol"), pushLimits, checkRef,
			func(ctx context.Context, p gitserve.Push) error { return h.applyPush(ctx, r, p) })
		var ref *gitserve.Refusal
		if errors.As(err, &ref) {
			return nil // told to git in the report
		}
		return err
	})
}

// gitPushRepo reads the repo of a push: writable by the caller, with a
// credential that has the write scope.
func (h *Hub) gitPushRepo(c echo.Context) (store.RepoID, error) {
	r, err := h.gitRepo(c, forWrite)
	if err != nil {
		return r, err
	}
	if p := h.cfg.Principal(c); !(accounts.Credential{Scopes: p.Scopes}).Has(accounts.ScopeWrite) {
		return r, refusal.Wrap(refusal.ErrForbidden, "this credential of tenant %s may read %s but not push to it: it has scope %s, pushing needs write",
			p.Tenant, h.shown(r), strings.Join(p.Scopes, ", "))
	}
	return r, nil
}

// applyPush checks a push by the Hub's rules and applies it.
func (h *Hub) applyPush(ctx context.Context, r store.RepoID, p gitserve.Push) error {
	var deletes, moves []gitserve.RefUpdate
	for _, u := range p.Updates {
		if u.New == "" {
			deletes = append(deletes, u)
		} else {
			moves = append(moves, u)
		}
	}
	if len(deletes) > 0 && (len(moves) > 0 || len(deletes) > 1) {
		return pushRefused("a push that deletes a ref deletes only that one: push other changes, and each deletion, apart")
	}
	if len(deletes) == 1 {
		ref, err := storeRef(deletes[0].Ref)
		if err != nil {
			return err
		}
		if ref == "main" {
			return pushRefused("main is the default branch and cannot be deleted")
		}
		return pushError(h.store.DeleteRef(ctx, r, ref))
	}
	updates := make([]store.PushUpdate, 0, len(moves))
	blobs := map[string][]byte{}
	var binary, large, missing []string
	for _, u := range moves {
		ref, err := storeRef(u.Ref)
		if err != nil {
			return err
		}
		// git sends a non-fast-forward update only when told to (--force);
		// the write right is the right to it.
		su := store.PushUpdate{Ref: ref, Old: u.Old, New: u.New, Force: true}
		for _, pc := range u.Commits {
			c := store.Commit{SHA: pc.ID, Parent: pc.Parent, Created: pc.When.UTC(), Object: pc.Object}
			c.Summary, c.Description = gitobj.SplitMessage(pc.Message)
			for _, f := range pc.Files {
				e := store.TreeEntry{Path: f.Path, SizeBytes: f.Size, SHA256: f.SHA256, GitOID: f.Blob}
				if f.Exec {
					e.Mode = store.ModeExecutable
				}
				switch {
				case f.Pointer:
					file, err := h.store.FileBySHA256(ctx, r.Tenant, f.SHA256)
					if errors.Is(err, store.ErrNotFound) || err == nil && int64(file.SizeBytes) != f.Size {
						missing = append(missing, f.Path+" ("+f.SHA256[:12]+")")
						continue
					}
					if err != nil {
						return err
					}
					e.XetHash = file.Hash.String()
				case f.Content != nil && bytes.IndexByte(f.Content[:min(len(f.Content), 8000)], 0) >= 0:
					binary = append(binary, f.Path)
				case f.Content != nil && len(f.Content) > maxTextBytes:
					large = append(large, f.Path)
				case f.Content != nil:
					blobs[f.SHA256] = f.Content
				}
				c.Tree = append(c.Tree, e)
			}
			sort.Slice(c.Tree, func(i, j int) bool { return c.Tree[i].Path < c.Tree[j].Path })
			su.Commits = append(su.Commits, c)
		}
		updates = append(updates, su)
	}
	if err := offending(binary, large, missing); err != nil {
		return err
	}
	return pushError(h.store.Push(ctx, r, updates, blobs))
}

// offending is the Hub's refusal of files a push may not hold as they are.
func offending(binary, large, missing []string) error {
	list := func(paths []string) string {
		sort.Strings(paths)
		paths = slices.Compact(paths)
		return " " + strings.Join(paths, ", ")
	}
	switch {
	case len(binary) > 0:
		return pushRefused("Your push was rejected because it contains binary files. Please use git-lfs (or git-xet) to store binary files; git lfs track, then git lfs migrate import for commits made before. Offending files:%s", list(binary))
	case len(large) > 0:
		return pushRefused("Your push was rejected because it contains files larger than 10 MiB. Please use git-lfs (or git-xet) to store large files. Offending files:%s", list(large))
	case len(missing) > 0:
		return pushRefused("Your push was rejected because it contains LFS pointers to files this server does not have with that size: git lfs push --all origin first. Offending files:%s", list(missing))
	}
	return nil
}

// storeRef is a pushed ref as the store names it: a branch's name, or
// TagRef(tag); anything else under refs/ is refused.
func storeRef(ref string) (string, error) {
	var name, out string
	switch {
	case strings.HasPrefix(ref, "refs/heads/"):
		name = strings.TrimPrefix(ref, "refs/heads/")
		out = name
	case strings.HasPrefix(ref, "refs/tags/"):
		name = strings.TrimPrefix(ref, "refs/tags/")
		out = store.TagRef(name)
	default:
		return "", pushRefused("%s: only branches (refs/heads/…) and tags (refs/tags/…) are taken", ref)
	}
	if err := store.ValidRefName(name); err != nil {
		return "", pushRefused("%s: %v", ref, err)
	}
	return out, nil
}

// pushError is the store's refusal of a push as git shows it.
func pushError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrRefMoved):
		return pushRefused("the branch moved since you fetched it (another push or commit): git pull, then push again")
	case errors.Is(err, store.ErrNotFastForward):
		return pushRefused("non-fast-forward: the branch has commits your push does not have; git pull (or rebase) and push again")
	case errors.Is(err, store.ErrRefExists):
		return pushRefused("the tag exists already; tags do not move: push a new tag")
	case errors.Is(err, store.ErrOverQuota):
		return pushRefused("quota_exceeded: %v", err)
	case errors.Is(err, store.ErrNotBranch):
		return pushRefused("%v", err)
	case errors.Is(err, store.ErrNotFound):
		return pushRefused("%v", err)
	}
	return err
}

func pushRefused(format string, args ...any) error {
	return &gitserve.Refusal{Reason: fmt.Sprintf(format, args...)}
}
