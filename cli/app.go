package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// Version is the release this binary was built from, and Revision the
// commit (empty: the one Go's build info records, if any). Release builds
// set both with -ldflags "-X openxet/cli.Version=… -X openxet/cli.Revision=…"
// (see .goreleaser.yaml); nothing else writes them.
var (
	Version  = "0.1.0"
	Revision = ""
)

// Env looks up an environment variable.
type Env func(key string) (string, bool)

// Run runs the command line with args (args[0] is the program name) and
// returns the process exit code. It never calls os.Exit.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) int {
	app := NewApp(stdout, stderr, env)
	err := app.RunContext(ctx, args)
	if err == nil {
		return 0
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) {
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(stderr, "openxet:", msg)
		}
		return ec.ExitCode()
	}
	fmt.Fprintln(stderr, "openxet:", err)
	return 1
}

// NewApp builds the command-line application.
func NewApp(stdout, stderr io.Writer, env Env) *cli.App {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	return &cli.App{
		Name:    "openxet",
		Usage:   "a self-hostable server for the Xet storage protocol of Hugging Face's hf_xet and hf clients",
		Version: versionString(),
		Description: "openxet serves the Xet CAS API and a Hub API to the stock Hugging Face clients, keeps a\n" +
			"per-tenant account of stored bytes, and enforces rate limits, byte quotas and memory shares.\n\n" +
			"Start a server on the defaults with `openxet serve`; see docs/ for the configuration reference.",
		Writer:          stdout,
		ErrWriter:       stderr,
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Commands: []*cli.Command{
			serveCommand(env),
			configCommand(env),
			healthcheckCommand(env),
			reindexCommand(env),
			limitsCommand(env),
			credentialsCommand(env),
			loadCommand(env),
			loadAbuserCommand(),
			gcCommand(env),
			usageCommand(env),
			filesCommand(env),
			tenantsCommand(env),
			reposCommand(env),
			mirrorCommand(env),
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(c.App.Writer, "openxet", versionString())
					return nil
				},
			},
		},
	}
}

func versionString() string {
	if r := revision(); len(r) >= 12 {
		return Version + " (" + r[:12] + ")"
	}
	return Version
}

// revision is the commit the binary was built from, "" when unknown.
func revision() string {
	if Revision != "" {
		return Revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

// configFlags are the flags of every configuration key plus --config.
func configFlags(keys func(setting) bool) []cli.Flag {
	flags := []cli.Flag{&cli.StringFlag{Name: "config", Usage: "TOML configuration file", EnvVars: nil}}
	for _, s := range settings {
		if keys != nil && !keys(s) {
			continue
		}
		def := s.def
		if def == "" {
			def = "none"
		}
		flags = append(flags, &cli.StringFlag{
			Name:  s.flagName(),
			Usage: fmt.Sprintf("%s (key %s, env %s, default %s)", s.usage, s.key, s.envName(), def),
		})
	}
	return flags
}

// loadConfig reads the configuration for a command: defaults, then the file
// (--config or OPENXET_CONFIG), then OPENXET_* variables, then flags.
func loadConfig(c *cli.Context, env Env) (Config, error) {
	return configInputs(c, env).load()
}

// configSources are the inputs of a configuration besides the defaults.
type configSources struct {
	path       string            // the TOML file; "" for none
	env, flags map[string]string // key -> value
}

func configInputs(c *cli.Context, env Env) configSources {
	in := configSources{path: c.String("config"), env: map[string]string{}, flags: map[string]string{}}
	if in.path == "" {
		in.path, _ = env("OPENXET_CONFIG")
	}
	for _, s := range settings {
		if v, ok := env(s.envName()); ok {
			in.env[s.key] = v
		}
		if c.IsSet(s.flagName()) {
			in.flags[s.key] = c.String(s.flagName())
		}
	}
	return in
}

func (in configSources) load() (Config, error) {
	cfg, err := LoadConfig(in.path, in.env, in.flags)
	if err != nil {
		return Config{}, cli.Exit(err.Error(), 2)
	}
	return cfg, nil
}

// storeKeys selects the keys a command that only opens the store needs.
func storeKeys(s setting) bool {
	switch s.key {
	case "server.data_dir", "server.bucket", "server.index":
		return true
	}
	return false
}

// KeysDoc lists every configuration key with its default, env and flag, as
// the configuration reference shows them.
func KeysDoc() string {
	var b strings.Builder
	keys := append([]setting(nil), settings...)
	sort.SliceStable(keys, func(i, j int) bool { return keys[i].key < keys[j].key })
	for _, s := range keys {
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | `--%s` | %s |\n", s.key, s.def, s.envName(), s.flagName(), s.usage)
	}
	return b.String()
}
