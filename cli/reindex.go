package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/urfave/cli/v2"

	"openxet/store"
)

func reindexCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "reindex",
		Usage: "rebuild the SQLite index from the bucket",
		Description: "Rebuilds the whole index (xorbs, owners and usage counters, files and the dedup index,\n" +
			"credentials, tenant limits) from the bucket into a new file and swaps it in. Stop every server\n" +
			"using the index first: reindex refuses while one holds it open. Safe to run again.\n" +
			"With --check it only compares and prints every difference, marking \"leftover\" those an\n" +
			"interrupted write leaves by design (the bucket ahead of the index); it exits 1 when any\n" +
			"difference is not a leftover. --check may run while servers are up.",
		Flags: append(configFlags(storeKeys), &cli.BoolFlag{Name: "check", Usage: "report differences without writing"}),
		Action: func(c *cli.Context) error {
			cfg, err := loadConfig(c, env)
			if err != nil {
				return err
			}
			rc := store.ReindexConfig{IndexPath: cfg.Index, BucketURL: cfg.Bucket, Progress: progressPrinter(c.App.ErrWriter)}
			if c.Bool("check") {
				diffs, err := store.CheckIndex(c.Context, rc)
				if err != nil {
					return cli.Exit(err.Error(), 2)
				}
				return reportCheck(c.App.Writer, diffs)
			}
			if err := store.Reindex(c.Context, rc); err != nil {
				if errors.Is(err, store.ErrIndexInUse) {
					return cli.Exit("the index is held open by a running server; stop every `openxet serve` on this data directory first", 1)
				}
				return cli.Exit(err.Error(), 1)
			}
			fmt.Fprintln(c.App.Writer, "index rebuilt from the bucket")
			return nil
		},
	}
}

// progressPrinter draws a progress bar on a terminal and prints one line
// per finished stage elsewhere.
func progressPrinter(w io.Writer) store.Progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	return func(stage string, done, total int) {
		if tty {
			width, fill := 30, 30
			if total > 0 {
				fill = width * done / total
			}
			fmt.Fprintf(w, "\r%-14s [%s%s] %d/%d", stage, strings.Repeat("#", fill), strings.Repeat(".", width-fill), done, total)
			if done == total {
				fmt.Fprintln(w)
			}
			return
		}
		if done == total {
			fmt.Fprintf(w, "%s: %d\n", stage, total)
		}
	}
}

// reportCheck prints what reindex --check found: each difference on a line
// of its own, the leftovers of interrupted writes (store.Difference.Leftover:
// the bucket ahead of the index, as a crash leaves it by design) marked
// "leftover". It exits 1 when any difference is not a leftover; with
// leftovers only it exits 0 and says so.
func reportCheck(w io.Writer, diffs []store.Difference) error {
	mismatches, leftovers := 0, 0
	for _, d := range diffs {
		if d.Leftover() {
			leftovers++
			fmt.Fprintln(w, "leftover", d)
			continue
		}
		mismatches++
		fmt.Fprintln(w, d)
	}
	switch {
	case mismatches > 0:
		return cli.Exit(fmt.Sprintf("%d differences between the index and the bucket (and %d leftovers of interrupted writes); run `openxet reindex` to repair", mismatches, leftovers), 1)
	case leftovers > 0:
		fmt.Fprintf(w, "index matches the bucket but for %d leftovers of interrupted writes (the bucket ahead of the index, as a crash leaves it): the next upload of the same bytes or collection pass settles them, `openxet reindex` at once\n", leftovers)
		return nil
	}
	fmt.Fprintln(w, "index matches the bucket")
	return nil
}
