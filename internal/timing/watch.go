package timing

// The watcher rule of issue 35's fair locks (docs/design/fair-locks-cost.md,
// section 3): no holder passes a waiter over; the waiter right behind a
// named successor does, and only once the successor, had it followed its
// schedule, would surely have looked at the lock since it was named.
// SuccessorDue is that instant, from what the watcher's own looks tell of
// where the successor was in the queue, and when.

import "time"

// Stay is a position a successor held in the queue, as its watcher's looks
// bound it: it came to Pos (0: first in line) no earlier than From, and left
// it no later than To (a zero From: unknown, as long ago as can be).
type Stay struct {
	Pos      int
	From, To time.Time
}

// Schedule is a waiter's wait between two looks at position p (0: first in
// line) when the queue had stood still for age as it saw it (the first in
// line: the hold's age as it saw it). It must not decrease as age grows.
type Schedule func(p int, age time.Duration) time.Duration

// SuccessorDue is the instant by which a successor that follows sched has
// looked at the lock at least once after it was named (no later than the
// last Stay's To, which is 0's when it knows it is first): at each position
// it held, its last look came no later than it left (To), with the queue
// standing still no longer than it had been there (To − From), so its next
// look came within sched(Pos, To − From) of To; the latest of those. A
// look after it was named finds the hand-off. Round trips and scheduling
// delays are the caller's margin.
func SuccessorDue(stays []Stay, sched Schedule) time.Time {
	var due time.Time
	for i, s := range stays {
		age := time.Duration(1<<63 - 1) // unknown: as long as can be
		if !s.From.IsZero() {
			age = max(s.To.Sub(s.From), 0)
		}
		// Between this stay and the next (a lower position), it may have
		// held every position in between, as long.
		lo := s.Pos
		if i+1 < len(stays) && stays[i+1].Pos < s.Pos {
			lo = stays[i+1].Pos + 1
		}
		for p := lo; p <= s.Pos; p++ {
			if d := s.To.Add(sched(p, age)); d.After(due) {
				due = d
			}
		}
	}
	return due
}

// WaiterSchedule is the schedule fair locks' waiters follow, as
// SuccessorDue takes it: HeadWait for the first in line, SecondWait's
// longest right behind it (a head poll while the queue moved within
// SecondCover, SecondLook after; HeadWait while the hold is young), BackWait
// further back with the published pace, which pace bounds (the watcher's:
// the largest it can bound from its reads of the lock record, PaceBound).
func WaiterSchedule(head, poll, pace time.Duration) Schedule {
	return waiterSchedule(head, poll, pace, HeadWait, unmarkedSecond, BackWait)
}

// unmarkedSecond is SecondLook's longest (a waiter not marked).
func unmarkedSecond(age, head, poll time.Duration) time.Duration {
	return SecondLook(age, head, poll, false)
}

// markedSecond is the wait right behind the first, past SecondCover, of a
// marked waiter (SecondLook) and of versions before SecondCap:
// QueueWait(1, …).
func markedSecond(age, head, poll time.Duration) time.Duration {
	return QueueWait(1, age, head, poll)
}

// OlderWaiterSchedule is the schedule of the version before HeadCap and
// NearCap: its first in line looked at most every poll (olderHeadWait),
// its waiters behind the first followed OlderBackWait.
func OlderWaiterSchedule(head, poll, pace time.Duration) Schedule {
	return waiterSchedule(head, poll, pace, olderHeadWait, markedSecond, OlderBackWait)
}

// olderHeadWait is HeadWait as the version before HeadCap had it: the
// first in line's wait capped at poll rather than HeadCap(poll).
func olderHeadWait(age, head, poll time.Duration) time.Duration {
	return headWait(age, head, poll)
}

func waiterSchedule(head, poll, pace time.Duration, headWait, second func(age, head, poll time.Duration) time.Duration,
	backWait func(p int, age, pace, poll time.Duration) time.Duration) Schedule {
	return func(p int, age time.Duration) time.Duration {
		switch {
		case p <= 0:
			return headWait(age, head, poll)
		case p == 1:
			d := head
			if age >= SecondCover(head) {
				d = max(head, second(age, head, poll))
			}
			if hw := headWait(age, head, poll); hw < head {
				d = min(d, hw) // a young hold: it looks as the first does
			}
			return d
		default:
			return backWait(p, age, pace, poll)
		}
	}
}

// SleepBound is the longest a fair lock's waiter may still sleep before it
// looks again, at any instant at which the queue has stood still, as it
// sees it, for at most age (its own age is since it last saw the queue
// move, never before it joined: a holder takes the time since its entry was
// written): the largest WaiterSchedule gives at any position and any pace
// for an age up to age. marked says it wrote its head mark since (it polls as
// the first, or as the second when a waiter came back ahead of it): then
// HeadWait's and SecondWait's longest for a marked waiter (SecondLook).
// Unmarked, while age is under
// QueueQuiet(poll) that is max(BackRamp(age), PaceCap(poll)) (BackWait's
// position and pace terms are capped), past it QueueWait's caps far back.
// The holder's hand-off returns at once when the lease outlasts this from
// the marker (fairunlock.go, unlockFair).
func SleepBound(age, head, poll time.Duration, marked bool) time.Duration {
	if marked {
		sched := waiterSchedule(head, poll, unknownPace, HeadWait, markedSecond, BackWait)
		return max(sched(0, age), sched(1, age))
	}
	sched := WaiterSchedule(head, poll, unknownPace)
	return max(sched(0, age), sched(1, age), sched(maxPosition, age))
}

// unknownPace and maxPosition stand for a pace and a position SleepBound
// does not know: larger than any BackWait distinguishes.
const (
	unknownPace = time.Duration(1 << 62)
	maxPosition = 1 << 16
)
