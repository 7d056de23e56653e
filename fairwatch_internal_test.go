package azlease

// takeLeft (fairwatch.go): the first in line takes over a hand-off to a
// waiter gone from the queue only when a look still shows that hand-off.

import (
	"context"
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
