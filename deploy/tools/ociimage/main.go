// Command ociimage builds the openxet OCI image from static openxet binaries,
// FROM scratch and without a Docker daemon or a registry: one layer with the
// binary, /etc/passwd and /etc/group entries for the non-root user 65532, CA
// certificates (for s3:// over HTTPS), /tmp and the /data volume.
//
//	go run ./ociimage -binary linux/amd64=../../dist/openxet_linux_amd64_v1/openxet \
//	    -binary linux/arm64=../../dist/openxet_linux_arm64_v8.0/openxet \
//	    -version 0.1.0 -oci-layout ../../dist/openxet-oci -tarball ../../dist/openxet-image.tar
//
// -oci-layout writes an OCI image layout (an index with one manifest per
// platform), for skopeo, crane, podman or a registry push
// (skopeo copy oci:dist/openxet-oci:0.1.0 docker://registry/openxet:0.1.0).
// -tarball writes the first platform as a `docker load` / `podman load`
// archive tagged openxet:<version>.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed parts; docs/deploy.md describes them.
const (
	BinaryPath = "/usr/local/bin/openxet"
	DataDir    = "/data"
	UID        = 65532
	Port       = "8080/tcp"
	CACerts    = "/etc/ssl/certs/ca-certificates.crt"
)

// Options say what to build.
type Options struct {
	Binaries []Binary // one per platform, the first is the tarball's
	Version  string
	Revision string
	Created  time.Time // of the config and every file: fixed, so builds are reproducible
	CACerts  []byte    // PEM bundle placed at CACerts; nil: none
}

// Binary is a static openxet binary for one platform.
type Binary struct {
	OS, Arch, Variant string
	Path              string
}

func (b Binary) platform() v1.Platform {
	return v1.Platform{OS: b.OS, Architecture: b.Arch, Variant: b.Variant}
}

// ParseBinary reads os/arch[/variant]=path.
func ParseBinary(s string) (Binary, error) {
	plat, path, ok := strings.Cut(s, "=")
	parts := strings.Split(plat, "/")
	if !ok || path == "" || len(parts) < 2 || len(parts) > 3 {
		return Binary{}, fmt.Errorf("-binary %q: want os/arch[/variant]=path", s)
	}
	b := Binary{OS: parts[0], Arch: parts[1], Path: path}
	if len(parts) == 3 {
		b.Variant = parts[2]
	}
	return b, nil
}

// Image builds the image of one binary.
func Image(o Options, b Binary) (v1.Image, error) {
	bin, err := os.ReadFile(b.Path)
	if err != nil {
		return nil, err
	}
	layerTar, err := rootfs(o, bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: o.Created}, CreatedBy: "openxet deploy/tools/ociimage", Comment: "openxet " + o.Version,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: o.Created}
	cf.OS, cf.Architecture, cf.Variant = b.OS, b.Arch, b.Variant
	cf.Author = "openxet"
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, UID),
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"serve"},
		// Env, not flags, so that every subcommand run in the container
		// (credentials, reindex, healthcheck) finds the same data and listener.
		Env: []string{
			"PATH=/usr/local/bin",
			"OPENXET_DATA_DIR=" + DataDir,
			"OPENXET_LISTEN=0.0.0.0:8080",
			"SSL_CERT_FILE=" + CACerts,
		},
		WorkingDir:   DataDir,
		Volumes:      map[string]struct{}{DataDir: {}},
		ExposedPorts: map[string]struct{}{Port: {}},
		StopSignal:   "SIGTERM",
		// Docker's extension of the image config; OCI runtimes ignore it
		// (docs/deploy.md gives the Compose and Kubernetes equivalents).
		Healthcheck: &v1.HealthConfig{
			Test:        []string{"CMD", BinaryPath, "healthcheck"},
			Interval:    30 * time.Second,
			Timeout:     5 * time.Second,
			StartPeriod: 30 * time.Second,
			Retries:     3,
		},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "openxet",
			"org.opencontainers.image.description": "A self-hostable storage server for the Xet protocol of Hugging Face clients",
			"org.opencontainers.image.version":     o.Version,
			"org.opencontainers.image.revision":    o.Revision,
			"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the image's only layer, as a tar stream.
func rootfs(o Options, bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = o.Created, tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dir := func(name string, mode int64, uid int) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, Uid: uid, Gid: uid}, nil)
	}
	file := func(name string, mode int64, body []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, body)
	}
	nonroot := strconv.Itoa(UID)
	steps := []error{
		dir("etc/", 0o755, 0),
		file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:"+nonroot+":"+nonroot+":nonroot:/home/nonroot:/sbin/nologin\n")),
		file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:"+nonroot+":\n")),
		dir("home/", 0o755, 0),
		dir("home/nonroot/", 0o700, UID),
		dir("tmp/", 0o1777, 0),
		dir("usr/", 0o755, 0),
		dir("usr/local/", 0o755, 0),
		dir("usr/local/bin/", 0o755, 0),
		file(strings.TrimPrefix(BinaryPath, "/"), 0o755, bin),
		dir(strings.TrimPrefix(DataDir, "/")+"/", 0o700, UID),
	}
	if o.CACerts != nil {
		steps = append(steps, dir("etc/ssl/", 0o755, 0), dir("etc/ssl/certs/", 0o755, 0),
			file(strings.TrimPrefix(CACerts, "/"), 0o644, o.CACerts))
	}
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Build writes the OCI layout (if layoutDir != "") and the docker archive
// of the first binary (if tarPath != "").
func Build(o Options, layoutDir, tarPath string) error {
	if len(o.Binaries) == 0 {
		return errors.New("no -binary given")
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var first v1.Image
	for _, b := range o.Binaries {
		img, err := Image(o, b)
		if err != nil {
			return fmt.Errorf("image for %s/%s: %w", b.OS, b.Arch, err)
		}
		if first == nil {
			first = img
		}
		plat := b.platform()
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform:    &plat,
			Annotations: map[string]string{"org.opencontainers.image.ref.name": o.Version},
		}})
	}
	if layoutDir != "" {
		if err := os.RemoveAll(layoutDir); err != nil {
			return err
		}
		if _, err := layout.Write(layoutDir, idx); err != nil {
			return fmt.Errorf("oci layout %s: %w", layoutDir, err)
		}
	}
	if tarPath != "" {
		tag, err := name.NewTag("openxet:" + strings.ReplaceAll(o.Version, "+", "-"))
		if err != nil {
			return err
		}
		if err := tarball.WriteToFile(tarPath, tag, first); err != nil {
			return fmt.Errorf("tarball %s: %w", tarPath, err)
		}
	}
	return nil
}

type binaryFlags []Binary

func (b *binaryFlags) String() string { return fmt.Sprint(*b) }
func (b *binaryFlags) Set(s string) error {
	bin, err := ParseBinary(s)
	if err != nil {
		return err
	}
	*b = append(*b, bin)
	return nil
}

func main() {
	var o Options
	var bins binaryFlags
	flag.Var(&bins, "binary", "os/arch[/variant]=path of a static openxet binary; repeat per platform")
	flag.StringVar(&o.Version, "version", "dev", "version for labels and the tag")
	flag.StringVar(&o.Revision, "revision", "", "commit for the revision label")
	created := flag.Int64("created", 0, "creation time, Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	caCerts := flag.String("ca-certs", CACerts, "CA bundle to copy into the image (\"\": none; s3:// over HTTPS needs one)")
	layoutDir := flag.String("oci-layout", "", "write an OCI image layout directory here")
	tarPath := flag.String("tarball", "", "write a docker/podman load archive of the first platform here")
	flag.Parse()
	o.Binaries = bins
	if *created == 0 {
		if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
			*created = v
		}
	}
	o.Created = time.Unix(*created, 0).UTC()
	if *caCerts != "" {
		b, err := os.ReadFile(*caCerts)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ociimage:", err, "(-ca-certs \"\" builds without CA certificates)")
			os.Exit(1)
		}
		o.CACerts = b
	}
	if *layoutDir == "" && *tarPath == "" {
		fmt.Fprintln(os.Stderr, "ociimage: give -oci-layout and/or -tarball")
		os.Exit(2)
	}
	if err := Build(o, *layoutDir, *tarPath); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}
