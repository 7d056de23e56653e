package azlease

// Holding a bare Lease with automatic renewal (Lease.Hold), and passing a
// held Lock to a chosen successor without a moment when the lease is free
// (Lock.HandOff): the pieces a balancer that moves work between processes
// is built from.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/azlease/azlease/internal/azname"
)

// Hold acquires the lease as [Lease.Acquire] does (proposing the ID that
// [Lease.NextLeaseID] chose, if any, so a lease handed to this Lease is
// taken at once) and keeps it renewed on the container client's shared
// scheduler, every LeaseDuration/3 or, when shorter, LeaseDuration −
// SafetyMargin − 2 × AttemptTimeout (room for two attempts: shorter for an
// AttemptTimeout over 4.625 s with the other defaults), up to 10 % sooner,
// until the returned [Lock] is unlocked, handed off, or lost. The Lock's
// context ends when the
// lease is lost or its validity deadline passes; it carries ctx's values but
// not its cancellation. When another holder has the lease, Hold returns an
// error wrapping [ErrLeaseHeld].
//
// A Lease holds one term at a time: while a Lock lasts, use the Lock, not
// the Lease's Renew, Release or HandOff. A Lock acts only on its own term:
// once the Lease has been held again, an older Lock's Unlock sends nothing
// (returning the older term's loss, if any), and its HandOff and writes send
// nothing and return an error wrapping [ErrNotHeld]. So work that outlives
// its term and unlocks late can never free or hand away a newer term's lease.
func (l *Lease) Hold(ctx context.Context) (*Lock, error) {
	if l == nil || l.bc == nil {
		return nil, fmt.Errorf("%w: a zero or nil azlease.Lease cannot be used; use NewLease", ErrNotInitialized)
	}
	tok, err := l.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	k := hold(context.WithoutCancel(ctx), l, tok, holdRenewEvery(l.cfg), nil)
	return &Lock{Term: k.term, k: k, lease: l}, nil
}

// holdRenewEvery is how often Hold renews: LeaseDuration/3, or less when
// that would leave a renewal less room than two full attempts before the
// validity deadline (LeaseDuration − SafetyMargin − 2 × AttemptTimeout), the
// rule the Elector's and Mutex's RenewInterval is checked against. Lease
// options allow AttemptTimeout up to (LeaseDuration − SafetyMargin)/3, so
// this is never below that.
func holdRenewEvery(c leaseConfig) time.Duration {
	return min(c.duration/3, c.duration-c.margin-2*c.attemptTimeout)
}

// HoldAfter is [Lease.Hold] for a caller that has just read the lock blob's
// status with [InspectPrefix] (a balancer that lists many blobs, then
// takes the free ones): the epoch write starts from that status instead of
// reading the blob again, two requests rather than three. The write is
// conditional on the blob being unchanged since the read: a stale status
// costs a request, never a wrong epoch. A status of another blob, or one
// not from a listing, is not used.
//
// A status that says the blob does not exist (Exists false) creates it with
// the new term's epoch record in one request (Put Blob, If-None-Match: *),
// then acquires: two requests rather than five. Two takers of one blob
// never begin a term after one that never began: when the blob exists
// after all, or the status shows it just created by another Lease (within
// AttemptTimeout, never written since, free), its creator is acquiring it,
// and HoldAfter returns an error wrapping [ErrLeaseHeld] (after the one
// request, or none). See docs/design/terms-and-fencing.md.
func (l *Lease) HoldAfter(ctx context.Context, seen Status) (*Lock, error) {
	if l == nil || l.bc == nil {
		return nil, fmt.Errorf("%w: a zero or nil azlease.Lease cannot be used; use NewLease", ErrNotInitialized)
	}
	if err := l.initErr(); err != nil {
		return nil, err
	}
	var s *Status
	switch {
	case seen.Name == l.t.blob && seen.etag != "":
		if by, ok := l.creatorAcquiring(seen); ok {
			return nil, l.errorf("acquire", ErrLeaseHeld, fmt.Errorf("the blob was created %s ago with %s's record, and is not leased yet: its creator is acquiring it", seen.listed.Sub(seen.created), by))
		}
		s = &seen
	case seen.Name == l.t.blob && !seen.Exists && l.cfg.create && !l.Held():
		var err error
		if s, err = l.createWithRecord(ctx); err != nil {
			return nil, err
		}
	}
	tok, err := l.acquireWithin(ctx, l.cfg.duration, s)
	if err != nil {
		return nil, err
	}
	k := hold(context.WithoutCancel(ctx), l, tok, holdRenewEvery(l.cfg), nil)
	return &Lock{Term: k.term, k: k, lease: l}, nil
}

// HandOff ends the lock's term and gives its lease to whoever holds the
// lease ID proposedID (a GUID, typically another Lease's
// [Lease.NextLeaseID]) without a moment when the lease is free: see
// [Lease.HandOff]. The term's context ends first (cause [ErrStopped]) and
// the renewals stop; the receiver starts its own term, with a larger
// epoch, when it acquires the lease with that ID, and must do so within the
// lease duration or the lease expires.
//
// Stop the work done under the lock before handing it off: the receiver may
// act as soon as it acquires. HandOff returns an error wrapping
// [ErrLeaseLost] if the lock was lost before (the hand-off was not made),
// an error wrapping [ErrNotHeld] without a request if the lock was
// abandoned ([Lock.Abandon]: its work may still run, and the receiver must
// not act beside it), and otherwise what [Lease.HandOff] returns. After a
// HandOff, Unlock returns the same result without a request.
func (lk *Lock) HandOff(ctx context.Context, proposedID string) error {
	if lk == nil || lk.k == nil {
		return fmt.Errorf("azlease: HandOff of a Lock that Mutex.Lock, TryLock or Lease.Hold did not return: %w", ErrNotHeld)
	}
	if _, ok := azname.GUID(proposedID); !ok {
		return optionErr("proposedID", "%q: must be a GUID", proposedID)
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.released {
		return fmt.Errorf("azlease: HandOff of a Lock already released or handed off: %w", ErrNotHeld)
	}
	if lk.stopped && lk.lost == nil {
		// Abandoned: the term ended before this call, and its work may
		// still run. Handing its lease on would let the receiver act
		// beside it (and the Lease may already hold a newer term, whose
		// lease this Lock must never touch).
		return fmt.Errorf("azlease: HandOff of a Lock whose term had already ended (%w): %w", lk.Term.Err(), ErrNotHeld)
	}
	lk.stopLocked()
	if lk.lost != nil {
		return lk.lost
	}
	canon, _ := azname.GUID(proposedID)
	err := lk.lease.handOff(ctx, lk.Token().LeaseID, canon)
	switch {
	case errors.Is(err, ErrInvalidOptions):
		// Nothing was sent: the lock stays as it was (stopped, still
		// held until Unlock releases it or its lease expires).
		return err
	case errors.Is(err, ErrNotHeld):
		// The term's validity deadline passed before the hand-off (or
		// the Lease no longer holds this term's lease ID): nothing was
		// sent.
		lk.released, lk.err = true, fmt.Errorf("%w: the lock's validity deadline passed before the hand-off", ErrDeadlinePassed)
		return lk.err
	}
	lk.released = err == nil || errors.Is(err, ErrLeaseLost)
	lk.err = err
	if err == nil {
		lk.lease.cfg.log.Debug("azlease: handed the lock off", slog.Uint64("epoch", lk.Epoch()))
	}
	return err
}

// Abandon ends the lock's term (cause [ErrStopped]) and stops renewing its
// lease, without releasing it: the lease frees itself when it expires,
// within the lease duration. It is for work that did not stop in time when
// asked: releasing or handing the lease off would let a successor act
// while that work still runs, whereas after the lease expired the work's
// own checks ([Term.Valid], the term's context) have long reported the term
// ended. Unlock, called once the work has stopped at last, still releases
// what may be held under this term's lease ID, and nothing if the Lease
// has been held again since (see [Lease.Hold]). HandOff of an abandoned
// Lock sends nothing.
func (lk *Lock) Abandon() {
	if lk == nil || lk.k == nil {
		return
	}
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.stopLocked()
}

// creatorAcquiring reports whether seen, from a listing, shows a blob that
// another Lease created with its next term's record (createWithRecord)
// and is about to acquire: free, never written since its creation, its
// record unreleased and of another holder, and created at most
// AttemptTimeout before the listing (storage's clock on both sides). An
// acquisition that won that race would begin its term after one that
// never began, and say that the creator stopped. It also names the
// creator. A creator that died between its two requests only delays the
// others by that window.
func (l *Lease) creatorAcquiring(seen Status) (string, bool) {
	if seen.State != "available" || seen.created.IsZero() || seen.listed.IsZero() || !seen.modified.Equal(seen.created) {
		return "", false
	}
	if age := seen.listed.Sub(seen.created); age < 0 || age > l.cfg.attemptTimeout {
		return "", false
	}
	r, err := parseRecord(seen.raw)
	if err != nil || r.epoch == 0 || r.released || r.holder == "" || r.holder == l.cfg.identity {
		return "", false
	}
	return r.holder, true
}
