package azlease_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// TestHoldAfterSavesTheRead: Lease.HoldAfter with the status a listing
// just read acquires with two requests (acquire, epoch write) where Hold
// makes three; with a status the blob has changed since, the epoch write's
// condition fails and it reads again, and the epoch still grows; a status
// of another blob is not used. (Measured: with the status ignored, the
// first case makes three requests.)
func TestHoldAfterSavesTheRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var mu sync.Mutex
		ops := map[azleasetest.Op]int{}
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Client == "a" {
				mu.Lock()
				ops[r.Op]++
				mu.Unlock()
			}
			return azleasetest.Fault{}
		})
		count := func() map[azleasetest.Op]int {
			mu.Lock()
			defer mu.Unlock()
			out := ops
			ops = map[azleasetest.Op]int{}
			return out
		}
		obs := e.client("observer")
		seed := newLease(t, obs, "x", nil)
		lk, err := seed.Hold(ctx)
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(ctx))

		sts, err := azlease.InspectPrefix(ctx, obs, "x")
		require.NoError(t, err)
		require.Len(t, sts, 1)
		a := newLease(t, e.client("a"), "x", nil)
		count()
		la, err := a.HoldAfter(ctx, sts[0])
		require.NoError(t, err)
		assert.Equal(t, map[azleasetest.Op]int{azleasetest.OpAcquireLease: 1, azleasetest.OpSetMetadata: 1}, count(), "two requests")
		assert.Equal(t, sts[0].Epoch+1, la.Epoch())
		require.NoError(t, la.Unlock(ctx))

		// The status is stale: the blob was held and released since.
		lk, err = seed.Hold(ctx)
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(ctx))
		la, err = a.HoldAfter(ctx, sts[0])
		require.NoError(t, err)
		assert.Equal(t, lk.Epoch()+1, la.Epoch(), "the epoch grows from the blob, not from the stale status")
		got := count()
		assert.Equal(t, 2, got[azleasetest.OpSetMetadata], "the conditional write failed once: %v", got)
		require.NoError(t, la.Unlock(ctx))

		// Another blob's status: not used.
		other := sts[0]
		other.Name = "y"
		la, err = a.HoldAfter(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, 1, count()[azleasetest.OpGetProperties], "read as Hold does")
		require.NoError(t, la.Unlock(ctx))
	})
}
