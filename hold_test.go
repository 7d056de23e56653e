package azlease_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// TestLeaseHoldAndLockHandOff: Lease.Hold keeps a lease renewed; a Lock
// handed off to another Lease's next ID ends its term (ErrStopped) and the
// receiver's Hold is granted at once, with a larger epoch, the lease never
// free in between (the server's grants are contiguous and exclusive).
func TestLeaseHoldAndLockHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		b := newLease(t, e.client("b"), "x", nil)
		la, err := a.Hold(ctx)
		require.NoError(t, err)
		time.Sleep(time.Minute) // four lease durations: renewed all along
		require.True(t, la.Valid(), "held and renewed")
		_, err = b.Hold(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)

		// Intervals name lease IDs: the server records the changed lease
		// as granted to the client that changed it (a).
		var rec azleasetest.Recorder
		startA := time.Now()
		require.NoError(t, la.HandOff(ctx, b.NextLeaseID()))
		rec.Add(azleasetest.Interval{Holder: "a", LeaseID: la.Token().LeaseID, Epoch: la.Epoch(), Start: startA, End: time.Now()})
		assert.ErrorIs(t, context.Cause(la.Context()), azlease.ErrStopped)
		require.NoError(t, la.Unlock(ctx), "after a hand-off, Unlock has nothing to do")

		lb, err := b.Hold(ctx)
		require.NoError(t, err, "granted at once: the lease carries b's ID")
		startB := time.Now()
		assert.Greater(t, lb.Epoch(), la.Epoch())
		time.Sleep(time.Minute)
		require.True(t, lb.Valid())
		rec.Add(azleasetest.Interval{Holder: "b", LeaseID: lb.Token().LeaseID, Epoch: lb.Epoch(), Start: startB, End: time.Now()})
		require.NoError(t, lb.Unlock(ctx))
		grants := e.Grants(testContainer, "x")
		require.NoError(t, azleasetest.CheckIntervals(grants, rec.Intervals()))
		require.Len(t, grants, 2)
		assert.False(t, grants[1].Start.After(grants[0].End), "no moment when the lease was free: %v", grants)
	})
}

// TestLockHandOffRefusals: a lost lock is not handed off; a bad ID sends
// nothing and leaves the lock held.
func TestLockHandOffRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		la, err := a.Hold(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, la.HandOff(ctx, "not-a-guid"), azlease.ErrInvalidOptions)
		require.True(t, la.Valid(), "nothing sent, still held")

		e.Partition("a", azleasetest.Blackhole) // renewals hang: the term ends at its deadline
		time.Sleep(20 * time.Second)
		require.False(t, la.Valid())
		e.Heal("a")
		other := newLease(t, e.client("b"), "x", nil)
		require.ErrorIs(t, la.HandOff(ctx, other.NextLeaseID()), azlease.ErrLeaseLost)

		var zero azlease.Lease
		_, err = zero.Hold(ctx)
		require.ErrorIs(t, err, azlease.ErrNotInitialized)
		var nilLock *azlease.Lock
		require.ErrorIs(t, nilLock.HandOff(ctx, other.NextLeaseID()), azlease.ErrNotHeld)
	})
}
