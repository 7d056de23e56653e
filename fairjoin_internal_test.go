package azlease

// A join placed without a listing (fairjoin.go): only a Mutex's Lock
// within a few round trips of its own hand-off, far enough back, and with
// tickets of one generation, is placed; the place counts the waiters the
// hand-off's listing showed (but this holder and those marked missed) and
// the tickets taken since.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/azlease/azlease/internal/timing"
)

func TestJoinPlacedFromTheHandOff(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const rtt = 2 * time.Millisecond
	// The holder had ticket 100; its listing showed it and 30 behind it
	// (101 to 130), the last two marked missed.
	listing := func() queueView {
		v := queueView{sent: t0.Add(-10 * time.Millisecond), got: t0.Add(-10*time.Millisecond + rtt)}
		for tk := uint64(100); tk <= 130; tk++ {
			v.ws = append(v.ws, waiter{Waiter: Waiter{Ticket: tk, Missed: tk > 128}})
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		slots  int
		edit   func(hf *handedFrom)
		ticket uint64
		asked  time.Duration // after the hand-off
		want   int
	}{
		{"right after", 1, nil, 131, 0, 28},
		{"tickets taken since", 1, nil, 141, rtt, 38},
		{"within four round trips", 1, nil, 131, 4 * rtt, 28},
		{"later than four round trips", 1, nil, 131, 4*rtt + time.Microsecond, 0},
		{"before the hand-off", 1, nil, 131, -time.Microsecond, 0},
		{"a Semaphore", 2, nil, 131, 0, 0},
		{"no hand-off", 1, func(hf *handedFrom) { *hf = handedFrom{} }, 131, 0, 0},
		{"near the front", 1, func(hf *handedFrom) {
			hf.v.ws = hf.v.ws[:18] // 100 to 117
		}, 118, 0, 0},
		{"just far enough back", 1, func(hf *handedFrom) {
			hf.v.ws = hf.v.ws[:21] // 100 to 120: 20 others
		}, 121, 0, 20},
		{"a ticket of another generation", 1, nil, ticketsPerGeneration + 1, 0, 0},
		{"a ticket the listing shows", 1, nil, 130, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fairLock{slots: make([]*Mutex, tc.slots)}
			hf := handedFrom{at: t0, v: listing(), ticket: 100}
			if tc.edit != nil {
				tc.edit(&hf)
			}
			f.handedFrom = hf
			want := tc.want
			got := f.placed(tc.ticket, t0.Add(tc.asked))
			assert.Equal(t, want, got.at)
			if want > 0 {
				assert.Equal(t, hf.v.sent, got.from.sent, "the pace counts from the listing that placed it")
			}
		})
	}
}

// TestPlacedSleepWithinTheSchedule: a waiter placed up to placedSlack
// places further back than it is sleeps no longer than its watchers count
// for the place it is at (timing.BackWait), nor than it would have slept
// had it listed (timing.OwnBackWait): the claim fairjoin.go rests on.
func TestPlacedSleepWithinTheSchedule(t *testing.T) {
	for _, poll := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second} {
		for p := placedFrom; p < 5000; p++ {
			d := placedSleep(p, poll)
			for k := 0; k <= placedSlack(p); k++ {
				if back := timing.BackWait(p-k, 0, 0, poll); d > back {
					t.Fatalf("poll %v: placed at %d, sleeps %v; at %d its watchers count %v", poll, p, d, p-k, back)
				}
			}
			if own := timing.OwnBackWait(p, 0, 0, poll); d > own {
				t.Fatalf("poll %v: placed at %d, sleeps %v, longer than its own wait there (%v)", poll, p, d, own)
			}
		}
	}
	assert.Equal(t, 6, placedSlack(49), "the back of a queue of 50")
}
