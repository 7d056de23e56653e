package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// errCommandFailed is what DoOnce records when CMD exits non-zero.
type errCommandFailed struct{ code int }

func (e errCommandFailed) Error() string {
	return fmt.Sprintf("the command exited with status %d", e.code)
}

func newOnceCmd(g *globals) *cobra.Command {
	var maxAttempts int
	c := &cobra.Command{
		Use:   "once KEY -- CMD [ARGS...]",
		Short: "Run a command once across every caller with the same key; the others wait for it",
		Long: `Run CMD so that, across every 'azlease once KEY' anywhere, it completes
successfully once. The first caller to take the key's lease runs CMD; the others
wait, and exit 0 when it is done, printing who did it and when. Later callers
find it done and exit 0 at once. Use a key per deployment, such as
"migrate-$VERSION": a key that is done stays done until 'azlease reset-once KEY'.

If CMD fails, the caller that ran it exits with CMD's status, the failure is
recorded, and a waiting caller tries again, up to --max-attempts attempts in all
(counting runners that died); then every caller exits 80 with the recorded error,
until the key is reset. If a runner dies, its lease expires and a waiter takes
over. CMD may run more than once if a runner dies after its side effects and
before it is recorded done: make it idempotent, or fence it with AZLEASE_EPOCH.

If the lease is lost while CMD runs, CMD's process group gets SIGTERM, then
SIGKILL after --kill-after, and azlease exits 79. If azlease stops responding
for 5 s (killed, paused), its guardian process stops CMD. A signal to a runner
is forwarded to CMD, and the attempt does not count if CMD then fails; a signal
to a waiter makes it exit at once (128+N).`,
		Example: `  # In every pod's start-up: the database migration runs once per release, and
  # every pod continues only when it is done.
  azlease once "migrate-$RELEASE" -- ./migrate up && exec ./server

  # In a deployment pipeline with parallel jobs:
  azlease once --max-attempts 1 "seed-$CI_PIPELINE_ID" -- make seed-data`,
		Args: dashArgs("key"),
		RunE: func(c *cobra.Command, args []string) error {
			return g.once(c, args[0], args[1:], maxAttempts)
		},
	}
	c.Flags().IntVar(&maxAttempts, "max-attempts", 3, "attempts in all, counting failed ones and ones whose runner died, before the key fails for good; give every caller the same value")
	return c
}

func (g *globals) once(c *cobra.Command, key string, argv []string, maxAttempts int) error {
	what := "once " + key
	if maxAttempts < 1 {
		return exitf(exitUsage, "invalid --max-attempts %d: at least 1", maxAttempts)
	}
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	opts := &azlease.DoOnceOptions{
		Identity: g.identity, LeaseDuration: g.leaseDuration, PollInterval: g.pollInterval,
		MaxAttempts: maxAttempts, Logger: g.log,
	}
	if _, err := azlease.InspectOnce(ctx, cc, key, opts); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return classify(what, err)
	}

	// DoOnce's context: a signal while CMD runs is forwarded to CMD; once
	// CMD has exited, the context is cancelled so that DoOnce treats the
	// attempt as abandoned by its caller (not counted) unless CMD succeeded.
	dctx, abandon := context.WithCancelCause(ctx)
	defer abandon(nil)
	var (
		mu  sync.Mutex
		ran *runResult
	)
	fn := func(fctx context.Context, tok azlease.Token) error {
		g.log.Info("azlease: once: running the command", slog.String("key", key), slog.Uint64("epoch", tok.Epoch))
		res := g.runUnder(r, heartbeat{fctx}, leaseEnv(key, g.identity, tok.Epoch), argv)
		mu.Lock()
		ran = &res
		mu.Unlock()
		if s := r.stopped(); s != nil && res.code != 0 {
			abandon(signalError{s})
		}
		switch {
		case res.err != nil:
			return res.err
		case res.lost != nil:
			return res.lost
		case res.code != 0:
			return errCommandFailed{res.code}
		}
		return nil
	}
	out, err := azlease.DoOnce(dctx, cc, key, opts, fn)
	mu.Lock()
	res := ran
	mu.Unlock()
	var of *azlease.OnceFailedError
	switch {
	case err == nil && out.Ran:
		g.log.Info("azlease: once: done", slog.String("key", key), slog.Int("attempt", out.Status.Attempts))
		return nil
	case err == nil:
		st := out.Status
		fmt.Fprintf(g.stderr, "azlease: %s: done by %s at %s (attempt %d, epoch %d)\n",
			what, st.Holder, st.Time.UTC().Format(time.RFC3339), st.Attempts, st.Epoch)
		return nil
	case errors.As(err, &of):
		return exitf(exitOnceFailed, "%s: failed for good after %d attempts (last by %s: %s); 'azlease reset-once %s' lets it run again",
			what, of.Attempts, of.Holder, of.LastError, key)
	case res != nil && res.err != nil:
		return res.err
	case res != nil && (res.lost != nil || errors.Is(err, azlease.ErrLeaseLost)):
		return exitf(exitLost, "%s: %s", what, line(err))
	case res != nil && res.code != 0:
		if s := r.stopped(); s != nil {
			fmt.Fprintf(g.stderr, "azlease: %s: the command exited with status %d after %s; the attempt does not count\n", what, res.code, signalName(s))
		} else {
			fmt.Fprintf(g.stderr, "azlease: %s: the command exited with status %d; the failure is recorded, and another caller may try again (--max-attempts %d)\n", what, res.code, maxAttempts)
		}
		return quiet(res.code)
	case r.stopped() != nil:
		return r.interrupted(what)
	}
	return classify(what, err)
}
