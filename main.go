// Command openxet is a self-hostable server for the Xet storage protocol.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"openxet/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args, os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}
