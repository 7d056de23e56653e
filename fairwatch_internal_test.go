package azlease

// takeLeft (fairwatch.go): the first in line takes over a hand-off to a
// waiter gone from the queue only when a look still shows that hand-off.

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// TestTakeLeftLooksBeforeItTakesOver: a holds the lock, s waits first in
// line. a's Unlock hands the lock to s; w lists the queue while the marker
// names s and s has not taken it yet. Then s takes it: it removes its entry
// beside the write of its term, so a listing can show the entry gone and
// the marker unchanged. Given that listing, w's takeLeft looks first, sees
// s's term, and sends no Change Lease: before, it sent one, refused (409),
// a request counted as failed. (A hand-off the look still shows is taken
// over: TestFairLockFirstWaiterDoesNotSpin, the fair lock simulation.)
func TestTakeLeftLooksBeforeItTakesOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, cc := schedEmu(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, s, w := mutexOn(t, cc), mutexOn(t, cc), mutexOn(t, cc)
		held, err := a.Lock(ctx)
		require.NoError(t, err)
		got := make(chan *Lock, 1)
		go func() {
			lk, err := s.Lock(ctx)
			if err != nil {
				lk = nil
			}
			got <- lk
		}()
		time.Sleep(5 * time.Second) // s is first in line, looking
		var slow atomic.Bool        // every request but w's list waits a second
		var changes atomic.Int64
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpChangeLease {
				changes.Add(1)
			}
			if slow.Load() && r.Op != azleasetest.OpListBlobs {
				return azleasetest.Fault{Delay: time.Second}
			}
			return azleasetest.Fault{}
		})
		require.NoError(t, held.Unlock(ctx))
		slow.Store(true) // s's look, and so its take, a second late
		v, err := w.fair.q.list(ctx, time.Now().Add(time.Minute))
		require.NoError(t, err)
		require.Len(t, v.locks, 1)
		require.True(t, v.locks[0].Leased)
		require.Len(t, v.ws, 1, "s is in the queue")
		sKey := v.ws[0].key
		require.Equal(t, sKey, v.locks[0].Next, "the marker names s")
		slow.Store(false)
		lk := <-got
		require.NotNil(t, lk, "s took the lock")

		// The listing as if read between s's entry's removal and the
		// write of its term.
		gone := v
		gone.ws = slices.DeleteFunc(slices.Clone(v.ws), func(x waiter) bool { return x.key == sKey })
		before := changes.Load()
		var pl polling
		taken, err := w.fair.takeLeft(ctx, waiter{key: "w"}, gone, &pl, time.Minute)
		require.NoError(t, err)
		assert.Nil(t, taken, "s holds the lock")
		assert.Equal(t, before, changes.Load(), "no Change Lease: the look showed s's term")
		assert.True(t, lk.Valid(), "s still holds it")
		require.NoError(t, lk.Unlock(ctx))
	})
}

// TestWatchersBehindWaitForTheOnesBetween: c waits right behind b, d to g
// further back; the lock is handed to b, which does not come. Each watcher
// lists the queue on its own schedule from its join, and storage dates
// everything in whole seconds against its own clock, so each dates b's
// join, the hold's start and the hand-off up to two seconds apart. No
// watcher further back may take the hand-off over before c's own promise
// has run out: in CI, e's listings dated b's join a second later than c's
// did, its promise ended 215 ms before c's, and e took the lock from live c
// while d, between them, was dead (TestMultiProcessFairLock). Random
// timelines; the promises as watch computes them from listings (track),
// extended as once its own has run out (othersWatch). Pairs further back
// (a live waiter with two or more dead ahead of it, and a watcher behind
// it) are not bounded (othersDue): their pass-overs are logged.
func TestWatchersBehindWaitForTheOnesBetween(t *testing.T) {
	t.Parallel()
	_, cc := schedEmu(t)
	f := mutexOn(t, cc).fair
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(35, 2))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	further := map[string]int{} // pass-overs not bounded, by pair
	for trial := range 300 {
		base := time.Now().Add(time.Hour) // never reached: watch only computes
		off := dur(-3*time.Second, 3*time.Second)
		storage := func(t time.Time) time.Time { return t.Add(off).Truncate(time.Second) }
		names := []string{"a", "b", "c", "d", "e", "f", "g"}
		joins := map[string]time.Time{}
		at := base.Add(dur(50*time.Millisecond, 300*time.Millisecond))
		for _, n := range names {
			joins[n] = at
			at = at.Add(dur(100*time.Millisecond, 400*time.Millisecond))
		}
		takeA := at.Add(dur(0, 2*time.Second))                              // a takes the lock: b first in line
		handB := takeA.Add(dur(50*time.Millisecond, 1500*time.Millisecond)) // a hands it to b
		ws := func(t time.Time, sent time.Time) []waiter {
			var out []waiter
			for i, n := range names {
				if joins[n].After(sent) || (n == "a" && !takeA.After(t)) {
					continue
				}
				out = append(out, waiter{Waiter: Waiter{Ticket: uint64(i + 1)}, key: n, modified: storage(joins[n])})
			}
			return out
		}
		lockAt := func(t time.Time) Status {
			st := Status{Exists: true, Leased: true, Epoch: 1, modified: storage(base)}
			switch {
			case !handB.After(t):
				st.Epoch, st.Next, st.modified = 2, "b", storage(handB)
			case !takeA.After(t):
				st.Epoch, st.modified = 2, storage(takeA)
			}
			return st
		}
		promise := func(self string) time.Time {
			var pl polling
			sent := joins[self]
			for {
				rtt := dur(time.Millisecond, 12*time.Millisecond)
				seen := sent.Add(dur(0, rtt)) // when storage read it
				v := queueView{sent: sent, got: sent.Add(rtt), date: storage(seen), ws: ws(seen, sent)}
				st := lockAt(seen)
				st.listed = v.date
				v.locks = []Status{st}
				i := slices.IndexFunc(v.ws, func(x waiter) bool { return x.key == self })
				require.GreaterOrEqual(t, i, 0)
				ahead := v.ws[:i]
				pl.track(ahead, v)
				if st.Next != "" {
					_, _, _, err := f.watch(ctx, &pl, ahead, v.locks, v.sent, v.got, time.Minute)
					require.NoError(t, err)
					require.NotEmpty(t, pl.watch.key, "%s watches the hand-off", self)
					f.othersWatch(&pl, ahead) // as watch does once its own promise ran out
					return pl.watch.promise
				}
				// Looks no further apart than the schedule's shortest.
				sent = v.got.Add(dur(time.Millisecond, 4*time.Millisecond))
			}
		}
		ps := []time.Time{promise("c"), promise("d"), promise("e"), promise("f"), promise("g")}
		for i := 1; i < len(ps); i++ {
			for j := range i {
				if ps[i].After(ps[j].Add(minHandOffMargin)) {
					continue
				}
				if j == 0 {
					t.Fatalf("trial %d: %s's promise %v after the hand-off, c's %v: %[2]s would take the hand-off from live c",
						trial, names[2+i], ps[i].Sub(handB), ps[0].Sub(handB))
				}
				further[names[2+i]+" before "+names[2+j]]++
			}
		}
	}
	t.Logf("promises of 300 timelines that end before another's ahead, past c (a live waiter with two or more dead ahead of it passed over): %v", further)
}
