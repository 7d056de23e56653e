package azlease_test

// The hand-off mechanism that fair locks and planned succession share
// (succession.go): a former holder's hand-on chain never acts on a newer
// term, even when a later holder hands the lease to the same successor.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// TestHandOnChainNeverActsOnANewerTerm is issue 25's duplicate epoch (fair
// lock simulation, seed 267): a holder (epoch e1) hands the lease to a
// waiter that does not take it in time; an operator breaks the lease; a new
// holder (e2) takes the lock and hands it to the same waiter, which still
// announces the same lease ID. The first holder's chain, moving on to the
// next waiter, must not find the lease under "its" ID: it must leave the
// newer term's record and hand-off alone, so that the waiter takes e2's
// hand-off with epoch e2 + 1. Before handOffID and the marker's reread,
// the chain wrote its record (epoch e1) over e2's and passed e2's lease on,
// and the next taker got epoch e1 + 1 = e2 a second time.
func TestHandOnChainNeverActsOnANewerTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		opts := func(id string) *azlease.LeaseOptions { return &azlease.LeaseOptions{Identity: id} }
		l1 := newLease(t, e.client("one"), "m", opts("one"))
		l2 := newLease(t, e.client("two"), "m", opts("two"))
		waiterA := newLease(t, e.client("a"), "m", opts("a"))
		waiterB := newLease(t, e.client("b"), "m", opts("b"))
		idA, idB := waiterA.NextLeaseID(), waiterB.NextLeaseID()

		tok1, err := l1.Acquire(ctx)
		require.NoError(t, err)
		var (
			wg    sync.WaitGroup
			tok2  azlease.Token
			taker string // who took the second holder's hand-off
			err2  error
		)
		calls := 0
		next1 := func() (string, string, time.Duration, bool) {
			calls++
			switch calls {
			case 1: // a, which does not look
				return "a", idA, 100 * time.Millisecond, true
			case 2:
				// a missed it; meanwhile an operator breaks the lease,
				// and a new holder takes the lock and hands it to a too.
				_, err := l2.Break(ctx, 0)
				require.NoError(t, err)
				tok2, err = l2.Acquire(ctx)
				require.NoError(t, err)
				require.Greater(t, tok2.Epoch, tok1.Epoch)
				wg.Go(func() { taker, err2 = handOnTo(ctx, l2, tok2, "a", idA, 10*time.Second) })
				for range 100 {
					st, err := azlease.Inspect(ctx, e.client("look"), "m")
					require.NoError(t, err)
					if st.Epoch == tok2.Epoch && st.Next == "a" {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				return "b", idB, 100 * time.Millisecond, true
			default:
				return "", "", 0, false
			}
		}
		_, _ = azlease.HandOnEachAs(ctx, l1, tok1.LeaseID, next1)

		st, err := azlease.Inspect(ctx, e.client("look"), "m")
		require.NoError(t, err)
		assert.Equal(t, tok2.Epoch, st.Epoch, "the newer term's record is left alone")
		assert.Equal(t, "a", st.Next, "the newer term's hand-off is left alone")
		require.True(t, st.Leased)

		tokA, err := azlease.TakeOverAs(ctx, waiterA, st)
		require.NoError(t, err, "the waiter takes the newer term's hand-off")
		assert.Equal(t, tok2.Epoch+1, tokA.Epoch)
		wg.Wait()
		require.NoError(t, err2)
		assert.Equal(t, "a", taker)
		require.NoError(t, waiterA.Release(ctx))
	})
}

// TestHandOnMarkerAnswerLost: the hand-off marker's write is applied but
// its answer is lost; the retry, refused for the stale ETag, reads the
// blob, finds its own marker, and the hand-off goes on: the successor takes
// the lease.
func TestHandOnMarkerAnswerLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var writes atomic.Int32
		e.SetFaults(faultsFor("one", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpSetMetadata && writes.Add(1) == 2 {
				// the first is the epoch's write, the second the marker's
				return azleasetest.Fault{Action: azleasetest.ApplyThenDrop}
			}
			return azleasetest.Fault{}
		}))
		l1, tok1, waiterA, idA, took := holderAndTaker(ctx, t, e)
		taker, err := handOnTo(ctx, l1, tok1, "a", idA, 200*time.Millisecond)
		tokA := <-took
		require.GreaterOrEqual(t, writes.Load(), int32(3), "the marker's answer was lost, and it was written again")
		require.NoError(t, err)
		assert.Equal(t, "a", taker)
		assert.Equal(t, tok1.Epoch+1, tokA.Epoch)
		require.NoError(t, waiterA.Release(ctx))
	})
}

// setUnderLease rewrites the lock blob's metadata under the lease ID id,
// as a write of the holder's term whose answer was lost would have: edit
// changes the metadata as read.
func setUnderLease(t *testing.T, cc *container.Client, name, id string, edit func(md map[string]*string)) {
	t.Helper()
	ctx := raw(context.Background())
	bc := cc.NewBlobClient(name)
	props, err := bc.GetProperties(ctx, nil)
	require.NoError(t, err)
	md := props.Metadata
	edit(md)
	_, err = bc.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &id}}})
	require.NoError(t, err)
}

// TestHandOnNeverWritesOverAnotherRecord: the hand-off marker is written
// conditionally on the hand-off's last write; a record of another epoch
// found under the same lease ID (a newer term: what a hand-off ID shared
// by two terms made possible) ends the hand-off and is left as it is. The
// marker's write used to retry without the condition, and wrote its older
// record over it.
func TestHandOnNeverWritesOverAnotherRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		l1 := newLease(t, e.client("one"), "m", nil)
		idA := newLease(t, e.client("a"), "m", nil).NextLeaseID()
		tok1, err := l1.Acquire(ctx)
		require.NoError(t, err)
		newer := strconv.FormatUint(tok1.Epoch+5, 10)
		setUnderLease(t, e.client("raw"), "m", tok1.LeaseID, func(md map[string]*string) {
			for k := range md {
				if strings.EqualFold(k, "azleaseepoch") {
					md[k] = &newer
				}
			}
		})
		_, err = handOnTo(ctx, l1, tok1, "a", idA, 100*time.Millisecond)
		require.ErrorIs(t, err, azlease.ErrLeaseLost)
		st, err := azlease.Inspect(ctx, e.client("look"), "m")
		require.NoError(t, err)
		assert.Equal(t, tok1.Epoch+5, st.Epoch, "the other record is left as it is")
		assert.Empty(t, st.Next, "no marker was written")
	})
}

// TestHandOnKeepsItsTermsOwnWrites: a write of the holder's own term that
// the holder does not know of (its answer was lost) is kept by the
// hand-off: the marker is written over the metadata as read, not over the
// holder's older copy, and the successor finds the user's metadata.
func TestHandOnKeepsItsTermsOwnWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		l1 := newLease(t, e.client("one"), "m", nil)
		waiterA := newLease(t, e.client("a"), "m", nil)
		idA := waiterA.NextLeaseID()
		tok1, err := l1.Acquire(ctx)
		require.NoError(t, err)
		setUnderLease(t, e.client("raw"), "m", tok1.LeaseID, func(md map[string]*string) {
			v := "written"
			md["state"] = &v
		})
		took := takeWhenHanded(ctx, e, waiterA, "a")
		taker, err := handOnTo(ctx, l1, tok1, "a", idA, 200*time.Millisecond)
		tokA := <-took
		require.NoError(t, err)
		assert.Equal(t, "a", taker)
		assert.Equal(t, tok1.Epoch+1, tokA.Epoch)
		st, err := azlease.Inspect(ctx, e.client("look"), "m")
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"state": "written"}, st.Metadata)
		require.NoError(t, waiterA.Release(ctx))
	})
}

// handOnTo hands the term tok of l on to one successor, key, which
// announced the lease ID announced and may take wait to take it.
func handOnTo(ctx context.Context, l *azlease.Lease, tok azlease.Token, key, announced string, wait time.Duration) (taker string, err error) {
	given := false
	return azlease.HandOnEachAs(ctx, l, tok.LeaseID, func() (string, string, time.Duration, bool) {
		if given {
			return "", "", 0, false
		}
		given = true
		return key, announced, wait, true
	})
}

// holderAndTaker: client one holds m (l1, tok1), and client a's Lease
// waiterA, whose next lease ID is idA, takes m once it is handed to key
// "a" (took).
func holderAndTaker(ctx context.Context, t *testing.T, e *emu) (l1 *azlease.Lease, tok1 azlease.Token, waiterA *azlease.Lease, idA string, took <-chan azlease.Token) {
	t.Helper()
	l1 = newLease(t, e.client("one"), "m", nil)
	waiterA = newLease(t, e.client("a"), "m", nil)
	idA = waiterA.NextLeaseID()
	tok1, err := l1.Acquire(ctx)
	require.NoError(t, err)
	return l1, tok1, waiterA, idA, takeWhenHanded(ctx, e, waiterA, "a")
}

// takeWhenHanded plays the successor key on w: it looks at the lock blob
// every 20 ms (for 2 s at most) and takes the lease over once the marker
// names it. The token it took (zero if none) comes on the channel. A look
// may find the marker before the lease is changed to the hand-off's ID:
// then it looks again.
func takeWhenHanded(ctx context.Context, e *emu, w *azlease.Lease, key string) <-chan azlease.Token {
	took := make(chan azlease.Token, 1)
	go func() {
		for range 100 {
			st, err := azlease.Inspect(ctx, e.client(key), "m")
			if err == nil && st.Next == key {
				if tok, err := azlease.TakeOverAs(ctx, w, st); err == nil {
					took <- tok
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		took <- azlease.Token{}
	}()
	return took
}

// TestTakeOverRenewsBesideTheEpochWrite: a successor renews the lease it
// took by Change Lease and writes its epoch at the same time. When every
// renewal is refused, no term begins (the epoch written beside it names a
// term that never began): the take-over fails, the successor holds
// nothing, the lease it took is given back, and the next holder's epoch
// is above the one written. When a renewal's answer is lost, the term
// begins with the retry, its validity measured from the retry's send.
func TestTakeOverRenewsBesideTheEpochWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault azleasetest.Fault
		once  bool
	}{
		{"renewals refused", azleasetest.Fault{Action: azleasetest.Fail}, false},
		{"a renewal's answer lost", azleasetest.Fault{Action: azleasetest.ApplyThenDrop}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				var renewals atomic.Int32
				e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
					if r.Op == azleasetest.OpRenewLease && (renewals.Add(1) == 1 || !tc.once) {
						return tc.fault
					}
					return azleasetest.Fault{}
				}))
				l1, tok1, waiterA, idA, took := holderAndTaker(ctx, t, e)
				_, _ = handOnTo(ctx, l1, tok1, "a", idA, 200*time.Millisecond)
				tokA := <-took
				if tc.once {
					require.Equal(t, tok1.Epoch+1, tokA.Epoch)
					assert.True(t, waiterA.Held())
					assert.GreaterOrEqual(t, renewals.Load(), int32(2), "renewed again after the lost answer")
					require.NoError(t, waiterA.Release(ctx))
					return
				}
				assert.Zero(t, tokA, "no term without a renewal")
				assert.False(t, waiterA.Held())
				st, err := azlease.Inspect(ctx, e.client("look"), "m")
				require.NoError(t, err)
				assert.False(t, st.Leased, "the lease taken is given back")
				l2 := newLease(t, e.client("two"), "m", nil)
				tok2, err := l2.Acquire(ctx)
				require.NoError(t, err)
				assert.Equal(t, tok1.Epoch+1, st.Epoch, "the epoch written beside the refused renewal")
				assert.Greater(t, tok2.Epoch, st.Epoch)
				require.NoError(t, l2.Release(ctx))
			})
		})
	}
}
