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
		Long: `Wait for the lock NAME, run CMD while holding it, release it when CMD exits,
and exit with CMD's status; with -n N, up to N holders run at once. Waiters are
served in the order they asked (--unordered: whoever polls first). CMD's process
group is killed before the lease can pass on, even if azlease is paused or
dies; a lease lost while CMD runs stops CMD (exit 79). CMD gets AZLEASE_NAME,
AZLEASE_IDENTITY, AZLEASE_EPOCH (and AZLEASE_SLOT with -n). The queue, its
costs, stop timing, exit statuses: docs/command.md#lock.`,
		Example: `  azlease lock --no-wait nightly-report -- ./report     # give up if held (exit 75)
  azlease lock --timeout 10m -n 2 exports -- ./export.sh  # two at once; wait 10m at most
  azlease lock ledger -- sh -c 'psql -c "... WHERE epoch <= $AZLEASE_EPOCH"'`,
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
	f.DurationVar(&timeout, "timeout", 0, "give up after this long, exit 75 (default: wait)")
	f.BoolVar(&noWait, "no-wait", false, "exit 75 at once if the lock is held")
	f.IntVarP(&slots, "slots", "n", 1, "let up to N holders run at once")
	f.BoolVar(&unordered, "unordered", false, "no queue: each waiter tries every --poll-interval")
	f.DurationVar(&headPoll, "head-poll", defaultHeadPoll, "first waiter's poll while a hold is < 5s old")
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
