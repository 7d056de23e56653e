// ui.go: 'azlease ui', a read-only live web page of the lock blobs of a
// container (or prefix), served from the binary: the command, its flags and
// its lifetime. The HTTP side is in uiserver.go, the data in uimodel.go,
// the page in ui/.

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

const (
	defaultUIAddr    = "127.0.0.1:8080"
	defaultUIRefresh = 5 * time.Second
	minUIRefresh     = time.Second
	maxUIRefresh     = time.Hour
)

func newUICmd(g *globals) *cobra.Command {
	var (
		addr    string
		prefix  string
		refresh time.Duration
	)
	c := &cobra.Command{
		Use:   "ui",
		Short: "Serve a live, read-only web page of every leader, lock, once-key and shard group",
		Long: `Serve a read-only web page (and the same data as JSON under /api) of every
lock blob in the container, or under --prefix: its kind, state, holder, epoch,
since when, a leader's timeline of terms, a shard group's grid. It makes one
List Blobs request per 5,000 blobs per --refresh, only while a page is open.
It never shows keys, SAS tokens or lease IDs, takes no lease and writes
nothing; a non-loopback --addr shows the holders to anyone who can reach it.
The JSON paths, what it shows: docs/command.md#ui.`,
		Example: `  azlease ui                                    # then open http://127.0.0.1:8080/
  azlease ui --prefix orders/ --refresh 10s     # one shard group, read every 10 s
  azlease ui --addr 127.0.0.1:0                 # any free port: the first line is the URL`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if refresh < minUIRefresh || refresh > maxUIRefresh {
				return exitf(exitUsage, "invalid --refresh %v: from %v to %v", refresh, minUIRefresh, maxUIRefresh)
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return exitf(exitUsage, "invalid --addr %q: %v", addr, err)
			}
			return g.serveUI(c, addr, prefix, refresh)
		},
	}
	f := c.Flags()
	f.StringVar(&addr, "addr", defaultUIAddr, "address to serve on (port 0: any free port)")
	f.StringVar(&prefix, "prefix", "", "show only the blobs whose names start with this")
	f.DurationVar(&refresh, "refresh", defaultUIRefresh, "how often the page reads again, 1s to 1h")
	return c
}

func (g *globals) serveUI(c *cobra.Command, addr, prefix string, refresh time.Duration) error {
	const what = "ui"
	ctx, stop := signal.NotifyContext(context.Background(), forwarded...)
	defer stop()
	cc, err := g.client(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if _, err := azlease.InspectPrefix(ctx, cc, prefix); err != nil {
		// A refusal (a wrong key, a missing permission) or an invalid
		// prefix is reported now; storage that cannot be reached is
		// shown on the page, as it would be later.
		var oe *azlease.OptionError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &oe):
			return exitf(exitUsage, "%s: invalid --prefix: %s", what, oe.Reason)
		case errors.Is(err, azlease.ErrPermanent):
			return classify(what, err)
		}
		g.log.Warn("ui: cannot list the container yet; the page shows it until storage answers", "error", line(err))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return exitf(exitUsage, "%s: cannot listen on --addr %q: %v", what, addr, err)
	}
	s := newUIServer(ctx, g, cc, prefix, refresh, loopbackListener(ln))
	url, others := uiURLs(addr, ln.Addr(), hostAddrs())
	fmt.Fprintln(g.stdout, url)
	if others != "" {
		fmt.Fprintf(g.stderr, "azlease: ui: --addr %s listens on every address of this host: %s opens it here; %s\n", addr, url, others)
	}
	if !s.loopbackOnly {
		fmt.Fprintf(g.stderr, "azlease: ui: %s is not a loopback address: anyone who can reach it sees the lock holders (never keys, SAS tokens or lease IDs)\n", addr)
	}
	fmt.Fprintf(g.stderr, "azlease: ui serving %s (container %s, prefix %q, read every %v); Ctrl-C stops it\n", url, s.env.Container, prefix, refresh)
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-done:
		s.close()
		return exitf(exitInternal, "%s: serving stopped: %v", what, err)
	}
	s.close()
	<-done
	return nil
}

// uiURLs is the URL to print for a page served on ln, bound as --addr
// asked: for an unspecified address (0.0.0.0, ::, or none), whose URL
// (http://[::]:PORT/) opens nothing, the loopback URL of the same family,
// and, as others, a sentence naming this host's other addresses (or saying
// that none was found).
func uiURLs(asked string, ln net.Addr, hosts []net.IP) (url, others string) {
	tcp, ok := ln.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return "http://" + ln.String() + "/", ""
	}
	port := strconv.Itoa(tcp.Port)
	h, _, _ := net.SplitHostPort(asked)
	loop := "127.0.0.1"
	if ip := net.ParseIP(h); ip != nil && ip.To4() == nil {
		loop = "::1" // --addr [::]: IPv6 only where the system says so
	}
	url = "http://" + net.JoinHostPort(loop, port) + "/"
	var from []string
	for _, ip := range hosts {
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			continue
		}
		from = append(from, "http://"+net.JoinHostPort(ip.String(), port)+"/")
	}
	if len(from) == 0 {
		return url, "this host has no other address to name"
	}
	return url, "from another machine, one of this host's addresses: " + strings.Join(from, " ")
}

// hostAddrs are this host's interface addresses (none if they cannot be
// read).
func hostAddrs() []net.IP {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []net.IP
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok {
			out = append(out, n.IP)
		}
	}
	return out
}

// loopbackListener reports whether ln listens on a loopback address only.
func loopbackListener(ln net.Listener) bool {
	a, ok := ln.Addr().(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
