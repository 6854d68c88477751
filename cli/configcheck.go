package cli

import (
	"fmt"
	"io"
	"net/url"
	"openxet/limits"
	"strings"

	"github.com/urfave/cli/v2"
)

func configCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "config",
		Usage: "check the configuration",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "print the effective configuration and where each value came from; exit 2 on an invalid one",
			Description: "Reads the configuration as `openxet serve` would (defaults, --config or OPENXET_CONFIG,\n" +
				"OPENXET_* variables, flags), checks every key and the TLS certificate and key, and prints\n" +
				"every key with its effective value and its origin: default, file, env or flag. Secrets in\n" +
				"URLs (passwords, tokens, keys in query parameters) are shown as REDACTED. On an invalid\n" +
				"configuration it prints one line per problem, naming the key, and exits 2.",
			Flags: configFlags(nil),
			Action: func(c *cli.Context) error {
				return printConfig(c, env)
			},
		}},
	}
}

// printConfig loads the configuration of c, checks it as serve would at
// start-up and prints it with the origin of every value.
func printConfig(c *cli.Context, env Env) error {
	in := configInputs(c, env)
	cfg, err := in.load()
	if err != nil {
		return err
	}
	if err := checkTLSFiles(cfg); err != nil {
		return cli.Exit(err.Error(), 2)
	}
	file := map[string]string{}
	if in.path != "" {
		file, _ = readTOML(in.path) // LoadConfig read it already
	}
	writeEffective(c.App.Writer, in, file, cfg)
	return nil
}

// origin says where the effective value of a key came from.
func (in configSources) origin(s setting, file map[string]string) (value, from string) {
	if v, ok := in.flags[s.key]; ok {
		return v, "flag --" + s.flagName()
	}
	if v, ok := in.env[s.key]; ok {
		return v, "env " + s.envName()
	}
	if v, ok := file[s.key]; ok {
		return v, "file " + in.path
	}
	return s.def, "default"
}

// derived shows the value a key takes from others when it is left empty
// or set to auto, so that the listing says what the server will use.
var derived = map[string]func(Config, string) (string, string){
	"server.bucket": func(c Config, v string) (string, string) {
		return c.Bucket, "from server.data_dir"
	},
	"server.index": func(c Config, v string) (string, string) {
		return c.Index, "from server.data_dir"
	},
	"server.memory_budget": func(c Config, v string) (string, string) {
		return limits.FormatBytes(c.MemoryBudget), "auto: a quarter of this machine's memory, at most 4GiB"
	},
	"server.public_url": func(c Config, v string) (string, string) {
		scheme := "http"
		if c.TLSCert != "" {
			scheme = "https"
		}
		return "", "empty: " + scheme + "://<Host of each request>"
	},
}

// writeEffective prints the configuration as TOML that openxet reads back:
// each key with its effective value and, in a comment, where it came from.
func writeEffective(w io.Writer, in configSources, file map[string]string, cfg Config) {
	src := "none"
	if in.path != "" {
		src = in.path
	}
	fmt.Fprintf(w, "# openxet %s: effective configuration (file: %s); secrets are REDACTED\n", versionString(), src)
	for _, section := range sections() {
		fmt.Fprintf(w, "\n[%s]\n", section)
		for _, s := range settings {
			sec, name, _ := strings.Cut(s.key, ".")
			if sec != section {
				continue
			}
			v, from := in.origin(s, file)
			if d, ok := derived[s.key]; ok && (v == "" || v == "auto") {
				var how string
				v, how = d(cfg, v)
				from += " (" + how + ")"
			}
			if strings.HasSuffix(s.key, "_token") && v != "" {
				v = redacted
			}
			fmt.Fprintf(w, "%s = %s  # %s\n", name, tomlValue(redact(v)), from)
		}
	}
}

// redacted replaces secrets in printed configuration values.
const redacted = "REDACTED"

// redact hides the secrets a configuration value may carry: the password
// of a URL (postgres://user:secret@host, an S3-compatible endpoint with
// user:secret@) and query parameters whose names say secret, password,
// token, credential, signature or key, also in URLs nested in a query
// (s3://bucket?endpoint=https://user:secret@minio). Paths, such as
// server.tls_key, are not secret: the key's contents never appear.
func redact(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.Scheme == "" || (u.Host == "" && u.User == nil && u.RawQuery == "") {
		return v
	}
	changed := false
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), redacted)
		changed = true
	}
	if u.RawQuery != "" {
		q := u.Query()
		for name, vals := range q {
			for i, val := range vals {
				nv := val
				if secretParam(name) {
					nv = redacted
				} else {
					nv = redact(val)
				}
				if nv != val {
					vals[i] = nv
					changed = true
				}
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	if !changed {
		return v
	}
	return u.String()
}

func secretParam(name string) bool {
	n := strings.ToLower(name)
	if strings.HasSuffix(n, "_file") { // a path, e.g. web_identity_token_file
		return false
	}
	for _, w := range []string{"secret", "password", "passwd", "token", "credential", "signature"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return n == "key" || strings.HasSuffix(n, "_key") || strings.HasSuffix(n, "accesskey") || strings.HasSuffix(n, "-key")
}
