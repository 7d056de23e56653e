package timing

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSuccessorDueHolds: a waiter that follows WaiterSchedule, seeing the
// queue's moves only at its own looks and reading a published pace that
// changes from look to look, always looks again after it is named by the
// instant its watcher computes from the stays its own (random, sparser or
// denser) looks bound, with the largest pace it can bound: random queues,
// moves, paces and looks.
func TestSuccessorDueHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 2))
	head, poll := 200*time.Millisecond, time.Second
	base := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	for trial := range 3000 {
		start := 1 + r.IntN(50)
		// The largest pace the watcher bounds; the successor reads one
		// at or below it at each look (zero: fewer than 8 holds known).
		paceMax := []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 300 * time.Millisecond, 5 * time.Second}[r.IntN(5)]
		// moves[k]: when the successor came to position start-1-k (it
		// joined at start at 0); the last move names it (position 0).
		var moves []time.Duration
		now := time.Duration(0)
		for range start {
			now += time.Duration(r.ExpFloat64() * float64([]time.Duration{5 * time.Millisecond, 200 * time.Millisecond, 5 * time.Second}[r.IntN(3)]))
			moves = append(moves, now)
		}
		named := moves[len(moves)-1]
		posAt := func(t time.Duration) (p int, movedAt time.Duration) {
			p = start
			for k, m := range moves {
				if m <= t {
					p, movedAt = start-1-k, m
				}
			}
			return p, movedAt
		}
		// The successor's looks: the queue's stand-still age is since the
		// last move it saw (at a look), or since it joined. As the first
		// in line, the age is the hold's (since it came first).
		var next time.Duration = -1
		seenMove := time.Duration(0)
		lastPos := start
		for t := time.Duration(0); ; {
			p, _ := posAt(t)
			if p != lastPos {
				seenMove, lastPos = t, p
			}
			if t >= named {
				next = t
				break
			}
			age := t - seenMove
			if p == 0 {
				_, m := posAt(t)
				age = t - m
			}
			pace := time.Duration(r.Float64() * float64(paceMax))
			t += WaiterSchedule(head, poll, pace)(p, age)
		}
		// The watcher joined after it, before the queue first moved (the
		// successor's first position is the first it sees), and lists at
		// random instants.
		var stays []Stay
		wt := time.Duration(r.Float64() * float64(moves[0]))
		prevSent := time.Duration(-1)
		prevPos := -1
		for wt < named {
			p, _ := posAt(wt)
			if p != prevPos {
				from := time.Time{}
				if prevSent >= 0 {
					from = at(prevSent)
				} else {
					from = at(0) // its join, as its entry's age tells
				}
				if len(stays) > 0 {
					stays[len(stays)-1].To = at(wt)
				}
				stays = append(stays, Stay{Pos: p, From: from})
				prevPos = p
			}
			prevSent = wt
			wt += time.Duration(r.ExpFloat64() * float64([]time.Duration{10 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second}[r.IntN(3)]))
		}
		// The watcher's look that first shows the hand-off.
		sight := wt
		if len(stays) > 0 {
			stays[len(stays)-1].To = at(sight)
		}
		stays = append(stays, Stay{Pos: 0, From: at(max(prevSent, 0)), To: at(sight)})
		due := SuccessorDue(stays, WaiterSchedule(head, poll, paceMax))
		require.False(t, at(next).After(due), "trial %d: start %d, moves %v, stays %v: next look %v after due %v", trial, start, moves, stays, next, due.Sub(base))
	}
}

// TestPaceSinceHolds: every pace published between two reads of the hold
// list is no larger than PaceSince of the later list, given how many holds
// were published in between (or PaceSince says it cannot tell): random
// hold sequences, random reads.
func TestPaceSinceHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 4))
	const kept = 32
	for trial := range 3000 {
		var holds []time.Duration // newest first, as the record keeps them
		lists := [][]time.Duration{nil}
		for range 80 {
			h := time.Duration(r.ExpFloat64() * float64([]time.Duration{time.Millisecond, 100 * time.Millisecond, 10 * time.Second}[r.IntN(3)]))
			holds = append([]time.Duration{h}, holds...)
			if len(holds) > kept {
				holds = holds[:kept]
			}
			lists = append(lists, holds)
		}
		for range 20 {
			a := r.IntN(len(lists))
			b := min(a+r.IntN(40), len(lists)-1)
			bound, ok := PaceSince(lists[b], b-a, kept)
			if b-a+PaceHolds <= kept {
				require.True(t, ok, "trial %d: %d published, %d kept", trial, b-a, kept)
			}
			if !ok {
				continue
			}
			for k := a; k <= b; k++ {
				require.LessOrEqual(t, Pace(lists[k]), bound, "trial %d: lists %d..%d, at %d", trial, a, b, k)
			}
		}
	}
	require.Zero(t, Pace(nil), "none known: zero")
	require.Zero(t, Pace([]time.Duration{time.Second}), "one known: zero")
	require.Equal(t, time.Millisecond, Pace([]time.Duration{time.Hour, 1 * time.Millisecond, 2 * time.Millisecond}), "fewer than 8: the shortest")
	require.Equal(t, 5*time.Millisecond, Pace([]time.Duration{time.Hour, 1, 2, 3, 5 * time.Millisecond, 6 * time.Millisecond, 7 * time.Millisecond, 8}), "one long hold does not move it")
}

// TestSleepBoundHolds: no sleep WaiterSchedule gives, at any position, any
// pace and any age up to age, is longer than SleepBound(age) (positions 0
// and 1 only when marked, right behind the first as a marked one sleeps); and while the queue has stood still for less
// than QueueQuiet it does not depend on how far back the waiter is.
func TestSleepBoundHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(35, 6))
	for trial := range 20000 {
		head := []time.Duration{20 * time.Millisecond, 200 * time.Millisecond, time.Second}[r.IntN(3)]
		poll := max(head, []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second}[r.IntN(3)])
		age := time.Duration(r.ExpFloat64() * float64([]time.Duration{100 * time.Millisecond, 5 * time.Second, 40 * time.Second, 10 * time.Minute}[r.IntN(4)]))
		a := time.Duration(r.Float64() * float64(age))
		pace := time.Duration(r.ExpFloat64() * float64([]time.Duration{0, time.Millisecond, 100 * time.Millisecond, 10 * time.Second}[r.IntN(4)]))
		p := []int{0, 1, 2, 3 + r.IntN(50), r.IntN(100000)}[r.IntN(5)]
		got := WaiterSchedule(head, poll, pace)(p, a)
		require.LessOrEqual(t, got, SleepBound(age, head, poll, false), "trial %d: p %d age %v pace %v", trial, p, a, pace)
		if p <= 1 {
			// A marked waiter right behind the first keeps QueueWait (SecondLook).
			marked := waiterSchedule(head, poll, pace, HeadWait, markedSecond, BackWait)(p, a)
			require.LessOrEqual(t, marked, SleepBound(age, head, poll, true), "trial %d: marked, p %d age %v", trial, p, a)
		}
	}
	// Behind a queue that stood still for less than QueueQuiet, the bound is
	// the stand-still ramp or PaceCap: a hot queue's waiter at any position
	// looks within 2 × PollInterval.
	require.Equal(t, PaceCap(time.Second), SleepBound(500*time.Millisecond, 200*time.Millisecond, time.Second, false))
	require.Equal(t, BackRamp(20*time.Second), SleepBound(20*time.Second, 200*time.Millisecond, time.Second, false))
	require.Equal(t, 2*time.Second, SleepBound(time.Hour, 200*time.Millisecond, time.Second, true))
}

// TestOlderHeadWait: the version before HeadCap's first in line, as
// OlderWaiterSchedule counts it, is HeadWait capped at poll.
func TestOlderHeadWait(t *testing.T) {
	head, poll := 200*time.Millisecond, time.Second
	for a := time.Duration(0); a <= time.Hour; a = max(a*3/2, time.Millisecond) {
		assert.Equal(t, min(HeadWait(a, head, poll), poll), olderHeadWait(a, head, poll), "age %v", a)
		assert.Equal(t, HeadWait(a, head, poll), olderHeadWait(a, head, HeadCap(poll)), "age %v: with twice the poll, as this version", a)
	}
}
