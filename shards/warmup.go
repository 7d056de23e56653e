package shards

// A shard on its way here: the optional warm-up the receiver runs before it
// announces the lease ID its owner hands the shard on to (Options.WarmUp),
// so that state is loaded while the owner still serves; and the watch that
// takes the shard as soon as its owner has handed it on, rather than at the
// next poll, so that the serving gap is the drain plus a round trip.

import (
	"context"
	"log/slog"
	"time"

	"github.com/azlease/azlease"
)

// warmed reports whether the shard handed here is ready to be announced:
// there is no warm-up, or it returned (successfully or not, or timed out).
// It starts the warm-up, in bg, the first time it is asked.
func (g *Group) warmed(ctx context.Context, s string) bool {
	if g.cfg.warmUp == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch st, ok := g.warm[s]; {
	case ok && st:
		return true
	case ok:
		return false
	}
	g.warm[s] = false
	g.bg.Go(func() {
		wctx, cancel := context.WithTimeout(ctx, g.cfg.warmUpTimeout)
		start := time.Now()
		err := callWarmUp(wctx, g.cfg.warmUp, s)
		cancel()
		if err != nil {
			g.cfg.log.Warn("azlease/shards: warming up a shard handed here failed; taking it anyway", slog.String("shard", s), slog.Any("error", err))
		} else {
			g.cfg.log.Debug("azlease/shards: warmed up a shard handed here", slog.String("shard", s), slog.Duration("took", time.Since(start)))
		}
		g.mu.Lock()
		g.warm[s] = true
		g.mu.Unlock()
	})
	return false
}

// callWarmUp calls the warm-up, turning a panic into an error.
func callWarmUp(ctx context.Context, f func(context.Context, string) error, s string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errWarmUpPanicked
		}
	}()
	return f(ctx, s)
}

// forgetWarm drops what is known of a shard's warm-up once it is taken (or
// no longer comes here).
func (g *Group) forgetWarm(s string) {
	g.mu.Lock()
	delete(g.warm, s)
	g.mu.Unlock()
}

// watchInterval is how often a receiver looks at a shard handed to it.
const watchInterval = 200 * time.Millisecond

// watchIncoming starts, once per shard, a watch in bg that reads the
// shard's blob every watchInterval (one request, billed as "other") while
// it is announced here, and queues its acquisition as soon as its owner's
// hand-off marker names this replica: the serving gap is then the drain,
// the marker and the change, and a round trip. It ends after the drain
// timeout and a lease duration, or when the shard is taken.
func (g *Group) watchIncoming(ctx context.Context, work Work, s string) {
	g.mu.Lock()
	if g.watching[s] {
		g.mu.Unlock()
		return
	}
	g.watching[s] = true
	g.mu.Unlock()
	g.bg.Go(func() {
		defer func() {
			g.mu.Lock()
			delete(g.watching, s)
			g.mu.Unlock()
			g.forgetWarm(s)
		}()
		end := time.Now().Add(g.cfg.drain + g.cfg.duration)
		for time.Now().Before(end) && !g.busy(s) {
			if !sleepCtx(ctx, watchInterval) {
				return
			}
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			st, err := azlease.Inspect(actx, g.cc, g.names.shard(s))
			cancel()
			if err != nil {
				continue
			}
			info := parseView(g.names, []azlease.Status{st}).shards[s]
			if info.pendingTo == g.cfg.identity {
				info.name = s
				g.startTake(ctx, work, info)
				return
			}
		}
	})
}
