package azlease

// movedAt (fairmove.go): when a waiter far back counts the queue's last
// move from, by cases.

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestMovedAt: a move made only of takes by waiters ahead is dated from the
// lock blob's write (storage's clock against the listing's Date, a second
// and 2 × AttemptTimeout late), never before the previous listing's answer
// nor the date used before, never after now; anything else is now.
func TestMovedAt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const attempt = 2 * time.Second
		f := &fairLock{slots: []*Mutex{nil}, cfg: holdConfig{lease: leaseConfig{attemptTimeout: attempt}}}
		now := time.Now()
		storage := now.Add(time.Hour) // storage's clock runs an hour ahead of this one
		ws := func(tickets ...uint64) []waiter {
			var out []waiter
			for _, tk := range tickets {
				out = append(out, waiter{Waiter: Waiter{Ticket: tk, Holder: "h" + string(rune('0'+tk))}})
			}
			return out
		}
		hist := func(epochs ...uint64) []HistoryEntry { // newest first; holder of epoch 10+k is h<k>
			var out []HistoryEntry
			for _, e := range epochs {
				out = append(out, HistoryEntry{Epoch: e, Holder: "h" + string(rune('0'+e-10))})
			}
			return out
		}
		// lock is the lock blob at epoch, last written ago before a
		// listing answered at got (storage's Date: the same instant).
		lock := func(epoch uint64, h []HistoryEntry, ago time.Duration) []Status {
			return []Status{{Epoch: epoch, History: h, modified: storage.Add(-ago), listed: storage}}
		}
		view := func(got time.Time, ws []waiter, locks []Status) queueView {
			return queueView{ws: ws, locks: locks, sent: got.Add(-time.Millisecond), got: got}
		}
		prevGot := now.Add(-4 * time.Minute)
		prev := view(prevGot, ws(1, 2, 3, 4, 5), lock(10, hist(10), 5*time.Minute))
		late := time.Second + 2*attempt // the date is made late by this much
		for _, tc := range []struct {
			name       string
			p          int
			ticket     uint64
			prev, v    queueView
			last, want time.Time
		}{
			{"one take by the first: dated from its write", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), prevGot, now.Add(-2*time.Minute + late)},
			{"two takes in a row", 2, 5, prev,
				view(now, ws(3, 4, 5), lock(12, hist(12, 11, 10), 90*time.Second)), prevGot, now.Add(-90*time.Second + late)},
			{"a take and a leave ahead: now", 2, 5, prev,
				view(now, ws(3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), prevGot, now},
			{"a leave alone (no term): now", 3, 5, prev,
				view(now, ws(1, 3, 4, 5), lock(10, hist(10), 5*time.Minute)), prevGot, now},
			{"a take by one not in the queue (a TryLock) and one by the first: now", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), lock(12, append([]HistoryEntry{{Epoch: 12, Holder: "outsider"}}, hist(11, 10)...), time.Minute)), prevGot, now},
			{"a take by one not in the queue alone: now", 4, 5, prev,
				view(now, ws(1, 2, 3, 4, 5), lock(11, []HistoryEntry{{Epoch: 11, Holder: "outsider"}}, time.Minute)), prevGot, now},
			{"terms the history does not hold: now", 2, 5, prev,
				view(now, ws(3, 4, 5), lock(12, hist(12), time.Minute)), prevGot, now},
			{"the previous listing missing: now", 3, 5, queueView{},
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), time.Time{}, now},
			{"a previous listing without the lock: now", 3, 5, view(prevGot, ws(1, 2, 3, 4, 5), nil),
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), prevGot, now},
			{"right behind the first (p 1): now", 1, 3, prev,
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), prevGot, now},
			{"the write before the previous listing's answer: that answer", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 10*time.Minute)), prevGot, prevGot},
			{"the date used before is later: kept", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), now.Add(-time.Minute), now.Add(-time.Minute)},
			{"a write dated after the listing's Date (clock edge): now at the latest", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), -10*time.Second)), prevGot, now},
			{"a write within the lateness of the answer: now at the latest", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), late/2)), prevGot, now},
			{"no Last-Modified: now", 3, 5, prev,
				view(now, ws(2, 3, 4, 5), []Status{{Epoch: 11, History: hist(11, 10), listed: storage}}), prevGot, now},
			{"epochs that went back (the blob made anew): now", 3, 5, view(prevGot, ws(1, 2, 3, 4, 5), lock(12, hist(12), time.Minute)),
				view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), prevGot, now},
			{"an entry ahead without a holder: now", 3, 5, view(prevGot, []waiter{{Waiter: Waiter{Ticket: 1}}, ws(2)[0], ws(3)[0], ws(4)[0], ws(5)[0]}, lock(10, hist(10), 5*time.Minute)),
				view(now, ws(2, 3, 4, 5), lock(11, []HistoryEntry{{Epoch: 11}, {Epoch: 10}}, 2*time.Minute)), prevGot, now},
			{"a take behind this waiter does not date it", 2, 3, prev,
				view(now, ws(1, 2, 3, 5), lock(11, []HistoryEntry{{Epoch: 11, Holder: "h4"}}, 2*time.Minute)), prevGot, now},
		} {
			got := f.movedAt(tc.p, tc.ticket, tc.prev, tc.v, tc.last)
			assert.Equal(t, tc.want, got, "%s: %v off", tc.name, got.Sub(tc.want))
			assert.False(t, got.After(now), "%s: never after now", tc.name)
		}
		// A Semaphore (several slots): now.
		s := &fairLock{slots: []*Mutex{nil, nil}, cfg: f.cfg}
		assert.Equal(t, now, s.movedAt(3, 5, prev, view(now, ws(2, 3, 4, 5), lock(11, hist(11, 10), 2*time.Minute)), prevGot))
	})
}
