package azlease_test

import (
	"context"
	"fmt"
	"sync"
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

// TestStaleLockNeverTouchesNewerTerm is issue 24's first safety item: one
// Lease held by Hold (term T1), T1 ends (abandoned, or lost at its deadline
// behind a partition), the same Lease is held again (T2, a new lease ID),
// and T1's Lock is used late. Its Unlock must not release T2's lease, its
// HandOff must not hand T2's lease away, its Term's writes must not act,
// and stopping T1's renewals must not unhook T2's loss signal: T2 stays
// held on the server and valid, and another holder cannot acquire.
func TestStaleLockNeverTouchesNewerTerm(t *testing.T) {
	for _, end := range []string{"abandoned", "lost at the deadline"} {
		t.Run(end, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				a := newLease(t, e.client("a"), "x", nil)
				l1, err := a.Hold(ctx)
				require.NoError(t, err)
				switch end {
				case "abandoned":
					l1.Abandon()
					require.ErrorIs(t, l1.Err(), azlease.ErrStopped)
					time.Sleep(16 * time.Second) // the abandoned lease expires
				default:
					e.Partition("a", azleasetest.Blackhole) // renewals hang
					time.Sleep(20 * time.Second)
					require.ErrorIs(t, l1.Err(), azlease.ErrDeadlinePassed)
					e.Heal("a")
				}
				l2, err := a.Hold(ctx)
				require.NoError(t, err, "the same Lease holds again: a new term")
				require.NotEqual(t, l1.Token().LeaseID, l2.Token().LeaseID)
				require.Greater(t, l2.Epoch(), l1.Epoch())

				// T1, late: every operation acts on T1's own ID or not at all.
				other := newLease(t, e.client("b"), "x", nil)
				err = l1.HandOff(ctx, other.NextLeaseID())
				require.Error(t, err, "an ended term hands nothing off")
				uerr := l1.Unlock(ctx)
				if end == "abandoned" {
					require.NoError(t, uerr, "T1's own lease was given back already")
				} else {
					require.ErrorIs(t, uerr, azlease.ErrLeaseLost, "T1 reports its own loss")
				}
				require.ErrorIs(t, l1.Term.Write(ctx, []byte("late")), azlease.ErrNotHeld)
				require.ErrorIs(t, l1.Term.Write(ctx, []byte("late")), l1.Err(), "with the term's end cause")

				// T2 is untouched: held on the server, valid, renewed.
				require.True(t, l2.Valid())
				st, err := other.Inspect(ctx)
				require.NoError(t, err)
				require.True(t, st.Leased, "T1's Unlock or HandOff freed T2's lease")
				_, err = other.Hold(ctx)
				require.ErrorIs(t, err, azlease.ErrLeaseHeld, "another holder acquired during T2")
				time.Sleep(time.Minute)
				require.True(t, l2.Valid(), "T2 renewed all along")

				// T2's loss signal still works after T1's renewals stopped:
				// an operator breaks the lease, and T2's next write learns
				// it and ends T2 at once (not at its next renewal).
				_, err = other.Break(ctx, 0)
				require.NoError(t, err)
				werr := l2.Term.Write(ctx, []byte("after the break"))
				require.ErrorIs(t, werr, azlease.ErrLeaseLost)
				require.False(t, l2.Valid(), "T2 ended at once by its write's loss")

				grants := e.Grants(testContainer, "x")
				require.Len(t, grants, 2)
				assert.Equal(t, l2.Token().LeaseID, grants[1].LeaseID)
				require.ErrorIs(t, l2.Unlock(ctx), azlease.ErrLeaseLost, "T2 reports its own loss")
			})
		})
	}
}

// TestHandOnActsOnlyOnItsTerm: the hand-on that an Elector's planned stop
// and a fair Unlock share names the term it hands on; asked for another
// term's lease ID (an older one, after the same Lease was held again), it
// sends nothing, and the Lease's own term keeps its lease. With the check
// removed, the hand-on (here with no successor) releases the newer term.
func TestHandOnActsOnlyOnItsTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		l1, err := a.Hold(ctx)
		require.NoError(t, err)
		l1.Abandon()
		time.Sleep(16 * time.Second) // the abandoned lease expires
		l2, err := a.Hold(ctx)
		require.NoError(t, err)
		require.ErrorIs(t, azlease.HandOnAs(ctx, a, l1.Token().LeaseID), azlease.ErrNotHeld)
		require.True(t, l2.Valid())
		st, err := azlease.Inspect(ctx, e.client("b"), "x")
		require.NoError(t, err)
		require.True(t, st.Leased, "the newer term keeps its lease")
		require.Equal(t, l2.Epoch(), st.Epoch)
		require.NoError(t, l2.Unlock(ctx))
	})
}

// TestHoldRenewsWithRoomForTwoAttempts: with AttemptTimeout at its largest
// (4.75 s for a 15 s lease), Hold renews by 4.75 s after the last renewal
// rather than 5 s, so a renewal whose first attempt hangs has a second
// attempt of nearly 4.75 s (less the retry's backoff) before the validity
// deadline: one answered after 4.5 s keeps the term. Renewing every 5 s
// (up to 10 % sooner), the second attempt had as little as 4.5 s less the
// backoff, and such a term could end.
func TestHoldRenewsWithRoomForTwoAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var mu sync.Mutex
		renewals := map[string][]time.Time{}
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op != azleasetest.OpRenewLease {
				return azleasetest.Fault{}
			}
			mu.Lock()
			defer mu.Unlock()
			renewals[r.Blob] = append(renewals[r.Blob], time.Now())
			switch len(renewals[r.Blob]) {
			case 2:
				return azleasetest.Fault{Delay: time.Minute} // its first attempt hangs
			case 3:
				return azleasetest.Fault{Delay: 4500 * time.Millisecond}
			}
			return azleasetest.Fault{}
		})
		const n = 8
		locks := make([]*azlease.Lock, n)
		for i := range locks {
			l := newLease(t, e.client("a"), fmt.Sprint("x", i), &azlease.LeaseOptions{AttemptTimeout: 4750 * time.Millisecond})
			var err error
			locks[i], err = l.Hold(ctx)
			require.NoError(t, err)
		}
		time.Sleep(30 * time.Second)
		for i, lk := range locks {
			mu.Lock()
			rs := renewals[fmt.Sprint("x", i)]
			mu.Unlock()
			require.GreaterOrEqual(t, len(rs), 3, "lease %d", i)
			assert.LessOrEqual(t, rs[1].Sub(rs[0]), 4750*time.Millisecond, "lease %d: from one renewal to the next", i)
			assert.True(t, lk.Valid(), "lease %d: a hung attempt and a slow one keep the term", i)
			require.NoError(t, lk.Unlock(ctx))
		}
	})
}
