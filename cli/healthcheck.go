package cli

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

// healthKeys are the configuration keys healthcheck reads to find the
// server on this host.
func healthKeys(s setting) bool {
	switch s.key {
	case "server.listen", "server.tls_cert", "server.tls_key":
		return true
	}
	return false
}

func healthcheckCommand(env Env) *cli.Command {
	return &cli.Command{
		Name:  "healthcheck",
		Usage: "exit 0 when the server answers /readyz with 200, 1 otherwise (for container and service health checks)",
		Description: "Without --url it asks the server of this host's configuration: server.listen (a wildcard\n" +
			"address becomes loopback), over https when server.tls_cert is set. It then checks readiness, not\n" +
			"the certificate, whose name is rarely the loopback address. Reads the same --config, OPENXET_*\n" +
			"variables and flags as serve.",
		Flags: append(configFlags(healthKeys),
			&cli.StringFlag{Name: "url", Usage: "the readiness URL to GET, e.g. https://xet.example.com/readyz (the certificate is verified)"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Second, Usage: "give up after this long"},
		),
		Action: func(c *cli.Context) error {
			url := c.String("url")
			client := &http.Client{Timeout: c.Duration("timeout")}
			if url == "" {
				cfg, err := loadConfig(c, env)
				if err != nil {
					return err
				}
				url = localReadyzURL(cfg)
				if cfg.TLSCert != "" {
					// The address is this host's own listener; what is checked is
					// readiness. No credential is sent.
					client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
				}
			}
			res, err := client.Get(url)
			if err != nil {
				return cli.Exit(fmt.Sprintf("healthcheck %s: %v", url, err), 1)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
			if res.StatusCode != http.StatusOK {
				return cli.Exit(fmt.Sprintf("healthcheck %s: %s: %s", url, res.Status, strings.TrimSpace(string(body))), 1)
			}
			fmt.Fprintf(c.App.Writer, "ready: %s\n", url)
			return nil
		},
	}
}

// localReadyzURL is the /readyz URL of the listener cfg configures, on
// loopback when it listens on every address.
func localReadyzURL(cfg Config) string {
	host, port, _ := net.SplitHostPort(cfg.Listen) // Validate checked it
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::", "[::]":
		host = "::1"
	}
	return listenerScheme(cfg) + "://" + net.JoinHostPort(host, port) + "/readyz"
}
