package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// errTimeout is the cause of a wait that --timeout ended.
var errTimeout = errors.New("timed out")

// errReleaseBound is the cause of a release that used up its one attempt's
// time as azlease exits.
var errReleaseBound = errors.New("azlease is exiting: one attempt's time to release")

func newLockCmd(g *globals) *cobra.Command {
	var (
		timeout   time.Duration
		noWait    bool
		slots     int
		unordered bool
		headPoll  time.Duration
		hf        healthFlags
	)
	c := &cobra.Command{
		Use:   "lock NAME -- CMD [ARGS...]",
		Short: "Run a command while holding a lock (or one of N slots)",
		Long: `Wait for the lock NAME, run CMD while holding it, release it when CMD exits, and
exit with CMD's status. With -n N, up to N holders run at once (the lock blobs
NAME/slot-0 … NAME/slot-N-1; -n 1 is the lock NAME itself).

The lease is renewed while CMD runs. CMD is stopped before the lease can pass to
another holder, whatever CMD does with SIGTERM and whatever happens to azlease:
if no renewal has moved the lease's validity deadline on, CMD's process group
gets SIGTERM at the deadline minus --kill-after minus 1 s and SIGKILL 1 s
before it, from a guardian process that acts even while azlease is paused, and
at once if azlease dies. If the lease is lost (a renewal refused, broken by an
operator), CMD's group gets SIGTERM at once and SIGKILL --kill-after later, and
azlease exits with 79.

CMD's environment carries AZLEASE_NAME, AZLEASE_IDENTITY and AZLEASE_EPOCH (with
-n, AZLEASE_SLOT too, and the epoch is the slot's). SIGINT, SIGTERM and SIGHUP
are forwarded to CMD (SIGKILL follows --kill-after later if it has not exited);
while azlease is still waiting, they make it exit at once (128+N), and CMD does
not run.

--timeout bounds the whole wait, first contact with storage included; --no-wait
makes one try of at most 3 s.

Waiters are served in the order they asked: each takes a ticket and waits in
the lock's queue (blobs NAME/queue…; 'azlease status NAME' and 'azlease watch
NAME' show it). The first in line looks at the lock every --head-poll (200ms),
those behind it less often the further back they are (at most every
2 × --poll-interval right behind it, 150 × --poll-interval at the back), and a
holder that is done hands the lock straight to the first in line: it is never
free in between, so a command started later cannot take it first. A waiter
that gives up (--timeout, a signal) leaves the queue; one that dies is passed
over when its turn comes, after a head poll if it was first in line, up to
2 × --poll-interval otherwise. Waiting costs about 1/--head-poll requests a
second for the first in line (5 with the default) and under 1 a second for
all the others together, whatever their number.

--unordered waits as before: every waiter tries every --poll-interval and the
first to try after a release gets the lock (one may wait indefinitely), at one
request per waiter per poll. It costs less while a single command waits a long
time, and more when many wait. Ordered and unordered waiters on one lock
exclude each other as ever; an unordered one can take the lock only when it is
free, which an ordered holder's hand-off never lets it be.`,
		Example: `  # A cron job that must not run twice at once across hosts; give up if another
  # run still holds the lock:
  azlease lock --no-wait nightly-report -- /usr/local/bin/nightly-report --since yesterday

  # Wait at most 10 minutes for the lock:
  azlease lock --timeout 10m db-backup -- sh -c 'pg_dump mydb > /backups/mydb.sql'

  # At most two exports at once across the fleet:
  azlease lock -n 2 exports -- ./export.sh

  # Who waits for the lock, in order:
  azlease status db-backup

  # A job that waits for hours behind a long run: look every 2s when first in
  # line (half a request a second), or wait unordered (one a second each):
  azlease lock --head-poll 2s --poll-interval 5s nightly -- ./nightly.sh
  azlease lock --unordered nightly -- ./nightly.sh

  # Fence what the command writes with the epoch:
  azlease lock ledger -- sh -c 'psql -c "UPDATE ledger SET ... WHERE epoch <= $AZLEASE_EPOCH"'`,
		Args: dashArgs("lock name"),
		RunE: func(c *cobra.Command, args []string) error {
			if err := g.checkRunFlags(); err != nil {
				return err
			}
			switch {
			case timeout < 0:
				return exitf(exitUsage, "invalid --timeout %v: must not be negative", timeout)
			case c.Flags().Changed("timeout") && timeout == 0:
				return exitf(exitUsage, "invalid --timeout 0s: give a positive duration, or --no-wait")
			case noWait && timeout > 0:
				return exitf(exitUsage, "give --no-wait or --timeout, not both")
			case slots < 1 || slots > azlease.MaxSlots:
				return exitf(exitUsage, "invalid -n %d: from 1 to %d", slots, azlease.MaxSlots)
			}
			if err := checkHeadPoll(c, unordered, headPoll, g.pollOr(time.Second)); err != nil {
				return err
			}
			order := lockOrder{unordered: unordered}
			if c.Flags().Changed("head-poll") {
				order.headPoll = headPoll // else the library's: 200ms, or --poll-interval if shorter
			}
			return g.lock(c, args[0], args[1:], slots, timeout, noWait, order, hf)
		},
	}
	f := c.Flags()
	f.DurationVar(&timeout, "timeout", 0, "give up after this long and exit 75 (default: wait until acquired)")
	f.BoolVar(&noWait, "no-wait", false, "exit 75 at once if the lock is held")
	f.IntVarP(&slots, "slots", "n", 1, "let up to N holders run at once (a semaphore of N slots)")
	f.BoolVar(&unordered, "unordered", false, "serve waiters in no order: each tries every --poll-interval, the first after a release gets the lock (as before fair locks)")
	f.DurationVar(&headPoll, "head-poll", defaultHeadPoll, "how often the first waiter in line looks at the lock, from 20ms to --poll-interval (one request each; --poll-interval if that is shorter)")
	hf.register(c, "holds")
	return c
}

// defaultHeadPoll is --head-poll's default: the library's
// MutexOptions.HeadPollInterval default.
const defaultHeadPoll = 200 * time.Millisecond

// lockOrder is how 'lock' waits: in order (headPoll is the first in line's
// poll, 0 for the library's default), or unordered.
type lockOrder struct {
	unordered bool
	headPoll  time.Duration
}

// checkHeadPoll validates --head-poll against --poll-interval (poll) and
// --unordered, naming the flags.
func checkHeadPoll(c *cobra.Command, unordered bool, headPoll, poll time.Duration) error {
	switch {
	case !c.Flags().Changed("head-poll"):
	case unordered:
		return exitf(exitUsage, "give --head-poll or --unordered, not both: unordered waiters have no first in line")
	case headPoll < 20*time.Millisecond || headPoll > poll:
		return exitf(exitUsage, "invalid --head-poll %v: from 20ms to --poll-interval (%v)", headPoll, poll)
	}
	return nil
}

// noWaitBudget bounds a --no-wait try: one attempt's worth.
const noWaitBudget = attemptTimeout

func (g *globals) lock(c *cobra.Command, name string, argv []string, slots int, timeout time.Duration, noWait bool, order lockOrder, hf healthFlags) error {
	what := "lock " + name
	sctx, r := newRouter(context.Background())
	defer r.close()
	// --timeout and --no-wait bound everything up to acquiring, first
	// contact with storage included.
	ctx := sctx
	switch {
	case timeout > 0:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(sctx, timeout, errTimeout)
		defer cancel()
	case noWait:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(sctx, noWaitBudget, errTimeout)
		defer cancel()
	}
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	hs, err := g.startHealth(hf, cc, name)
	if err != nil {
		return err
	}
	defer hs.close()
	var (
		try  func(context.Context) (*azlease.Lock, bool, error)
		wait func(context.Context) (*azlease.Lock, error)
	)
	opts := g.mutexOptions()
	opts.Unordered, opts.HeadPollInterval = order.unordered, order.headPoll
	if slots == 1 {
		m, err := azlease.NewMutex(cc, name, opts)
		if err != nil {
			return g.optionFailure(what, err)
		}
		try, wait = m.TryLock, m.Lock
	} else {
		s, err := azlease.NewSemaphore(cc, name, slots, opts)
		if err != nil {
			return g.optionFailure(what, err)
		}
		try, wait = s.TryAcquire, s.Acquire
	}
	timedOut := func() bool { return errors.Is(context.Cause(ctx), errTimeout) }
	first := name // the lock blob, or a semaphore's first slot
	if slots > 1 {
		first = azlease.SlotName(name, 0)
	}
	if _, err := g.preflight(ctx, cc, what, first); err != nil {
		switch {
		case r.stopped() != nil:
			return r.interrupted(what)
		case timedOut():
			return exitf(exitUnavailable, "%s: storage did not answer within %v: %s", what, g.budget(timeout, noWait), line(err))
		}
		return err
	}

	var lock *azlease.Lock
	switch {
	case noWait:
		l, ok, err := try(ctx)
		switch {
		case r.stopped() != nil:
			return r.interrupted(what)
		case err != nil && timedOut():
			return exitf(exitUnavailable, "%s: no answer from storage within %v (--no-wait): %s", what, noWaitBudget, line(err))
		case err != nil:
			return classify(what, err)
		case !ok:
			return exitf(exitNotAcquired, "%s: held%s; not waiting (--no-wait)", what, g.heldBy(cc, name, slots))
		}
		lock = l
	default:
		g.log.Debug("azlease: waiting for the lock", slog.String("lock", name), slog.Duration("timeout", timeout))
		l, err := wait(ctx)
		switch {
		case r.stopped() != nil:
			return r.interrupted(what)
		case err != nil && timedOut():
			return exitf(exitNotAcquired, "%s: not acquired within %v (--timeout)%s", what, timeout, g.heldBy(cc, name, slots))
		case err != nil:
			return classify(what, err)
		}
		lock = l
	}

	g.log.Info("azlease: locked; starting the command", slog.String("lock", lock.Name()), slog.Uint64("epoch", lock.Epoch()))
	env := leaseEnv(name, g.identity, lock.Epoch())
	if slots > 1 {
		env = append(env, "AZLEASE_SLOT="+slotOf(name, lock.Name()))
	}
	res := g.runUnder(r, lock.Context(), lock.Term, env, argv, 0)
	// The release gets one attempt's time (the library's AttemptTimeout),
	// as an Elector's on stop: azlease exits next, whoever stops it allows
	// a grace period (--kill-after + 3 s + a margin), and a lease that is
	// not released frees itself when it expires.
	uctx, cancel := context.WithTimeoutCause(context.Background(), attemptTimeout, errReleaseBound)
	uerr := lock.Unlock(uctx)
	cancel()
	switch {
	case res.err != nil:
		return res.err
	case res.signalled != nil:
		return exitf(signalStatus(res.signalled), "%s: %s before the command ran", what, signalError{res.signalled})
	case res.lost != nil:
		return exitf(exitLost, "%s: lost while the command ran (%s); the command was stopped", what, line(res.lost))
	case res.code == 0 && errors.Is(uerr, azlease.ErrLeaseLost):
		return exitf(exitLost, "%s: lost before the command finished (%s); it may not have run alone", what, line(uerr))
	case uerr != nil && !errors.Is(uerr, azlease.ErrLeaseLost):
		g.log.Warn("azlease: could not release the lock; it frees itself when its lease expires", slog.String("error", line(uerr)))
	}
	return quiet(res.code)
}

// budget is how long --timeout or --no-wait allows.
func (g *globals) budget(timeout time.Duration, noWait bool) time.Duration {
	if noWait {
		return noWaitBudget
	}
	return timeout
}

// slotOf is the slot number of the lock blob held, for AZLEASE_SLOT.
func slotOf(name, blob string) string {
	for i := range azlease.MaxSlots {
		if azlease.SlotName(name, i) == blob {
			return strconv.Itoa(i)
		}
	}
	return "0"
}

// heldBy says who holds the lock, for a message: " by HOLDER (epoch N)", or
// "" when that cannot be read quickly.
func (g *globals) heldBy(cc *container.Client, name string, slots int) string {
	if slots > 1 {
		return " (all " + strconv.Itoa(slots) + " slots)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := azlease.Inspect(ctx, cc, name)
	if err != nil || !st.Leased {
		return ""
	}
	return fmt.Sprintf(" by %s (epoch %d)", st.Holder, st.Epoch)
}
