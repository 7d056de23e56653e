package azlease

// The watcher rule of fair locks (issue 35; docs/design/fair-locks-cost.md,
// section 3): no holder passes a waiter over. The waiter right behind a
// successor named in a hand-off (or the first live one behind a row of dead
// ones) watches it, and takes the hand-off over (a Change from the
// successor's hand-off ID) once the successor, had it followed its
// schedule, would surely have looked (timing.SuccessorDue, from where this
// waiter's own looks saw it, and the pace the lock record published, which
// paceWatch bounds); a waiter further back waits, besides, until each one
// between would have taken it over, and what the one right ahead of it
// computes from its own listings (othersDue). Meanwhile the watcher renews
// the hand-off's lease under that ID when its watch outlives the lease's
// guaranteed rest. A hand-off to a waiter gone from the queue is the first
// in line's to take at once.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/azlease/azlease/internal/timing"
)

// paceWatch is what a waiter's reads of the lock record (its listings and
// looks) tell of the pace the record published (timing.Pace): the last one
// it read, and bounds on every pace published between two of its reads.
type paceWatch struct {
	last  time.Duration    // the pace its last read showed (the largest over the slots)
	prev  map[int]paceRead // per slot, its last read
	first time.Time        // the send of its first read (zero: none yet)
	pre   time.Duration    // the bound before first: the largest pace of a list it could see then, or unknownPace
	spans []paceSpan       // bounds between two consecutive reads, oldest first
}

// paceRead is one read of a slot's record: its epoch and hold list.
type paceRead struct {
	epoch uint64
	holds []time.Duration
}

// paceSpan bounds the pace published from from to to.
type paceSpan struct {
	from, to time.Time
	bound    time.Duration
}

// unknownPace stands for a pace a watcher cannot bound: timing.BackWait
// caps what the pace adds at timing.PaceCap.
const unknownPace = maxHold

// maxPaceSpans is how many bounds a waiter keeps (older ones are dropped:
// a successor that joined before the oldest kept is counted with the
// largest of them and unknownPace).
const maxPaceSpans = 64

// read notes a read of the slots' records (sts), sent at sent and answered
// at got.
func (pw *paceWatch) read(sts []Status, sent, got time.Time) {
	if pw.prev == nil {
		pw.prev = map[int]paceRead{}
	}
	pw.last = 0
	span := paceSpan{from: sent, to: got}
	for i, st := range sts {
		if !st.Exists && st.Epoch == 0 {
			continue
		}
		pw.last = max(pw.last, timing.Pace(st.holds))
		prev, ok := pw.prev[i]
		switch {
		case !ok:
			if pw.first.IsZero() || sent.Before(pw.first) {
				pw.first = sent
			}
			// What was published before this read: every list was a
			// suffix of this one while the record kept every hold;
			// past that, not known.
			b, ok := timing.PaceSince(st.holds, len(st.holds), maxHolds)
			if !ok {
				b = unknownPace
			}
			pw.pre = max(pw.pre, b)
			span.bound = max(span.bound, timing.Pace(st.holds))
		case st.Epoch >= prev.epoch && st.Epoch-prev.epoch < maxHolds:
			// At most one hold published per term since the last read
			// (each term's epoch larger, the last read's term's own
			// included): the lists in between are suffixes of this one.
			b, ok := timing.PaceSince(st.holds, int(st.Epoch-prev.epoch)+1, maxHolds)
			if !ok {
				b = unknownPace
			}
			span.bound = max(span.bound, b, timing.Pace(prev.holds))
		default:
			span.bound = unknownPace
		}
		pw.prev[i] = paceRead{epoch: st.Epoch, holds: st.holds}
	}
	if n := len(pw.spans); n > 0 {
		span.from = pw.spans[n-1].to // since the last read: every pace in between
	}
	pw.spans = append(pw.spans, span)
	if len(pw.spans) > maxPaceSpans {
		pw.pre = max(pw.pre, pw.spans[0].bound)
		pw.spans = pw.spans[1:]
		pw.first = pw.spans[0].from
	}
}

// bound is the largest pace a waiter that joined at joined (zero: unknown)
// can have read since this waiter's first read (spans that end after it
// joined).
func (pw *paceWatch) bound(joined time.Time) time.Duration {
	var b time.Duration
	for _, s := range pw.spans {
		if joined.IsZero() || !s.to.Before(joined) {
			b = max(b, s.bound)
		}
	}
	return b
}

// watchState is a hand-off to the first in line that a waiter behind it
// watches.
type watchState struct {
	key     string    // slot/epoch/successor ("": none)
	promise time.Time // when the first, and each waiter up to this one, would surely have seen it
	renewAt time.Time // when to renew the lease under the hand-off's ID, if promise is later
	// sight, holdFrom and margins are what the promise was computed from:
	// when the hand-off began at the latest (this waiter's first sight of
	// it, or the marker's write: writtenNoLaterThan), the hold's start as it bounded
	// it, and the margins added; seen is true once the promise
	// also covers what the waiters between compute (othersDue).
	sight, holdFrom time.Time
	margins         time.Duration
	seen            bool
}

// wake is when the watcher should look again (zero: it watches nothing).
func (ws watchState) wake() time.Time {
	if ws.key == "" {
		return time.Time{}
	}
	if !ws.renewAt.IsZero() && ws.renewAt.Before(ws.promise) {
		return ws.renewAt
	}
	return ws.promise
}

// watch is the watcher rule (issue 35; docs/design/fair-locks-cost.md,
// section 3): no holder passes anyone over; a hand-off to the first in line
// (ahead[0]) is watched by the waiters behind it until the first, had it
// followed its schedule, would surely have seen it, and each waiter between
// it and this one (ahead[1:]) would surely have taken it over itself (their
// promises, from where this waiter's listings saw each of them and when,
// counted from the hand-off's beginning as the marker dates it, a margin for
// round trips each, and, once that has run out, what the waiter right ahead
// computes from its own listings: othersWatch); then this waiter takes it
// over (a Change from the first's hand-off ID), and marks those ahead
// missed: they keep their tickets, and one that looks again is first at the
// next hand-off. sts is a
// look at the slots sent at sent and answered at got. It returns the lock it
// took; relist when the queue should be listed again (the hand-off was
// taken, or its lease is gone); at, when to look again for the watch (zero:
// nothing watched). The hand-off's lease lasts handOffLeaseLeft from the
// last look that showed no hand-off (pl.clean); a watch that must outlast
// that renews it under the hand-off's ID (never free between holders).
func (f *fairLock) watch(ctx context.Context, pl *polling, ahead []waiter, sts []Status, sent, got time.Time, budget time.Duration) (lk *Lock, relist bool, at time.Time, err error) {
	if len(ahead) == 0 || sts == nil {
		return nil, false, time.Time{}, nil
	}
	first := ahead[0]
	hi := slices.IndexFunc(sts, func(st Status) bool { return st.Leased && st.Next == first.key })
	if hi < 0 {
		pl.watch, pl.clean = watchState{}, sent
		return nil, false, time.Time{}, nil
	}
	st := sts[hi]
	if key := fmt.Sprintf("%d/%d/%s", hi, st.Epoch, first.key); key != pl.watch.key {
		// From the hand-off's beginning, as far as both this look and
		// the marker's write (its Last-Modified) tell: every watcher counts from about the
		// same instant, however late its own look came.
		ref := got
		if h := writtenNoLaterThan(got, st.listed, st.modified); !h.IsZero() && h.Before(ref) {
			ref = h
		}
		due := f.ownDue(pl, ahead, ref, pl.holdFrom[hi])
		// A margin for round trips, per waiter ahead: each waiter between
		// watches the first with a margin of its own, and takes the
		// hand-off over only once that has run out too (with one margin
		// for all, the dead-waiter bench had a waiter 6th in line take
		// over a hand-off that the live one right behind the first was
		// about to take, five live waiters passed over).
		margin := max(minHandOffMargin, 4*got.Sub(sent))
		margins := time.Duration(len(ahead)) * margin
		pl.watch = watchState{key: key, promise: due.Add(margins), sight: ref, holdFrom: pl.holdFrom[hi], margins: margins}
		if !pl.clean.IsZero() {
			pl.watch.renewAt = pl.clean.Add(f.cfg.lease.duration/3 - f.cfg.lease.attemptTimeout)
		}
		if at := markerRest(st, sent, f.cfg.lease); at.After(pl.watch.renewAt) {
			// Never saw the lock without a hand-off (or saw it long
			// before): the marker's write tells when the hand-off began.
			// Renewing at once was refused (409) whenever the successor
			// had already taken the lease: about one request in two per
			// acquisition in a hot queue.
			pl.watch.renewAt = at
		}
		f.cfg.lease.log.Debug("azlease: watching a hand-off to the first in line", slog.Uint64("ticket", first.Ticket), slog.Duration("promise", time.Until(pl.watch.promise)))
	}
	now := time.Now()
	if !now.Before(pl.watch.promise) {
		// Computed only now: a hand-off is mostly taken long before a
		// watcher behind the one right behind the first gets here, and
		// the views of the waiters between cost far more CPU (up to 2 ms
		// with 50 ahead).
		f.othersWatch(pl, ahead)
	}
	switch {
	case !now.Before(pl.watch.promise):
		lk, err := f.takeFrom(ctx, first, hi, st, budget)
		switch {
		case err == nil:
			for _, x := range ahead {
				f.passedOver(ctx, x)
			}
			// Said, since the queue's order changed: a live waiter
			// passed over was paused or starved of CPU past its promise.
			f.cfg.lease.log.Info("azlease: took over a hand-off to the first in line, which had not taken it by when it would surely have looked; passed over, it keeps its place",
				slog.Uint64("ticket", first.Ticket), slog.Int("passed_over", len(ahead)), slog.Duration("overdue", now.Sub(pl.watch.promise)))
			pl.watch = watchState{}
			return lk, false, time.Time{}, nil
		case ctx.Err() == nil && (errors.Is(err, ErrLeaseHeld) || errors.Is(err, errHandOffGone)):
			// Taken (by the first, at the last moment), or the lease is
			// gone: the queue tells.
			pl.watch = watchState{}
			return nil, true, time.Time{}, nil
		default:
			return nil, false, time.Time{}, err
		}
	case pl.watch.promise.After(pl.watch.renewAt) && !now.Before(pl.watch.renewAt):
		// The watch outlives what the hand-off's lease surely has left:
		// renew it under the hand-off's ID. Refused for the ID: the first
		// took it.
		send, err := f.slots[hi].newLease().renewHandOff(ctx, handOffID(first.id, st.Epoch))
		switch {
		case errors.Is(err, ErrLeaseLost):
			pl.watch = watchState{}
			return nil, true, time.Time{}, nil
		case err == nil:
			pl.watch.renewAt = send.Add(f.cfg.lease.duration / 3)
		default:
			pl.watch.renewAt = now.Add(f.cfg.headPoll)
		}
	}
	return nil, false, pl.watch.wake(), nil
}

// successorDue is when s, the first in line, named in a hand-off this
// waiter first saw at sight, has surely looked at the lock since, had it
// followed its schedule (timing.SuccessorDue over the positions this
// waiter's listings saw it hold; with none seen, as if it had been right
// behind the first for ever). As the first in line it looks by the age of
// the hold as it saw it, never older than the hold: holdFrom, when known
// (not zero), bounds that.
func (f *fairLock) successorDue(pl *polling, s waiter, sight, holdFrom time.Time) time.Time {
	return f.dueOver(pl, s, f.staysSeen(pl, s, sight, holdFrom))
}

// staysSeen is where this waiter's listings saw s (timing.Stay), the last
// stay up to sight, and no stay first in line from before holdFrom (zero:
// not known).
func (f *fairLock) staysSeen(pl *polling, s waiter, sight, holdFrom time.Time) []timing.Stay {
	stays := []timing.Stay{{Pos: 1, To: sight}}
	if a, ok := pl.ahead[s.Ticket]; ok {
		stays = slices.Clone(a.stays)
		stays[len(stays)-1].To = sight
	}
	for i := range stays {
		if stays[i].Pos == 0 && !holdFrom.IsZero() && holdFrom.After(stays[i].From) {
			stays[i].From = holdFrom
		}
	}
	return stays
}

// ownDue is when the first in line (ahead[0]), named in a hand-off that
// began by sight at the latest, has surely looked since, as this waiter's
// listings tell (successorDue, over the places it saw it hold), and each
// waiter between (ahead[1:]) too, and so seen it.
func (f *fairLock) ownDue(pl *polling, ahead []waiter, sight, holdFrom time.Time) time.Time {
	due := f.successorDue(pl, ahead[0], sight, holdFrom)
	for _, x := range ahead[1:] {
		due = later(due, f.successorDue(pl, x, sight, time.Time{}))
	}
	return due
}

// othersWatch extends the watched promise, once, to what the waiter right
// ahead of this one computes (othersDue).
func (f *fairLock) othersWatch(pl *polling, ahead []waiter) {
	if pl.watch.seen || len(ahead) < 2 {
		return
	}
	pl.watch.seen = true
	if p := f.othersDue(pl, ahead, pl.watch.sight, pl.watch.holdFrom).Add(pl.watch.margins); p.After(pl.watch.promise) {
		pl.watch.promise = earlier(p, pl.watch.promise.Add(othersCap))
	}
}

// othersCap is the most othersWatch extends a watcher's own promise: what
// two views of one hand-off can differ by (viewSlack on each side). The
// bound othersDue computes maps every move through y's next look, which
// after a stand-still of minutes is its sleep far back (up to BackCap):
// uncapped, a watcher behind eight dead waiters waited out such a sleep
// and left a free lock untaken for up to 5 minutes (TestFairLockSimulation
// seed 542; 17-20 s before othersWatch).
const othersCap = 2 * viewSlack

// othersDue bounds the ownDue that y, the waiter right ahead of this one
// (ahead[0] is the first in line, named in a hand-off that began by sight
// at the latest), computes from its own listings. Those saw every move
// later than this waiter's did (at y's next look), and dated every write
// from storage's whole seconds against other answers' Dates (writtenBy, and
// writtenNoLaterThan for the sight: up to viewSlack apart from this waiter's dates).
// Without it, a waiter two places behind the first, whose listing happened
// to date the first's join a second later than the live waiter right
// behind the first did, took the hand-off over before that waiter's own
// promise ran out (TestMultiProcessFairLock, in CI). One view deep only: y
// bounds the one ahead of it in turn, and a bound of that bound, two views
// deep, is looser again; followed all the way, ten waiters of one crashed
// host held the live one behind them for minutes. So the waiter right
// behind the first is never passed over by one further back
// (TestWatchersBehindWaitForTheOnesBetween), while one further back can be,
// once, when two or more ahead of it are dead or paused and the listings'
// dates fall badly (docs/design/fair-locks-cost.md).
func (f *fairLock) othersDue(pl *polling, ahead []waiter, sight, holdFrom time.Time) time.Time {
	y := ahead[len(ahead)-1]
	due := f.dueSeen(pl, ahead[0], f.staysSeen(pl, ahead[0], sight, holdFrom), y)
	for _, x := range ahead[1 : len(ahead)-1] {
		due = later(due, f.dueSeen(pl, x, f.staysSeen(pl, x, sight, time.Time{}), y))
	}
	return due
}

// dueSeen is dueOver over stays as y may have seen them: every date
// viewSlack earlier (the sight that ends the last stay later), every move
// seen at y's next look after this waiter's listing showed it.
func (f *fairLock) dueSeen(pl *polling, s waiter, stays []timing.Stay, y waiter) time.Time {
	datedEarlier(stays)
	for i := range stays {
		switch {
		case i == len(stays)-1:
			stays[i].To = stays[i].To.Add(viewSlack)
		case !stays[i].To.IsZero():
			// y's next look, by its schedule as y's own listings may
			// date it.
			ys := f.staysSeen(pl, y, stays[i].To, time.Time{})
			datedEarlier(ys)
			stays[i].To = f.dueOver(pl, y, ys)
		}
	}
	return f.dueOver(pl, s, stays)
}

// datedEarlier moves every known start of stays viewSlack earlier: as
// another waiter's listings may date them.
func datedEarlier(stays []timing.Stay) {
	for i := range stays {
		if !stays[i].From.IsZero() {
			stays[i].From = stays[i].From.Add(-viewSlack)
		}
	}
}

// viewSlack is how far apart two waiters may date one write they both read
// from listings or looks (writtenBy, writtenNoLaterThan: storage's whole seconds of
// Date and Last-Modified, a second each way).
const viewSlack = 2 * time.Second

// dueOver is when s, at the stays given, has surely looked, had it
// followed its schedule (see successorDue).
func (f *fairLock) dueOver(pl *polling, s waiter, stays []timing.Stay) time.Time {
	// The pace s slept by is one the record published since it joined:
	// after this waiter's first read, no more than its reads bound; before,
	// no more than pl.paces.pre (the largest pace of any list before the
	// first it read: lists only grow until full), its sleeps then counted up
	// to that read.
	joined := stays[0].From
	due := timing.SuccessorDue(stays, s.schedule(f.cfg, pl.paces.bound(joined)))
	if first := pl.paces.first; first.IsZero() || joined.IsZero() || joined.Before(first) {
		var pre []timing.Stay
		for _, st := range stays {
			if first.IsZero() {
				pre = append(pre, st)
				continue
			}
			if !st.From.IsZero() && !st.From.Before(first) {
				break
			}
			st.To = earlier(st.To, first)
			pre = append(pre, st)
		}
		paceBefore := pl.paces.pre
		if first.IsZero() {
			paceBefore = unknownPace
		}
		if d := timing.SuccessorDue(pre, s.schedule(f.cfg, paceBefore)); d.After(due) {
			due = d
		}
	}
	return due
}

// markerRest is when a watcher that looked at st (sent at sent) renews a
// hand-off's lease: the lease had handOffLeaseLeft when the hand-off began,
// and its two requests (the Change, then the marker that st's Last-Modified
// dates) took at most an attempt each, so it lasts a third of its duration
// past the marker's write, which storage's clock dates (whole seconds: up to
// two seconds earlier) against the look's Date. The renewal is sent a
// second (or an attempt, if shorter) before that: it keeps a lease nobody
// holds alive, and one that lands after the lease expired renews it all the
// same (Azure renews an expired lease nobody took since) or is refused
// (another took it); no holder's validity rests on it. Zero when the look
// does not tell. A marker whose answer was lost and that storage applied
// late leaves less: the lease may then expire first, and the queue's first
// takes the free lock, in order.
func markerRest(st Status, sent time.Time, cfg leaseConfig) time.Time {
	written := writtenBy(sent, st.listed, st.modified)
	if written.IsZero() {
		return time.Time{}
	}
	return written.Add(cfg.duration/3 - min(cfg.attemptTimeout, time.Second))
}

// passedOver marks s missed after this waiter took over a hand-off to it
// (conditional on its entry as listed: one that wrote since keeps its
// place, and is first at the next hand-off), and tells the hook.
func (f *fairLock) passedOver(ctx context.Context, s waiter) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*f.cfg.lease.attemptTimeout)
	defer cancel()
	_, _, _ = f.q.miss(cctx, s)
	fairHook("missed", f.name, s.Ticket) // passed over, marked or not
}

// takeLeft takes over a slot that v shows handed to a waiter no longer in
// the queue (it left, or was served by another slot), whose announced ID w
// knows from a listing before: w is first in line. It looks at the lock
// first, and takes over only a hand-off that look still shows: a taker
// removes its entry beside the write that records its term (renewBeside),
// so a listing can show the entry gone before that write, and a take-over
// then fails (409), a request counted as failed.
func (f *fairLock) takeLeft(ctx context.Context, w waiter, v queueView, pl *polling, budget time.Duration) (*Lock, error) {
	var now []Status // the look (nil: not yet)
	for i, st := range v.locks {
		if !st.Leased || st.Next == "" || st.Next == w.key || slices.ContainsFunc(v.ws, func(x waiter) bool { return x.key == st.Next }) {
			continue
		}
		id, ok := pl.announced(st.Next)
		if !ok && st.nextID != "" {
			id, ok = st.nextID, true // as the marker says
		}
		if !ok {
			continue
		}
		if now == nil {
			pl.sent = time.Now() // the look that gives it the lock, if any
			sts, err := f.look(ctx, 2*f.cfg.lease.attemptTimeout)
			if err != nil {
				return nil, err
			}
			now = sts
		}
		if i >= len(now) || !now[i].Leased || now[i].Next != st.Next || now[i].Epoch != st.Epoch {
			continue // taken (its term recorded), or handed on since
		}
		lk, err := f.takeFrom(ctx, waiter{key: st.Next, id: id}, i, now[i], budget)
		switch {
		case err == nil:
			return lk, nil
		case ctx.Err() == nil && (errors.Is(err, ErrLeaseHeld) || errors.Is(err, errHandOffGone)):
			continue
		default:
			return nil, err
		}
	}
	return nil, nil
}

// takeFrom takes over slot i, handed to another waiter s (a successor that
// did not come by its promise, or that left the queue without taking it):
// a Change Lease from s's hand-off ID to a fresh one only this waiter
// knows, a renewal, and its epoch (takeOver). s, if it is there, changes
// the lease first or not at all: Azure refuses the later Change.
func (f *fairLock) takeFrom(ctx context.Context, s waiter, i int, st Status, budget time.Duration) (*Lock, error) {
	m := f.slots[i]
	l := m.newLease()
	l.nextID = s.id
	tok, err := l.takeOver(ctx, budget, &st)
	if err != nil {
		return nil, err
	}
	return m.newLock(ctx, l, tok), nil
}
