package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

func newLeadCmd(g *globals) *cobra.Command {
	var restart bool
	c := &cobra.Command{
		Use:   "lead NAME -- CMD [ARGS...]",
		Short: "Run a command only while this instance leads; stand by otherwise",
		Long: `Contend for leadership of NAME with every other 'azlease lead NAME'. While this
instance leads, CMD runs; the others stand by, polling, and one of them takes
over within --lease-duration + --poll-interval when the leader dies, or within
--poll-interval when it steps down.

When leadership is lost (a renewal refused, the validity deadline passed, the
lease broken), CMD's process group gets SIGTERM at once and SIGKILL after
--kill-after, and azlease contends again, running CMD anew in its next term.
When CMD exits by itself, azlease releases the lease and exits with CMD's
status; with --restart it contends again instead (after a poll interval, so
that a standby may take over).

CMD's environment carries AZLEASE_NAME, AZLEASE_IDENTITY and AZLEASE_EPOCH (the
term's fencing epoch). SIGINT, SIGTERM and SIGHUP are forwarded to CMD, and
azlease exits when it does; while standing by, they make azlease exit at once.`,
		Example: `  # A singleton worker with hot standbys (run the same line on every host or pod):
  azlease lead --identity "$HOSTNAME" billing-sweeper -- ./sweeper --epoch-from-env

  # A Kubernetes sidecar-style entrypoint: the replica that leads runs the
  # scheduler; the others wait. Restart the scheduler if it exits.
  azlease lead --restart --lease-duration 20s scheduler -- /app/scheduler`,
		Args: dashArgs("election name"),
		RunE: func(c *cobra.Command, args []string) error {
			return g.lead(c, args[0], args[1:], restart)
		},
	}
	c.Flags().BoolVar(&restart, "restart", false, "when CMD exits, contend again instead of exiting")
	return c
}

func (g *globals) lead(c *cobra.Command, name string, argv []string, restart bool) error {
	what := "lead " + name
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	opts := &azlease.ElectorOptions{
		Identity: g.identity, LeaseDuration: g.leaseDuration, PollInterval: g.pollInterval, Logger: g.log,
		AfterTask: azlease.StopElecting,
		// The task stops CMD within --kill-after of a loss; past that the
		// lease is left to expire rather than released under it.
		DrainTimeout: g.killAfter + 2*time.Second,
	}
	if restart {
		opts.AfterTask = azlease.ReleaseAndContend
	}
	e, err := azlease.NewElector(cc, name, opts)
	if err != nil {
		return classify(what, err)
	}
	if _, err := g.preflight(ctx, cc, what, name); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return err
	}

	var (
		mu   sync.Mutex
		last *runResult // the last run of CMD
	)
	task := func(_ context.Context, term *azlease.Term) error {
		g.log.Info("azlease: leading; starting the command", slog.String("name", name), slog.Uint64("epoch", term.Epoch()))
		res := g.runUnder(r, term, leaseEnv(name, g.identity, term.Epoch()), argv)
		mu.Lock()
		last = &res
		mu.Unlock()
		switch {
		case res.err != nil:
			r.stopSession(res.err) // cannot run CMD: stop electing
			return res.err
		case res.lost != nil:
			g.log.Warn("azlease: lost leadership; the command was stopped; contending again",
				slog.String("name", name), slog.String("cause", line(res.lost)))
			return nil
		case r.stopped() != nil:
			r.stopSession(errors.New("azlease: stopped by a signal")) // CMD exited as asked: stop electing
			return nil
		case restart:
			g.log.Info("azlease: the command exited; contending again", slog.Int("status", res.code))
		}
		return nil
	}
	err = e.Run(ctx, task)
	mu.Lock()
	res := last
	mu.Unlock()
	switch {
	case res != nil && res.err != nil:
		return res.err
	case res == nil && r.stopped() != nil:
		return r.interrupted(what)
	case res == nil && err != nil:
		return classify(what, err)
	case res == nil:
		return exitf(exitInternal, "%s: stopped without running the command", what)
	case r.stopped() != nil && !r.forwardedAny():
		return r.interrupted(what) // stopped while standing by
	case res.lost != nil:
		return exitf(exitLost, "%s: %s", what, line(res.lost))
	}
	return quiet(res.code)
}
