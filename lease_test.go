package azlease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

func newLease(t *testing.T, cc *container.Client, name string, opts *azlease.LeaseOptions) *azlease.Lease {
	t.Helper()
	l, err := azlease.NewLease(cc, name, opts)
	require.NoError(t, err)
	return l
}

func TestLeaseAcquireRenewRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "leader", &azlease.LeaseOptions{Identity: "node-a"})
		b := newLease(t, e.client("b"), "leader", &azlease.LeaseOptions{Identity: "node-b"})

		tok, err := a.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, epoch1, tok.Epoch)
		assert.Len(t, tok.LeaseID, 36)
		assert.True(t, a.Held())
		assert.Equal(t, fmt.Sprintf("epoch %d", tok.Epoch), tok.String(), "String never shows the lease ID")

		_, err = a.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrAlreadyHeld)

		_, err = b.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)
		var aerr *azlease.Error
		require.ErrorAs(t, err, &aerr)
		assert.Equal(t, "LeaseAlreadyPresent", aerr.Code)
		assert.Equal(t, 409, aerr.StatusCode)
		assert.NotEmpty(t, aerr.RequestID)
		assert.True(t, bloberror.HasCode(err, bloberror.LeaseAlreadyPresent), "the Azure error stays reachable")
		assert.NotContains(t, err.Error(), tok.LeaseID)

		time.Sleep(5 * time.Second)
		require.NoError(t, a.Renew(ctx))
		assert.Equal(t, time.Now().Add(15*time.Second-750*time.Millisecond), a.ValidUntil())

		require.NoError(t, a.Release(ctx))
		assert.False(t, a.Held())
		require.NoError(t, a.Release(ctx), "releasing again is a no-op")
		require.ErrorIs(t, a.Renew(ctx), azlease.ErrNotHeld)

		tok2, err := b.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, epoch1+1, tok2.Epoch)
		assert.NotEqual(t, tok.LeaseID, tok2.LeaseID)

		st, err := azlease.Inspect(ctx, e.client("observer"), "leader")
		require.NoError(t, err)
		assert.True(t, st.Exists)
		assert.True(t, st.Leased)
		assert.Equal(t, "leased", st.State)
		assert.Equal(t, "node-b", st.Holder)
		assert.Equal(t, epoch1+1, st.Epoch)
		require.Len(t, st.History, 2)
		assert.Equal(t, "node-b", st.History[0].Holder)
		assert.Equal(t, "node-a", st.History[1].Holder)
		assert.Equal(t, epoch1, st.History[1].Epoch)
	})
}

func TestLeaseFreshIDPerTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		l := newLease(t, e.client("a"), "x", nil)
		seen := map[string]bool{}
		for range 20 {
			tok, err := l.Acquire(context.Background())
			require.NoError(t, err)
			require.False(t, seen[tok.LeaseID], "a lease ID is never reused across terms")
			seen[tok.LeaseID] = true
			assert.Equal(t, strings.ToLower(tok.LeaseID), tok.LeaseID)
			require.NoError(t, l.Release(context.Background()))
		}
	})
}

func TestLeaseCreatesContainerAndBlobWithoutOverwriting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("a")

		// Missing container and blob: both are created.
		l := newLease(t, cc, "fresh", nil)
		_, err := l.Acquire(ctx)
		require.NoError(t, err)
		props, err := cc.NewBlobClient("fresh").GetProperties(raw(ctx), nil)
		require.NoError(t, err)
		assert.Equal(t, int64(0), *props.ContentLength, "the lock blob is zero bytes")

		// An existing blob with content and metadata keeps both.
		_, err = cc.NewBlockBlobClient("precious").Upload(raw(ctx), streaming.NopCloser(strings.NewReader("keep me")),
			&blockblob.UploadOptions{Metadata: map[string]*string{"owner": to.Ptr("ops")}})
		require.NoError(t, err)
		p := newLease(t, cc, "precious", nil)
		_, err = p.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, "keep me", download(t, cc, "precious"))
		st, err := p.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"owner": "ops"}, st.Metadata)
		assert.Equal(t, epoch1, st.Epoch)
	})
}

func TestLeaseNoCreate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		l := newLease(t, e.client("a"), "x", &azlease.LeaseOptions{NoCreate: true})
		_, err := l.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.True(t, bloberror.HasCode(err, bloberror.ContainerNotFound))

		_, err = e.client("a").Create(raw(context.Background()), nil)
		require.NoError(t, err)
		_, err = l.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.True(t, bloberror.HasCode(err, bloberror.BlobNotFound))
	})
}

// TestLeaseCreateRacesWithALeasedBlob: between our acquire's 404 and our
// create, another process creates the blob and leases it. Azure answers our
// create-if-absent with 412 LeaseIdMissing, which means "exists": the
// acquire then reports the lease as held, and nothing is overwritten.
func TestLeaseCreateRacesWithALeasedBlob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		other := e.client("other")
		_, err := other.Create(raw(ctx), nil)
		require.NoError(t, err)
		var once sync.Once
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpPutBlob {
				once.Do(func() {
					_, err := other.NewBlockBlobClient("x").Upload(raw(ctx), streaming.NopCloser(strings.NewReader("theirs")), nil)
					require.NoError(t, err)
					lc, err := lease.NewBlobClient(other.NewBlobClient("x"), nil)
					require.NoError(t, err)
					_, err = lc.AcquireLease(raw(ctx), 15, nil)
					require.NoError(t, err)
				})
			}
			return azleasetest.Fault{}
		}))
		l := newLease(t, e.client("a"), "x", nil)
		_, err = l.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)
		assert.Equal(t, "theirs", download(t, other, "x"))
	})
}

func TestLeaseExpiresAtExactlyItsDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		b := newLease(t, e.client("b"), "x", nil)
		t0 := time.Now()
		_, err := a.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, t0.Add(15*time.Second-750*time.Millisecond), a.ValidUntil(), "validity: send + duration − margin")

		time.Sleep(15*time.Second - 750*time.Millisecond - time.Nanosecond)
		assert.True(t, a.Held())
		time.Sleep(time.Nanosecond)
		assert.False(t, a.Held(), "no longer certain at the validity deadline")
		_, ok := a.Token()
		assert.False(t, ok)

		time.Sleep(750*time.Millisecond - time.Nanosecond)
		_, err = b.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld, "Azure still holds it 1 ns before the duration")
		time.Sleep(time.Nanosecond)
		_, err = b.Acquire(ctx)
		require.NoError(t, err, "and frees it at exactly the duration")

		err = a.Renew(ctx)
		require.ErrorIs(t, err, azlease.ErrDeadlinePassed)
		require.ErrorIs(t, err, azlease.ErrLeaseLost)
	})
}

// TestLeaseValidityFromSendTime: a slow request or a slow response never
// extends what the client trusts. Azure's own lease starts when it processes
// the request, which is at or after the send.
func TestLeaseValidityFromSendTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault azleasetest.Fault
	}{
		{"slow request", azleasetest.Fault{Delay: 2 * time.Second}},
		{"slow response", azleasetest.Fault{DelayResponse: 2 * time.Second}},
		{"both", azleasetest.Fault{Delay: time.Second, DelayResponse: time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				l := newLease(t, e.client("a"), "x", nil)
				_, err := l.Acquire(ctx)
				require.NoError(t, err)

				e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
					if r.Op == azleasetest.OpRenewLease {
						return tc.fault
					}
					return azleasetest.Fault{}
				}))
				time.Sleep(5 * time.Second)
				send := time.Now()
				require.NoError(t, l.Renew(ctx))
				assert.Equal(t, 2*time.Second, time.Since(send))
				assert.Equal(t, send.Add(15*time.Second-750*time.Millisecond), l.ValidUntil())

				grants := e.Grants(testContainer, "x")
				require.Len(t, grants, 1)
				assert.True(t, grants[0].End.After(l.ValidUntil()), "the client never trusts beyond Azure's expiry")
			})
		})
	}
}

// TestLeaseRenewHangingServer: every renewal hangs. Each attempt is cut at
// AttemptTimeout, no attempt outlives the validity deadline, and Renew gives
// up exactly at the deadline with ErrDeadlinePassed.
func TestLeaseRenewHangingServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		l := newLease(t, e.client("a"), "x", nil)
		_, err := l.Acquire(ctx)
		require.NoError(t, err)
		validUntil := l.ValidUntil()

		var mu sync.Mutex
		var starts []time.Time
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			return azleasetest.Fault{Action: azleasetest.Hang}
		}))
		time.Sleep(5 * time.Second)
		err = l.Renew(ctx)
		require.ErrorIs(t, err, azlease.ErrDeadlinePassed)
		assert.Equal(t, validUntil.Add(-time.Millisecond), time.Now(), "gives up just before the deadline, not later")
		time.Sleep(time.Millisecond)
		assert.False(t, l.Held())

		require.GreaterOrEqual(t, len(starts), 3, "retries within the validity")
		for i, s := range starts {
			if i > 0 {
				assert.GreaterOrEqual(t, s.Sub(starts[i-1]), 3*time.Second, "each attempt ran for at most AttemptTimeout")
			}
			assert.True(t, s.Before(validUntil))
		}
	})
}

// TestLeaseAcquireHangingServer: Acquire keeps trying for one lease
// duration, then spends one more attempt giving back the lease its attempts
// may have been granted, and gives up.
func TestLeaseAcquireHangingServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		var attempts atomic.Int32
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpAcquireLease {
				attempts.Add(1)
			}
			return azleasetest.Fault{Action: azleasetest.Hang}
		})
		l := newLease(t, e.client("a"), "x", nil)
		start := time.Now()
		_, err := l.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrTransient)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, 15*time.Second-3*time.Second, "kept trying for about a lease duration")
		assert.LessOrEqual(t, took, 15*time.Second+3*time.Second, "plus one release attempt")
		assert.GreaterOrEqual(t, attempts.Load(), int32(4))
	})
}

// TestLeaseAmbiguousAcquire: Azure grants the lease but the response is
// lost. The retry proposes a fresh lease ID (the first may still be applied
// later, and must never be the term's), Azure answers that the lease is
// held, and Acquire finds it held under its own first ID: it changes the
// lease to a third ID and renews it. No self-inflicted "held by someone
// else"; the lease never free in between; the term's ID is the third,
// proposed by one answered request.
func TestLeaseAmbiguousAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		pre := newLease(t, e.client("pre"), "x", nil) // create the blob
		_, err := pre.Acquire(context.Background())
		require.NoError(t, err)
		require.NoError(t, pre.Release(context.Background()))
		var lost atomic.Int32
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpAcquireLease && lost.Add(1) == 1 {
				return azleasetest.Fault{Action: azleasetest.ApplyThenDrop}
			}
			return azleasetest.Fault{}
		}))
		l := newLease(t, e.client("a"), "x", nil)
		tok, err := l.Acquire(context.Background())
		require.NoError(t, err)
		assert.Equal(t, epoch1+1, tok.Epoch)
		grants := e.Grants(testContainer, "x")[1:]
		require.Len(t, grants, 2, "the lost grant, then the same lease under the term's ID")
		assert.NotEqual(t, tok.LeaseID, grants[0].LeaseID, "the ID of the attempt whose answer was lost is not the term's")
		assert.Equal(t, tok.LeaseID, grants[1].LeaseID)
		assert.Equal(t, grants[0].End, grants[1].Start, "never free in between")
		assert.Equal(t, int32(2), lost.Load(), "two acquisition attempts")
	})
}

// TestLeaseAmbiguousAcquireAcrossCalls: every acquire is granted (or, once
// the lease is held, refused) but its answer lost, and so is every attempt
// to find the lease under one of those IDs, until Acquire gives up. Acquire
// then gives the orphans back, one attempt each. When those attempts'
// outcomes are unknown too, no orphan's lease ID is ever used again: the
// next Acquire proposes a fresh ID, and gets the lease once the orphan has
// expired. (Reusing an ID would get the lease at once, but the give-back
// Release may still be applied later and free the new term's lease:
// TestLeaseLateGiveBack.)
func TestLeaseAmbiguousAcquireAcrossCalls(t *testing.T) {
	for _, releaseWorks := range []bool{true, false} {
		t.Run(map[bool]string{true: "orphan released", false: "orphan left to expire"}[releaseWorks], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				pre := newLease(t, e.client("pre"), "x", nil) // create the blob
				_, err := pre.Acquire(ctx)
				require.NoError(t, err)
				require.NoError(t, pre.Release(ctx))

				var drop atomic.Bool
				drop.Store(true)
				e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
					switch {
					case drop.Load() && (r.Op == azleasetest.OpAcquireLease || r.Op == azleasetest.OpChangeLease):
						return azleasetest.Fault{Action: azleasetest.ApplyThenHang} // granted, answer lost
					case drop.Load() && !releaseWorks && r.Op == azleasetest.OpReleaseLease:
						return azleasetest.Fault{Action: azleasetest.Hang} // never arrives
					}
					return azleasetest.Fault{}
				}))
				l := newLease(t, e.client("a"), "x", nil)
				_, err = l.Acquire(ctx)
				require.ErrorIs(t, err, azlease.ErrTransient)
				grants := e.Grants(testContainer, "x")
				orphan := grants[len(grants)-1]
				drop.Store(false)
				if releaseWorks {
					assert.Equal(t, time.Now(), orphan.End, "the orphan was released as Acquire gave up")
					_, err = newLease(t, e.client("b"), "x", nil).Acquire(ctx)
					require.NoError(t, err, "so others get the lease at once")
					return
				}
				time.Sleep(time.Until(orphan.End))
				tok, err := l.Acquire(ctx)
				require.NoError(t, err)
				for _, g := range grants {
					assert.NotEqual(t, g.LeaseID, tok.LeaseID, "an orphan's ID is reused")
				}
			})
		})
	}
}

// TestLeaseLateGiveBack is issue 7's scenario: Acquire meets lost answers for
// a whole lease duration, and the Release it sends to give the orphan back
// is applied late, after the caller gave up on it. Whatever Acquire does
// next, that Release must never free a lease a newer term holds: at no
// instant may two Leases both be certainly held.
func TestLeaseLateGiveBack(t *testing.T) {
	for _, lateBy := range []time.Duration{0, 5 * time.Second, 10 * time.Second, 20 * time.Second} {
		t.Run(lateBy.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				pre := newLease(t, e.client("pre"), "x", nil)
				_, err := pre.Acquire(ctx)
				require.NoError(t, err)
				require.NoError(t, pre.Release(ctx))

				var faulty atomic.Bool
				faulty.Store(true)
				e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
					switch {
					case faulty.Load() && r.Op == azleasetest.OpAcquireLease:
						return azleasetest.Fault{Action: azleasetest.ApplyThenDrop} // granted, answer lost
					case r.Op == azleasetest.OpReleaseLease && faulty.Load():
						return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: lateBy}
					}
					return azleasetest.Fault{}
				}))
				a := newLease(t, e.client("a"), "x", nil)
				b := newLease(t, e.client("b"), "x", nil)
				_, err = a.Acquire(ctx)
				require.ErrorIs(t, err, azlease.ErrTransient)
				faulty.Store(false)

				// Both contend for a minute as a Mutex would: a holder renews
				// every 5 s, a contender tries every second. A newer term of
				// either must never be cut short by the late Release while it
				// is certainly held.
				next := map[*azlease.Lease]time.Time{}
				deadline := time.Now().Add(time.Minute)
				for time.Now().Before(deadline) {
					for _, l := range []*azlease.Lease{a, b} {
						switch {
						case time.Now().Before(next[l]):
						case l.Held():
							_ = l.Renew(ctx)
							next[l] = time.Now().Add(5 * time.Second)
						default:
							_, _ = l.Acquire(ctx)
							next[l] = time.Now().Add(time.Second)
							if l.Held() {
								next[l] = time.Now().Add(5 * time.Second)
							}
						}
					}
					require.False(t, a.Held() && b.Held(), "two Leases certainly hold the lease at %v:\n%s",
						time.Now(), describeGrants(e.Grants(testContainer, "x")))
					time.Sleep(100 * time.Millisecond)
				}
			})
		})
	}
}

// TestLeaseAmbiguousRelease: the release is applied but its response lost;
// the retry gets 409 and Release reports success. A follower gets the lease
// at once.
func TestLeaseAmbiguousRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		_, err := a.Acquire(ctx)
		require.NoError(t, err)
		var first atomic.Bool
		first.Store(true)
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpReleaseLease && first.Swap(false) {
				return azleasetest.Fault{Action: azleasetest.ApplyThenDrop}
			}
			return azleasetest.Fault{}
		}))
		require.NoError(t, a.Release(ctx))
		_, err = newLease(t, e.client("b"), "x", nil).Acquire(ctx)
		require.NoError(t, err)
	})
}

// TestLeaseReleaseAfterLoss: releasing a lease that was broken and taken by
// someone else reports the loss and leaves the new holder alone.
func TestLeaseReleaseAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		b := newLease(t, e.client("b"), "x", nil)
		_, err := a.Acquire(ctx)
		require.NoError(t, err)
		op := newLease(t, e.client("operator"), "x", nil)
		left, err := op.Break(ctx, 0)
		require.NoError(t, err)
		assert.Zero(t, left)
		_, err = b.Acquire(ctx)
		require.NoError(t, err)

		err = a.Release(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseLost)
		assert.True(t, b.Held())
		require.NoError(t, b.Renew(ctx), "the new holder is unharmed")
	})
}

func TestLeaseRenewDefinitiveLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		_, err := a.Acquire(ctx)
		require.NoError(t, err)
		_, err = newLease(t, e.client("op"), "x", nil).Break(ctx, 10*time.Second)
		require.NoError(t, err)
		start := time.Now()
		err = a.Renew(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseBroken)
		require.ErrorIs(t, err, azlease.ErrLeaseLost)
		assert.Zero(t, time.Since(start), "a definitive answer ends the lease at once, without retries")
		assert.False(t, a.Held())

		// Another holder took over after expiry: the old ID is refused.
		time.Sleep(16 * time.Second)
		c := newLease(t, e.client("c"), "x", nil)
		_, err = c.Acquire(ctx)
		require.NoError(t, err)
		_, err = a.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)
	})
}

// TestLeaseRenewRetriesTransientFailures: 503s and lost connections are
// retried within the validity; the renewal that gets through counts from its
// own send.
func TestLeaseRenewRetriesTransientFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		l := newLease(t, e.client("a"), "x", nil)
		_, err := l.Acquire(ctx)
		require.NoError(t, err)
		var n atomic.Int32
		var lastSend atomic.Int64
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			lastSend.Store(time.Now().UnixNano())
			switch n.Add(1) {
			case 1:
				return azleasetest.Fault{Action: azleasetest.Fail} // 503 ServerBusy
			case 2:
				return azleasetest.Fault{Action: azleasetest.Drop}
			case 3:
				return azleasetest.Fault{Action: azleasetest.Fail, Status: 500, Code: "InternalError"}
			}
			return azleasetest.Fault{}
		}))
		time.Sleep(5 * time.Second)
		start := time.Now()
		require.NoError(t, l.Renew(ctx))
		assert.Equal(t, int32(4), n.Load())
		assert.Greater(t, time.Since(start), time.Duration(0), "backed off between attempts")
		assert.Equal(t, time.Unix(0, lastSend.Load()).Add(15*time.Second-750*time.Millisecond).UnixNano(), l.ValidUntil().UnixNano())
	})
}

// TestLeaseRenewServerClockFast: Azure's clock runs 5 % fast, within the
// default margin (5.2 %): the client's validity still ends before Azure's
// expiry.
func TestLeaseRenewServerClockFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		e.SetClockRate(1.05)
		l := newLease(t, e.client("a"), "x", nil)
		_, err := l.Acquire(context.Background())
		require.NoError(t, err)
		g := e.Grants(testContainer, "x")
		require.Len(t, g, 1)
		assert.True(t, l.ValidUntil().Before(g[0].End), "valid until %v, Azure expires at %v", l.ValidUntil(), g[0].End)
	})
}

// TestLeaseStaleHolderWritesAreRejected: a holder whose lease is gone cannot
// write the lock blob; Azure itself refuses.
func TestLeaseStaleHolderWritesAreRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		b := newLease(t, e.client("b"), "x", nil)
		tokA, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, a.SetMetadata(ctx, map[string]string{"checkpoint": "1"}))
		require.NoError(t, a.Write(ctx, []byte("state-1")))
		st, err := b.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"checkpoint": "1"}, st.Metadata)
		assert.Equal(t, epoch1, st.Epoch, "Write keeps the epoch")

		// a is paused past its lease; b takes over.
		time.Sleep(16 * time.Second)
		_, err = b.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, b.Write(ctx, []byte("state-2")))

		// a's process resumes, still believing in its old state; the
		// library knows better, and so does Azure for a forced write.
		require.ErrorIs(t, a.Write(ctx, []byte("stale")), azlease.ErrNotHeld)
		aBlob := e.client("a").NewBlockBlobClient("x")
		_, err = aBlob.Upload(raw(ctx), streaming.NopCloser(strings.NewReader("stale")), &blockblob.UploadOptions{
			AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &tokA.LeaseID}},
		})
		require.True(t, bloberror.HasCode(err, bloberror.LeaseIDMismatchWithBlobOperation), "%v", err)
		assert.Equal(t, "state-2", download(t, e.client("b"), "x"))

		require.Error(t, a.SetMetadata(ctx, map[string]string{"azleaseEpoch": "99"}), "azlease's keys are reserved")
	})
}

// TestLeaseStaleHolderKeepsItsOldID replays the realistic stale write: the
// old holder still has its old lease ID and writes with it after losing.
func TestLeaseStaleHolderKeepsItsOldID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		tokA, err := a.Acquire(ctx)
		require.NoError(t, err)
		time.Sleep(16 * time.Second)
		b := newLease(t, e.client("b"), "x", nil)
		tokB, err := b.Acquire(ctx)
		require.NoError(t, err)
		assert.Greater(t, tokB.Epoch, tokA.Epoch)

		_, err = e.client("a").NewBlobClient("x").SetMetadata(raw(ctx), map[string]*string{"x": to.Ptr("1")},
			&blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &tokA.LeaseID}}})
		require.True(t, bloberror.HasCode(err, bloberror.LeaseIDMismatchWithBlobOperation), "%v", err)
	})
}

// TestLeaseHandOff: a holder hands the lease to another Lease's next lease
// ID. It stops holding at once (no path to two holders), the receiver's
// Acquire is granted without waiting, and its term has a larger epoch.
func TestLeaseHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", nil)
		b := newLease(t, e.client("b"), "x", nil)
		tokA, err := a.Acquire(ctx)
		require.NoError(t, err)

		next := b.NextLeaseID()
		assert.Equal(t, next, b.NextLeaseID(), "chosen once, until an Acquire uses it")
		_, err = b.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrLeaseHeld)
		assert.Equal(t, next, b.NextLeaseID(), "a refused acquire leaves nothing in flight: the ID is kept")

		require.NoError(t, a.HandOff(ctx, strings.ToUpper(next)))
		assert.False(t, a.Held(), "the giver stops holding")
		_, ok := a.Token()
		assert.False(t, ok)
		require.ErrorIs(t, a.Renew(ctx), azlease.ErrNotHeld)
		require.ErrorIs(t, a.Write(ctx, []byte("x")), azlease.ErrNotHeld)

		tokB, err := b.Acquire(ctx)
		require.NoError(t, err, "granted at once: the lease already carries b's ID")
		assert.Equal(t, next, tokB.LeaseID)
		assert.Greater(t, tokB.Epoch, tokA.Epoch)
		assert.NotEqual(t, next, b.NextLeaseID(), "a used ID is never proposed again")
		require.NoError(t, a.Release(ctx), "nothing left to release")
		assert.True(t, b.Held())

		require.ErrorIs(t, a.HandOff(ctx, next), azlease.ErrNotHeld)
		require.ErrorIs(t, b.HandOff(ctx, "not-a-guid"), azlease.ErrInvalidOptions)
		require.ErrorIs(t, b.HandOff(ctx, next), azlease.ErrInvalidOptions, "its own ID")
		require.True(t, b.Held())
	})
}

// TestLeaseHandOffUnknownOutcome: a hand-off whose answer is lost may or may
// not have happened. The giver has stopped holding either way; its next
// Release gives its old ID back, which frees the lease only if the hand-off
// did not happen.
func TestLeaseHandOffUnknownOutcome(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(map[bool]string{true: "applied", false: "not applied"}[applied], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newEmu(t)
				ctx := context.Background()
				a := newLease(t, e.client("a"), "x", nil)
				b := newLease(t, e.client("b"), "x", nil)
				_, err := a.Acquire(ctx)
				require.NoError(t, err)
				action := azleasetest.Hang
				if applied {
					action = azleasetest.ApplyThenHang
				}
				e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
					if r.Op == azleasetest.OpChangeLease {
						return azleasetest.Fault{Action: action}
					}
					return azleasetest.Fault{}
				}))
				next := b.NextLeaseID()
				err = a.HandOff(ctx, next)
				require.ErrorIs(t, err, azlease.ErrTransient)
				assert.False(t, a.Held())
				require.NoError(t, a.Release(ctx))
				tok, err := b.Acquire(ctx)
				require.NoError(t, err, "either handed over or released: b gets it at once")
				assert.Equal(t, next, tok.LeaseID)
			})
		})
	}
}

func TestLeaseBreak(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "x", &azlease.LeaseOptions{LeaseDuration: 60 * time.Second})
		_, err := a.Acquire(ctx)
		require.NoError(t, err)
		op := newLease(t, e.client("op"), "x", nil)
		left, err := op.Break(ctx, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 10*time.Second, left)
		st, err := op.Inspect(ctx)
		require.NoError(t, err)
		assert.Equal(t, "breaking", st.State)
		assert.True(t, st.Leased)

		left, err = op.Break(ctx, 0)
		require.NoError(t, err)
		assert.Zero(t, left)
		require.ErrorIs(t, a.Renew(ctx), azlease.ErrLeaseBroken)
		require.NoError(t, a.Release(ctx), "a broken lease can still be released")

		left, err = op.Break(ctx, 0)
		require.NoError(t, err, "nothing to break is not an error")
		assert.Zero(t, left)

		for _, p := range []time.Duration{-time.Second, 61 * time.Second, 1500 * time.Millisecond} {
			_, err = op.Break(ctx, p)
			require.ErrorIs(t, err, azlease.ErrInvalidOptions, "%v", p)
		}
		_, err = newLease(t, e.client("op"), "missing", nil).Break(ctx, 0)
		require.ErrorIs(t, err, azlease.ErrPermanent)
	})
}

func TestInspectMissing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		st, err := azlease.Inspect(context.Background(), e.client("a"), "nothing")
		require.NoError(t, err)
		assert.False(t, st.Exists)
		_, err = azlease.Inspect(context.Background(), nil, "x")
		require.ErrorIs(t, err, azlease.ErrInvalidOptions)
	})
}

func TestLeaseMalformedEpochIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("a")
		_, err := cc.Create(raw(ctx), nil)
		require.NoError(t, err)
		_, err = cc.NewBlockBlobClient("x").Upload(raw(ctx), streaming.NopCloser(bytes.NewReader(nil)),
			&blockblob.UploadOptions{Metadata: map[string]*string{"AzLeaseEpoch": to.Ptr("seven")}})
		require.NoError(t, err)
		l := newLease(t, cc, "x", nil)
		_, err = l.Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.Contains(t, err.Error(), "azleaseepoch")
		assert.False(t, l.Held())
		_, err = newLease(t, e.client("b"), "x", nil).Acquire(ctx)
		require.ErrorIs(t, err, azlease.ErrPermanent, "the failed holder released the lease")
	})
}

// TestLeaseEpochStrictlyIncreases: four holders compete for one lock over
// 1,000 terms while a fifth of all requests fail (503, lost connections,
// lost responses). Every completed acquisition's epoch is larger than every
// epoch completed before it.
func TestLeaseEpochStrictlyIncreases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		rng := rand.New(rand.NewPCG(1, 2))
		var rmu sync.Mutex
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			rmu.Lock()
			defer rmu.Unlock()
			if rng.Float64() >= 0.2 {
				return azleasetest.Fault{}
			}
			return azleasetest.Fault{Action: []azleasetest.Action{azleasetest.Fail, azleasetest.Drop, azleasetest.ApplyThenDrop}[rng.IntN(3)]}
		})
		const terms = 1000
		var (
			mu     sync.Mutex
			epochs []uint64
			wg     sync.WaitGroup
		)
		stop := time.Now().Add(24 * time.Hour) // fake time: a bound, never reached when things work
		for i := range 4 {
			label := string(rune('a' + i))
			l := newLease(t, e.client(label), "contended", nil)
			wg.Go(func() {
				for time.Now().Before(stop) {
					mu.Lock()
					if len(epochs) >= terms {
						mu.Unlock()
						return
					}
					mu.Unlock()
					tok, err := l.Acquire(context.Background())
					if err != nil {
						time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
						continue
					}
					mu.Lock()
					epochs = append(epochs, tok.Epoch)
					mu.Unlock()
					time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
					_ = l.Release(context.Background())
				}
			})
		}
		wg.Wait()
		require.GreaterOrEqual(t, len(epochs), terms)
		for i := 1; i < len(epochs); i++ {
			require.Greater(t, epochs[i], epochs[i-1], "term %d", i)
		}
		t.Logf("%d terms, last epoch %d (epochs skipped by retried writes: %d)", len(epochs), epochs[len(epochs)-1], int(epochs[len(epochs)-1])-len(epochs))
		assert.True(t, sort.SliceIsSorted(epochs, func(i, j int) bool { return epochs[i] < epochs[j] }))
	})
}

func download(t *testing.T, cc *container.Client, name string) string {
	t.Helper()
	resp, err := cc.NewBlobClient(name).DownloadStream(raw(context.Background()), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestLeaseNoTokenBeforeTheEpochIsWritten: between a granted acquire and the
// epoch write no term exists; nobody may see the previous term's token.
func TestLeaseNoTokenBeforeTheEpochIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		l := newLease(t, e.client("a"), "x", nil)
		_, err := l.Acquire(ctx)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))

		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpSetMetadata {
				return azleasetest.Fault{Delay: 2 * time.Second}
			}
			return azleasetest.Fault{}
		}))
		done := make(chan azlease.Token)
		go func() {
			tok, err := l.Acquire(ctx)
			assert.NoError(t, err)
			done <- tok
		}()
		time.Sleep(time.Second) // the lease is granted; the epoch write is in flight
		_, ok := l.Token()
		assert.False(t, ok, "no token before the term starts")
		assert.False(t, l.Held())
		assert.True(t, l.ValidUntil().IsZero())
		require.ErrorIs(t, l.Write(ctx, []byte("x")), azlease.ErrNotHeld)
		tok := <-done
		got, ok := l.Token()
		assert.True(t, ok)
		assert.Equal(t, tok, got)
		assert.Equal(t, epoch1+1, tok.Epoch)
		require.NoError(t, l.Release(ctx))
	})
}

// TestTokenNeverPrintsTheLeaseID: the lease ID lets its holder write the lock
// blob, so neither fmt nor slog shows it.
func TestTokenNeverPrintsTheLeaseID(t *testing.T) {
	tok := azlease.Token{LeaseID: "0f0e0d0c-0b0a-4908-8706-050403020100", Epoch: 7}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("acquired", "token", tok)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("acquired", "token", tok)
	out := buf.String() + fmt.Sprint(tok) + fmt.Sprintf("%v %+v %s", tok, tok, tok)
	assert.NotContains(t, out, tok.LeaseID)
	assert.Contains(t, out, "epoch=7")
	assert.Contains(t, out, `"epoch":7`)
}

// TestLeaseCancelledAcquireHonoursTheDeadline: the caller's context ends
// while an acquire Azure granted is in flight. Acquire returns at the
// caller's deadline, not later: it does not spend more time giving that
// lease back. The orphan blocks the lease until it expires, and the next
// Acquire proposes a fresh lease ID (the orphan's may still be applied).
func TestLeaseCancelledAcquireHonoursTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		pre := newLease(t, e.client("pre"), "x", nil)
		_, err := pre.Acquire(context.Background())
		require.NoError(t, err)
		require.NoError(t, pre.Release(context.Background()))
		var hang atomic.Bool
		hang.Store(true)
		e.SetFaults(faultsFor("a", func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpAcquireLease && hang.Load() {
				return azleasetest.Fault{Action: azleasetest.ApplyThenHang}
			}
			return azleasetest.Fault{}
		}))
		l := newLease(t, e.client("a"), "x", nil)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = l.Acquire(ctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "returned at the caller's deadline")
		hang.Store(false)
		_, err = l.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrLeaseHeld, "the orphan holds it")
		grants := e.Grants(testContainer, "x")
		time.Sleep(time.Until(grants[len(grants)-1].End))
		tok, err := l.Acquire(context.Background())
		require.NoError(t, err)
		assert.NotEqual(t, grants[len(grants)-1].LeaseID, tok.LeaseID)
	})
}

// failing is a transport that fails every request with err, as a network
// does before any request leaves the process.
type failing struct {
	err      error
	requests atomic.Int64
}

func (f *failing) Do(*http.Request) (*http.Response, error) {
	f.requests.Add(1)
	return nil, f.err
}

func refusing() *failing {
	return &failing{err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}}
}

func failingClient(t *testing.T, tr *failing) *container.Client {
	t.Helper()
	cc, err := container.NewClientWithNoCredential("http://127.0.0.1:9/devstoreaccount1/locks",
		&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}})
	require.NoError(t, err)
	return cc
}

// TestLeaseUnreachableHonoursTheDeadline: with nothing listening, Acquire
// returns at the caller's deadline with the cause in its error, and sends no
// give-back release, since no request reached the server.
func TestLeaseUnreachableHonoursTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := refusing()
		l := newLease(t, failingClient(t, tr), "x", nil)
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := l.Acquire(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, azlease.ErrTransient, "the last attempt's error is kept")
		assert.Contains(t, err.Error(), "connection refused")
		assert.Equal(t, 5*time.Second, time.Since(start))
		n := tr.requests.Load()
		time.Sleep(time.Minute)
		assert.Equal(t, n, tr.requests.Load(), "nothing sent after Acquire returned")
	})
}

// TestLeaseMisconfiguredEndpointIsPermanent: a host name that does not
// exist is a configuration error, not an outage: Acquire says so after one
// request instead of retrying for a lease duration.
func TestLeaseMisconfiguredEndpointIsPermanent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := &failing{err: &net.DNSError{Err: "no such host", Name: "acct.blob.core.windows.nett", IsNotFound: true}}
		l := newLease(t, failingClient(t, tr), "x", nil)
		start := time.Now()
		_, err := l.Acquire(context.Background())
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.Contains(t, err.Error(), "no such host")
		assert.Equal(t, int64(1), tr.requests.Load())
		assert.Zero(t, time.Since(start))
	})
}

// TestLeaseEpochSurvivesRecreatedBlob: deleting the lock blob (here with its
// container, as a restarted in-memory emulator does) must not send the
// fencing epoch backwards. A holder that saw the old blob continues above
// what it saw; a fresh holder continues above the old blob's epochs because
// the new blob was created later (the creation time is the floor).
func TestLeaseEpochSurvivesRecreatedBlob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var logs bytes.Buffer
		a := newLease(t, e.client("a"), "x", &azlease.LeaseOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		drop := func() {
			_, err := e.client("op").Delete(raw(ctx), nil)
			require.NoError(t, err)
		}
		tok1, err := a.Acquire(ctx)
		require.NoError(t, err)
		require.Equal(t, epoch1, tok1.Epoch)
		require.NoError(t, a.Release(ctx))

		drop() // created again within the same second: only memory helps
		tok2, err := a.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, tok1.Epoch+1, tok2.Epoch, "continues above what it saw")
		assert.Contains(t, logs.String(), "level=WARN", "the backwards epoch is reported")
		require.NoError(t, a.Release(ctx))

		time.Sleep(1500 * time.Millisecond)
		drop() // created again a second later: the creation time is the floor
		fresh := newLease(t, e.client("fresh"), "x", nil)
		tok3, err := fresh.Acquire(ctx)
		require.NoError(t, err)
		assert.Greater(t, tok3.Epoch, tok2.Epoch, "a holder that never saw the old blob still goes up")
		require.NoError(t, fresh.Release(ctx))

		// The documented limit: a fresh holder, a blob created again within
		// the same second as the old one, and no memory.
		drop()
		tok4, err := newLease(t, e.client("fresh2"), "x", nil).Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, tok3.Epoch, tok4.Epoch, "the one case the floor cannot cover")
	})
}
