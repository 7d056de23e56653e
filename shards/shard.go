package shards

// The shards a replica owns: taking them, running the work of each, and
// handing one on to another replica (end its context, wait for its work,
// mark the hand-off, change the lease to the receiver's ID) without a
// moment when it is free or owned twice.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/azlease/azlease"
)

// owned is a shard this replica holds, for one term.
type owned struct {
	name  string
	lock  *azlease.Lock
	meter *loadMeter // the shard's load in this term

	mu       sync.Mutex
	ctx      context.Context // the work's context: ends with the term, or when cancelled
	cancel   context.CancelCauseFunc
	workDone chan struct{} // closed when the work's goroutine has returned
	movingTo string        // the member it is being handed to
}

// shardContext is the context a shard's work gets: the term's context, which
// the replica can also end (to move or stop) while it still holds the lease.
// Err checks the term's validity itself, so it reports the deadline as soon
// as it passes, even if no goroutine has run since (after a pause).
type shardContext struct {
	context.Context
	term *azlease.Term
}

func (c *shardContext) Err() error {
	c.term.Valid() // ends the term, and so this context, if the deadline passed
	return c.Context.Err()
}

// newContext makes the context for a run of the work.
func (o *owned) newContext() {
	ctx, cancel := context.WithCancelCause(o.lock.Context())
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ctx, o.cancel = &shardContext{Context: ctx, term: o.lock.Term}, cancel
	o.workDone = make(chan struct{})
}

// end ends the work's context with cause.
func (o *owned) end(cause error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cancel(cause)
}

func (o *owned) moving() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.movingTo != ""
}

func (o *owned) setMoving(to string) {
	o.mu.Lock()
	o.movingTo = to
	o.mu.Unlock()
}

func (o *owned) done() chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.workDone
}

// drain waits up to d for the work to return.
func (o *owned) drain(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-o.done():
		return true
	case <-t.C:
		return false
	}
}

// acquireConcurrency bounds the releases of lost shards and the clean-ups
// of removed ones a replica makes at once.
const acquireConcurrency = 16

// Acquisitions run from a queue the polls fill, by up to takeWorkers at
// once, paced so that they send at most takeRate requests a second after a
// burst of takeBurst (an acquisition costs two requests: acquire and the
// epoch write of a shard the listing showed, the creation of its blob with
// the epoch record and acquire of one it did not; more only when a race or
// a failure makes it read again): never more than about 500 in a second.
// A replica alone in a group of 1,000 shards takes them all within 5 s,
// while its polls keep their cadence;
// a few dozen are taken at once, as a cold start of several replicas
// needs (each takes its share before the others look).
const (
	takeWorkers = 32
	takeRate    = 400
	takeBurst   = 80
)

// startTake queues the acquisition of a shard, unless it is queued or
// under way; workers in bg take the queue in order. It reports true (the
// poll goes on).
func (g *Group) startTake(ctx context.Context, work Work, info shardInfo) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.queued[info.name] || g.acquiring[info.name] {
		return true
	}
	g.queued[info.name] = true
	g.queue = append(g.queue, info)
	if g.takers < takeWorkers && g.takers < len(g.queue) {
		g.takers++
		g.bg.Go(func() { g.taker(ctx, work) })
	}
	return true
}

// keepQueued drops from the queue the shards a poll no longer takes (the
// plan changed, or another replica took them).
func (g *Group) keepQueued(want map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queue = slices.DeleteFunc(g.queue, func(i shardInfo) bool {
		if !want[i.name] && i.pendingTo != g.cfg.identity { // handed here: queued by a watch before the listing shows it
			delete(g.queued, i.name)
			return true
		}
		return false
	})
}

// taker takes queued shards until the queue is empty or ctx ends.
func (g *Group) taker(ctx context.Context, work Work) {
	for {
		g.mu.Lock()
		if len(g.queue) == 0 || ctx.Err() != nil {
			g.takers-- // under the same lock as the look: startTake starts another if it queues more
			g.mu.Unlock()
			return
		}
		info := g.queue[0]
		g.queue = g.queue[1:]
		delete(g.queued, info.name)
		if g.owned[info.name] != nil || g.acquiring[info.name] {
			g.mu.Unlock()
			continue
		}
		g.acquiring[info.name] = true
		wait := g.pace.reserve(time.Now(), 2)
		g.mu.Unlock()
		if sleepCtx(ctx, wait) {
			g.take(ctx, work, info)
		}
		g.mu.Lock()
		delete(g.acquiring, info.name) // owned by now, if taken
		g.mu.Unlock()
	}
}

// pacer spaces requests at takeRate a second after a burst of takeBurst
// (a leaky bucket: in any second, at most takeRate + takeBurst).
type pacer struct{ tat time.Time }

// reserve books n requests from now and returns how long to wait before
// sending them.
func (p *pacer) reserve(now time.Time, n int) time.Duration {
	if p.tat.Before(now) {
		p.tat = now
	}
	p.tat = p.tat.Add(time.Duration(n) * time.Second / takeRate)
	return max(0, p.tat.Sub(now)-takeBurst*time.Second/takeRate)
}

// take acquires one shard and starts its work.
func (g *Group) take(ctx context.Context, work Work, info shardInfo) {
	seen := info.st
	if !seen.Exists {
		// The listing did not show its blob: HoldAfter creates it with the
		// new term's record, then acquires (two requests, not five).
		seen = azlease.Status{Name: g.names.shard(info.name)}
	}
	lock, err := g.lease(info.name).HoldAfter(ctx, seen)
	if err != nil {
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, azlease.ErrLeaseHeld):
			// A shard handed here whose lease does not carry this
			// replica's ID yet (the marker is written before the lease is
			// changed), or carries one it no longer proposes (it
			// restarted), is refused as held: the next poll tries again,
			// until the changed lease is taken or expires (within a lease
			// duration: nobody renews it). So is a shard whose blob another
			// replica created since the listing: it is acquiring it.
		case errors.Is(err, azlease.ErrPermanent):
			// Storage refuses this shard's lease for good (the replica's
			// own membership was leased, or the group would have stopped):
			// the shard stays free for the others to try, and this
			// replica tries again at later polls.
			g.mu.Lock()
			report := g.refusals.failed(err)
			g.mu.Unlock()
			report.log(g.cfg.log, "acquiring shards", err, slog.String("shard", info.name))
		default:
			g.cfg.log.Debug("azlease/shards: could not take a shard", slog.String("shard", info.name), slog.Any("error", err))
		}
		return
	}
	o := &owned{name: info.name, lock: lock, meter: &loadMeter{}}
	switch {
	case info.pendingTo != "" && info.hasCarried:
		o.meter.carry(info.carried, time.Now())
	case info.hasLast:
		o.meter.carry(info.lastLoad, time.Now()) // taken free: its last known load
	}
	o.newContext()
	g.mu.Lock()
	g.owned[info.name] = o
	ended := g.refusals.succeeded()
	g.mu.Unlock()
	ended.logEnd(g.cfg.log, "acquiring shards")
	how := "free"
	if info.pendingTo != "" {
		how = "handed over"
	}
	why := takenWhy(info)
	g.tm.acquired(how, why)
	g.cfg.log.Info("azlease/shards: took a shard", slog.String("shard", info.name), slog.Uint64("epoch", lock.Epoch()), slog.String("how", how),
		slog.String("reason", why))
	g.startWork(o, work)
}

// startWork runs the shard's work in a goroutine the group waits for.
func (g *Group) startWork(o *owned, work Work) {
	o.mu.Lock()
	ctx, done := o.ctx, o.workDone
	o.mu.Unlock()
	g.wg.Go(func() {
		defer close(done)
		g.runWork(ctx, o, work)
	})
}

// runWork calls work until its context ends, again after a growing pause
// when it returns early.
func (g *Group) runWork(ctx context.Context, o *owned, work Work) {
	pause := time.Second
	for {
		start := time.Now()
		err := callWork(ctx, work, &Shard{Name: o.name, Term: o.lock.Term, meter: o.meter})
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) >= time.Minute {
			pause = time.Second
		}
		g.cfg.log.Warn("azlease/shards: the work of a shard returned while the shard is still owned; calling it again after a pause",
			slog.String("shard", o.name), slog.Any("error", err), slog.Duration("pause", pause))
		if !sleepCtx(ctx, pause) {
			return
		}
		pause = min(2*pause, time.Minute)
	}
}

// callWork calls work, turning a panic into an error.
func callWork(ctx context.Context, work Work, s *Shard) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("azlease/shards: the work of shard %q panicked: %v\n%s", s.Name, v, debug.Stack())
		}
	}()
	return work(ctx, s)
}

// busy reports whether this replica holds the shard (in any state) or is
// acquiring it: the shard is not to be taken or announced.
func (g *Group) busy(s string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.owned[s] != nil || g.acquiring[s]
}

func (g *Group) forget(o *owned) {
	g.mu.Lock()
	if g.owned[o.name] == o {
		delete(g.owned, o.name)
	}
	g.mu.Unlock()
}

// reap forgets the shards whose term ended (lost) once their work
// returned, after giving back in bg what each may still hold (a request
// each, at most AttemptTimeout): as many as there are free slots, the rest
// at later polls. A shard stays owned, so neither taken nor announced
// again, until its Lock is unlocked: its Lease never holds a new term while
// the old Lock may still act.
func (g *Group) reap() {
	g.mu.Lock()
	var ended []*owned
	for _, o := range g.owned {
		if !o.lock.Valid() && !o.moving() {
			select {
			case <-o.done():
				ended = append(ended, o)
			default:
			}
		}
	}
	g.mu.Unlock()
	for _, o := range ended {
		select {
		case g.slots <- struct{}{}:
		default:
			return
		}
		o.setMoving(reaping)
		g.bg.Go(func() {
			defer func() { <-g.slots }()
			cause := context.Cause(o.lock.Context())
			_ = o.lock.Unlock(context.Background()) // gives back what may still be held
			g.forget(o)
			g.tm.lost()
			g.cfg.log.Warn("azlease/shards: lost a shard", slog.String("shard", o.name), slog.Uint64("epoch", o.lock.Epoch()), slog.Any("cause", cause))
		})
	}
}

// reaping is what movingTo says while a lost shard is given back: no move
// or clearing starts meanwhile.
const reaping = "\x00reaping"

// startMove hands a shard on to another member, in a goroutine the group
// waits for.
func (g *Group) startMove(ctx context.Context, work Work, s string, o *owned, mv move) {
	o.setMoving(mv.to)
	g.movers.Go(func() { g.move(context.WithoutCancel(ctx), work, o, mv.to, mv.reason) })
}

// move hands a shard to the member to: it reads the lease ID the receiver
// announced for the shard (no ID, no move: the shard's work goes on
// undisturbed and the next poll plans again), ends the shard's work, waits
// for it, marks the hand-off and changes the lease to that ID. Whatever
// happens, the shard is never handed over while its work may still act: if
// the work does not return within DrainTimeout, the lease is left to
// expire.
func (g *Group) move(ctx context.Context, work Work, o *owned, to, reason string) {
	id := g.acceptID(ctx, to, o.name)
	if id == "" {
		// The receiver has not announced an ID for it (yet): keep it, its
		// work undisturbed, and plan again at the next poll.
		o.setMoving("")
		g.tm.moved("no_receiver")
		return
	}
	o.end(errMoving)
	if !g.settleOr(ctx, o, g.pin) {
		return
	}
	epoch := o.lock.Epoch()
	marker := map[string]string{metaTo: url.QueryEscape(to), metaEpoch: strconv.FormatUint(epoch, 10), metaWhy: reason}
	if v, ok := o.meter.value(time.Now()); ok {
		marker[metaLoad] = encodeLoad(v)
	}
	if err := o.lock.SetMetadata(ctx, marker); err != nil {
		if errors.Is(err, azlease.ErrLeaseLost) || !o.lock.Valid() {
			g.dropLost(ctx, o, err)
			return
		}
		g.keepWorking(o, work)
		g.tm.moved("failed")
		return
	}
	err := o.lock.HandOff(ctx, id)
	g.forget(o)
	if err != nil {
		g.tm.moved("failed")
		g.cfg.log.Warn("azlease/shards: handing a shard on failed; its lease frees itself when it expires",
			slog.String("shard", o.name), slog.String("to", to), slog.Any("error", err))
		return
	}
	g.tm.moved("handed_off")
	g.tm.movedFor(reason)
	g.cfg.log.Info("azlease/shards: handed a shard on", slog.String("shard", o.name), slog.String("to", to), slog.Uint64("epoch", epoch),
		slog.String("reason", reason))
}

// startClear removes a stale hand-off marker (or the mark that the shard
// was removed) from a shard this replica holds and works on, in the
// background (see act), writing md instead. If the write fails, the next
// poll tries again; if the term is lost meanwhile, its work's context ends
// by itself and reap forgets the shard.
func (g *Group) startClear(ctx context.Context, o *owned, md map[string]string) {
	o.setMoving(clearing)
	g.movers.Go(func() {
		err := o.lock.SetMetadata(context.WithoutCancel(ctx), md)
		g.cfg.log.Debug("azlease/shards: cleared the marker of a hand-off that did not happen", slog.String("shard", o.name), slog.Any("error", err))
		o.setMoving("")
	})
}

// clearing is what movingTo says while a stale hand-off marker is being
// removed: no move starts meanwhile.
const clearing = "\x00clearing"

// settle waits for a shard's work to return after its context ended. It
// reports whether the shard is still held and its work has returned; when
// not, it has dealt with the shard (forgotten it, leaving an undrained
// lease to expire).
func (g *Group) settle(ctx context.Context, o *owned) bool { return g.settleOr(ctx, o, nil) }

// settleOr is settle, calling timedOut (if not nil) before it abandons the
// lease of a shard whose work did not return in time.
func (g *Group) settleOr(ctx context.Context, o *owned, timedOut func(context.Context, *owned)) bool {
	if !o.drain(g.cfg.drain) {
		if timedOut != nil {
			timedOut(ctx, o)
		}
		o.lock.Abandon()
		g.cfg.log.Error("azlease/shards: the work of a shard did not return within DrainTimeout; leaving its lease to expire",
			slog.String("shard", o.name), slog.Duration("drain_timeout", g.cfg.drain))
		for !o.drain(g.cfg.duration) {
			g.cfg.log.Error("azlease/shards: the work of a shard is still running after its term ended", slog.String("shard", o.name))
		}
		_ = o.lock.Unlock(ctx)
		g.forget(o)
		return false
	}
	if !o.lock.Valid() {
		g.dropLost(ctx, o, context.Cause(o.lock.Context()))
		return false
	}
	return true
}

// pinTime is how long a shard whose work did not return in time when it
// was to be handed on stays where it is (see pin).
const pinTime = 10 * time.Minute

// pin marks on a shard's blob, under its lease still held, that its work
// did not return within DrainTimeout when it was to be handed on: every
// replica then leaves it where it lands (once its lease expired, and it is
// taken again) for pinTime rather than try again, each attempt leaving it
// unowned for a lease duration. The mark stays on the blob across terms
// (it is the group's metadata, which a new term keeps) until it passes.
func (g *Group) pin(ctx context.Context, o *owned) {
	pctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	md := map[string]string{metaPinned: strconv.FormatInt(time.Now().Add(pinTime).UnixMilli(), 10)}
	if v, ok := o.meter.value(time.Now()); ok {
		md[metaLoad] = encodeLoad(v) // for whoever takes it once its lease expired
	}
	if err := o.lock.SetMetadata(pctx, md); err != nil {
		g.cfg.log.Debug("azlease/shards: could not pin a shard whose work did not return", slog.String("shard", o.name), slog.Any("error", err))
	}
}

// dropLost forgets a shard whose lease was lost.
func (g *Group) dropLost(ctx context.Context, o *owned, cause error) {
	_ = o.lock.Unlock(ctx)
	g.forget(o)
	g.tm.lost()
	g.cfg.log.Warn("azlease/shards: lost a shard", slog.String("shard", o.name), slog.Any("cause", cause))
}

// keepWorking restarts the work of a shard whose move did not happen, if
// the shard is still held; otherwise it drops it as lost.
func (g *Group) keepWorking(o *owned, work Work) {
	if !o.lock.Valid() {
		g.dropLost(context.Background(), o, context.Cause(o.lock.Context()))
		return
	}
	o.mu.Lock()
	o.movingTo = ""
	o.mu.Unlock()
	o.newContext()
	g.startWork(o, work)
}

// acceptID reads the ID the member to accepts the shard under, from its
// membership, or "".
func (g *Group) acceptID(ctx context.Context, to, shard string) string {
	st, err := azlease.Inspect(ctx, g.cc, g.names.member(to))
	if err != nil || !st.Leased {
		return ""
	}
	return parseAccept(st.Metadata[metaIn])[shard]
}

// finish stops a shard as the replica leaves: waits for its work, then
// releases it (or leaves it to expire if the work does not return).
// Its release waits for one of the slots in releases, and is paced as
// acquisitions are: a replica that stops with many shards releases them a
// bounded number at a time, within takeRate requests a second.
func (g *Group) finish(ctx context.Context, o *owned, releases chan struct{}) {
	if !g.settle(ctx, o) {
		return
	}
	releases <- struct{}{}
	g.mu.Lock()
	wait := g.pace.reserve(time.Now(), 2)
	g.mu.Unlock()
	time.Sleep(wait)
	_ = o.lock.Unlock(ctx)
	<-releases
	g.forget(o)
	g.tm.released(whyStop)
}

// releaseConcurrency bounds the releases of a replica that stops (two
// requests each: the release's mark and the release).
const releaseConcurrency = 64

// errRemoved is the cause with which a shard's context ends when the shard
// leaves the group's set.
var errRemoved = fmt.Errorf("%w: the shard was removed from the group", azlease.ErrStopped)

// retiring is what movingTo says while a shard that left the set is being
// stopped: no move or clearing starts meanwhile.
const retiring = "\x00retiring"

// startRetire stops a shard that left the group's set, in a goroutine the
// group waits for: it ends the work's context, waits for the work, and,
// when the registry removed the shard, clears its blob (content and the
// group's metadata, marking it cleared) before releasing it; a shard
// that left only because no live replica's list has it any more is just
// released. If the work does not return within DrainTimeout, its lease is
// left to expire, and the first live member clears it later.
func (g *Group) startRetire(ctx context.Context, o *owned, removed bool) {
	o.setMoving(retiring)
	o.end(errRemoved)
	g.movers.Go(func() {
		ctx := context.WithoutCancel(ctx)
		if !g.settle(ctx, o) {
			return
		}
		if removed {
			if err := clearShard(ctx, o.lock); err != nil {
				g.cfg.log.Warn("azlease/shards: could not clear a removed shard; the first member clears it once it is free",
					slog.String("shard", o.name), slog.Any("error", err))
			}
		}
		_ = o.lock.Unlock(ctx)
		g.forget(o)
		why := whyRemoved
		if !removed {
			why = "list" // no live replica's list has it any more
		}
		g.tm.released(why)
		g.cfg.log.Info("azlease/shards: stopped a shard that left the group's set", slog.String("shard", o.name), slog.Bool("removed", removed),
			slog.String("reason", why))
	})
}

// clearShard empties a removed shard's blob under its lock: its content,
// and the group's metadata but the mark that it was cleared.
func clearShard(ctx context.Context, lock *azlease.Lock) error {
	if err := lock.Write(ctx, nil); err != nil {
		return err
	}
	return lock.SetMetadata(ctx, map[string]string{metaGone: "1"})
}

// startCleanup clears the blob of a removed shard that was left uncleared
// (its owner stopped before, or crashed): it takes the shard's lease,
// clears the blob and releases it, in bg, as an acquisition; it reports
// whether a slot was free.
func (g *Group) startCleanup(ctx context.Context, s string) bool {
	select {
	case g.slots <- struct{}{}:
	default:
		return false
	}
	g.mu.Lock()
	g.acquiring[s] = true
	g.mu.Unlock()
	g.bg.Go(func() {
		defer func() {
			g.mu.Lock()
			delete(g.acquiring, s)
			g.mu.Unlock()
			<-g.slots
		}()
		lock, err := g.lease(s).Hold(ctx)
		if err != nil {
			return // held again, or failing: a later poll sees
		}
		if err := clearShard(ctx, lock); err != nil {
			g.cfg.log.Debug("azlease/shards: could not clear a removed shard", slog.String("shard", s), slog.Any("error", err))
		}
		_ = lock.Unlock(ctx)
		g.cfg.log.Info("azlease/shards: cleared a removed shard", slog.String("shard", s))
	})
	return true
}
