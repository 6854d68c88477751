// Package testgit runs the stock git binary (and git-lfs) for tests: in a
// directory of the test's, with no configuration of the machine's, no
// terminal to ask on and no credential helper. Without git the tests that
// need it skip, with a message saying how to install it, unless
// OPENXET_REQUIRE_GIT=1 (set by CI after installing git and git-lfs),
// which makes them fail instead.
package testgit

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Need skips (or, with OPENXET_REQUIRE_GIT=1, fails) tb without git, and
// without git-lfs when lfs is set.
func Need(tb testing.TB, lfs bool) {
	tb.Helper()
	missing := ""
	if _, err := exec.LookPath("git"); err != nil {
		missing = "git"
	} else if lfs && exec.Command("git", "lfs", "version").Run() != nil {
		missing = "git-lfs"
	}
	if missing == "" {
		return
	}
	msg := "no " + missing + " (apt-get install git git-lfs; .ci/run installs them)"
	if os.Getenv("OPENXET_REQUIRE_GIT") == "1" {
		tb.Fatal(msg + " (OPENXET_REQUIRE_GIT=1 requires them)")
	}
	tb.Skip(msg)
}

// Env is the environment git runs in: HOME is dir (so ~/.gitconfig is the
// test's), no system configuration, no prompts, no askpass; extra is
// appended ("NAME=value").
func Env(dir string, extra ...string) []string {
	return append(os.Environ(), append([]string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + dir, "XDG_CONFIG_HOME=" + dir,
		"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=", "GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@example.com"}, extra...)...)
}

// Run runs git with args in dir and returns its combined output, trimmed.
func Run(tb testing.TB, dir string, env []string, args ...string) (string, error) {
	tb.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = env
	if env == nil {
		cmd.Env = Env(dir)
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Must is Run that fails tb when git does.
func Must(tb testing.TB, dir string, env []string, args ...string) string {
	tb.Helper()
	out, err := Run(tb, dir, env, args...)
	if err != nil {
		tb.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
