package azlease

// Acquiring a lease: the attempts of one acquisition, a fresh lease ID for
// each attempt after one whose outcome is unknown, finding the lease when an
// attempt whose answer was lost was granted after all, and giving back what
// may have been granted when the acquisition fails.
//
// The rule these keep: the lease ID of a term is proposed by exactly one
// request that was answered (and perhaps by others that Azure definitively
// refused). No request carrying it can then be applied later, so once the
// term's ID is released nothing can grant it again, and a write still on
// its way with that ID can never land after the release. (Retrying an
// acquisition with the same ID after a lost answer, as earlier versions
// did, broke that: the lost attempt, applied late after the release, would
// grant the ID again, and a late write of the term could then land.)

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// acquire sends Acquire Lease until Azure grants or refuses it, and returns
// the granted lease ID and the send instant of the request that granted it.
// It proposes id first, and a fresh ID after each attempt whose outcome is
// unknown. When Azure then answers that the lease is held, it may be held
// under one of those IDs: find asks Azure (see find), and takes it under a
// fresh ID if so. unsure lists the IDs that may hold the lease although no
// answer said so, for the caller to give back if the acquisition fails.
func (l *Lease) acquire(ctx context.Context, id string, budget time.Duration) (granted string, send time.Time, unsure []string, err error) {
	var (
		created bool
		maybe   []string // IDs proposed by requests whose outcome is unknown
	)
	limit := time.Now().Add(budget)
	cur := id
	l.grantTag = ""
	// A round ends with a grant, a refusal, or "held" while some ID may be
	// ours; find then settles that. The lease can change under find (it
	// may expire), so a few rounds may be needed; each is bounded by limit.
	for round := 0; ; round++ {
		held := false
		err = l.loop(ctx, "acquire", limit, func(actx context.Context, now time.Time) (bool, error) {
			resp, err := l.leaseClient(cur).AcquireLease(actx, int32(l.cfg.duration/time.Second), nil)
			c := classify(ctx, err)
			proposed := true // err is the answer to a request proposing cur
			if c == classNotFound && l.cfg.create && !created {
				if err = l.ensure(ctx, actx, err); err == nil {
					created = true
					now = time.Now()
					resp, err = l.leaseClient(cur).AcquireLease(actx, int32(l.cfg.duration/time.Second), nil)
				} else {
					proposed = false // creating the blob failed
				}
				c = classify(ctx, err)
			}
			switch c {
			case classOK:
				granted, send = cur, now
				if resp.ETag != nil {
					l.grantTag = *resp.ETag // lease operations leave it as the last write made it
				}
				return true, nil
			case classHeld:
				held = true
				return true, l.errorf("acquire", ErrLeaseHeld, err)
			case classTransient, classConflict:
				if proposed && ambiguous(err) {
					maybe = append(maybe, cur)
					cur = newLeaseID()
				}
				return false, l.errorf("acquire", ErrTransient, err)
			case classCanceled:
				if proposed && ambiguous(err) { // cut short: it may have been granted
					maybe = append(maybe, cur)
				}
				return true, err
			default:
				return true, l.errorf("acquire", ErrPermanent, err)
			}
		})
		if err == nil {
			return granted, send, idsExcept(maybe, granted), nil
		}
		if !held || len(maybe) == 0 || ctx.Err() != nil || round == 2 {
			return "", time.Time{}, idsExcept(maybe, ""), err
		}
		id, send, ok, present, more := l.find(ctx, maybe, limit, true)
		maybe = append(maybe, more...)
		switch {
		case ok:
			return id, send, idsExcept(maybe, id), nil
		case present:
			return "", time.Time{}, idsExcept(maybe, ""), err // held by another
		}
		// The lease is not present any more (it expired, or was released
		// or broken meanwhile): acquire again, with a fresh ID.
		cur = newLeaseID()
	}
}

// find asks whether the lease is held under one of the IDs in maybe,
// newest first, by changing it from that ID to a fresh one with Change
// Lease: Azure changes it only if the lease is that ID's, and refuses with
// LeaseIdMismatchWithLeaseOperation otherwise, or with
// LeaseNotPresentWithLeaseOperation when no lease is present. On success
// the lease is under the fresh ID, proposed by this one answered request.
// Its validity is not known yet: the lease under the old ID may have been
// granted by another holder's hand-off rather than by this Lease's
// acquisition, and Change Lease does not renew; so find renews it, and the
// renewal's send is the validity's start (send); or, when renew is false,
// leaves that to its caller and returns a zero send (a hand-off's take:
// begin renews it beside the epoch write). present reports that the
// lease is held by someone else (or, after a failure, may be); more lists
// the IDs that may now hold the lease although no answer said so (a change
// whose outcome is unknown, or a changed lease that could not be renewed),
// for the caller to give back.
func (l *Lease) find(ctx context.Context, maybe []string, limit time.Time, renew bool) (id string, send time.Time, ok, present bool, more []string) {
	present = true
	for i := len(maybe) - 1; i >= 0 && ctx.Err() == nil; i-- {
		fresh := newLeaseID()
		var res error
		end := time.Now().Add(2 * l.cfg.attemptTimeout)
		if end.After(limit) {
			end = limit
		}
		err := l.loop(ctx, "handoff", end, func(actx context.Context, _ time.Time) (bool, error) {
			_, res = l.leaseClient(maybe[i]).ChangeLease(actx, fresh, nil)
			if c := classify(ctx, res); c == classTransient && !ambiguous(res) {
				return false, l.errorf("handoff", ErrTransient, res) // refused before it was applied: again
			}
			return true, res
		})
		switch c := classify(ctx, res); {
		case err == nil && !renew:
			return fresh, time.Time{}, true, true, more
		case err == nil:
			send, rerr := l.renewFound(ctx, fresh, limit)
			if rerr != nil {
				return "", time.Time{}, false, true, append(more, fresh)
			}
			return fresh, send, true, true, more
		case bloberror.HasCode(res, bloberror.LeaseIDMismatchWithLeaseOperation):
			continue // held, not under this ID
		case bloberror.HasCode(res, bloberror.LeaseNotPresentWithLeaseOperation):
			return "", time.Time{}, false, false, more
		case (c == classTransient || c == classCanceled) && ambiguous(res):
			more = append(more, fresh)
		}
	}
	return "", time.Time{}, false, present, more
}

// renewFound renews the lease find took under id, until limit, and returns
// the send instant of the renewal that succeeded.
func (l *Lease) renewFound(ctx context.Context, id string, limit time.Time) (send time.Time, err error) {
	err = l.loop(ctx, "renew", limit, func(actx context.Context, now time.Time) (bool, error) {
		_, err := l.leaseClient(id).RenewLease(actx, nil)
		switch c := classify(ctx, err); c {
		case classOK:
			send = now
			return true, nil
		case classTransient, classConflict:
			return false, l.errorf("renew", ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, l.errorf("renew", kindOf(c), err)
		}
	})
	return send, err
}

// idsExcept returns the IDs in maybe other than except.
func idsExcept(maybe []string, except string) []string {
	var out []string
	for _, m := range maybe {
		if m != except {
			out = append(out, m)
		}
	}
	return out
}

// giveBack releases lease IDs that requests whose answers were lost may
// have been granted, so that the lease does not stay blocked until it
// expires, within what the caller's context leaves (cleanupContext). Their
// outcome does not matter: the IDs are never used again.
func (l *Lease) giveBack(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	cctx, cancel, ok := l.cleanupContext(ctx)
	if !ok {
		l.cfg.log.Debug("azlease: not giving back a lease that may have been granted: the caller's context has ended; it expires on its own")
		return
	}
	defer cancel()
	for _, id := range ids {
		if cctx.Err() != nil {
			return
		}
		_ = l.releaseID(cctx, id, time.Now().Add(l.cfg.attemptTimeout), true)
	}
}
