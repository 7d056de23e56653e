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
		Short: "Ask the leader of NAME to hand leadership over to another instance, and wait until it has",
		Long: `Ask the instance that leads NAME ('azlease lead NAME', or an Elector of the
library) to hand leadership over to another instance without stopping: to the
one --to names, or to the best ready standby (the highest --priority, then the
most recently started). Any process can ask: the request is a blob next to the
lock blob (NAME/candidates/~yield), which the leader looks for every fifth of
its --poll-interval (every second by default). The leader then gets the
successor ready while its command still runs (its standby, which polls as
often, answers within about as long), stops its command, and hands the lease
straight over; it stays a standby. Leadership moves within about a second
and CMD's stop. It is not preferred back for its priority for a minute.

yield waits until leadership has moved, then prints who leads, and exits:

  0   leadership moved (the new leader and epoch are printed)
  75  it did not: the leader declined (no other instance is ready, or not the
      one --to names; the reason is printed), nobody leads NAME, or nothing
      happened within --timeout (a leader that runs an azlease without
      planned succession, or with --no-handoff, never answers)
  64, 69, 77, 128+N as for the other commands

It needs write access to the container, not the lease.`,
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
	c.Flags().StringVar(&to, "to", "", "the identity of the instance to hand leadership to (default: the best ready one)")
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
			fmt.Fprintf(g.stdout, "%s: leadership moved from %s to %s (epoch %d)\n", name, from, st.Holder, st.Epoch)
			return nil
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
