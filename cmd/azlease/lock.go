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

func newLockCmd(g *globals) *cobra.Command {
	var (
		timeout time.Duration
		noWait  bool
		slots   int
	)
	c := &cobra.Command{
		Use:   "lock NAME -- CMD [ARGS...]",
		Short: "Run a command while holding a lock (or one of N slots)",
		Long: `Wait for the lock NAME, run CMD while holding it, release it when CMD exits, and
exit with CMD's status. With -n N, up to N holders run at once (the lock blobs
NAME/slot-0 … NAME/slot-N-1).

The lease is renewed while CMD runs. If it is lost (a renewal refused, its
validity deadline passed, broken by an operator), CMD's process group gets
SIGTERM at once and SIGKILL after --kill-after, and azlease exits with 79. If
azlease itself dies or is paused, its guardian process stops CMD.

CMD's environment carries AZLEASE_NAME, AZLEASE_IDENTITY and AZLEASE_EPOCH (with
-n, AZLEASE_SLOT too, and the epoch is the slot's). SIGINT, SIGTERM and SIGHUP
are forwarded to CMD; while azlease is still waiting, they make it exit at once
(128+N).`,
		Example: `  # A cron job that must not run twice at once across hosts; give up if another
  # run still holds the lock:
  azlease lock --no-wait nightly-report -- /usr/local/bin/nightly-report --since yesterday

  # Wait at most 10 minutes for the lock:
  azlease lock --timeout 10m db-backup -- sh -c 'pg_dump mydb > /backups/mydb.sql'

  # At most two exports at once across the fleet:
  azlease lock -n 2 exports -- ./export.sh

  # Fence what the command writes with the epoch:
  azlease lock ledger -- sh -c 'psql -c "UPDATE ledger SET ... WHERE epoch <= $AZLEASE_EPOCH"'`,
		Args: dashArgs("lock name"),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout < 0 {
				return exitf(exitUsage, "invalid --timeout %v: must not be negative", timeout)
			}
			if noWait && timeout > 0 {
				return exitf(exitUsage, "give --no-wait or --timeout, not both")
			}
			return g.lock(c, args[0], args[1:], slots, timeout, noWait)
		},
	}
	f := c.Flags()
	f.DurationVar(&timeout, "timeout", 0, "give up waiting after this long and exit 75 (default: wait until acquired)")
	f.BoolVar(&noWait, "no-wait", false, "exit 75 at once if the lock is held")
	f.IntVarP(&slots, "slots", "n", 1, "let up to N holders run at once (a semaphore of N slots)")
	return c
}

func (g *globals) lock(c *cobra.Command, name string, argv []string, slots int, timeout time.Duration, noWait bool) error {
	what := "lock " + name
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	var (
		try   func(context.Context) (*azlease.Lock, bool, error)
		wait  func(context.Context) (*azlease.Lock, error)
		first = name
	)
	if slots == 1 {
		m, err := azlease.NewMutex(cc, name, g.mutexOptions())
		if err != nil {
			return classify(what, err)
		}
		try, wait = m.TryLock, m.Lock
	} else {
		s, err := azlease.NewSemaphore(cc, name, slots, g.mutexOptions())
		if err != nil {
			return classify(what, err)
		}
		try, wait, first = s.TryAcquire, s.Acquire, azlease.SlotName(name, 0)
	}
	if _, err := g.preflight(ctx, cc, what, first); err != nil {
		if ie := r.interrupted(what); ie != nil {
			return ie
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
		case err != nil:
			return classify(what, err)
		case !ok:
			return exitf(exitNotAcquired, "%s: held%s; not waiting (--no-wait)", what, g.heldBy(cc, name, slots))
		}
		lock = l
	default:
		wctx := ctx
		if timeout > 0 {
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeoutCause(ctx, timeout, errTimeout)
			defer cancel()
		}
		g.log.Debug("azlease: waiting for the lock", slog.String("lock", name), slog.Duration("timeout", timeout))
		l, err := wait(wctx)
		switch {
		case r.stopped() != nil:
			return r.interrupted(what)
		case err != nil && errors.Is(context.Cause(wctx), errTimeout):
			return exitf(exitNotAcquired, "%s: not acquired within %v (--timeout)%s", what, timeout, g.heldBy(cc, name, slots))
		case err != nil:
			return classify(what, err)
		}
		lock = l
	}
	// A signal that came as the lock was taken still stops the run.
	if r.stopped() != nil {
		_ = lock.Unlock(context.Background())
		return r.interrupted(what)
	}

	g.log.Info("azlease: locked; starting the command", slog.String("lock", lock.Name()), slog.Uint64("epoch", lock.Epoch()))
	env := leaseEnv(name, g.identity, lock.Epoch())
	if slots > 1 {
		env = append(env, "AZLEASE_SLOT="+lock.Name()[len(name)+len("/slot-"):])
	}
	res := g.runUnder(r, lock, env, argv)
	uerr := lock.Unlock(context.Background())
	switch {
	case res.err != nil:
		return res.err
	case res.lost != nil:
		return exitf(exitLost, "%s: lost while the command ran (%s); the command was stopped", what, line(res.lost))
	case res.code == 0 && errors.Is(uerr, azlease.ErrLeaseLost):
		return exitf(exitLost, "%s: lost before the command finished (%s); it may not have run alone", what, line(uerr))
	case uerr != nil && !errors.Is(uerr, azlease.ErrLeaseLost):
		g.log.Warn("azlease: could not release the lock; it frees itself when its lease expires", slog.String("error", line(uerr)))
	}
	return quiet(res.code)
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
