package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/urfave/cli/v2"

	"openxet/load"
)

// loadAbuserName is the hidden command `openxet load` starts for the
// abuse scenario's abuser (load.Config.AbuserCommand).
const loadAbuserName = "load-abuser"

// loadAbuserCommand runs the abuse scenario's attacks in a process of
// their own, at the lowest CPU priority (yieldCPU) on the CPUs it inherits
// from `openxet load`, so that the abuser's own client takes none of the
// CPU the honest tenants' clients want. It talks to its parent over stdin
// and stdout (load.ServeAbuser); it is not for people, so help hides it.
func loadAbuserCommand() *cli.Command {
	return &cli.Command{
		Name:   loadAbuserName,
		Usage:  "the abuser of `openxet load --scenario abuse`, started by it",
		Hidden: true,
		Action: func(c *cli.Context) error {
			prio, err := yieldCPU()
			if err != nil {
				fmt.Fprintf(c.App.ErrWriter, "%s: %v\n", loadAbuserName, err)
			}
			where := "CPUs unknown"
			if cpus, err := processCPUs(); err == nil {
				where = "CPUs " + cpus.String()
			}
			ready := fmt.Sprintf("pid %d, %s, %s", os.Getpid(), prio, where)
			if err := load.ServeAbuser(c.Context, os.Stdin, c.App.Writer, ready); err != nil {
				return cli.Exit(err.Error(), 1)
			}
			return nil
		},
	}
}

// abuserCommand is the load.Config.AbuserCommand of `openxet load`: this
// executable's load-abuser command, its errors on stderr.
func abuserCommand(stderr io.Writer) (func(ctx context.Context) *exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable to run the abuser: %w", err)
	}
	return func(ctx context.Context) *exec.Cmd {
		cmd := exec.CommandContext(ctx, exe, loadAbuserName)
		cmd.Stderr = stderr
		return cmd
	}, nil
}
