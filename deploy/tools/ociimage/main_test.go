package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// staticBinary is $OPENXET_IMAGE_BINARY, or openxet built here as a
// release build would be (CGO_ENABLED=0, version set by -ldflags).
func staticBinary(t *testing.T) (path, version string) {
	t.Helper()
	if p := os.Getenv("OPENXET_IMAGE_BINARY"); p != "" {
		return p, ""
	}
	version = "9.9.9-imagetest"
	path = filepath.Join(t.TempDir(), "openxet")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X openxet/cli.Version="+version, "-o", path, ".")
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return path, version
}

type entry struct {
	hdr  *tar.Header
	body []byte
}

func layerFiles(t *testing.T, img v1.Image) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d %v", len(layers), err)
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s", mt)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out := map[string]entry{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimSuffix(h.Name, "/")] = entry{h, b}
	}
	return out
}

// TestImage builds the image of a static openxet binary into an OCI layout
// and a docker archive, and inspects both as a registry client would:
// manifest and config media types, platform, entrypoint, user, env,
// volume, port, health check, labels; the files of the layer with their
// owners and modes; the binary static (no interpreter, no shared
// libraries) and, on this platform, answering `version`.
func TestImage(t *testing.T) {
	bin, version := staticBinary(t)
	dir := t.TempDir()
	o := Options{
		Binaries: []Binary{{OS: "linux", Arch: runtime.GOARCH, Path: bin}},
		Version:  "1.2.3", Revision: "0123456789abcdef0123456789abcdef01234567",
		Created: time.Unix(1700000000, 0).UTC(), CACerts: []byte("-----BEGIN CERTIFICATE-----\n"),
	}
	layoutDir, tarPath := filepath.Join(dir, "oci"), filepath.Join(dir, "image.tar")
	if err := Build(o, layoutDir, tarPath); err != nil {
		t.Fatal(err)
	}

	idx, img := layoutImage(t, layoutDir)
	checkConfig(t, img, o)
	files := layerFiles(t, img)
	checkLayer(t, files, o)
	checkStatic(t, files["usr/local/bin/openxet"].body, version, dir)

	// The docker archive holds the same image under openxet:<version>.
	tag, _ := name.NewTag("openxet:1.2.3")
	fromTar, err := tarball.ImageFromPath(tarPath, &tag)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := img.ConfigName()
	d2, _ := fromTar.ConfigName()
	if d1 != d2 {
		t.Errorf("archive config %s, layout config %s", d2, d1)
	}

	// Reproducible: the same inputs give the same digest.
	if err := Build(o, filepath.Join(dir, "oci2"), ""); err != nil {
		t.Fatal(err)
	}
	idx2, _ := layout.ImageIndexFromPath(filepath.Join(dir, "oci2"))
	h1, _ := idx.Digest()
	h2, _ := idx2.Digest()
	if h1 != h2 {
		t.Errorf("two builds of the same inputs: %s and %s", h1, h2)
	}
}

// layoutImage reads the OCI layout in dir, checks that its index names one
// linux image of this architecture tagged 1.2.3, and returns both.
func layoutImage(t *testing.T, dir string) (v1.ImageIndex, v1.Image) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].Platform == nil || im.Manifests[0].Platform.OS != "linux" ||
		im.Manifests[0].Platform.Architecture != runtime.GOARCH || im.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
		t.Fatalf("index: %+v", im.Manifests)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, img
}

// checkConfig checks the media types of img's manifest and config and what
// its config sets: platform, user, entrypoint, env, volume, port, health
// check, labels, creation time and stop signal.
func checkConfig(t *testing.T, img v1.Image, o Options) {
	t.Helper()
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", mt)
	}
	m, _ := img.Manifest()
	if m.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("config media type %s", m.Config.MediaType)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	checks := []struct {
		name string
		ok   bool
	}{
		{"os/arch", cf.OS == "linux" && cf.Architecture == runtime.GOARCH},
		{"user 65532:65532 (non-root)", c.User == "65532:65532"},
		{"entrypoint", slices.Equal(c.Entrypoint, []string{"/usr/local/bin/openxet"})},
		{"cmd serve", slices.Equal(c.Cmd, []string{"serve"})},
		{"data dir from env", slices.Contains(c.Env, "OPENXET_DATA_DIR=/data")},
		{"listens on every address", slices.Contains(c.Env, "OPENXET_LISTEN=0.0.0.0:8080")},
		{"one volume, /data", len(c.Volumes) == 1 && c.Volumes["/data"] == struct{}{}},
		{"port 8080", len(c.ExposedPorts) == 1 && c.ExposedPorts["8080/tcp"] == struct{}{}},
		{"health check", c.Healthcheck != nil && slices.Equal(c.Healthcheck.Test, []string{"CMD", "/usr/local/bin/openxet", "healthcheck"})},
		{"labels", c.Labels["org.opencontainers.image.version"] == "1.2.3" && c.Labels["org.opencontainers.image.revision"] == o.Revision},
		{"created fixed", cf.Created.Time.Equal(o.Created)},
		{"stop signal", c.StopSignal == "SIGTERM"},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("config: %s: %+v", ch.name, cf)
		}
	}
}

// checkLayer checks the type, mode, owner, time and content of each file
// the layer must hold, and that it holds nothing else.
func checkLayer(t *testing.T, files map[string]entry, o Options) {
	t.Helper()
	want := []struct {
		path      string
		typ       byte
		mode      int64
		uid       int
		mustHold  string
		mustEqual []byte
	}{
		{"usr/local/bin/openxet", tar.TypeReg, 0o755, 0, "", nil},
		{"etc/passwd", tar.TypeReg, 0o644, 0, "nonroot:x:65532:65532:", nil},
		{"etc/group", tar.TypeReg, 0o644, 0, "nonroot:x:65532:", nil},
		{"data", tar.TypeDir, 0o700, 65532, "", nil},
		{"tmp", tar.TypeDir, 0o1777, 0, "", nil},
		{"home/nonroot", tar.TypeDir, 0o700, 65532, "", nil},
		{"etc/ssl/certs/ca-certificates.crt", tar.TypeReg, 0o644, 0, "", o.CACerts},
	}
	for _, w := range want {
		e, ok := files[w.path]
		if !ok {
			t.Errorf("layer lacks /%s", w.path)
			continue
		}
		if e.hdr.Typeflag != w.typ || e.hdr.Mode != w.mode || e.hdr.Uid != w.uid || e.hdr.Gid != w.uid || !e.hdr.ModTime.Equal(o.Created) {
			t.Errorf("/%s: type %c mode %o owner %d:%d time %v", w.path, e.hdr.Typeflag, e.hdr.Mode, e.hdr.Uid, e.hdr.Gid, e.hdr.ModTime)
		}
		if !strings.Contains(string(e.body), w.mustHold) || w.mustEqual != nil && !bytes.Equal(e.body, w.mustEqual) {
			t.Errorf("/%s: content %.80q", w.path, e.body)
		}
	}
	if len(files) != 14 { // the entries above and their parent directories
		t.Errorf("%d entries in the layer, want 14: %v", len(files), slices.Sorted(func(yield func(string) bool) {
			for k := range files {
				if !yield(k) {
					return
				}
			}
		}))
	}
}

// checkStatic checks that the image's binary is static (no program
// interpreter, no shared libraries) and, when it was built here and this is
// linux, that it answers `version` with version; dir holds its copy.
func checkStatic(t *testing.T, binBytes []byte, version, dir string) {
	t.Helper()
	ef, err := elf.NewFile(bytes.NewReader(binBytes))
	if err != nil {
		t.Fatalf("binary is not ELF: %v", err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary has a program interpreter (dynamically linked)")
		}
	}
	if libs, _ := ef.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("binary needs shared libraries %v", libs)
	}
	if version != "" && runtime.GOOS == "linux" {
		p := filepath.Join(dir, "openxet-from-image")
		os.WriteFile(p, binBytes, 0o755)
		out, err := exec.Command(p, "version").Output()
		if err != nil || !strings.HasPrefix(string(out), "openxet "+version) {
			t.Errorf("openxet version from the image: %q %v", out, err)
		}
	}
}

func TestParseBinary(t *testing.T) {
	b, err := ParseBinary("linux/arm64/v8=dist/openxet")
	if err != nil || b != (Binary{OS: "linux", Arch: "arm64", Variant: "v8", Path: "dist/openxet"}) {
		t.Fatalf("%+v %v", b, err)
	}
	for _, bad := range []string{"linux=x", "linux/amd64", "linux/amd64=", "a/b/c/d=x"} {
		if _, err := ParseBinary(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
