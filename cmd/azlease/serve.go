package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease/azleasetest"
)

func newEmulatorCmd(g *globals) *cobra.Command {
	var (
		addr   string
		anyKey bool
	)
	c := &cobra.Command{
		Use:   "emulator",
		Short: "Serve azlease's Blob lease emulator on loopback, for local development",
		Long: `Serve the Blob Storage lease emulator that azlease's own tests use, on a
loopback address, with Azurite's well-known development account
(devstoreaccount1). On the default address, 127.0.0.1:10000, the connection
string "UseDevelopmentStorage=true" reaches it, as it would reach Azurite.

It prints the connection string to use on standard output, keeps everything
in memory, and stops on Ctrl-C (SIGINT), SIGTERM or SIGHUP. Requests must be
signed with the development account's key, as Azure checks keys; SAS tokens
are accepted without verification. It implements what azlease needs
(containers, blobs with metadata, leases), not the whole Blob service.`,
		Example: `  # One terminal:
  azlease emulator
  # Another:
  export AZURE_STORAGE_CONNECTION_STRING=UseDevelopmentStorage=true
  azlease lock demo -- sh -c 'echo "holding epoch $AZLEASE_EPOCH"; sleep 5'

  # Any free port, for scripts (the first line of output is the connection string):
  azlease emulator --addr 127.0.0.1:0`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return g.serveEmulator(addr, anyKey)
		},
	}
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:10000", "loopback address (port 0: any free port)")
	c.Flags().BoolVar(&anyKey, "allow-any-key", false, "accept requests signed with any key, or none")
	return c
}

func (g *globals) serveEmulator(addr string, anyKey bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return exitf(exitUsage, "emulator: invalid --addr %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return exitf(exitUsage, "emulator: --addr %q is not a loopback address (the emulator serves this machine only)", addr)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	srv := azleasetest.New(&azleasetest.Options{AllowAnyKey: anyKey})
	defer srv.Close()
	ep, err := srv.Listen(addr)
	if err != nil {
		return exitf(exitUnavailable, "emulator: %v", err)
	}
	fmt.Fprintln(g.stdout, ep.ConnectionString())
	fmt.Fprintf(g.stderr, "azlease: emulator serving %s; the line above is its connection string; Ctrl-C stops it\n", ep.URL)
	s := <-sigs
	srv.Close()
	if err := ep.Close(); err != nil {
		return exitf(exitInternal, "emulator: %v", err)
	}
	fmt.Fprintf(g.stderr, "azlease: emulator stopped (%s)\n", signalName(s))
	return nil
}
