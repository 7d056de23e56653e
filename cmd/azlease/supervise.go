package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/azlease/azlease"
)

// holding is a held lease as the supervisor sees it: a [azlease.Term] (a
// Lock embeds one), or for once, the heartbeat of DoOnce's context.
type holding interface {
	Done() <-chan struct{}
	Err() error
	ValidUntil() time.Time
}

// deadlineEvery is how often the supervisor reads the lease's validity
// deadline and, when a renewal moved it, tells the guardian.
const deadlineEvery = 100 * time.Millisecond

// onceHeartbeat bounds how long CMD outlives azlease's last sign of life
// under once, whose lease deadline the library does not expose: the guardian
// stops CMD if azlease stops confirming for this long that the term lasts.
// With the default timing a renewal leaves at least 9 s of validity, so a
// paused azlease's CMD is stopped before its lease ends, unless renewals
// were already failing.
const onceHeartbeat = 5 * time.Second

// heartbeat is a holding for DoOnce: its deadline is always onceHeartbeat
// from now while the context lasts.
type heartbeat struct{ ctx context.Context }

func (h heartbeat) Done() <-chan struct{} { return h.ctx.Done() }
func (h heartbeat) Err() error {
	if h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(h.ctx)
}

func (h heartbeat) ValidUntil() time.Time {
	if h.ctx.Err() != nil {
		return time.Now()
	}
	return time.Now().Add(onceHeartbeat)
}

// runResult is how a command run under a lease ended.
type runResult struct {
	code int        // CMD's status, to pass through
	lost error      // the lease was lost while CMD ran (CMD was stopped): why
	err  *exitError // CMD could not be run, or its supervision failed
}

// leaseEnv is the environment CMD gets: what it runs under.
func leaseEnv(name, identity string, epoch uint64) []string {
	return []string{
		"AZLEASE_NAME=" + name,
		"AZLEASE_IDENTITY=" + identity,
		"AZLEASE_EPOCH=" + strconv.FormatUint(epoch, 10),
	}
}

// runUnder runs argv while h lasts: it starts CMD under a guardian with h's
// validity deadline, passes every renewal's new deadline on, forwards
// signals through r, and stops CMD (SIGTERM, SIGKILL after --kill-after) as
// soon as h ends. It returns when CMD and its process group are gone.
func (g *globals) runUnder(r *router, h holding, env, argv []string) runResult {
	if err := h.Err(); err != nil {
		return runResult{lost: err}
	}
	last := h.ValidUntil()
	c, err := startChild(argv, env, g.killAfter, last)
	if err != nil {
		return runResult{err: exitf(exitInternal, "%s", line(err))}
	}
	r.attach(c)
	defer r.detach()
	tick := time.NewTicker(deadlineEvery)
	defer tick.Stop()
	done := h.Done()
	var lost error
	for {
		select {
		case <-c.done:
			res := c.wait()
			out := runResult{code: res.code, err: res.err}
			if lost != nil || res.expired {
				out.lost = lost
				if out.lost == nil {
					out.lost = fmt.Errorf("%w (the guardian process stopped the command at the deadline)", azlease.ErrDeadlinePassed)
				}
			}
			return out
		case <-done:
			done = nil
			lost = h.Err()
			if lost == nil {
				lost = azlease.ErrLeaseLost
			}
			g.log.Warn("azlease: lease lost; stopping the command", slog.String("cause", line(lost)), slog.Duration("kill_after", g.killAfter))
			c.stop()
		case <-tick.C:
			if vu := h.ValidUntil(); vu.After(last) {
				last = vu
				c.setDeadline(vu)
			}
		}
	}
}

// isStopped reports whether err says the term ended because its owner stopped
// it, not because the lease was lost.
func isStopped(err error) bool {
	return errors.Is(err, azlease.ErrStopped) && !errors.Is(err, azlease.ErrLeaseLost)
}
