package main

// azlease lead: run CMD only while this instance leads, contending again
// after every loss, whoever notices it first.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// successionFlags are lead's flags for planned succession.
type successionFlags struct {
	priority    int
	labels      []string
	handOffWait time.Duration
	noHandOff   bool
}

func (sf *successionFlags) register(c *cobra.Command) {
	f := c.Flags()
	f.IntVar(&sf.priority, "priority", 0, "the ready one of highest priority leads; <0: if none other can")
	f.StringArrayVar(&sf.labels, "label", nil, "a `KEY=VALUE` label for status, watch and ui; repeatable")
	f.DurationVar(&sf.handOffWait, "handoff-wait", 0, "on SIGTERM, the longest wait for a successor (default 10s)")
	f.BoolVar(&sf.noHandOff, "no-handoff", false, "no planned succession: a stopping leader just releases")
}

// options applies the flags to an Elector's options.
func (sf successionFlags) options(o *azlease.ElectorOptions) error {
	o.Priority, o.HandOffWait, o.NoSuccession = sf.priority, sf.handOffWait, sf.noHandOff
	if sf.handOffWait < 0 || (sf.handOffWait > 0 && (sf.handOffWait < 100*time.Millisecond || sf.handOffWait > azlease.MaxPollInterval)) {
		return exitf(exitUsage, "invalid --handoff-wait %v: from 100ms to 1h", sf.handOffWait)
	}
	for _, l := range sf.labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return exitf(exitUsage, "invalid --label %q: KEY=VALUE", l)
		}
		if o.Labels == nil {
			o.Labels = map[string]string{}
		}
		o.Labels[k] = v
	}
	return nil
}

func newLeadCmd(g *globals) *cobra.Command {
	var (
		restart bool
		hf      healthFlags
		sf      successionFlags
	)
	c := &cobra.Command{
		Use:   "lead NAME -- CMD [ARGS...]",
		Short: "Run a command only while this instance leads; stand by otherwise",
		Long: `Contend for leadership of NAME with every other 'azlease lead NAME': CMD runs
only while this instance leads; a standby takes over within --lease-duration +
--poll-interval if the leader dies. On SIGTERM or SIGINT the leader readies the
best standby (highest --priority, then the newest) while CMD still runs, stops
CMD and hands the lease straight over: the successor's CMD starts about 0.3s
after CMD's exit. CMD's process group is killed before the lease can pass on,
even if azlease is paused or dies. Succession, stop timing, grace periods,
exit statuses: docs/command.md#lead.`,
		Example: `  azlease lead --identity "$HOSTNAME" billing-sweeper -- ./sweeper  # on every host
  azlease lead --restart --health-addr :8080 scheduler -- /app/scheduler
  azlease lead --priority "$BUILD_NUMBER" scheduler -- /app/scheduler  # rollouts move once`,
		Args: dashArgs("election name"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := g.checkRunFlags(); err != nil {
				return err
			}
			return g.lead(c, args[0], args[1:], restart, hf, sf)
		},
	}
	c.Flags().BoolVar(&restart, "restart", false, "when CMD exits, contend again instead of exiting")
	hf.register(c, "leads")
	sf.register(c)
	return c
}

// errContendAgain is what a term's task returns when the command was
// stopped for a loss and this instance is to contend again. A task whose
// command ended otherwise returns nil: the Elector then logs that the task
// returned without an error attribute, as for any clean stop.
var errContendAgain = errors.New("contend again")

func (g *globals) lead(c *cobra.Command, name string, argv []string, restart bool, hf healthFlags, sf successionFlags) error {
	what := "lead " + name
	var probe azlease.ElectorOptions
	if err := sf.options(&probe); err != nil {
		return err
	}
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	hs, err := g.startHealth(hf, cc, name)
	if err != nil {
		return err
	}
	defer hs.close()
	if _, err := g.preflight(ctx, cc, what, name); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return err
	}
	var quick restartBackoff
	base := yieldPause(g.pollOr(5 * time.Second))
	for {
		res, err := g.leadTerms(ctx, r, cc, name, argv, hs, sf)
		switch {
		case errors.Is(err, errContendAgain):
			continue // a new Elector: the last one stopped when its task returned
		case res != nil && res.err != nil:
			return res.err
		case res != nil && res.signalled != nil:
			return exitf(signalStatus(res.signalled), "%s: %s before the command ran", what, signalError{res.signalled})
		case res == nil && r.stopped() != nil:
			return r.interrupted(what) // stopped while standing by
		case res == nil && err != nil:
			return classify(what, err)
		case res == nil:
			return exitf(exitInternal, "%s: stopped without running the command", what)
		case r.forwardedAny() || !restart:
			return quiet(res.code) // CMD exited, by itself or as a signal asked
		}
		wait := quick.next(res.ran, base)
		level := slog.LevelInfo
		if wait > base {
			level = slog.LevelWarn // it keeps exiting at once: say so where operators look
		}
		g.log.Log(ctx, level, "azlease: the command exited; contending again after a pause (--restart)",
			slog.String("name", name), slog.Int("status", res.code),
			slog.Duration("ran", res.ran.Round(time.Millisecond)), slog.Duration("pause", wait))
		if !sleepCtx(ctx, wait) {
			return r.interrupted(what)
		}
	}
}

// yieldPause is how long an instance that let go waits before contending
// again, as the library's Elector does: the longest poll interval a
// follower can draw (20 % jitter) plus a fifth, so a standby polls first.
func yieldPause(poll time.Duration) time.Duration { return poll*6/5 + poll/5 }

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// leadResult is one run of CMD under a term.
type leadResult struct {
	runResult
	ran time.Duration // how long CMD ran
}

// leadTerms runs an Elector until its task returns, or it stops: it
// returns the last run of CMD, if any, and the Elector's error
// (errContendAgain when CMD was stopped for a loss and this instance is to
// contend again). A loss the library sees first makes the Elector contend
// again by itself, running CMD anew in its next term.
func (g *globals) leadTerms(ctx context.Context, r *router, cc *container.Client, name string, argv []string, hs *healthServer, sf successionFlags) (*leadResult, error) {
	opts := &azlease.ElectorOptions{
		Identity: g.identity, LeaseDuration: g.leaseDuration, PollInterval: g.pollInterval, Logger: g.log,
		AfterTask: azlease.StopElecting,
		// The task stops CMD within --kill-after of a loss, and never
		// after the deadline's kill point; past that the lease is left to
		// expire rather than released under it.
		DrainTimeout: g.killAfter + killMargin + 2*time.Second,
	}
	if err := sf.options(opts); err != nil {
		return nil, err
	}
	e, err := azlease.NewElector(cc, name, opts)
	if err != nil {
		return nil, classify("lead "+name, err)
	}
	hs.setElector(e)
	defer hs.setElector(nil)

	var (
		mu   sync.Mutex
		last *leadResult // the run that ended the Elector's work, if any
	)
	task := func(_ context.Context, term *azlease.Term) error {
		g.log.Info("azlease: leading; starting the command", slog.String("name", name), slog.Uint64("epoch", term.Epoch()))
		start := time.Now()
		// A SIGTERM or SIGINT first gets a successor ready (while CMD runs),
		// then goes to CMD; once CMD has exited, the task returns and the
		// Elector hands the lease straight over (PrepareStop).
		if !sf.noHandOff {
			r.setPrepare(func(ctx context.Context) {
				g.log.Debug("azlease: stopping: getting a successor ready before stopping the command", slog.String("name", name))
				wait := sf.handOffWait
				if wait == 0 {
					wait = azlease.DefaultHandOffWait
				}
				pctx, cancel := context.WithTimeout(ctx, wait+time.Second)
				defer cancel()
				if to, err := e.PrepareStop(pctx); err == nil {
					g.log.Info("azlease: successor ready; stopping the command", slog.String("name", name), slog.String("successor", to))
				} else {
					g.log.Debug("azlease: no successor ready; stopping the command, then releasing", slog.String("name", name), slog.String("why", line(err)))
				}
			})
			defer r.setPrepare(nil)
		}
		res := leadResult{runResult: g.runUnder(r, term.Context(), term, leaseEnv(name, g.identity, term.Epoch()), argv, 0)}
		res.ran = time.Since(start)
		if res.signalled != nil {
			// A signal came before CMD started, so CMD did not run; it is
			// still a planned stop: stop the session and let the Elector
			// step down as for any stop (a ready standby is handed the
			// lease; none, or --no-handoff: released). The task waits for
			// that to end the term, bounded by the term's deadline:
			// returning first would race the step-down and could release
			// the lease instead.
			r.stopSession(signalError{res.signalled})
			<-term.Context().Done()
		}
		if res.lost != nil && errors.Is(res.lost, azlease.ErrYielded) && res.err == nil && res.signalled == nil && !r.forwardedAny() {
			// Handing over ('azlease yield', a standby of higher priority):
			// the Elector stands by on its own, whatever the task returns.
			// The hand-off itself comes after the task returns: whether the
			// successor took the lease, or it was released, is the
			// library's next log line ("handed leadership over", or "no
			// designated successor took leadership over; released").
			g.log.Info("azlease: handing leadership over; the command was stopped; standing by",
				slog.String("name", name), slog.String("cause", line(res.lost)))
			return nil
		}
		if res.lost != nil && res.err == nil && res.signalled == nil && !r.forwardedAny() {
			// Whoever noticed the loss first (the library, or the guardian
			// while azlease was paused), this instance contends again.
			g.log.Warn("azlease: lost leadership; the command was stopped; contending again",
				slog.String("name", name), slog.String("cause", line(res.lost)))
			return errContendAgain
		}
		mu.Lock()
		last = &res
		mu.Unlock()
		return nil // AfterTask StopElecting: Run returns nil, and last says how CMD ended
	}
	err = e.Run(ctx, task)
	mu.Lock()
	defer mu.Unlock()
	if errors.Is(err, errContendAgain) {
		return last, errContendAgain
	}
	return last, err
}

// restartBackoff paces --restart: a command that keeps exiting within a
// minute of its start waits twice as long each time, up to 5 minutes.
type restartBackoff struct{ wait time.Duration }

const (
	quickExit       = time.Minute
	maxRestartPause = 5 * time.Minute
)

// next is the pause before contending again after a run of length ran;
// base is the pause after a run that was not quick.
func (b *restartBackoff) next(ran, base time.Duration) time.Duration {
	if ran >= quickExit || b.wait == 0 {
		b.wait = base
	} else {
		b.wait = min(2*b.wait, maxRestartPause)
	}
	return b.wait
}
