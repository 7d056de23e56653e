package main

// azlease yield NAME: ask the leader of an election ('azlease lead NAME', or
// a library Elector) to hand leadership over without stopping, from any
// process, and wait until it has moved.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// yieldLook is how often yield reads the lock blob while it waits (the
// move takes about a second: one request per look is cheap for that long).
const yieldLook = 200 * time.Millisecond

// answerLooks is every how many looks yield reads the leader's answer.
const answerLooks = 5

func newYieldCmd(g *globals) *cobra.Command {
	var (
		to      string
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:   "yield NAME",
		Short: "Ask the leader of NAME to hand leadership over, and wait until it has",
		Long: `Ask the instance that leads NAME ('azlease lead NAME', or an Elector) to hand
leadership over without stopping: to the instance --to names, or to the best
ready standby. Any process can ask (it writes NAME/candidates/~yield: write
access, no lease). The leader readies its successor while CMD runs, stops CMD
and hands the lease straight over, within about a second and CMD's stop; a
successor that does not take it within its poll and a margin (paused, or
starved of CPU) finds it released instead. yield waits until leadership
moved, prints who leads and whether it was handed over, and exits 0; 75 when
the leader declined, nobody leads, the leader took the lease back, another
than --to took it, or nothing happened within --timeout. More:
docs/command.md#yield.`,
		Example: `  azlease yield scheduler                      # to the best standby
  azlease yield scheduler --to scheduler-7f9c  # to that instance
  azlease status scheduler                     # candidates, and the answer`,
		Args: oneArg("election name"),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout <= 0 {
				return exitf(exitUsage, "invalid --timeout %v: must be positive", timeout)
			}
			return g.yield(c, args[0], to, timeout)
		},
	}
	c.Flags().StringVar(&to, "to", "", "the identity to hand leadership to (default: the best ready one)")
	c.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for leadership to move")
	return c
}

func (g *globals) yield(c *cobra.Command, name, to string, timeout time.Duration) error {
	what := "yield " + name
	ctx, r := newRouter(context.Background())
	defer r.close()
	cc, err := g.client(ctx, c)
	if err != nil {
		return err
	}
	fail := func(err error) error {
		if ie := r.interrupted(what); ie != nil {
			return ie
		}
		return classify(what, err)
	}
	y, err := azlease.RequestYield(ctx, cc, name, &azlease.YieldOptions{To: to, Identity: g.identity})
	switch {
	case errors.Is(err, azlease.ErrNotLeader):
		return exitf(exitNotAcquired, "%s: nobody leads %s: nothing to hand over", what, name)
	case err != nil:
		return fail(err)
	}
	st, err := azlease.Inspect(ctx, cc, name)
	if err != nil {
		return fail(err)
	}
	from := st.Holder
	fmt.Fprintf(g.stdout, "asked %s (epoch %d) to hand %s over", from, y.Epoch, name)
	if to != "" {
		fmt.Fprintf(g.stdout, " to %s", to)
	}
	fmt.Fprintln(g.stdout)
	deadline := time.Now().Add(timeout)
	answered := ""
	for n := 0; ; n++ {
		if !sleepCtx(ctx, yieldLook) {
			return r.interrupted(what)
		}
		st, err := azlease.Inspect(ctx, cc, name)
		if err != nil {
			if ctx.Err() != nil {
				return r.interrupted(what)
			}
			g.log.Warn("yield: cannot read the lock's status; still trying", "name", name, "error", line(err))
		} else if st.Leased && st.Epoch > y.Epoch && st.Holder != "" && !st.Released {
			return g.yielded(what, name, from, to, termAfter(st, y.Epoch))
		}
		if n%answerLooks == answerLooks-1 { // the answer, every second
			if _, got, err := azlease.InspectCandidates(ctx, cc, name); err == nil && got != nil && got.Epoch == y.Epoch && got.Answer != answered {
				answered = got.Answer
				if strings.HasPrefix(got.Answer, "declined") {
					return exitf(exitNotAcquired, "%s: %s %s", what, from, got.Answer)
				}
				fmt.Fprintf(g.stdout, "%s answered: %s\n", from, got.Answer)
			}
		}
		if time.Now().After(deadline) {
			return exitf(exitNotAcquired, "%s: leadership did not move within %v (does the leader run an azlease with planned succession, without --no-handoff?)", what, timeout)
		}
	}
}

// yielded reports how the term asked to yield ended, from the first term
// after it (next), as its record settles it: handed over for the yield, or,
// when the successor did not take the hand-off over in time (a process
// paused or starved of CPU past its poll and a margin), released by the
// leader and taken by whoever came first. It exits 0 when leadership moved
// to the instance --to names (any other, without --to), 75 when the leader
// took the lease back or another instance than --to's took it.
func (g *globals) yielded(what, name, from, to string, next azlease.HistoryEntry) error {
	if next.Holder == from {
		return exitf(exitNotAcquired, "%s: leadership did not move: %s leads again (epoch %d): the lease was not handed over; %s %s",
			what, from, next.Epoch, from, beganText(next.Began))
	}
	moved := fmt.Sprintf("%s: leadership moved from %s to %s (epoch %d)", name, from, next.Holder, next.Epoch)
	switch {
	case next.Began == azlease.ChangeYield:
		fmt.Fprintf(g.stdout, "%s: handed over\n", moved)
	case next.Began == azlease.ChangeUnknown: // not recorded (an older azlease): how is not known
		fmt.Fprintln(g.stdout, moved)
	case next.Began.HandOver():
		fmt.Fprintf(g.stdout, "%s, by another hand-over: %s\n", moved, beganText(next.Began))
	default:
		fmt.Fprintf(g.stdout, "%s, but not handed over: %s %s\n", moved, next.Holder, beganText(next.Began))
	}
	if to != "" && next.Holder != to {
		return exitf(exitNotAcquired, "%s: leadership moved to %s, not to %s", what, next.Holder, to)
	}
	return nil
}

// termAfter is the first term st records after epoch: the one that took
// the lease from the term asked to yield (the latest term, if its history
// does not go back that far).
func termAfter(st azlease.Status, epoch uint64) azlease.HistoryEntry {
	next := latestTerm(st)
	for _, h := range st.History { // newest first
		if h.Epoch <= epoch {
			break
		}
		next = h
	}
	return next
}
