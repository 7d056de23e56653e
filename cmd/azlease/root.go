package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// connectionEnv is where --connection-string comes from when it is not given.
const connectionEnv = "AZURE_STORAGE_CONNECTION_STRING"

// defaultKillAfter is --kill-after's default: with the default lease of
// 15 s, SIGTERM comes 10.25 s after the last renewal was sent (5.25 s after
// the next one was due) and SIGKILL 13.25 s after (see stoptiming.go).
const defaultKillAfter = 3 * time.Second

// globals are the flags every command shares, and where output goes.
type globals struct {
	connectionString string
	accountURL       string
	sasURL           string
	container        string
	identity         string
	leaseDuration    time.Duration
	pollInterval     time.Duration
	logLevel         string
	killAfter        time.Duration

	stdout, stderr io.Writer
	log            *slog.Logger
	refusals       *refusalHandler // holds the library's records of refusals (refusals.go)
	reach          *reachability   // what the storage client's requests met
	health         *healthServer   // --health-addr, when given
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "azlease COMMAND",
		Short: "Run a program under an Azure Blob Storage lease: under a lock, as the leader, or once across the fleet",
		Long: `azlease runs a program under an Azure Blob Storage lease, from the shell. CMD
starts only once the lease is held, and its whole process group has received
SIGKILL before the lease can pass to anyone else, even while azlease is paused
or after it died. CMD gets AZLEASE_NAME, AZLEASE_IDENTITY and AZLEASE_EPOCH, a
fencing epoch that grows with every acquisition: have what CMD writes reject
lower ones. The account comes from $` + connectionEnv + `
(or --connection-string, --account-url, --sas-url); "UseDevelopmentStorage=true"
means a local 'azlease emulator'. Shared flags, stop timing and exit statuses:
docs/command.md in the azlease repository.`,
		Example: `  azlease emulator &                                   # a local lease service, for trying it out
  export AZURE_STORAGE_CONNECTION_STRING=UseDevelopmentStorage=true
  azlease lock demo -- sh -c 'echo "I hold demo, epoch $AZLEASE_EPOCH"; sleep 2'`,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: func(c *cobra.Command, _ []string) error { return g.setUp(c) },
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return exitf(exitUsage, "%s (see '%s --help')", err, c.CommandPath())
	})
	root.SetUsageFunc(usage)
	root.AddCommand(newLockCmd(g), newLeadCmd(g), newOnceCmd(g), newShardsCmd(g), newShardsChangeCmd(g, true), newShardsChangeCmd(g, false),
		newStatusCmd(g), newBreakCmd(g),
		newResetOnceCmd(g), newEmulatorCmd(g))
	root.AddCommand(newWatchCmd(g), newUICmd(g), newVersionCmd(g), newYieldCmd(g))
	for _, c := range root.Commands() {
		g.addSharedFlags(c)
	}
	return root
}

// setUp checks the shared flags c takes and builds the logger.
func (g *globals) setUp(c *cobra.Command) error {
	var level slog.Level
	switch strings.ToLower(g.logLevel) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning", "": // "": a command without --log-level
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	case "off", "none":
		g.log = slog.New(slog.DiscardHandler)
	default:
		return exitf(exitUsage, "invalid --log-level %q: use debug, info, warn, error or off", g.logLevel)
	}
	if g.log == nil {
		g.refusals = newRefusalHandler(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: level}))
		g.log = slog.New(g.refusals)
	}
	if err := checkLeaseDuration(g.leaseDuration); err != nil {
		return err
	}
	// (watch has a --poll-interval of its own, which this is not.)
	if _, changed := sharedFlag(c, "poll-interval", groupHolder); changed && (g.pollInterval < 100*time.Millisecond || g.pollInterval > azlease.MaxPollInterval) {
		return exitf(exitUsage, "invalid --poll-interval %v: from 100ms to 1h", g.pollInterval)
	}
	if g.identity == "" {
		g.identity = defaultIdentity()
	} else if len(g.identity) > azlease.MaxIdentity {
		return exitf(exitUsage, "invalid --identity: longer than %d bytes", azlease.MaxIdentity)
	}
	g.reach = newReachability(g.leaseDuration)
	return nil
}

// checkRunFlags checks what the commands that run CMD need beyond the
// shared flags. (The shared checks run for every command.)
func (g *globals) checkRunFlags() error {
	return checkStopTiming(g.leaseDuration, g.killAfter)
}

// flagOf names the flag that sets a library option, for errors.
var flagOf = map[string]string{
	"LeaseDuration": "--lease-duration", "PollInterval": "--poll-interval", "Identity": "--identity", "HeadPollInterval": "--head-poll",
	"MaxAttempts": "--max-attempts", "n": "-n", "name": "NAME", "key": "KEY", "blobName": "NAME",
	"container": "--container", "containerName": "--container",
}

// optionFailure reports a library option error in the command's terms:
// the flag or argument, not the Go field.
func (g *globals) optionFailure(what string, err error) error {
	var oe *azlease.OptionError
	if !errors.As(err, &oe) {
		return classify(what, err)
	}
	field := oe.Field
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		field = field[i+1:]
	}
	if f, ok := flagOf[field]; ok {
		field = f
	}
	return exitf(exitUsage, "%s: invalid %s: %s", what, field, oe.Reason)
}

// defaultIdentity is "<hostname>-<pid>", as the library's default, computed
// here so that CMD's environment can carry it.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > azlease.MaxIdentity {
		host = host[:azlease.MaxIdentity-len(pid)]
	}
	return strings.ToValidUTF8(host, "?") + pid
}

// client builds the container client from exactly one source of connection
// settings. For Entra ID it gets a token first, so that a missing or wrong
// credential fails at once rather than as endless retries.
func (g *globals) client(ctx context.Context, c *cobra.Command) (*container.Client, error) {
	f := c.Flags()
	given := 0
	for _, name := range []string{"connection-string", "account-url", "sas-url"} {
		if f.Changed(name) {
			given++
		}
	}
	if given > 1 {
		return nil, exitf(exitUsage, "give only one of --connection-string, --account-url and --sas-url")
	}
	switch {
	case f.Changed("sas-url"):
		if f.Changed("container") {
			return nil, exitf(exitUsage, "--container cannot be used with --sas-url, whose URL names the container")
		}
		cc, err := azlease.ContainerClientFromSASURL(g.sasURL, g.clientOptions())
		if err != nil {
			return nil, exitf(exitUsage, "%s", line(err))
		}
		return cc, nil
	case f.Changed("account-url"):
		if err := checkAccountURL(g.accountURL); err != nil {
			return nil, err
		}
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, exitf(exitRefused, "no Microsoft Entra ID credential: %s", line(err))
		}
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := cred.GetToken(tctx, policy.TokenRequestOptions{Scopes: []string{"https://storage.azure.com/.default"}}); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, exitf(exitRefused, "could not get a Microsoft Entra ID token for storage: %s", line(err))
		}
		cc, err := azlease.ContainerClientWithCredential(g.accountURL, g.container, cred, g.clientOptions())
		if err != nil {
			return nil, exitf(exitUsage, "%s", line(err))
		}
		return cc, nil
	}
	cs := g.connectionString
	if !f.Changed("connection-string") {
		cs = os.Getenv(connectionEnv)
	}
	if strings.TrimSpace(cs) == "" {
		return nil, exitf(exitUsage, "no storage account: set %s, or give --connection-string, --account-url or --sas-url", connectionEnv)
	}
	cc, err := azlease.ContainerClientFromConnectionString(cs, g.container, g.clientOptions())
	if err != nil {
		return nil, exitf(exitUsage, "%s", line(err))
	}
	return cc, nil
}

// clientOptions makes the storage client report what its requests meet to
// g.reach, for the liveness endpoint.
func (g *globals) clientOptions() *container.ClientOptions {
	if g.reach == nil {
		return nil
	}
	return &container.ClientOptions{ClientOptions: azcore.ClientOptions{PerRetryPolicies: []policy.Policy{g.reach}}}
}

// checkAccountURL checks --account-url before any credential is asked for,
// so that a typo is reported as one.
func checkAccountURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return exitf(exitUsage, "invalid --account-url: not a URL")
	case u.Scheme != "https" && u.Scheme != "http":
		return exitf(exitUsage, "invalid --account-url %q: must start with https:// (https://ACCOUNT.blob.core.windows.net/)", s)
	case u.Host == "":
		return exitf(exitUsage, "invalid --account-url %q: no host (https://ACCOUNT.blob.core.windows.net/)", s)
	case u.RawQuery != "":
		return exitf(exitUsage, "invalid --account-url: it must not carry a query (a SAS goes in --sas-url)")
	}
	return nil
}

// preflight reads the lock blob once, so that storage that refuses us (a
// wrong key, a missing permission) or cannot be reached fails at once with
// a clear status rather than as a wait that never ends.
func (g *globals) preflight(ctx context.Context, cc *container.Client, what, blob string) (azlease.Status, error) {
	st, err := azlease.Inspect(ctx, cc, blob)
	if err != nil {
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		return st, classify(what, err)
	}
	return st, nil
}

func (g *globals) mutexOptions() *azlease.MutexOptions {
	return &azlease.MutexOptions{
		Identity: g.identity, LeaseDuration: g.leaseDuration, PollInterval: g.pollInterval, Logger: g.log,
	}
}

// dashArgs accepts "NAME -- CMD [ARGS...]": exactly one name before the
// "--", and a command after it.
func dashArgs(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		dash := c.ArgsLenAtDash()
		switch {
		case dash < 0 && len(args) == 1:
			return exitf(exitUsage, "no command: usage: %s (see '%s --help')", c.UseLine(), c.CommandPath())
		case dash < 0 && len(args) == 0:
			return exitf(exitUsage, "no %s and no command: usage: %s (see '%s --help')", what, c.UseLine(), c.CommandPath())
		case dash < 0:
			return exitf(exitUsage, "put -- between the %s and the command: usage: %s", what, c.UseLine())
		case dash != 1:
			return exitf(exitUsage, "exactly one %s before --: usage: %s", what, c.UseLine())
		case len(args) < 2:
			return exitf(exitUsage, "no command after --: usage: %s", c.UseLine())
		}
		return nil
	}
}

// oneArg accepts exactly one positional argument, named what.
func oneArg(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != 1 {
			return exitf(exitUsage, "want one %s, got %d arguments: usage: %s", what, len(args), c.UseLine())
		}
		return nil
	}
}

// run executes the command line args and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	// The shared flags' defaults, also for the commands that do not take
	// them (flags.go).
	g := &globals{stdout: stdout, stderr: stderr, container: "locks", leaseDuration: azlease.DefaultDuration, killAfter: defaultKillAfter}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		ee = exitf(exitUsage, "%s (see 'azlease --help')", line(err))
	}
	if g.refusals != nil {
		// A refusal that ends the command is its one line (77).
		g.refusals.hold.finish(ee != nil && ee.code == exitRefused)
	}
	if err == nil {
		return exitOK
	}
	if ee.msg != "" {
		fmt.Fprintln(stderr, "azlease: "+ee.msg)
	}
	return ee.code
}
