package hub

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"

	"github.com/labstack/echo/v4"

	"openxet/store"
)

// The safetensors metadata of a sharded model in one request, as
// huggingface_hub's get_sharded_safetensors_metadata asks for it: GET
// /api/models/{ns}/{name}/safetensors-metadata/{index file}, answered from
// main with the index file (without its weight_map, which repeats the
// tensor names) and the JSON header of every shard it names. Only each
// shard's header is read: its first 8 bytes give the header's length.

const (
	// maxSafetensorsIndexBytes bounds the index file read (the
	// weight_map of the largest models is a few MiB).
	maxSafetensorsIndexBytes = 32 << 20
	// maxSafetensorsHeaderBytes is the longest shard header read, the
	// bound huggingface_hub puts on a header it parses itself.
	maxSafetensorsHeaderBytes = 25_000_000
	// maxSafetensorsShards bounds the shards of one index.
	maxSafetensorsShards = 10_000
)

func (h *Hub) safetensorsRoutes(e *echo.Echo) {
	e.GET("/api/:types/:ns/:name/safetensors-metadata/*", h.safetensorsMetadata, h.cfg.GuardPublic())
}

// safetensorsMetadata answers {"index": {…}, "headers": {shard: header}}.
func (h *Hub) safetensorsMetadata(c echo.Context) error {
	r, err := h.apiRepo(c, forRead)
	if err != nil {
		return err
	}
	if r.Type != "model" {
		return hubNotFound("EntryNotFound", "safetensors metadata is served for models, not for %ss", r.Type)
	}
	cm, err := h.resolveRev(c, r, "main")
	if err != nil {
		return err
	}
	indexPath := param(c, "*")
	index, shards, err := h.readSafetensorsIndex(c, r, cm, indexPath)
	if err != nil {
		return err
	}
	headers := make(map[string]json.RawMessage, len(shards))
	for _, shard := range shards {
		e, ok := cm.Entry(shard)
		if !ok {
			return hubNotFound("EntryNotFound", "file %s, a shard %s names, not found in %s at %s", shard, indexPath, h.shown(r), cm.SHA)
		}
		header, release, err := h.safetensorsHeader(c, r, cm, e)
		if err != nil {
			return err
		}
		defer release()
		headers[shard] = header
	}
	return c.JSON(http.StatusOK, map[string]any{"index": index, "headers": headers})
}

// readSafetensorsIndex reads and checks the index file p of cm: its
// fields but weight_map, and the shards weight_map names, sorted, once
// each.
func (h *Hub) readSafetensorsIndex(c echo.Context, r store.RepoID, cm store.Commit, p string) (map[string]json.RawMessage, []string, error) {
	e, ok := cm.Entry(p)
	if !ok {
		return nil, nil, hubNotFound("EntryNotFound", "file %s not found in %s at %s", p, h.shown(r), cm.SHA)
	}
	if e.SizeBytes > maxSafetensorsIndexBytes {
		return nil, nil, badRequest("%s is %d bytes, more than the %d a safetensors index may have here", p, e.SizeBytes, maxSafetensorsIndexBytes)
	}
	release, err := h.cfg.Reserve(c, 2*e.SizeBytes)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	b, err := h.readEntryRange(c, r, cm, e, 0, e.SizeBytes)
	if err != nil {
		return nil, nil, err
	}
	var index map[string]json.RawMessage
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, nil, badRequest("%s is not a safetensors index: %v", p, err)
	}
	var weights map[string]string
	if err := json.Unmarshal(index["weight_map"], &weights); err != nil || len(weights) == 0 {
		return nil, nil, badRequest("%s is not a safetensors index: it needs a weight_map of tensor names to shard files", p)
	}
	delete(index, "weight_map")
	var shards []string
	for _, s := range weights {
		shards = append(shards, s)
	}
	slices.Sort(shards)
	shards = slices.Compact(shards)
	if len(shards) > maxSafetensorsShards {
		return nil, nil, badRequest("%s names %d shards, more than the %d served here", p, len(shards), maxSafetensorsShards)
	}
	return index, shards, nil
}

// safetensorsHeader reads the JSON header of the safetensors file e,
// holding its memory until release.
func (h *Hub) safetensorsHeader(c echo.Context, r store.RepoID, cm store.Commit, e store.TreeEntry) (json.RawMessage, func(), error) {
	if e.SizeBytes < 8 {
		return nil, nil, badRequest("%s is not a safetensors file: %d bytes, shorter than its 8-byte header length", e.Path, e.SizeBytes)
	}
	head, err := h.readEntryRange(c, r, cm, e, 0, 8)
	if err != nil {
		return nil, nil, err
	}
	n := binary.LittleEndian.Uint64(head)
	if n > maxSafetensorsHeaderBytes || n > uint64(e.SizeBytes-8) {
		return nil, nil, badRequest("%s is not a safetensors file here: a header of %d bytes in a file of %d (at most %d)", e.Path, n, e.SizeBytes, maxSafetensorsHeaderBytes)
	}
	release, err := h.cfg.Reserve(c, 2*int64(n))
	if err != nil {
		return nil, nil, err
	}
	b, err := h.readEntryRange(c, r, cm, e, 8, 8+int64(n))
	if err != nil {
		release()
		return nil, nil, err
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b, &header); err != nil {
		release()
		return nil, nil, badRequest("%s is not a safetensors file: its header is not a JSON object (%v)", e.Path, err)
	}
	return json.RawMessage(bytes.TrimSpace(b)), release, nil
}

// readEntryRange is bytes [start, end) of the file e of cm of r: a
// regular file from its blob, a Xet file reconstructed (pulled first when
// r is mirrored and the file is not stored yet).
func (h *Hub) readEntryRange(c echo.Context, r store.RepoID, cm store.Commit, e store.TreeEntry, start, end int64) ([]byte, error) {
	ctx := c.Request().Context()
	if e.XetHash != "" {
		if h.mirrored(r) {
			tenant := "anonymous"
			if p := h.cfg.Principal(c); !p.Anonymous {
				tenant = p.Tenant
			}
			reserve := func(n int64) ([]byte, func(), error) { return h.cfg.ReserveBuffer(c, n) }
			if _, err := h.cfg.Mirror.Fetch(ctx, tenant, r, cm.SHA, e, nil, reserve); err != nil {
				return nil, err
			}
		}
		return h.cfg.ReadXetRange(c, r.Tenant, e, start, end)
	}
	blob, err := h.store.OpenBlob(ctx, e.SHA256)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("the blob of %s (%s) is missing: %w", e.Path, e.SHA256, err)
	}
	if err != nil {
		return nil, err
	}
	defer blob.Close()
	if _, err := blob.Seek(start, io.SeekStart); err != nil {
		return nil, err
	}
	b := make([]byte, end-start)
	if _, err := io.ReadFull(blob, b); err != nil {
		return nil, fmt.Errorf("the blob of %s: %w", e.Path, err)
	}
	return b, nil
}
