package main

// Running CMD under a held lease: start it under a guardian with the term's
// validity deadline, pass every renewal's new deadline on, and stop CMD as
// soon as the term ends.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/azlease/azlease"
)

// deadlineEvery is how often the supervisor reads the lease's validity
// deadline and, when a renewal moved it, tells the guardian.
const deadlineEvery = 100 * time.Millisecond

// runResult is how a command run under a lease ended.
type runResult struct {
	code      int        // CMD's status, to pass through
	lost      error      // the lease was lost while CMD ran, or the guardian stopped CMD for the deadline: why
	expired   bool       // the guardian stopped CMD on its own, at the deadline's stop point
	signalled os.Signal  // a signal came before CMD ran: CMD did not run
	stderr    string     // the tail of CMD's stderr, when asked for
	err       *exitError // CMD could not be run, or its supervision failed
}

// leaseEnv is the environment CMD gets: what it runs under.
func leaseEnv(name, identity string, epoch uint64) []string {
	return []string{
		"AZLEASE_NAME=" + name,
		"AZLEASE_IDENTITY=" + identity,
		"AZLEASE_EPOCH=" + strconv.FormatUint(epoch, 10),
	}
}

// stopTiming is the guardian's timing for the flags.
func (g *globals) stopTiming() stopTiming {
	return stopTiming{killAfter: g.killAfter, margin: killMargin}
}

// runUnder runs argv while term lasts, with ctx the context of the work
// under the term (the term's own, or one the owner may end first). Signals
// received from here on go to CMD (one received before makes it return at
// once with signalled set, and CMD does not run). It starts CMD under a
// guardian with the term's validity deadline, passes every renewal's new
// deadline on, and stops CMD (SIGTERM, SIGKILL after --kill-after, never
// after the deadline's kill point) as soon as ctx ends. tail is how much of
// CMD's stderr to keep. It returns when CMD and its process group are gone.
func (g *globals) runUnder(r *router, ctx context.Context, term *azlease.Term, env, argv []string, tail int) runResult {
	r.testHook("acquired")
	rn := r.begin()
	if rn == nil {
		return runResult{signalled: r.stopped()}
	}
	defer r.end(rn)
	r.testHook("begun")
	if ctx.Err() != nil {
		return runResult{lost: context.Cause(ctx)}
	}
	last := term.ValidUntil()
	c, err := startChild(argv, env, childOptions{stop: g.stopTiming(), tail: tail, testHook: os.Getenv(hookEnv)}, last)
	if err != nil {
		return runResult{err: exitf(exitInternal, "%s", line(err))}
	}
	if os.Getenv(hookEnv) == "guardian-started" {
		// The guardian runs meanwhile: were it not to wait for
		// attach's "start", CMD would be running by the time the
		// test's signal comes.
		time.Sleep(500 * time.Millisecond)
	}
	r.testHook("guardian-started")
	r.attach(rn, c)
	g.health.running(term)
	defer g.health.running(nil)
	tick := time.NewTicker(deadlineEvery)
	defer tick.Stop()
	// The backstop: at the kill point, azlease kills CMD's group itself in
	// case the guardian cannot (stopped, or starved).
	backstop := time.NewTimer(time.Until(last) - killMargin)
	defer backstop.Stop()
	done := ctx.Done()
	var lost error
	for {
		select {
		case <-c.done:
			res := c.wait()
			out := runResult{code: res.code, err: res.err, expired: res.expired, signalled: res.nostart, stderr: res.stderr}
			if res.err != nil && res.err.code == exitInternal {
				g.health.fail(res.err)
			}
			if lost != nil || res.expired {
				out.lost = lost
				if out.lost == nil {
					out.lost = fmt.Errorf("%w (the guardian process stopped the command before the validity deadline: no renewal reached it in time)", azlease.ErrDeadlinePassed)
				}
			}
			return out
		case <-done:
			done = nil
			lost = context.Cause(ctx)
			if lost == nil {
				lost = azlease.ErrLeaseLost
			}
			if errors.Is(lost, azlease.ErrStopped) && !errors.Is(lost, azlease.ErrLeaseLost) {
				g.log.Info("azlease: stopping the command", slog.String("cause", line(lost)), slog.Duration("kill_after", g.killAfter))
			} else {
				g.log.Warn("azlease: lease lost; stopping the command", slog.String("cause", line(lost)), slog.Duration("kill_after", g.killAfter))
			}
			c.stop()
		case <-tick.C:
			if vu := term.ValidUntil(); vu.After(last) {
				last = vu
				c.setDeadline(vu)
				backstop.Reset(time.Until(last) - killMargin)
			}
		case <-backstop.C:
			if time.Until(last) <= killMargin {
				if c.killGroup() {
					g.log.Warn("azlease: the command was still running at its kill point (the guardian did not stop it); killed its process group")
				}
				c.stop()
			}
		}
	}
}
