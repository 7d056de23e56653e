package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azlease/azlease/internal/timing"
)

// Term is one continuous holding of a lease: it begins with an acquisition
// and ends when the lease is released, lost, or its validity deadline passes
// without a renewal. Its context is cancelled when it ends, with a cause that
// says why ([ErrStopped], or an error wrapping [ErrLeaseLost]); read it with
// [context.Cause] or [Term.Err].
//
// [Term.Valid], [Term.Err] and the Err of [Term.Context] check the clock
// themselves: they report the term ended as soon as its deadline passed, even
// if no azlease goroutine has run since (a paused process). Check one of them
// right before each action that must happen under the lease. A Term is safe
// for concurrent use; the zero Term is not held: it reports [ErrNotHeld].
type Term struct {
	ctx    *termContext
	cancel context.CancelCauseFunc // ends the term; counts its end once
	token  Token
	start  time.Time
	lease  *Lease

	// deadline is the validity deadline, in nanoseconds after start on the
	// monotonic clock: read without a lock on every check of the context.
	deadline atomic.Int64

	mu         sync.Mutex
	validUntil time.Time
	lastRenew  time.Time // send instant of the last successful acquire or renew
	heartbeat  time.Time
}

func newTerm(parent context.Context, l *Lease, tok Token, lastSend, validUntil time.Time) *Term {
	inner, cancel := context.WithCancelCause(parent)
	now := time.Now()
	t := &Term{token: tok, start: now, lease: l, validUntil: validUntil, lastRenew: lastSend, heartbeat: now}
	t.ctx = &termContext{Context: inner, t: t}
	t.deadline.Store(int64(validUntil.Sub(now)))
	// Every way a term ends goes through t.cancel (the keeper's deadline
	// timer and renewals, its owner, and a holder's check noticing the
	// deadline), so
	// the end is counted here, once, with the cause the holder reads.
	var tm *telemetry // nil records nothing
	if l != nil {
		tm = l.tm
	}
	var counted atomic.Bool
	t.cancel = func(cause error) {
		cancel(cause)
		if !counted.Load() && counted.CompareAndSwap(false, true) {
			tm.termEnded(context.Cause(inner))
		}
	}
	tm.termStarted()
	return t
}

// termContext is the context a Term hands its holder. The keeper's deadline
// timer cancels it at the validity deadline; in addition, Err and Value
// (through which [context.Cause] reads the cause) check the deadline
// themselves and cancel it when it has passed, so a goroutine that runs
// before the timer's function (after a pause of the whole process) still
// sees the term as ended. Done is
// the cancel context's channel: it is closed whenever Err is not nil.
//
// Contexts derived from it (WithTimeout, WithValue, …) are cancelled with it
// but do not check the clock themselves: check the term's own context, or
// [Term.Valid], right before acting.
type termContext struct {
	context.Context // the cancel-cause context: Deadline, Done
	t               *Term
}

func (c *termContext) Err() error {
	c.t.expireIfPast()
	return c.Context.Err()
}

func (c *termContext) Value(key any) any {
	c.t.expireIfPast()
	if key == (termKey{}) {
		return c.t
	}
	return c.Context.Value(key)
}

// termKey is the context key under which a term's context answers with its
// Term.
type termKey struct{}

// TermFromContext returns the Term whose context ctx is or derives from: the
// context an [Elector] hands its task, a [Lock]'s context, or the context
// [DoOnce] hands fn. With nested terms (a Mutex locked inside a leader
// task), it is the innermost. ok is false when ctx belongs to no term.
//
// It is how code that only has the context learns the term's validity
// deadline ([Term.ValidUntil]) or its token; the Term also reports its end
// by itself ([Term.Valid]), which a derived context does not.
func TermFromContext(ctx context.Context) (term *Term, ok bool) {
	if ctx == nil {
		return nil, false
	}
	t, ok := ctx.Value(termKey{}).(*Term)
	return t, ok && t != nil
}

func (c *termContext) String() string { return "azlease.Term.Context" }

// expireIfPast ends the term with ErrDeadlinePassed if its validity deadline
// has passed. It is cheap: one clock read and an atomic load.
func (t *Term) expireIfPast() {
	if time.Since(t.start) >= time.Duration(t.deadline.Load()) {
		t.cancel(ErrDeadlinePassed) // a no-op if the term already ended
	}
}

// endedContext is what a zero Term hands out: a context already cancelled,
// with cause ErrNotHeld.
var endedContext = func() context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrNotHeld)
	return ctx
}()

// Context returns the term's context. It is cancelled when the term ends, at
// the latest at the validity deadline, even if a renewal request hangs, and
// its Err reports the deadline as soon as it passes, even if no azlease
// goroutine has run since. Contexts derived from it are cancelled with it,
// but only the term's own context checks the clock: check it (or
// [Term.Valid]) right before each action.
func (t *Term) Context() context.Context {
	if t == nil || t.ctx == nil {
		return endedContext
	}
	return t.ctx
}

// Done is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.Context().Done() }

// Err returns nil while the term lasts, then why it ended. It checks the
// validity deadline itself, as [Term.Valid] does.
func (t *Term) Err() error {
	ctx := t.Context()
	if ctx.Err() == nil {
		return nil
	}
	return context.Cause(ctx)
}

// Token returns the term's fencing token.
func (t *Term) Token() Token {
	if t == nil {
		return Token{}
	}
	return t.token
}

// Epoch returns the term's fencing epoch, Token().Epoch. Epochs count per
// lock blob: compare it only with epochs of the same lock (see [Token]).
func (t *Term) Epoch() uint64 { return t.Token().Epoch }

// StartedAt returns when the term began, on the local clock.
func (t *Term) StartedAt() time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.start
}

// ValidUntil returns the current validity deadline; renewals move it on.
func (t *Term) ValidUntil() time.Time {
	if t == nil {
		return time.Time{}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.validUntil
}

// Valid reports whether the term is certainly still held: it has not ended
// and its validity deadline has not passed. It checks the clock itself, so it
// turns false at the deadline whatever its renewal is doing.
func (t *Term) Valid() bool {
	return t != nil && t.ctx != nil && t.ctx.Err() == nil
}

// Heartbeat records that the work done under this term is making progress.
// An [Elector] with ElectorOptions.HeartbeatTimeout reports itself unhealthy
// when its leader's work stops calling it.
func (t *Term) Heartbeat() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.heartbeat = time.Now()
	t.mu.Unlock()
}

func (t *Term) lastHeartbeat() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.heartbeat
}

func (t *Term) renewedAt() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastRenew
}

// Read returns the lock blob's content, read under the term's lease: it
// fails (wrapping [ErrLeaseLost]) if the lease is no longer this term's.
// State kept in the lock blob is fenced by Azure itself: see [Term.Write].
func (t *Term) Read(ctx context.Context) ([]byte, error) {
	if !t.Valid() {
		return nil, t.endedErr()
	}
	return t.lease.readAs(ctx, t.token.LeaseID)
}

// Write replaces the lock blob's content under the term's lease, keeping its
// metadata. Azure rejects the write if the lease is no longer this term's,
// so a former holder that was paused or cut off cannot overwrite a newer
// holder's state: the write fails with an error wrapping [ErrLeaseLost], and
// the term ends at once with that cause. Writing after the term ended
// returns an error wrapping [ErrNotHeld] and the term's end cause, without
// a request. The write always carries this
// term's lease ID, never a later term's.
func (t *Term) Write(ctx context.Context, content []byte) error {
	if !t.Valid() {
		return t.endedErr()
	}
	return t.lease.writeAs(ctx, t.token.LeaseID, content)
}

// SetMetadata replaces the lock blob's user metadata under the term's lease;
// see [Lease.SetMetadata] and [Term.Write].
func (t *Term) SetMetadata(ctx context.Context, md map[string]string) error {
	if !t.Valid() {
		return t.endedErr()
	}
	return t.lease.setMetadataAs(ctx, t.token.LeaseID, md)
}

// endedErr is what an operation of an ended term returns without a
// request: an error wrapping ErrNotHeld and the cause the term ended with.
func (t *Term) endedErr() error {
	if t == nil || t.ctx == nil {
		return ErrNotHeld
	}
	return fmt.Errorf("%w: its term has ended: %w", ErrNotHeld, t.Err())
}

// extend records a renewal. It moves the validity deadline only while the
// term lasts: a renewal whose answer arrives after the term ended, or after
// its deadline passed, does not revive it. The renewal time is recorded
// either way, since an owner draining its work still holds (and renews) the
// lease.
func (t *Term) extend(lastSend, validUntil time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if lastSend.After(t.lastRenew) {
		t.lastRenew = lastSend
	}
	if t.ctx.Err() == nil && validUntil.After(t.validUntil) {
		t.validUntil = validUntil
		t.deadline.Store(int64(validUntil.Sub(t.start)))
	}
}

// end cancels the term with cause, unless it already ended.
func (t *Term) end(cause error) { t.cancel(cause) }

// keeper renews a Lease for one term and ends the term when the lease is lost
// or its validity deadline passes. It is azlease's single timing core:
// Elector, Mutex and DoOnce all hold their leases through it.
//
// It owns two timers and no goroutine of its own (see scheduler.go):
//   - the deadline timer ends the term at its validity deadline, on its own,
//     so that a hanging renewal or a starved scheduler cannot keep it
//     alive; each renewal moves it on;
//   - the renewal timer fires when the next renewal is due (with jitter, so
//     that many leases do not renew in bursts) and hands the renewal to the
//     renewLimiter of the lease's container client, which runs it on a
//     worker (retrying transient failures until the deadline, inside
//     Lease.Renew). The renewal ends the term at once on a definitive loss,
//     and otherwise arms the timer for the next one. While the renewal
//     waits in the limiter's queue, the same timer lets it start anyway
//     after renewOverflowAfter, up to renewMaxInFlight renewals at once.
//
// Renewals go on after the term's context is cancelled by its owner: an
// owner that stops drains its work under a lease it still holds, and
// releases only after that. stop ends them, and waits for the timers'
// functions and the keeper's renewal in flight.
type keeper struct {
	lease      *Lease
	term       *Term
	renewEvery time.Duration
	log        *slog.Logger
	lim        *renewLimiter

	// rctx carries the renewals. It is detached from the term's context,
	// which the owner may cancel while it drains its work, and is
	// cancelled only by stop.
	rctx    context.Context
	rcancel context.CancelFunc
	// beforeRenew, when set by tests, runs before each renewal: a way to
	// make the renewer oversleep as if its process had been paused.
	beforeRenew func()

	// pending counts what stop waits for: each armed timer (until its
	// function returns, or Stop or Reset cancels it) and the renewal handed
	// to the limiter (until its worker is done with it). Nothing is added
	// once stopped is set, so stop's Wait never races an Add.
	pending sync.WaitGroup

	mu       sync.Mutex // guards the fields below; taken before lim.mu
	stopped  bool
	phase    renewPhase
	renewed  bool        // a renewal succeeded: later ones use the shorter jitter
	due      time.Time   // when the next renewal is due
	limit    time.Time   // the validity deadline when it was scheduled
	renewal  *time.Timer // fires at due (phase waiting), or after renewOverflowAfter (phase queued)
	deadline *time.Timer // ends the term at its validity deadline

	// The limiter's queue links and when the renewal joined the queue,
	// guarded by lim.mu.
	qprev, qnext *keeper
	inQueue      bool
	enqueued     time.Time
}

// renewPhase is where a keeper's next renewal is.
type renewPhase int

const (
	phaseIdle    renewPhase = iota // none scheduled: the renewals have ended
	phaseWaiting                   // the renewal timer is armed for due
	phaseQueued                    // due, and waiting for a worker of the limiter
	phaseRunning                   // a worker runs it
)

// hold starts a term for a lease just acquired and the keeper that renews it.
// parent bounds the term's context; the renewals are not tied to parent's
// cancellation, only to stop.
func hold(parent context.Context, l *Lease, tok Token, renewEvery time.Duration, beforeRenew func()) *keeper {
	lastSend, validUntil, _ := l.snapshot(tok.LeaseID)
	rctx, rcancel := context.WithCancel(context.WithoutCancel(parent))
	k := &keeper{
		lease:       l,
		term:        newTerm(parent, l, tok, lastSend, validUntil),
		renewEvery:  renewEvery,
		log:         l.cfg.log,
		lim:         limiterFor(l.t.cc),
		rctx:        rctx,
		rcancel:     rcancel,
		beforeRenew: beforeRenew,
	}
	// Any operation that learns from Azure that the lease is gone ends
	// the term at once, without waiting for the next renewal.
	l.setOnLost(tok.LeaseID, k.term.end)
	k.mu.Lock()
	k.arm(&k.deadline, time.Until(validUntil), k.deadlineFired)
	cause := k.scheduleLocked()
	k.mu.Unlock()
	if cause != nil {
		k.term.end(cause)
	}
	return k
}

// stop ends the term with cause (if it has not ended already), stops
// renewing, and waits for the keeper's timer functions and its renewal in
// flight. It does not release the lease. It may be called more than once,
// and concurrently.
func (k *keeper) stop(cause error) {
	k.term.end(cause)
	k.rcancel()
	k.mu.Lock()
	if !k.stopped {
		k.stopped = true
		k.disarm(k.renewal)
		k.disarm(k.deadline)
		if k.phase == phaseQueued && k.lim.remove(k) {
			k.pending.Done() // the queued renewal, which no worker will run
		}
		k.phase = phaseIdle
	}
	k.mu.Unlock()
	k.pending.Wait()
	k.lease.clearOnLost(k.term.token.LeaseID)
}

// arm sets *t (a timer running f) to fire after d, counting it in pending;
// k.mu is held and stopped is false. The count is added first, so that f
// (which calls pending.Done) can never bring it below zero; a Reset that
// moves a timer that had not fired keeps the one count of that timer.
func (k *keeper) arm(t **time.Timer, d time.Duration, f func()) {
	k.pending.Add(1)
	if *t == nil {
		*t = time.AfterFunc(d, f)
	} else if (*t).Reset(d) {
		k.pending.Done()
	}
}

// disarm stops t; if that kept its function from running, its count in
// pending is dropped. k.mu is held.
func (k *keeper) disarm(t *time.Timer) {
	if t != nil && t.Stop() {
		k.pending.Done()
	}
}

// deadlineFired ends the term if its validity deadline has passed, and
// otherwise (a renewal moved it, and the timer was not moved with it yet)
// waits for the new one.
func (k *keeper) deadlineFired() {
	defer k.pending.Done()
	k.mu.Lock()
	if k.stopped || k.term.ctx.Context.Err() != nil {
		k.mu.Unlock()
		return
	}
	if d := time.Until(k.term.ValidUntil()); d > 0 {
		k.arm(&k.deadline, d, k.deadlineFired)
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.term.end(ErrDeadlinePassed)
}

// scheduleLocked arms the renewal timer for the next renewal: the first one
// uniformly in [renewEvery/2, renewEvery] after the grant's send, later ones
// up to timing.RenewJitter before renewEvery after the last renewal's send,
// and never after the validity deadline. It returns the cause to end the
// term with if the lease is no longer held. k.mu is held.
func (k *keeper) scheduleLocked() error {
	lastSend, validUntil, ok := k.lease.snapshot(k.term.token.LeaseID)
	if !ok {
		k.phase = phaseIdle
		return ErrLeaseLost
	}
	if k.renewed {
		k.due = timing.NextRenewAt(lastSend, k.renewEvery, mrand.Float64())
	} else {
		k.due = timing.FirstRenewAt(lastSend, k.renewEvery, mrand.Float64())
	}
	k.limit = validUntil
	k.phase = phaseWaiting
	k.arm(&k.renewal, timing.Sleep(time.Now(), k.due, validUntil), k.renewalFired)
	return nil
}

// renewalFired hands the due renewal to the limiter, or, if it has waited
// in the limiter's queue for renewOverflowAfter, starts it anyway. When the
// renewal starts, this timer's goroutine becomes its worker.
func (k *keeper) renewalFired() {
	work := k.fire()
	k.pending.Done() // the timer; the renewal has a count of its own
	if work {
		k.lim.work(k)
	}
}

// fire is renewalFired's decision, under k.mu: it reports whether the
// caller is to run the renewal as a worker of the limiter.
func (k *keeper) fire() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	// A firing that lost the race for k.mu to a Reset (the renewal it was
	// for ran meanwhile, and the timer is armed for the next one) finds
	// the time not yet come, and leaves it to the armed timer.
	now := time.Now()
	switch {
	case k.phase == phaseWaiting && timing.Sleep(now, k.due, k.limit) == 0:
		k.pending.Add(1) // the renewal, until its worker is done with it
		if k.lim.submit(k, now) {
			k.phase = phaseRunning
			return true
		}
		k.phase = phaseQueued
		k.arm(&k.renewal, renewOverflowAfter, k.renewalFired)
	case k.phase == phaseQueued:
		started, wait := k.lim.overflow(k, now)
		if started {
			k.phase = phaseRunning
			return true
		}
		if wait > 0 { // still queued: look again then
			k.arm(&k.renewal, wait, k.renewalFired)
		}
	}
	return false
}

// run is the renewal, on a worker of the limiter. It renews once and either
// schedules the next renewal or ends the renewals (and the term, when the
// outcome ends it).
func (k *keeper) run() {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return
	}
	k.phase = phaseRunning
	k.disarm(k.renewal) // the overflow check, if the renewal was queued
	due, limit := k.due, k.limit
	k.mu.Unlock()

	cause, again := k.renew(due, limit)

	k.mu.Lock()
	if !k.stopped {
		k.phase = phaseIdle
		if again {
			k.renewed = true
			if k.term.ctx.Context.Err() == nil {
				k.arm(&k.deadline, time.Until(k.term.ValidUntil()), k.deadlineFired)
			}
			cause = k.scheduleLocked()
		}
	}
	k.mu.Unlock()
	if cause != nil {
		k.term.end(cause)
	}
}

// renew renews once. It returns the cause to end the term with, if any, and
// whether to renew again. After its owner cancels the term, the renewals go
// on, so the lease stays held while the owner's work drains; a renewal that
// lands after the deadline keeps the lease held for the owner to release,
// but never revives the term.
func (k *keeper) renew(due, limit time.Time) (cause error, again bool) {
	if k.beforeRenew != nil {
		k.beforeRenew()
	}
	if late, past := timing.Overslept(due, time.Now(), limit); past {
		k.log.Warn("azlease: woke up after the validity deadline; not trusting the lease",
			slog.Duration("late", late), slog.Uint64("epoch", k.term.token.Epoch))
		return ErrPaused, false
	}
	if err := k.lease.renewID(k.rctx, k.term.token.LeaseID); err != nil {
		switch {
		case k.rctx.Err() != nil: // stopping
			return nil, false
		case errors.Is(err, ErrDeadlinePassed):
			// Out of time for retries, the term still lasts until its
			// deadline, where the deadline timer ends it: one place decides.
			return nil, false
		case errors.Is(err, ErrNotHeld):
			return ErrLeaseLost, false // lost through another operation
		default:
			return err, false
		}
	}
	lastSend, validUntil, _ := k.lease.snapshot(k.term.token.LeaseID)
	k.term.extend(lastSend, validUntil)
	return nil, true
}
