package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"openxet/limits"
)

// TestConfigCheckShowsOrigins: `openxet config check` prints every key with
// its effective value and where it came from, hides secrets, and its
// output (without secrets) reads back as the same configuration.
func TestConfigCheckShowsOrigins(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	file := writeFile(t, "openxet.toml", `
[server]
listen = "0.0.0.0:9000"
data_dir = "`+data+`"
memory_wait = "3s"
index = "postgres://openxet:pgsecret@db.internal/openxet?sslmode=require"

[limits]
tenant_burst = 11
`)
	env := map[string]string{
		"OPENXET_MEMORY_WAIT": "4s",
		"OPENXET_BUCKET":      "s3://models?region=eu-west-1&endpoint=https://minio:miniosecret@minio.internal:9000&use_path_style=true",
	}
	code, out, errOut := run(t, env, "config", "check", "--config", file, "--tenant-burst", "12", "--memory-budget", "1GiB")
	if code != 0 || errOut != "" {
		t.Fatalf("config check: %d %q", code, errOut)
	}
	for _, want := range []string{
		`listen = "0.0.0.0:9000"  +# file ` + regexp.QuoteMeta(file) + `\n`,
		`memory_wait = "4s" +# env OPENXET_MEMORY_WAIT\n`,
		`tenant_burst = 12 +# flag --tenant-burst\n`,
		`memory_budget = "1GiB" +# flag --memory-budget\n`,
		`dedup_scope = "global" +# default\n`,
		`credential_burst = 2000 +# default\n`,
		`tls_cert = "" +# default\n`,
		`index = "postgres://openxet:REDACTED@db.internal/openxet\?sslmode=require" +# file `,
		`bucket = "s3://models\?endpoint=https%3A%2F%2Fminio%3AREDACTED%40minio.internal%3A9000&region=eu-west-1&use_path_style=true" +# env OPENXET_BUCKET\n`,
		`\[server\]\n`, `\[limits\]\n`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("output lacks /%s/:\n%s", want, out)
		}
	}
	for _, secret := range []string{"pgsecret", "miniosecret"} {
		if strings.Contains(out, secret) {
			t.Errorf("output shows the secret %q:\n%s", secret, out)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("config check touched the data directory: %v", err)
	}

	// serve --print-config prints the same and does not start.
	code, out2, errOut := run(t, env, "serve", "--print-config", "--config", file, "--tenant-burst", "12", "--memory-budget", "1GiB")
	if code != 0 || out2 != out || errOut != "" {
		t.Fatalf("serve --print-config: %d %q\n%s", code, errOut, cmp.Diff(out, out2))
	}

	// Without secrets the listing is a configuration file for the same result.
	code, out, _ = run(t, nil, "config", "check", "--config", file, "--index", filepath.Join(data, "x.db"), "--bucket", "mem://")
	if code != 0 {
		t.Fatal(code)
	}
	again := writeFile(t, "again.toml", out)
	want, err := LoadConfig(file, nil, map[string]string{"server.index": filepath.Join(data, "x.db"), "server.bucket": "mem://"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(again, nil, nil)
	if err != nil {
		t.Fatalf("the listing does not load: %v\n%s", err, out)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listing read back differs; -want +got:\n%s", diff)
	}
}

// TestConfigCheckDerivedValues: keys left empty or auto show the value the
// server will use and what it comes from.
func TestConfigCheckDerivedValues(t *testing.T) {
	data := filepath.Join(t.TempDir(), "d")
	code, out, _ := run(t, nil, "config", "check", "--data-dir", data)
	if code != 0 {
		t.Fatal(code)
	}
	cfg, _ := LoadConfig("", nil, map[string]string{"server.data_dir": data})
	for _, want := range []string{
		`bucket = "` + cfg.Bucket + `"  # default (from server.data_dir)`,
		`index = "` + cfg.Index + `"  # default (from server.data_dir)`,
		`memory_budget = "` + limits.FormatBytes(cfg.MemoryBudget) + `"  # default (auto: `,
		`public_url = ""  # default (empty: http://<Host of each request>)`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigCheckInvalid: every bad key is reported on its own line naming
// the key and where the value came from; exit 2; nothing on stdout.
func TestConfigCheckInvalid(t *testing.T) {
	file := writeFile(t, "bad.toml", "[server]\nlisten = \"nope\"\nlisen = 1\n[limits]\ntenant_burst = 0\n")
	code, out, errOut := run(t, map[string]string{"OPENXET_DEDUP_SCOPE": "everyone"}, "config", "check", "--config", file, "--memory-wait", "soon")
	if code != 2 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	for _, want := range []string{
		"config server.listen (" + file + "): ",
		"config server.lisen (" + file + "): unknown key",
		"config limits.tenant_burst (" + file + "): must be at least 1",
		"config server.dedup_scope (OPENXET_DEDUP_SCOPE): must be global or tenant",
		"config server.memory_wait (--memory-wait): ",
	} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if n := strings.Count(strings.TrimSpace(errOut), "\n") + 1; n != 5 {
		t.Errorf("%d lines, want 5:\n%s", n, errOut)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"":                                        "",
		"./openxet-data":                          "./openxet-data",
		"/etc/openxet/key.pem":                    "/etc/openxet/key.pem",
		"file:///var/lib/openxet/bucket":          "file:///var/lib/openxet/bucket",
		"s3://models?region=eu-west-1":            "s3://models?region=eu-west-1",
		"postgres://u:p@db/openxet":               "postgres://u:REDACTED@db/openxet",
		"postgres://u@db/openxet":                 "postgres://u@db/openxet",
		"s3://b?endpoint=http://k:s@minio:9000":   "s3://b?endpoint=http%3A%2F%2Fk%3AREDACTED%40minio%3A9000",
		"s3://b?aws_secret_access_key=s&region=x": "s3://b?aws_secret_access_key=REDACTED&region=x",
		"s3://b?token=abc":                        "s3://b?token=REDACTED",
		"s3://b?role=arn:aws:iam::1:role/r&web_identity_token_file=/run/t": "s3://b?role=arn:aws:iam::1:role/r&web_identity_token_file=/run/t",
		"https://xet.example.com": "https://xet.example.com",
		"127.0.0.1:8080":          "127.0.0.1:8080",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
