// flags.go: the flags several commands share (connection, holder, run),
// registered on each command that uses them and on no other, and the
// usage text every command's --help ends with.

package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/shards"
)

// The groups of shared flags. A command takes the flags its entry in
// sharedFlags names; a flag given to a command that does not take it is a
// usage error, as any unknown flag is.
var (
	// connectionFlags: every command that talks to storage.
	connectionFlags = []string{"connection-string", "account-url", "sas-url", "container", "log-level"}
	// holderFlags: commands that hold a lease or wait for one.
	holderFlags = []string{"identity", "lease-duration", "poll-interval"}
	// runFlags: commands that run CMD under a lease.
	runFlags = []string{"kill-after"}
)

// sharedFlags names the shared flags each command takes. A command missing
// here takes the connection flags (TestHelpFitsAScreen insists every
// command has an entry).
var sharedFlags = map[string][]string{
	"lock":   slices.Concat(connectionFlags, holderFlags, runFlags),
	"lead":   slices.Concat(connectionFlags, holderFlags, runFlags),
	"once":   slices.Concat(connectionFlags, holderFlags, runFlags),
	"shards": slices.Concat(connectionFlags, holderFlags, runFlags),
	// shards-add, shards-remove: one conditional write of the registry,
	// as whoever runs them; no lease held, nothing run.
	"shards-add":    connectionFlags,
	"shards-remove": connectionFlags,
	"status":        connectionFlags,
	"watch":         connectionFlags, // and a --poll-interval of its own
	"ui":            connectionFlags,
	"break":         connectionFlags,
	"yield":         slices.Concat(connectionFlags, []string{"identity"}),                   // who asks, in the request
	"reset-once":    slices.Concat(connectionFlags, []string{"identity", "lease-duration"}), // it holds the key's lease
	"emulator":      nil,
	"version":       nil,
}

// groupAnnotation marks a shared flag with its group, for the usage text
// and for telling the holder's --poll-interval from watch's own.
const groupAnnotation = "azlease-group"

const (
	groupConnection = "connection"
	groupHolder     = "holder"
	groupRun        = "run"
)

// pollDefaults is what --poll-interval defaults to per command (the
// library's defaults), for its usage line.
var pollDefaults = map[string]string{"lock": "1s", "lead": "5s", "once": "2s", "shards": "2s"}

// pollWho is who looks every --poll-interval, per command, for its usage
// line: a lead or shards instance is no waiter.
var pollWho = map[string]string{
	"lock":   "how often a waiter looks again",
	"lead":   "how often a standby looks again",
	"once":   "how often a waiting caller looks again",
	"shards": "how often it looks at the group",
}

// addSharedFlags registers the shared flags c takes (sharedFlags) on c.
func (g *globals) addSharedFlags(c *cobra.Command) {
	names, ok := sharedFlags[c.Name()]
	if !ok {
		names = connectionFlags
	}
	g.addFlags(c, names)
}

// addFlags registers the shared flags names on c.
func (g *globals) addFlags(c *cobra.Command, names []string) {
	f := c.Flags()
	for _, name := range names {
		group := groupConnection
		switch name {
		case "connection-string":
			f.StringVar(&g.connectionString, name, "", "connection string (default $"+connectionEnv+")")
		case "account-url":
			f.StringVar(&g.accountURL, name, "", "https://ACCOUNT.blob.core.windows.net/, with Microsoft Entra ID")
		case "sas-url":
			f.StringVar(&g.sasURL, name, "", "container SAS `URL` (read, write, create); it names the container")
		case "container":
			f.StringVar(&g.container, name, "locks", "container of the lock blobs, created if missing")
		case "log-level":
			f.StringVar(&g.logLevel, name, "warn", "log `level`: debug, info, warn, error, off")
		case "identity":
			group = groupHolder
			what := "this instance's name, shown to others"
			switch c.Name() {
			case "yield":
				what = "who asks, recorded with the request"
			case "reset-once":
				what = "who resets, recorded in the key's history"
			}
			f.StringVar(&g.identity, name, "", what+" (default HOSTNAME-PID)")
		case "lease-duration":
			group = groupHolder
			f.DurationVar(&g.leaseDuration, name, azlease.DefaultDuration, "15s to 60s; a crashed holder blocks others this long")
			if c.Name() == "shards" {
				// Its default is the group's (shards.DefaultLeaseDuration);
				// the variable every command shares keeps the library's, so
				// the command reads it only when the flag was given.
				f.Lookup(name).DefValue = fmt.Sprintf("%ds", int(shards.DefaultLeaseDuration.Seconds()))
			}
		case "poll-interval":
			group = groupHolder
			f.DurationVar(&g.pollInterval, name, 0, pollWho[c.Name()]+", 100ms to 1h (default "+pollDefaults[c.Name()]+")")
		case "kill-after":
			group = groupRun
			f.DurationVar(&g.killAfter, name, defaultKillAfter, "SIGTERM to SIGKILL; at most 4.25s for 15s leases")
		default:
			panic("azlease: no shared flag " + name)
		}
		_ = f.SetAnnotation(name, groupAnnotation, []string{group})
	}
}

// sharedFlag reports whether c has the shared flag name of group, and
// whether it was given.
func sharedFlag(c *cobra.Command, name, group string) (has, changed bool) {
	fl := c.Flags().Lookup(name)
	if fl == nil || !slices.Equal(fl.Annotations[groupAnnotation], []string{group}) {
		return false, false
	}
	return true, fl.Changed
}

// usage is the end of every command's --help (cobra prints Long first):
// the usage line, the command's own flags and the holder and run flags it
// takes, the connection flags on one line, the subcommands, and examples.
// Nothing a command does not take is listed; "-h, --help" goes without
// saying.
func usage(c *cobra.Command) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage:\n  %s\n", c.UseLine())
	if c.HasAvailableSubCommands() {
		b.WriteString("\nCommands:\n")
		width := 0
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				width = max(width, len(sub.Name()))
			}
		}
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(&b, "  %-*s %s\n", width, sub.Name(), sub.Short)
			}
		}
	}
	own := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	own.SortFlags = false
	var conn []*pflag.Flag
	var shared []*pflag.Flag
	c.LocalFlags().VisitAll(func(fl *pflag.Flag) { // sorted by name
		switch {
		case fl.Name == "help" || fl.Hidden:
		case slices.Equal(fl.Annotations[groupAnnotation], []string{groupConnection}):
			conn = append(conn, fl)
		case fl.Annotations[groupAnnotation] != nil:
			shared = append(shared, fl)
		default:
			own.AddFlag(fl)
		}
	})
	order := slices.Concat(holderFlags, runFlags)
	slices.SortFunc(shared, func(a, b *pflag.Flag) int { // after the command's own, group by group
		return slices.Index(order, a.Name) - slices.Index(order, b.Name)
	})
	for _, fl := range shared {
		own.AddFlag(fl)
	}
	if own.HasFlags() {
		fmt.Fprintf(&b, "\nFlags:\n%s", own.FlagUsages())
	}
	if len(conn) > 0 {
		slices.SortFunc(conn, func(a, b *pflag.Flag) int { // in the group's order
			return slices.Index(connectionFlags, a.Name) - slices.Index(connectionFlags, b.Name)
		})
		names := make([]string, len(conn))
		for i, fl := range conn {
			names[i] = "--" + fl.Name
		}
		fmt.Fprintf(&b, "Connection: %s (azlease --help)\n", strings.Join(names, " "))
	}
	if c == c.Root() {
		b.WriteString("\nConnection flags, for every command that talks to storage:\n")
		cf := &cobra.Command{Use: "connection"}
		cf.Flags().SortFlags = false
		(&globals{}).addFlags(cf, connectionFlags)
		b.WriteString(cf.LocalFlags().FlagUsages())
	}
	if c.Example != "" {
		fmt.Fprintf(&b, "\nExamples:\n%s\n", c.Example)
	}
	_, err := fmt.Fprint(c.OutOrStderr(), b.String())
	return err
}

// pollOr is --poll-interval, or def when it was not given.
func (g *globals) pollOr(def time.Duration) time.Duration {
	if g.pollInterval > 0 {
		return g.pollInterval
	}
	return def
}
