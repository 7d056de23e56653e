// Package timing holds azlease's timing decisions as pure functions: each
// takes the current time (and any randomness) as arguments, so they can be
// tested with tables and reasoned about without a clock.
//
// The rule they implement: a lease granted by a request sent at instant s is
// certainly valid until s + duration − margin on the local monotonic clock.
// Azure starts the lease when it processes the request, which is after s, so
// the lease outlives that instant as long as the local clock does not run
// slower than Azure's by more than margin/duration.
package timing

import (
	"math"
	"time"
)

// ValidUntil is the instant until which a lease granted by a request sent at
// send is certainly valid.
func ValidUntil(send time.Time, duration, margin time.Duration) time.Time {
	return send.Add(duration - margin)
}

// MinAttempt is the least time worth giving a remote attempt: with less left
// before a deadline, the attempt is not sent.
const MinAttempt = 50 * time.Millisecond

// AttemptDeadline returns the deadline of a remote attempt starting at now:
// attemptTimeout from now, but never after limit. ok is false when less than
// MinAttempt remains before limit, and no attempt should be made.
func AttemptDeadline(now, limit time.Time, attemptTimeout time.Duration) (deadline time.Time, ok bool) {
	deadline = now.Add(attemptTimeout)
	if limit.Before(deadline) {
		deadline = limit
	}
	return deadline, deadline.Sub(now) >= MinAttempt
}

// Backoff returns the wait before retry number n (n >= 1): base doubled for
// each earlier retry, capped at max, then spread over [d/2, d) by rnd in
// [0, 1), so that many clients retrying together do not stay in step.
func Backoff(n int, base, max time.Duration, rnd float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d/2 + time.Duration(rnd*float64(d/2))
}

// Jitter spreads d uniformly over [d·(1−frac), d·(1+frac)) using rnd in
// [0, 1). frac is between 0 and 1. The result saturates at the largest
// Duration rather than overflow (a float64 out of int64's range converts to
// a negative number on common platforms: a wait of zero, a hot loop).
func Jitter(d time.Duration, frac, rnd float64) time.Duration {
	j := float64(d) * (1 - frac + 2*frac*rnd)
	switch {
	case j >= math.MaxInt64: // float64(MaxInt64) is 2^63, itself out of range
		return math.MaxInt64
	case j <= 0 || math.IsNaN(j):
		return 0
	}
	return time.Duration(j)
}

// MaxJittered is the longest wait Jitter(d, frac, ·) can return.
func MaxJittered(d time.Duration, frac float64) time.Duration {
	return Jitter(d, frac, 1)
}

// Sleep returns how long to wait at now before something due at due, and
// never more than until limit. A negative result is zero.
func Sleep(now, due, limit time.Time) time.Duration {
	if limit.Before(due) {
		due = limit
	}
	return max(due.Sub(now), 0)
}

// Overslept reports by how much a wake-up at now overshot the instant it was
// due at, and whether that overshoot passed limit (the validity deadline):
// a process that wakes after its deadline was paused or starved, and must not
// trust a lease it has not renewed since.
func Overslept(due, now, limit time.Time) (late time.Duration, pastLimit bool) {
	return max(now.Sub(due), 0), !now.Before(limit)
}

// RenewAt is when a holder whose last successful grant was sent at lastSend
// renews next, at the latest.
func RenewAt(lastSend time.Time, interval time.Duration) time.Time {
	return lastSend.Add(interval)
}

// RenewJitter is the largest fraction of the renew interval by which a
// renewal after the first comes early: each is due between
// interval·(1−RenewJitter) and interval after the previous grant's send.
const RenewJitter = 0.1

// FirstRenewAt is when a holder whose lease was granted by a request sent at
// lastSend renews for the first time: uniformly in [interval/2, interval]
// after the send, using rnd in [0, 1). Locks taken together (at start-up,
// say) thereby renew spread over half an interval instead of all at once.
// It is never later than RenewAt.
func FirstRenewAt(lastSend time.Time, interval time.Duration, rnd float64) time.Time {
	return lastSend.Add(interval - time.Duration(clamp01(rnd)*float64(interval/2)))
}

// NextRenewAt is when a holder renews after a renewal sent at lastSend:
// interval minus up to RenewJitter of it, using rnd in [0, 1), so renewals
// that fell into step drift apart again. It is never later than RenewAt:
// renewing early only costs a request, never safety.
func NextRenewAt(lastSend time.Time, interval time.Duration, rnd float64) time.Time {
	return lastSend.Add(interval - time.Duration(clamp01(rnd)*RenewJitter*float64(interval)))
}

// clamp01 keeps a random draw within [0, 1], NaN as 0.
func clamp01(x float64) float64 {
	switch {
	case x > 1:
		return 1
	case x > 0:
		return x
	}
	return 0
}

// ToleratedRateRatio is how much faster Azure's clock may run than the local
// clock before ValidUntil stops being safe: duration / (duration − margin).
func ToleratedRateRatio(duration, margin time.Duration) float64 {
	if margin >= duration {
		return math.Inf(1)
	}
	return float64(duration) / float64(duration-margin)
}

// QueueWait is how long a waiter of a fair lock's queue waits before it
// looks again, at position p behind the first waiter (p >= 1; the first
// waiter itself polls every head), when the queue last moved age ago (as
// far as this waiter saw). Right after a move it looks often, since the
// queue may move again soon (short holds): every p × head (head right
// behind the first). The longer nothing moves, the less often: every
// age/2; and once the queue has been quiet for QueueQuiet(poll), every
// age × (p−1)/2 (twice in the time the queue would take, at the pace it
// now shows, to bring it right behind the first), so that the further
// back, the sooner it slows down. Up to QueueCap(p, poll), which every
// position reaches within 60 × poll of quiet. Those caps make a queue that
// does not move cost about 1/(2×poll) + (H(min(W−1,10)) − 1)/(15×poll) +
// max(W−11, 0)/(150×poll) requests per second behind its first waiter,
// for W waiters (H the harmonic number): 0.89 a second for 50 waiters with
// a poll of 1 s.
func QueueWait(p int, age, head, poll time.Duration) time.Duration {
	if p < 1 {
		return head
	}
	lo := time.Duration(p) * head
	if p == 1 {
		lo = head
	}
	hi := max(QueueCap(p, poll), lo)
	k := time.Duration(1) // the ramp's factor × 2
	if age > QueueQuiet(poll) {
		k = time.Duration(max(p-1, 1))
	}
	if age >= 2*hi/k {
		return hi // (and no overflow below)
	}
	return min(max(age*k/2, lo), hi)
}

// SecondWait is how long the waiter right behind the first of a fair
// lock's queue waits before it looks at the lock again, at now; moved is
// when the queue last moved (as far as it saw), looked when it last looked
// at the lock, pending when it first saw the lock handed to another waiter
// in this hand-off (zero: it does not see one). margin is the least time a
// holder waits, beyond head, for the waiter it hands the lock to.
//   - A hand-off to another waiter shows: it looks every head/4 (fast), for
//     at most 2 × head + margin from when it first saw it. That waiter, if
//     alive, takes the lock within a head poll; if it does not, the holder
//     hands the lock on to this one, which then sees it within head/4
//     instead of at its next ordinary look.
//   - Otherwise, for SecondCover(head) after the queue moved, every head,
//     counted from its last look at the lock (a listing of the queue
//     meanwhile does not delay the look): it looks at least once while a
//     hand-off to the first shows (head + margin at the least), and so
//     sees the first one that is not taken. The queue moves at every
//     hand-off, so while the lock is held for less than that, it sees every
//     hand-off.
//   - After that, every SecondLook(…, marked), and a listing of the queue
//     takes the place of a look.
//
// fast reports the first case: the caller does not list the queue then.
// marked says the waiter wrote its head mark (it was first in line once).
func SecondWait(now, moved, looked, pending time.Time, head, poll, margin time.Duration, marked bool) (wait time.Duration, fast bool) {
	if !pending.IsZero() && now.Sub(pending) < 2*head+margin {
		return head / 4, true
	}
	if now.Sub(moved) >= SecondCover(head) {
		return SecondLook(now.Sub(moved), head, poll, marked), false
	}
	if !looked.IsZero() {
		return max(head-now.Sub(looked), 0), false
	}
	return head, false
}

// SecondLook is the wait between two looks of the waiter right behind the
// first once the queue has stood still for age (past SecondCover):
// QueueWait(1, …), every age/2 from head up to 2 × poll; and, unless it is
// marked (it polled as the first once: PassOverFree counts a marked first
// that came to be second again by 2 × poll), age/150 up to SecondCap(poll),
// longer than 2 × poll from 300 × poll of stand-still (5 minutes with the
// default poll). Behind a hold of 10 minutes that halves what it costs
// (issue 35: with 2 × poll, 50 waiters sent 1.6 to 1.7 requests a second
// over a second long hold's last minute, this waiter 0.5 of it). What it
// costs: this waiter learns that the first took the lock that much later,
// so a short hold right after a hold H is handed on within max(2 × poll,
// H/150) rather than 2 × poll; and a dead first behind H is passed over up
// to that much later, within issue 35's 5 % of H with the first's own look.
func SecondLook(age, head, poll time.Duration, marked bool) time.Duration {
	d := QueueWait(1, age, head, poll)
	if marked {
		return d
	}
	return max(d, min(age/150, SecondCap(poll)))
}

// SecondCap is the longest the waiter right behind the first sleeps
// (SecondLook): 4 × poll, twice HeadCap, which an older version's watcher
// allows it too (QueueWait(1, …) with OlderPoll, 2 × poll).
func SecondCap(poll time.Duration) time.Duration { return 2 * HeadCap(poll) }

// SecondCover is how long after the queue moved the waiter right behind the
// first looks at the lock every head (SecondWait): 10 × head.
func SecondCover(head time.Duration) time.Duration { return 10 * head }

// QueueQuiet is how long a fair lock's queue stands still before the
// waiters far back slow down faster (QueueWait): 30 × poll. Until then
// they look every half the time since it last moved, so that holds shorter
// than that followed by short ones seldom reach a waiter before it looks.
func QueueQuiet(poll time.Duration) time.Duration { return 30 * poll }

// QueueCap is the longest a waiter at position p behind the first waits
// between two looks: 2×poll right behind it, 15×p×poll further back, and
// never more than MaxQueueLook(poll).
func QueueCap(p int, poll time.Duration) time.Duration {
	if p <= 1 {
		return 2 * poll
	}
	return min(15*time.Duration(p)*poll, MaxQueueLook(poll))
}

// MaxQueueLook is QueueWait's longest wait: 150×poll. Waiters behind the
// first sleep up to BackCap (240×poll far back); twice MaxQueueLook is
// longer, so a holder evicts a missed waiter silent that long
// (fairunlock.go) only once no live one would be.
func MaxQueueLook(poll time.Duration) time.Duration { return 150 * poll }

// HandOffWait is how long a fair lock's holder waits for a successor that
// has not said it polls as the first waiter (its queue entry carries no head
// mark) to take the lock: as long as such a waiter may take to look again
// (QueueWait right behind the first, at most 2×poll), estimated from how
// long the holder held the lock and how long it was itself first or second
// in line before (the queue's recent pace), and never less than head.
func HandOffWait(held, wasHead, head, poll time.Duration) time.Duration {
	return min(max(2*max(held, wasHead), head), max(2*poll, head))
}

// PassOverFree is how long a slot of a fair lock stays free, while the
// first waiter in line does not take it, before a waiter behind it (or a
// TryLock) passes the first over (marks it missed). A first waiter that has
// said it polls as the first (marked: its head mark) takes a free slot at
// its next look, which comes within HeadLook of the hold it saw, at most
// HeadCap(poll): that and one of its head polls (head), and margin for
// requests in flight. One that has not may not know yet that it is first:
// it learns it at its next look as the waiter right behind the first,
// within SecondLook of the stand-still it saw, and looks at the lock at
// once: two head polls, margin, and that. still bounds that stand-still:
// the time since its entry was written (its join, or its return after it
// was missed: it counts from then at the latest); 2 × poll while under
// 300 × poll, SecondCap(poll) at most (a still unknown: as long as can be).
func PassOverFree(head, poll, margin time.Duration, marked bool, still time.Duration) time.Duration {
	if marked {
		return head + max(head, HeadCap(poll)) + margin
	}
	return 2*head + margin + max(QueueCap(1, poll), SecondLook(still, head, poll, false))
}
