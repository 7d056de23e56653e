package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// errCommandFailed is what DoOnce records when CMD exits non-zero: its
// status and the tail of its stderr.
type errCommandFailed struct {
	code   int
	stderr string
}

func (e errCommandFailed) Error() string {
	if e.stderr == "" {
		return fmt.Sprintf("the command exited with status %d", e.code)
	}
	// One line, for messages and the status table: lines joined with " | ".
	return fmt.Sprintf("the command exited with status %d; its stderr ended with: %s", e.code, strings.ReplaceAll(e.stderr, "\n", " | "))
}

// perFormat names a --per period in the key: its start, UTC, to the second.
// Fixed width, so that the keys of a job sort oldest first (as Retention's
// sweep needs).
const perFormat = "20060102T150405Z"

// maxPer bounds --per: a year.
const maxPer = 8760 * time.Hour

// periodKey is the DoOnce key of a run of key started at now, with --per
// per: key, "/", and the start of the period now falls in, periods being
// multiples of per since the Unix epoch (midnight UTC for 24h).
func periodKey(key string, per time.Duration, now time.Time) string {
	s := int64(per / time.Second)
	start := now.Unix() - ((now.Unix()%s)+s)%s // floor, also before 1970
	return key + "/" + time.Unix(start, 0).UTC().Format(perFormat)
}

// perFlags validates --per and --keep and returns the DoOnce retention:
// --keep, or 10 × --per and at least an hour by default; zero without --per.
func perFlags(per, keep time.Duration) (time.Duration, error) {
	switch {
	case per == 0 && keep != 0:
		return 0, exitf(exitUsage, "--keep needs --per: only the keys of periods are deleted")
	case per == 0:
		return 0, nil
	case per < time.Second || per > maxPer || per%time.Second != 0:
		return 0, exitf(exitUsage, "invalid --per %v: whole seconds from 1s to %v", per, maxPer)
	case keep == 0:
		return max(10*per, time.Hour), nil
	case keep < 2*per || keep < time.Minute || keep > 87600*time.Hour:
		return 0, exitf(exitUsage, "invalid --keep %v: from twice --per (%v) and 1m to 87600h", keep, 2*per)
	}
	return keep, nil
}

func newOnceCmd(g *globals) *cobra.Command {
	var (
		maxAttempts int
		tail        int
		per, keep   time.Duration
		hf          healthFlags
	)
	c := &cobra.Command{
		Use:   "once KEY -- CMD [ARGS...]",
		Short: "Run a command once across every caller with the same key; the others wait for it",
		Long: `Run CMD so that, across every 'azlease once KEY' anywhere, it completes
successfully once: the first caller to take the key runs it, the others wait
and exit 0 when it is done; later callers exit 0 at once. A failed CMD is
retried by a waiting caller, up to --max-attempts; then every caller exits 80
until 'azlease reset-once KEY'. With --per 24h the key is KEY/ and the day (UTC),
for a crontab line on every host. CMD may run again if its runner dies before
it is recorded done: make it idempotent, or fence it with AZLEASE_EPOCH. Exit
81: CMD succeeded but is not known to be recorded. More: docs/command.md#once.`,
		Example: `  azlease once "migrate-$RELEASE" -- ./migrate up && exec ./server  # every pod
  0 2 * * *  azlease once --per 24h nightly-report -- ./report      # crontab, every host`,
		Args: dashArgs("key"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := g.checkRunFlags(); err != nil {
				return err
			}
			switch {
			case maxAttempts < 1 || maxAttempts > 1000:
				return exitf(exitUsage, "invalid --max-attempts %d: from 1 to 1000", maxAttempts)
			case tail < 0 || tail > maxStderrTail:
				return exitf(exitUsage, "invalid --stderr-tail %d: from 0 (off) to %d bytes", tail, maxStderrTail)
			}
			retention, err := perFlags(per, keep)
			if err != nil {
				return err
			}
			key := args[0]
			if per > 0 {
				key = periodKey(key, per, time.Now())
			}
			return g.once(c, key, args[1:], maxAttempts, tail, retention, hf)
		},
	}
	c.Flags().IntVar(&maxAttempts, "max-attempts", 3, "attempts before failing; the first caller's wins")
	c.Flags().DurationVar(&per, "per", 0, "once per period (1s to 8760h): the key is KEY/20261121T000000Z")
	c.Flags().DurationVar(&keep, "keep", 0, "with --per: delete older keys (default 10 × --per, at least 1h)")
	c.Flags().IntVar(&tail, "stderr-tail", defaultStderrTail, "stderr bytes recorded with a failure (0: none)")
	hf.register(c, "holds")
	return c
}

// attempts is "1 attempt" or "3 attempts".
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

func (g *globals) once(c *cobra.Command, key string, argv []string, maxAttempts, tail int, retention time.Duration, hf healthFlags) error {
	what := "once " + key
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	hs, err := g.startHealth(hf, cc, "once/"+key)
	if err != nil {
		return err
	}
	defer hs.close()
	opts := &azlease.DoOnceOptions{
		Identity: g.identity, LeaseDuration: g.leaseDuration, PollInterval: g.pollInterval,
		MaxAttempts: maxAttempts, Retention: retention, Logger: g.log,
	}
	if _, err := azlease.InspectOnce(ctx, cc, key, opts); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return g.optionFailure(what, err)
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
		term, ok := azlease.TermFromContext(fctx)
		if !ok {
			return errors.New("azlease: once: the library handed fn no term") // cannot happen
		}
		g.log.Info("azlease: once: running the command", slog.String("key", key), slog.Uint64("epoch", tok.Epoch))
		res := g.runUnder(r, fctx, term, leaseEnv(key, g.identity, tok.Epoch), argv, tail)
		mu.Lock()
		ran = &res
		mu.Unlock()
		if s := r.stopped(); s != nil {
			// Stopping: DoOnce treats a failed attempt as abandoned (not
			// counted), and gives what it writes after CMD one attempt,
			// so that the stop is bounded whether storage answers or not.
			abandon(signalError{s})
		}
		switch {
		case res.err != nil:
			return res.err
		case res.signalled != nil:
			return signalError{res.signalled}
		case res.lost != nil:
			return res.lost
		case res.code != 0:
			return errCommandFailed{code: res.code, stderr: res.stderr}
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
	case res != nil && res.signalled != nil:
		return exitf(signalStatus(res.signalled), "%s: %s before the command ran", what, signalError{res.signalled})
	case errors.Is(err, azlease.ErrOnceTooLate):
		return exitf(exitNotAcquired, "%s: not taken within --keep/2 of the start (its record may have been deleted), so the command did not run", what)
	case errors.As(err, &of):
		limit := ""
		if of.MaxAttempts > 0 && of.MaxAttempts != maxAttempts {
			limit = fmt.Sprintf(" (--max-attempts %d, recorded by the key's first caller; this one's %d does not apply)", of.MaxAttempts, maxAttempts)
		}
		return exitf(exitOnceFailed, "%s: failed for good after %s%s (last by %s: %s); 'azlease reset-once %s' lets it run again",
			what, attempts(of.Attempts), limit, of.Holder, of.LastError, key)
	case res != nil && res.err != nil:
		return res.err
	case errors.Is(err, azlease.ErrOnceUnrecorded):
		return exitf(exitUnrecorded, "%s: %s", what, line(err))
	case res != nil && (res.lost != nil || errors.Is(err, azlease.ErrLeaseLost)):
		return exitf(exitLost, "%s: %s", what, line(err))
	case res != nil && res.code != 0:
		st := out.Status
		if st.MaxAttempts > 0 {
			maxAttempts = st.MaxAttempts // the key's recorded limit
		}
		switch s := r.stopped(); {
		case s != nil:
			fmt.Fprintf(g.stderr, "azlease: %s: the command exited with status %d after %s; the attempt does not count\n", what, res.code, signalName(s))
		case st.State == azlease.OnceFailed && st.Attempts >= maxAttempts:
			fmt.Fprintf(g.stderr, "azlease: %s: the command exited with status %d; that was attempt %d of %d, so the key has failed for good: 'azlease reset-once %s' lets it run again\n", what, res.code, st.Attempts, maxAttempts, key)
		case st.State == azlease.OnceFailed:
			fmt.Fprintf(g.stderr, "azlease: %s: the command exited with status %d; attempt %d of %d is recorded as failed, and another caller may try again\n", what, res.code, st.Attempts, maxAttempts)
		default:
			fmt.Fprintf(g.stderr, "azlease: %s: the command exited with status %d; the failure could not be recorded (%s)\n", what, res.code, line(err))
		}
		return quiet(res.code)
	case r.stopped() != nil:
		return r.interrupted(what)
	}
	return classify(what, err)
}
