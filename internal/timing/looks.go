package timing

// The look schedule of issue 35's fair locks (docs/design/fair-locks-cost.md):
// how long a waiter of a fair lock's queue sleeps before it looks at the lock
// again, so that the cost follows the hold. HeadLook is the first in line's
// schedule (fairlock.go's head, with HeadPollInterval as its floor) and what
// a holder waits for a first in line that said it polls as the first; the
// others are the design's next steps (the waiters behind the first still
// follow QueueWait and SecondWait).
//
// The first in line looks often while the current hold is young (a release
// is likely soon: short holds, a queue that moves) and rarely once it has
// lasted (HeadLook). The others look by how far back they are, how long the
// queue has stood still and how fast it moved when it moved (BackLook). No
// holder ever passes a waiter over: only the waiter behind a named successor
// does, once that successor's look is overdue by the same schedule
// (LookPromise), so a live waiter is never passed over for sleeping as the
// schedule told it to.

import (
	"cmp"
	"slices"
	"time"
)

// LookFloor is the first in line's shortest wait between two looks, while
// the hold it waits behind has just begun (HeadWait).
const LookFloor = 5 * time.Millisecond

// HeadWait is the first in line's wait between two looks at the lock, as
// fair locks use it: LookFloor + age/4 while that is shorter than
// HeadLook(age, head, poll), and HeadLook after (head is HeadPollInterval).
// A hold of 10 ms is handed on within about 10 ms, one of 100 ms within
// about 30; a hold of 1 s costs 18 looks. It is never longer than
// HeadLook(age, head, poll), which is what a holder waits for the first in
// line before it passes it over.
//
//	age      0     10 ms   100 ms  780 ms  5 s     25 s   10 min
//	wait     5 ms  7.5 ms  30 ms   200 ms  200 ms  1 s    2 s      (HeadPollInterval 200 ms, PollInterval 1 s)
func HeadWait(age, head, poll time.Duration) time.Duration {
	return headWait(age, head, HeadCap(poll))
}

// headWait is HeadWait with hi as HeadLook's most (headLook).
func headWait(age, head, hi time.Duration) time.Duration {
	return max(min(LookFloor+age/4, headLook(age, head, hi)), min(LookFloor, head))
}

// HeadHoldPlateau is the first in line's look interval between the end of
// its early ramp and the age at which HeadLook's proportional part takes
// over (625 ms): short enough that a hold under 100 ms is handed on within
// about a round trip and half of it on average.
const HeadHoldPlateau = 25 * time.Millisecond

// HeadLook is how long the first in line waits before it looks at the lock
// again, when the current hold has lasted age as it saw it (since it saw the
// lock change hands, by its own clock: the hold is at least that old).
// floor is the least interval (MutexOptions' floor, a few milliseconds);
// poll is PollInterval, and HeadCap(poll) the most. It is floor + age/4
// while that is below HeadHoldPlateau, then HeadHoldPlateau until age/25 is
// larger, then age/25 (4 % of the hold) up to HeadCap(poll):
//
//	age      0    40 ms  100 ms  1 s    5 s     25 s   50 s   10 min
//	look     5 ms 15 ms  25 ms   40 ms  200 ms  1 s    2 s    2 s      (floor 5 ms, poll 1 s)
//
// So the gap from a release to the next holder's look is at most 4 % of the
// hold (plus round trips), and never more than 2 × poll; a hold of 10
// minutes costs the first in line a request every 2 s once it is 50 s old.
func HeadLook(age, floor, poll time.Duration) time.Duration {
	return headLook(age, floor, HeadCap(poll))
}

// headLook is HeadLook with hi as its most (HeadCap(poll); an older
// version's was poll: watch.go, olderHeadWait).
func headLook(age, floor, hi time.Duration) time.Duration {
	d := min(floor+age/4, max(HeadHoldPlateau, age/25))
	return min(max(d, floor), max(hi, floor))
}

// HeadCap is the longest the first in line waits between two looks at the
// lock, behind a hold at least 50 × poll old (HeadLook): 2 × poll. Issue
// 35 asks 50 waiters behind a hold of 10 minutes to send at most 1.5
// requests a second in all; with the first looking every poll they sent
// 1.6, and a gap of 2 s after a hold of 50 s or more is within the 5 % of
// the hold the issue allows (docs/design/fair-locks-cost.md).
func HeadCap(poll time.Duration) time.Duration { return 2 * poll }

// BackRamp is how long a waiter behind the first sleeps, by how long the
// queue has stood still as it saw it (age): age/10 for the first 4 s (a
// waiter that dies while a fresh queue stands for a second or two is passed
// over within about a fifth of a second of its turn), then age/2 − 1.6 s,
// so that the waiters far back reach their cap (4 minutes with the default
// PollInterval) within about 8 minutes of stand-still and a queue of 50
// behind a hold of 10 minutes costs less than 1.5 requests a second in all.
func BackRamp(age time.Duration) time.Duration {
	return max(age/10, age/2-1600*time.Millisecond)
}

// BackCap is the longest a waiter at position p (≥ 1) behind the first
// sleeps: 10 × poll right behind it (it becomes the first at the next
// hand-off), NearCap(poll) up to NearPositions, 240 × poll further back
// (180 × in older versions: OlderBackCap; the looks NearCap adds are paid
// for there, ten or more hand-offs from their turn).
func BackCap(p int, poll time.Duration) time.Duration {
	switch {
	case p <= 1:
		return 10 * poll
	case p <= NearPositions:
		return NearCap(poll)
	}
	return 240 * poll
}

// NearPositions and NearCap: the waiters up to position NearPositions
// behind the first sleep at most NearCap(poll), whatever the stand-still.
// After a long hold they are the next to be served, and a queue cannot
// move past one that sleeps: with the stand-still's ramp alone (half its
// age), ten waiters behind a hold of 3 minutes, each holding 10 ms, were
// served in 2 min 9 s; with the cap, in 48 to 60 s. Their looks cost at
// most 9/(60 × poll) requests a second, which the far cap of 240 × poll
// pays for: 50 waiters behind a hold of 10 minutes send about 1.25 a second
// in all, within issue 35's 1.5, and the waiters behind the first stay
// within issue 25's 1 a second more than the first's (30 × poll did not:
// docs/design/fair-locks-cost.md).
const NearPositions = 10

// NearCap is the longest a waiter at positions 2 to NearPositions sleeps:
// 60 × poll.
func NearCap(poll time.Duration) time.Duration { return 60 * poll }

// OlderBackCap is BackCap as versions before NearCap follow it (their
// entries do not say their paces under the key this version writes): 10 ×
// poll right behind the first, 180 × poll further back.
func OlderBackCap(p int, poll time.Duration) time.Duration {
	if p <= 1 {
		return 10 * poll
	}
	return 180 * poll
}

// PaceShare is the share of the time the queue needs, at its pace, to bring
// a waiter right behind the first that the waiter sleeps through at once.
const PaceShare = 0.8

// BackLook is how long a waiter at position p (1: right behind the first)
// sleeps before it looks again. age is how long the queue has stood still
// as it saw it; pace is the queue's pace as the lock record publishes it
// (the median time per hand-off over the last 8, each measured by one holder
// on its own clock; zero while fewer are known). It is the longest of
// BackRamp(age); p × floor (the queue cannot move faster than about a look
// per hand-off); and, further back (p ≥ 2), PaceShare × (p − 1) × pace, most
// of the time the queue needs to bring it right behind the first: so a
// waiter far back in a queue that moves fast looks a few times on its way to
// the front (once at 80 % of the way, once near, then as the first), not at
// every move. Never less than floor, never more than BackCap(p, poll).
func BackLook(p int, age, pace, floor, poll time.Duration) time.Duration {
	hi := max(BackCap(p, poll), floor)
	if time.Duration(p) > hi/max(floor, 1) {
		return hi // (and no overflow below)
	}
	d := max(BackRamp(age), time.Duration(p)*floor)
	if p >= 2 && pace > 0 {
		ahead := float64(p-1) * float64(pace) * PaceShare
		if ahead >= float64(hi) {
			return hi
		}
		d = max(d, time.Duration(ahead))
	}
	return min(max(d, floor), hi)
}

// Look is the schedule at position p: HeadLook for the first in line (p =
// 0), BackLook behind it.
func Look(p int, age, pace, floor, poll time.Duration) time.Duration {
	if p <= 0 {
		return HeadLook(age, floor, poll)
	}
	return BackLook(p, age, pace, floor, poll)
}

// LookPromise bounds how long a live waiter named as the successor can go
// without looking, as the waiter behind it computes it when it first sees
// the hand-off: ages[k] is how long ago, at most, the successor came to
// position k (0: first in line; the watcher takes the earliest instant its
// own looks allow for each move, so that no age is shorter than the
// successor's own). The successor may not have looked since any of those
// moves, and so may still sleep on the schedule of any of those positions;
// from any look at or before now, its next one comes within Look(k, ages[k],
// …) of now (the schedule grows slower than time passes). pace is the
// largest pace the successor can have read (the watcher takes twice the
// largest it read itself since the successor joined: the published median
// moves slowly). margin covers round trips and scheduling delays. The
// watcher passes the successor over only after the hand-off has been in
// place that long.
func LookPromise(ages []time.Duration, pace, floor, poll, margin time.Duration) time.Duration {
	var d time.Duration
	for k, age := range ages {
		d = max(d, Look(k, age, pace, floor, poll))
	}
	return d + margin
}

// PaceHolds is how many holds the published pace is the median of.
const PaceHolds = 8

// Pace is the queue's pace a fair lock's record publishes: the median (the
// upper one) of its last PaceHolds holds, each measured by its holder on its
// own clock from its term's start to its Unlock. A young lock's, with 2 to
// PaceHolds − 1 known, is the shortest of them (without it the waiters far
// back of a queue that formed at once sleep by BackFloor alone, listing
// every few tens of milliseconds until the eighth hand-off; with the median
// of so few, a first long hold had a hot queue's waiters oversleep); zero
// with fewer. One long hold does not move it.
func Pace(holds []time.Duration) time.Duration {
	n := min(len(holds), PaceHolds)
	switch {
	case n < 2:
		return 0
	case n < PaceHolds:
		return rank(holds[:n], n-1) // the shortest: one long hold does not set it
	}
	return rank(holds[:n], n/2-1)
}

// PaceSince is the largest pace (Pace) published from a read of a lock
// record's hold list (newest first) to a later read that showed cur, when
// at most n holds were published in between (the caller bounds n with the
// epochs: one per term): the list after each of them is a suffix of cur's,
// whole while the record has kept every hold (fewer than kept), so each of
// those paces is known; ok is false when one is not (the record keeps
// fewer holds than n + PaceHolds − 1).
func PaceSince(cur []time.Duration, n, kept int) (pace time.Duration, ok bool) {
	for i := 0; i <= n && i < len(cur); i++ {
		if i+PaceHolds > len(cur) && len(cur) >= kept {
			return 0, false // cut off by the record, not by the lock's youth
		}
		pace = max(pace, Pace(cur[i:]))
	}
	return pace, true
}

// rank is the k-th largest of ds (0: the largest).
func rank(ds []time.Duration, k int) time.Duration {
	s := slices.Clone(ds)
	slices.SortFunc(s, func(a, b time.Duration) int { return cmp.Compare(b, a) })
	return s[k]
}

// PaceCap is the most the pace adds to a waiter's sleep behind the first
// (BackWait): 2 × poll. A watcher that cannot bound the pace a waiter read
// (before its own first read) counts this much.
func PaceCap(poll time.Duration) time.Duration { return 2 * poll }

// BackWait is how long a fair lock's waiter at position p ≥ 2 sleeps between
// two looks: toward its turn at the published pace (PaceShare of the time
// the queue needs at pace to bring it right behind the first, at most
// PaceCap), BackFloor per position at least (what that adds capped at
// PaceCap too), BackRamp as the queue begins to stand still (age, as it saw
// it), and, once the queue has stood still for QueueQuiet(poll), no less
// than QueueWait with LookFloor as its head (the further back, the sooner it
// slows down); at most BackCap(p, poll). It does not decrease as age, pace
// or p grow (the watcher's promise relies on it), and while the queue has
// stood still for less than QueueQuiet it is at most max(BackRamp(age),
// PaceCap(poll)) at any position: a holder bounds a waiter's sleep without
// knowing how far back it was (SleepBound).
func BackWait(p int, age, pace, poll time.Duration) time.Duration {
	return backWait(p, age, pace, poll, BackCap)
}

// OlderPoll is the PollInterval a waiter of this version says it has to
// older versions (in the entry key they read): HeadCap(poll), at most an
// hour. An older watcher counts this version's waiter by its own schedule
// with that poll: the first in line's longest look is that poll, which is
// HeadCap's; right behind the first, and far back, it allows at least what
// this version sleeps. Between 30 × poll and 60 × poll of stand-still
// (its QueueQuiet with that poll) it expects a waiter behind the second to
// look sooner than this version's does: an older watcher may pass one over
// there, once (TestOlderWatchersNeverEarly). No single poll avoids both.
func OlderPoll(poll time.Duration) time.Duration { return min(HeadCap(poll), time.Hour) }

// OlderBackWait is BackWait as older versions follow it (OlderBackCap).
func OlderBackWait(p int, age, pace, poll time.Duration) time.Duration {
	return backWait(p, age, pace, poll, OlderBackCap)
}

// OwnBackWait is how long a waiter at position p ≥ 2 of this version
// sleeps itself: BackWait with OwnFloor per position rather than
// BackFloor, so never longer than BackWait (what its watcher counts).
func OwnBackWait(p int, age, pace, poll time.Duration) time.Duration {
	return backWaitFloor(p, age, pace, poll, OwnFloor, BackCap)
}

func backWait(p int, age, pace, poll time.Duration, backCap func(int, time.Duration) time.Duration) time.Duration {
	return backWaitFloor(p, age, pace, poll, BackFloor, backCap)
}

func backWaitFloor(p int, age, pace, poll, floor time.Duration, backCap func(int, time.Duration) time.Duration) time.Duration {
	hi := max(backCap(p, poll), floor)
	d := max(BackRamp(age), min(time.Duration(min(p, 1<<30))*floor, PaceCap(poll)))
	if p >= 2 && pace > 0 {
		d = max(d, time.Duration(min(float64(p-1)*float64(pace)*PaceShare, float64(PaceCap(poll)))))
	}
	if age > QueueQuiet(poll) {
		d = max(d, QueueWait(p, age, LookFloor, poll))
	}
	return min(d, hi)
}

// BackSpread is the largest share of a sleep d at position p ≥ 2 that a
// waiter's jitter takes off it (a random part of it at each sleep; only
// shorter: its watcher counts the whole): none up to poll (in a queue that
// moves, waiters woken early list more: jittered at every sleep, 50
// contenders with zero holds made 2 requests more an acquisition, and 25 %
// fewer); jitter/2 past it; and FarSpread far back (p > NearPositions) once
// d passes QueueQuiet(poll), unless jitter is zero (none asked). Waiters
// far back that joined together, or saw one hand-off date the queue's
// stand-still alike (fairmove.go), otherwise sleep in step for the whole
// hold: 26 of 39 listed in one minute, the last of a second hold of 10
// minutes, 1.4 requests a second of 50 waiters' 1.5 (issue 35).
func BackSpread(p int, d, poll time.Duration, jitter float64) float64 {
	switch {
	case d <= poll || jitter <= 0:
		return 0
	case p > NearPositions && d > QueueQuiet(poll):
		return FarSpread
	}
	return jitter / 2
}

// FarSpread is BackSpread far back in a long stand-still: a sleep there
// is drawn between half and all of BackWait's (costing a third more looks
// than the whole, 0.04 requests a second for 39 waiters at BackCap).
const FarSpread = 0.5

// BackFloor is the least a waiter behind the first sleeps per position
// (BackWait): about the shortest a hand-off takes (two requests of the
// holder's, a look and two of the taker's, a few milliseconds on loopback),
// so that a waiter far back in a hot queue lists a few times on its way to
// the front, not at every move.
const BackFloor = 10 * time.Millisecond

// OwnFloor is the least a waiter behind the second sleeps per position
// itself (OwnBackWait), shorter than the BackFloor its watchers count:
// where holds are short the floor sets a hot queue's speed (a waiter that
// joins at the back sleeps about its position × the floor and mostly finds
// the lock handed to it in the listing it wakes to), so a floor above the
// time a hand-off takes holds the queue back. With the first in line taking
// a hand-off its listing shows (no look), a hand-off takes 6 to 8 ms on
// loopback: 50 contenders with zero holds made 95 to 98 acquisitions a
// second by BackFloor and 108.6 to 109.0 by 9 ms, at 10.4 to 10.6 requests
// each either way (alternating rounds; 8 ms: 109 to 113 at about 12.5, as
// waiters woken before their turn list more). Those figures predate the
// join placed from its own hand-off (fairjoin.go), which lists less: 111
// to 112 a second at 9.5 to 9.7 requests by 9 ms.
// A sleep shorter than the schedule never shortens a watcher's promise, so
// versions that count BackFloor stay in order.
const OwnFloor = 9 * time.Millisecond
