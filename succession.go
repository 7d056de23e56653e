package azlease

// Passing a held lease to a chosen successor, and the successor taking it:
// the one mechanism behind fair locks (the holder of a Mutex, or of a
// Semaphore's slot, passes the lease to the first waiter of its queue:
// queue.go, fairlock.go) and planned succession (an Elector passes
// leadership to the candidate it chose: candidates.go).
//
// The holder, its work stopped (handOn):
//  1. changes the lease to an ID derived from the one the successor
//     announced (Change Lease; see below): the lease is never free, so
//     nobody else can take it meanwhile;
//  2. writes a hand-off marker into the lock blob's metadata under the
//     lease as it is now (the record's "next", naming the successor, with
//     the clean-release mark), so that the successor, polling the lock
//     blob, learns that the lease is passed to it; the change comes first,
//     so that a successor that sees the marker finds the lease under the
//     hand-off's ID (its Change never fails for being early);
//  3. waits, for a bounded time, for the successor's term to show in the
//     lock blob (its epoch). If it does not, the holder, which knows the
//     ID it handed the lease to, clears the marker, moves the lease on to
//     the next candidate and names it, and so on, and releases the lease
//     when none is left (the clear first: a successor passed over never
//     finds its name beside a lease that has moved on).
//     Azure decides the race between a late successor and the holder
//     moving on: whoever changes the lease's ID first wins; the other's
//     Change is refused.
//
// The lease is handed to an ID derived from the one the successor announced
// and the epoch of the term handed on (handOffID), never to the announced ID
// itself: a waiter's announcement stays in its queue entry, and may be handed
// the lease by several holders in turn (it missed a hand-off, the lease was
// broken, a later holder handed it the lease again). Had they all used one
// ID, a former holder's hand-on chain, still running after its term was
// broken, would find the lease under the ID it had handed it to, and act on
// a newer term: write its old record over the newer one (a fencing epoch
// going back) and pass the newer holder's lease on. Each term's hand-offs
// use IDs of their own, so no two terms ever share a lease ID.
//
// The successor (takeHandOff), seeing the marker name it, changes the lease
// from that ID to a fresh one only it knows (from then on the
// holder cannot move it on), renews it (Change Lease does not renew: the
// lease's time is still the former holder's), and writes its epoch; its
// term's validity starts at that renewal's send. Every request of either
// side carries one lease ID and acts only while the lease has that ID, so a
// request applied late acts on nothing: the successor's term has a lease ID
// that no request of the holder's ever carried.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/azlease/azlease/internal/timing"
)

// successor is a candidate for a hand-off.
type successor struct {
	// key names it in the hand-off marker: a queue ticket, or an Elector
	// candidate's identity.
	key string
	// id is the lease ID it announced (its Lease's NextLeaseID).
	id string
	// holder is its identity, as its term's record will name it ("":
	// unknown), to tell its term from another holder's (handOnOutcome,
	// takenBy): a fair lock's waiter's, an Elector candidate's identity.
	holder string
	// wait is how long it may take to notice the marker and change the
	// lease to its own ID: its poll interval, while it polls the lock
	// blob. The holder adds a margin for requests in flight.
	wait time.Duration
	// passed, when not nil, is called when it did not take the lease in
	// time (a fair lock marks it missed in its queue).
	passed func()
	// why is the reason of the hand-over, as the marker records it
	// (handOverChange): an Elector's ("stop", "yield", …), or "" for a
	// fair lock's queue.
	why string
	// look, when not nil, reads the lock blob for the holder's wait in
	// place of Get Blob Properties, and reports whether the successor has
	// left (it will not take the lease: it was served elsewhere, or gone):
	// the holder then moves on at once, without calling passed.
	look func(ctx context.Context, limit time.Time) (st Status, left bool, err error)
	// handed, when not nil, is called once the lease is under its hand-off
	// ID and the marker names it: a fair lock's waiter in this process is
	// woken to take it at once, without waiting for its next look.
	handed func()
	// due, when not nil, is a fair lock's (issue 35's watcher rule, in
	// which the waiter behind a successor that does not come passes it
	// over, not the holder): the instant by which a waiter of the queue
	// (the successor, or the one behind it) surely looks at the lock after
	// a marker written at its argument, and so takes the lease or renews
	// it (zero: unknown). When the lease outlasts it, with a margin and an
	// attempt, the hand-off ends once the lease is under its hand-off ID
	// and the marker names the successor: the holder waits for nobody. The
	// lease is renewed first when that makes it so (and when it has less
	// than handOffLeaseLeft left, so that the watcher finds it alive).
	// Otherwise the holder keeps the lease alive (see keepAlive).
	due func(marker time.Time) time.Time
	// keepAlive marks a fair lock's successor that may be asleep for
	// longer than the lease lasts (its due is later than the lease): the
	// holder waits for its term (or a watcher's take-over) up to wait,
	// renewing the lease under the hand-off's ID, and looks often at first
	// (from 10 ms): it never passes it over (passed is nil). It stops as
	// soon as a renewal makes the lease outlast due: the queue takes it
	// from there.
	keepAlive bool
	// publish adds hold to the lock record's published holds (metaHolds)
	// with the marker: a fair lock's (issue 35's pace), once per hand-off.
	publish bool
	hold    time.Duration
}

// handOffLeaseLeft is the least time a due hand-off leaves on the lease
// as it begins (the holder renews first otherwise): its two requests'
// attempts and a third of the lease (5 s with the defaults), which the
// watcher behind the successor counts on from the last look at which it saw
// no marker, renewing under the hand-off's ID itself when it must wait
// longer (fairwatch.go).
func handOffLeaseLeft(cfg leaseConfig) time.Duration {
	return 2*cfg.attemptTimeout + cfg.duration/3
}

// handOnOutcome is how a hand-off ended.
type handOnOutcome struct {
	// taker is the key of the successor that took the lease (its term's
	// epoch shows in the lock blob), or "".
	taker string
	// handed is the key of the successor a due hand-off named (the
	// lease under its hand-off ID, the marker written), or "".
	handed string
	// released is true when nobody took it and it was released (or it was
	// no longer present: expired or broken).
	released bool
	// passed lists the keys of the successors that did not take it in time.
	passed []string
	// lost says how the lease left the hand-off's hands when nobody it was
	// handed to took it: lostExpired, lostBroken, lostReleased, lostTaken
	// (a newer term than the hand-off's, not its successor's) or lostHeld;
	// "" otherwise.
	lost string
}

// The ways a hand-off can lose its lease with nobody it was handed to
// taking it (handOnOutcome.lost).
const (
	lostExpired  = "expired"
	lostBroken   = "broken"
	lostReleased = "released" // by someone else: a successor that gave its ID back
	lostTaken    = "taken by another holder"
	// lostHeld: held under an ID no term shows (a successor changed the
	// lease to its own and did not write its epoch); it expires.
	lostHeld = "held under an unknown ID"
)

// errHandOffLost means the lease was not this Lease's any more when the
// hand-off began: nothing was handed on.
var errHandOffLost = errors.New("the lease was no longer this holder's")

// errForeignRecord means a hand-off's marker found, under the hand-off's
// lease, a record the term did not write (a newer epoch): it is never
// written over.
var errForeignRecord = errors.New("the lock blob has a newer term's record")

// minHandOffMargin bounds from below the margin a holder adds to a
// successor's wait for requests in flight (its poll's read and its Change):
// a few round trips as the holder measured them, but never less than this,
// so that a loaded machine's scheduling delays do not pass over a
// successor that is there.
const minHandOffMargin = 50 * time.Millisecond

// handOn hands the held lease on to the first of succs that takes it (see
// the top of this file). The term must have ended and its work stopped:
// handOn stops holding before it sends anything, as HandOff does. It
// returns who took it, or that nobody did (the lease was then released).
// An error means the hand-off could not go on (the lease was lost before it
// began, or storage failed): the lease may still be under the ID it was last
// handed to, and expires on its own. id is the lease ID of the term handed
// on: a Lease that holds another term (or none) sends nothing and returns
// ErrNotHeld.
func (l *Lease) handOn(ctx context.Context, id string, succs []successor) (handOnOutcome, error) {
	i := 0
	return l.handOnEach(ctx, id, func() (successor, bool) {
		if i == len(succs) {
			return successor{}, false
		}
		i++
		return succs[i-1], true
	})
}

// handOnEach is handOn with the successors given one at a time: next gives
// the first, and the next each time one did not take the lease in time
// (after its passed), until it reports none left. A fair lock picks each
// from the queue as it is then (a waiter passed over may be back).
//
// Change Lease does not renew the lease, so a chain that waits for many
// successors renews it, under the hand-off's ID, before a wait it might
// not outlive: the lock stays handed on, never free, however long the
// chain. When the lease leaves the chain's hands (a request refused for
// the ID), it reads the lock blob to tell a successor that took it from a
// lease that expired, was broken, or was taken by another holder.
func (l *Lease) handOnEach(ctx context.Context, id string, next func() (successor, bool)) (handOnOutcome, error) {
	var out handOnOutcome
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	own, state, validUntil, md, etag, epoch := l.id, l.state, l.validUntil, l.md, l.etag, l.token.Epoch
	if state != held || own != id || !time.Now().Before(validUntil) || !l.termStarted() {
		l.mu.Unlock()
		return out, ErrNotHeld
	}
	l.state, l.id, l.md, l.token = notHeld, "", nil, Token{}
	notify := l.hookFor(own)
	l.mu.Unlock()
	if notify != nil {
		notify(ErrStopped)
	}
	rec, err := parseRecord(md)
	if err != nil {
		return out, l.errorf("handoff", ErrPermanent, err)
	}
	rec.released = true
	stopped := time.Now().UTC() // the term's work has stopped: its end, as the marker records it
	m := &marker{rec: rec, md: md, etag: etag}
	handed := rec.epoch // the epoch the successor reads beside the marker: handOffID's
	cur := own
	leaseUntil := validUntil // the lease under cur lasts at least until then
	renewing := false        // a renewal was sent under cur: one applied late must be settled
	var prev successor       // the last successor the lease was changed to
	published := false       // this term's hold is in m.rec.holds
	// lostUnder ends the chain when a request under cur was refused for
	// the ID (ErrLeaseLost): before anything was handed on, nothing was;
	// after, the lock blob tells what became of the lease.
	lostUnder := func(err error) (handOnOutcome, error) {
		if cur == own {
			return out, fmt.Errorf("%w: %w", errHandOffLost, err)
		}
		return l.chainLost(ctx, out, epoch, cur, prev, renewing), nil
	}
	for {
		s, ok := next()
		if !ok {
			break
		}
		// 0. The lease, alive through this successor's turn: the marker,
		// the change and the wait, with an attempt's time to spare.
		need := s.wait + awaitLook + l.cfg.attemptTimeout
		if s.due != nil {
			// Enough for the queue to act on the marker, when a renewal
			// can give that (the Change and the marker a few round trips
			// away); and never less than what the watcher counts on.
			need = handOffLeaseLeft(l.cfg)
			if by := s.due(time.Now().Add(awaitLook)); !by.IsZero() {
				if d := time.Until(by) + minHandOffMargin + awaitLook + l.cfg.attemptTimeout; d > need && d <= l.cfg.duration-l.cfg.margin-awaitLook {
					need = d
				}
			}
		}
		if time.Until(leaseUntil) < need {
			renewing = true
			send, rerr := l.renewHandOff(ctx, cur)
			switch {
			case rerr == nil:
				leaseUntil = timing.ValidUntil(send, l.cfg.duration, l.cfg.margin)
			case errors.Is(rerr, ErrLeaseLost):
				return lostUnder(rerr)
			case ctx.Err() != nil:
				return out, rerr
			}
			// Otherwise go on: the lease may still last; a refusal
			// below tells.
		}
		// 1. The lease, to this term's ID for the successor (handOffID of
		// the ID it announced), before the marker names it: a successor
		// acts on the marker only, so its Change always finds the lease
		// under the hand-off's ID (issue 35: with the marker first, a
		// successor that looked between the two had its Change refused,
		// 409, and looked again).
		to := handOffID(s.id, handed)
		fromOwn := cur == own
		if !fromOwn && m.rec.successor != "" {
			// The marker still names the successor passed over, under
			// whose hand-off ID the lease is: cleared first, so that one
			// looking late never finds its name beside a lease moved on
			// (its Change would be refused, 409). One request per pass-over.
			m.rec.successor = ""
			switch werr := l.writeMarker(ctx, cur, m); {
			case werr == nil:
			case errors.Is(werr, ErrLeaseLost):
				return lostUnder(werr)
			default:
				l.abandonHandOff(ctx, cur)
				return out, werr
			}
		}
		start := time.Now() // the Change and the marker: the round trips the margin below counts
		cerr := l.changeID(ctx, cur, to, time.Now().Add(l.cfg.attemptTimeout))
		switch {
		case cerr == nil:
			cur, prev, renewing = to, s, false
		case errors.Is(cerr, ErrLeaseLost) || bloberror.HasCode(cerr, bloberror.LeaseNotPresentWithLeaseOperation):
			// Under the term's own ID: expired or broken before anything
			// was handed on (errHandOffLost); under a hand-off's: the
			// lock blob tells.
			return lostUnder(cerr)
		default:
			l.abandonHandOff(ctx, cur)
			return out, cerr
		}
		// 2. The marker, under the lease as it is now: the successor's
		// to take.
		m.rec.successor, m.rec.successorID = s.key, ""
		if s.publish && !published {
			m.rec.holds, published = pushHold(m.rec.holds, s.hold), true
		}
		if s.due != nil {
			// A fair lock's: a waiter that finds the successor gone from
			// the queue takes the hand-off over with it (fairwatch.go).
			m.rec.successorID = s.id
		}
		end := m.rec.cur
		end.endedBy, end.ended = handOverChange(s.why, l.cfg.role), stopped
		m.rec.setCur(end)
		werr := l.writeMarker(ctx, cur, m)
		rtt := time.Since(start)
		switch {
		case werr == nil:
		case errors.Is(werr, errForeignRecord) && fromOwn:
			// The lease was the term's own until the Change above, and,
			// still under the hand-off's ID (the record was read under
			// it), the lock blob holds a record the term did not write:
			// nothing is handed on, nothing written over, and the lease,
			// under an ID nobody acts on, expires (as it did under the
			// term's own ID when the marker came first).
			return out, fmt.Errorf("%w: %w", errHandOffLost, werr)
		case errors.Is(werr, ErrLeaseLost):
			return lostUnder(werr)
		default:
			l.abandonHandOff(ctx, cur)
			return out, werr
		}
		if s.handed != nil {
			s.handed()
		}
		// 3. Its term, within its wait and a margin for requests in flight:
		// four round trips as the two requests above measured them.
		margin := max(minHandOffMargin, 2*rtt)
		keep := s.keepAlive
		// queueActs reports whether the lease, as this hand-off last made
		// sure of it, outlasts the instant by which the queue acts on the
		// marker (s.due), with the margin and an attempt for that act.
		var by time.Time
		if s.due != nil {
			by = s.due(time.Now())
		}
		queueActs := func() bool {
			return !by.IsZero() && !leaseUntil.Before(by.Add(margin+l.cfg.attemptTimeout))
		}
		if s.due != nil {
			if queueActs() {
				out.handed = s.key
				return out, nil
			}
			// Nobody in the queue surely looks within the lease (a
			// successor asleep far back after a long stand-still): keep
			// it alive, in Unlock, until one of them takes it or the lease
			// outlasts their next look.
			keep = true
		}
		waitEnd := time.Now().Add(s.wait + margin)
		var (
			took, gone, left bool
			err              error
		)
		for {
			// A keepAlive wait renews the lease under the hand-off's ID
			// before it would expire: the lock is never free while it
			// waits (a renewal refused for the ID: taken, or gone).
			until := waitEnd
			if keep {
				if renewBy := leaseUntil.Add(-awaitLook - l.cfg.attemptTimeout); renewBy.Before(until) {
					until = renewBy
				}
			}
			took, gone, left, err = l.awaitTaker(ctx, epoch, s.holder, until, s.look, keep)
			if err != nil || took || gone || left || !keep || !time.Now().Before(waitEnd) {
				break
			}
			renewing = true
			send, rerr := l.renewHandOff(ctx, cur)
			switch {
			case rerr == nil:
				leaseUntil, renewing = timing.ValidUntil(send, l.cfg.duration, l.cfg.margin), false
				if queueActs() {
					// The successor (or the one behind it) now surely
					// looks while the lease lasts: the queue takes it
					// from here.
					out.handed = s.key
					return out, nil
				}
			case errors.Is(rerr, ErrLeaseLost):
				return lostUnder(rerr)
			case ctx.Err() != nil:
				return out, rerr
			}
		}
		switch {
		case err != nil:
			return out, err
		case took:
			out.taker = s.key
			return out, nil
		case gone:
			// No lease any more: the successor took it and released it
			// already, or gave it back, or it expired or was broken; or
			// another holder's term followed the hand-off's.
			return l.chainLost(ctx, out, epoch, cur, prev, false), nil
		}
		out.passed = append(out.passed, s.key)
		if left {
			l.cfg.log.Debug("azlease: successor left; passing the lease on", slog.String("successor", s.key))
			continue
		}
		l.cfg.log.Debug("azlease: successor did not take the lease in time; passing it on", slog.String("successor", s.key))
		if s.passed != nil {
			s.passed()
		}
	}
	// Nobody took it: release it under the ID it has now, marked clean and
	// with no successor named. If the last successor took it meanwhile,
	// Azure refuses both requests.
	m.rec.successor = ""
	end := m.rec.cur
	end.endedBy, end.ended = ChangeReleased, stopped
	m.rec.setCur(end)
	if werr := l.writeMarker(ctx, cur, m); cur != own && errors.Is(werr, ErrLeaseLost) {
		return lostUnder(werr)
	}
	if err := l.releaseID(ctx, cur, time.Now().Add(l.cfg.attemptTimeout), cur == own); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return lostUnder(err)
		}
		return out, err
	}
	out.released = true
	return out, nil
}

// chainLost settles how a hand-on chain ended when its lease was no longer
// under cur, the ID it last handed it to (prev): it reads the lock blob.
// A newer term than the hand-off's (epoch) is prev's when the first term
// recorded after the hand-off's names prev's holder (takenBy; or prev's
// holder is unknown); a lease held with the
// hand-off's epoch may be prev's term starting (its Change applied, its
// epoch not written yet), so it waits a few round trips for the epoch
// before calling it held by an unknown ID. renewing says a renewal under
// cur may still be applied late: if the lease expired under cur, cur is
// released, so that it cannot be revived.
func (l *Lease) chainLost(ctx context.Context, out handOnOutcome, epoch uint64, cur string, prev successor, renewing bool) handOnOutcome {
	ctx = context.WithoutCancel(ctx)
	st, err := l.inspect(ctx, time.Now().Add(l.cfg.attemptTimeout))
	if err == nil && st.Leased && st.Epoch <= epoch {
		// Changed by prev at the last moment, or by someone else: give
		// the epoch write a few attempts' time.
		if took, gone, _, _ := l.awaitTaker(ctx, epoch, prev.holder, time.Now().Add(2*l.cfg.attemptTimeout), nil, false); took || gone {
			st, err = l.inspect(ctx, time.Now().Add(l.cfg.attemptTimeout))
		}
	}
	switch {
	case err != nil:
		out.lost = lostHeld // unknown: say the least
	case st.Epoch > epoch && takenBy(st, epoch, prev.holder):
		out.taker = prev.key
	case st.Epoch > epoch:
		out.lost = lostTaken
	case st.Leased:
		out.lost = lostHeld
	default:
		out.released = true
		switch st.State {
		case "broken":
			out.lost = lostBroken
		case "expired":
			out.lost = lostExpired
			if renewing {
				_ = l.releaseID(ctx, cur, time.Now().Add(l.cfg.attemptTimeout), true)
			}
		default:
			out.lost = lostReleased
		}
	}
	return out
}

// renewHandOff renews the lease under the hand-off ID id (or the term's
// own, before the first change), for at most AttemptTimeout, and returns
// the send instant of the renewal that succeeded. Only the holder that
// handed the lease on knows id, and no term ever has it: a renewal (even
// one applied late) acts on this hand-off's lease or on nothing (Azure
// refuses an ID the lease does not have, and a released lease).
func (l *Lease) renewHandOff(ctx context.Context, id string) (send time.Time, err error) {
	err = l.loop(ctx, "renew", time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, now time.Time) (bool, error) {
		_, err := l.leaseClient(id).RenewLease(actx, nil)
		if err == nil {
			send = now
		}
		return l.handOffEnd(ctx, "renew", err)
	})
	return send, err
}

// abandonHandOff gives up a hand-off that storage did not let go on: the
// lease stays under id, held by nobody, and expires on its own; the ID is
// released if a request gets through (it is never used for a term again).
func (l *Lease) abandonHandOff(ctx context.Context, id string) {
	if cctx, cancel, ok := l.cleanupContext(ctx); ok {
		_ = l.releaseID(cctx, id, time.Now().Add(l.cfg.attemptTimeout), true)
		cancel()
	}
}

// marker is what a hand-off writes into the lock blob: its term's record,
// with the clean-release mark and the successor it names, over the
// metadata the hand-off last read or wrote (md), whose ETag is etag.
type marker struct {
	rec  record
	md   map[string]*string
	etag azcore.ETag
}

// writeMarker writes m into the lock blob under the lease ID id,
// conditional on m.etag, retrying transient failures for at most
// AttemptTimeout, and keeps m's metadata and ETag as written. A stale etag
// means a write since, which only a read tells apart: this write's own
// earlier attempt whose answer was lost, or a write of this term (another
// of the holder's, whose answer was lost) show the term's own epoch, and
// the marker is written again over what was read; any other record is a
// newer term's (the successor took the lease), and ends the hand-off with
// ErrLeaseLost. A record the hand-off did not expect is never written over.
func (l *Lease) writeMarker(ctx context.Context, id string, m *marker) error {
	return l.loop(ctx, "write", time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		for reread := 0; ; reread++ {
			md := m.rec.format(m.md)
			var ifMatch *azcore.ETag
			if m.etag != "" {
				ifMatch = &m.etag
			}
			resp, err := l.bc.SetMetadata(actx, md, &blob.SetMetadataOptions{AccessConditions: leaseAccess(id, ifMatch)})
			if err == nil {
				m.md, m.etag = md, *resp.ETag
				return true, nil
			}
			if bloberror.HasCode(err, bloberror.ConditionNotMet) && reread < 2 {
				props, rerr := l.bc.GetProperties(actx, &blob.GetPropertiesOptions{AccessConditions: leaseAccess(id, nil)})
				if rerr != nil {
					return l.handOffEnd(ctx, "write", rerr)
				}
				got, perr := parseRecord(props.Metadata)
				switch {
				case perr != nil:
					return true, l.errorf("write", ErrPermanent, perr)
				case got.epoch != m.rec.epoch || props.ETag == nil:
					return true, l.errorf("write", ErrLeaseLost, fmt.Errorf("%w: %w (epoch %d, the hand-off's %d)", err, errForeignRecord, got.epoch, m.rec.epoch))
				}
				mine := got.successor == m.rec.successor && got.released
				got.released, got.successor = true, m.rec.successor
				got.setCur(m.rec.cur)
				m.rec, m.md, m.etag = got, props.Metadata, *props.ETag
				if mine {
					return true, nil // this write's own earlier attempt
				}
				continue
			}
			return l.handOffEnd(ctx, "write", err)
		}
	})
}

// handOffEnd ends an attempt of one of a hand-off's requests (the
// marker's write, Change Lease) on its answer err: a conflict is retried as
// a transient failure is, and a lease gone in any way (another ID, broken,
// the blob deleted) ends the hand-off with ErrLeaseLost; the rest as
// attemptEnd.
func (l *Lease) handOffEnd(ctx context.Context, op string, err error) (bool, error) {
	switch c := classify(ctx, err); c {
	case classOK:
		return true, nil
	case classConflict:
		return false, l.errorf(op, ErrTransient, err)
	case classLost, classBroken, classNotFound:
		return true, l.errorf(op, ErrLeaseLost, err)
	default:
		return l.attemptEnd(op, c, err)
	}
}

// handOffID is the lease ID a hand-off of the term with epoch epoch to the
// successor that announced the lease ID announced uses: a version-4-shaped
// UUID (Azure takes any GUID) derived from both, so the successor, which
// reads the epoch beside the marker, knows it, and a hand-off of another
// term to the same successor uses another (see the top of this file).
func handOffID(announced string, epoch uint64) string {
	sum := sha256.Sum256([]byte("azlease hand-off\x00" + announced + "\x00" + strconv.FormatUint(epoch, 10)))
	return formatGUID([16]byte(sum[:16]))
}

// changeID changes the lease from the ID from to the ID to, retrying
// transient failures until limit. A retried change that already happened
// succeeds (Azure accepts a change to the ID the lease already has), so
// retries are idempotent. ChangeLease rewrites the SDK client's lease ID
// field: a fresh client per attempt.
func (l *Lease) changeID(ctx context.Context, from, to string, limit time.Time) error {
	return l.loop(ctx, "handoff", limit, func(actx context.Context, _ time.Time) (bool, error) {
		_, err := l.leaseClient(from).ChangeLease(actx, to, nil)
		return l.handOffEnd(ctx, "handoff", err)
	})
}

// awaitTaker polls the lock blob until deadline for the successor's term:
// an epoch above epoch whose first term is holder's (took; takenBy), or no
// lease at all (gone: the successor released it already, or it expired),
// or a newer term of another holder's (gone too: the lease was broken or
// expired and taken). Its last look is at the deadline.
// Each look may take until the deadline, and at least awaitLook: bounded by
// the deadline alone, no look would be sent in its last timing.MinAttempt,
// and a successor that took the lease then would be passed over. look,
// when not nil, makes each look (successor.look) and reports that the
// successor left (left: it will not take the lease). grow starts the looks
// 10 ms apart, half as far again each time, up to 100 ms (a fair lock's
// successor is usually quick, and may take minutes).
func (l *Lease) awaitTaker(ctx context.Context, epoch uint64, holder string, deadline time.Time, look func(context.Context, time.Time) (Status, bool, error), grow bool) (took, gone, left bool, err error) {
	step := min(max(time.Until(deadline)/8, 10*time.Millisecond), 100*time.Millisecond)
	if grow {
		step = 10 * time.Millisecond
	}
	for {
		limit := deadline
		if soon := time.Now().Add(awaitLook); soon.After(limit) {
			limit = soon
		}
		var (
			st   Status
			away bool
			ierr error
		)
		if look != nil {
			st, away, ierr = look(ctx, limit)
		} else {
			st, ierr = l.inspect(ctx, limit)
		}
		switch {
		case ierr != nil && ctx.Err() != nil:
			return false, false, false, ierr
		case ierr == nil && st.Epoch > epoch:
			took := takenBy(st, epoch, holder)
			return took, !took, false, nil
		case ierr == nil && !st.Leased:
			return false, true, false, nil
		case ierr == nil && away:
			return false, false, true, nil
		}
		rest := time.Until(deadline)
		if rest <= 0 {
			return false, false, false, nil
		}
		if !sleepCtx(ctx, min(step, rest)) {
			return false, false, false, context.Cause(ctx)
		}
		if grow {
			step = min(step*3/2, 100*time.Millisecond)
		}
	}
}

// takenBy reports whether the first term st records after epoch (the
// hand-off's) is holder's, or holder is unknown (""): whether the
// successor took the lease, rather than another holder after an expiry or
// a break. The first term after epoch, not the latest: the successor may
// have handed the lease on already. With that term no longer recorded, the
// latest holder decides.
func takenBy(st Status, epoch uint64, holder string) bool {
	if holder == "" {
		return true
	}
	first := st.Holder
	for _, h := range st.History { // newest first
		if h.Epoch <= epoch {
			break
		}
		first = h.Holder
	}
	return first == holder
}

// awaitLook is the least time one of awaitTaker's looks may take, retries
// included: a few round trips, more than timing.MinAttempt.
const awaitLook = 2 * minHandOffMargin

// errPassedOver means a lease handed to this Lease had been passed on to
// another successor (or taken by another holder) when this Lease tried to
// take it.
var errPassedOver = fmt.Errorf("%w: the hand-off was passed on before this holder took it", ErrLeaseHeld)

// errHandOffGone means a lease handed to this Lease was no longer present
// (it expired, or was released or broken) when this Lease tried to take it:
// the lock is free.
var errHandOffGone = errors.New("azlease: the lease handed to this holder is no longer present")

// takeHandOff takes the lease handed to announced, the ID derived from the
// one this Lease announced (its NextLeaseID; see takeOver), by changing
// it to a fresh ID (find); begin renews it beside the epoch write, so the
// send it returns is zero. It fails with errPassedOver when
// the lease is held under another ID, and with errHandOffGone when there is
// no lease.
func (l *Lease) takeHandOff(ctx context.Context, announced string, budget time.Duration) (string, time.Time, []string, error) {
	limit := time.Now().Add(budget)
	maybe := []string{announced}
	for round := 0; ; round++ {
		id, send, ok, present, more := l.find(ctx, maybe, limit, false)
		maybe = append(maybe, more...)
		switch {
		case ok:
			return id, send, idsExcept(maybe[1:], id), nil
		case !present:
			return "", time.Time{}, maybe[1:], errHandOffGone
		case len(more) == 0 || ctx.Err() != nil || round == 2 || !time.Now().Before(limit):
			// Held under another ID: the holder moved on, has not changed
			// the lease to the hand-off's ID yet, or someone else holds
			// it. The hand-off's ID is not given back (released): only
			// the holder that handed the lease on uses it, and may still
			// change the lease to it, for this Lease to take at its next
			// look; releasing it then would free the lock under the
			// hand-off.
			return "", time.Time{}, maybe[1:], errPassedOver
		}
		// A change whose outcome is unknown: the lease may be under its
		// fresh ID; look again, that ID included.
	}
}

// takeOver starts a term on a lease handed to this Lease (see the top of
// this file): seen is the lock blob as the poll that found the marker read
// it. The ID taken over is derived from the one NextLeaseID announced and
// the epoch of the term that handed it on (seen's: handOffID).
func (l *Lease) takeOver(ctx context.Context, budget time.Duration, seen *Status) (Token, error) {
	if seen == nil {
		return Token{}, fmt.Errorf("azlease: internal error: a take-over without the look that found the hand-off")
	}
	return l.begin(ctx, budget, seen, true, func(ctx context.Context, announced string, budget time.Duration) (string, time.Time, []string, error) {
		return l.takeHandOff(ctx, handOffID(announced, seen.Epoch), budget)
	})
}
