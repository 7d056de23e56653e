package azleasetest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// TestGrantsAreExact: whatever the server's clock rate, a grant ends at the
// first local instant at which the lease is no longer held, to the
// nanosecond; safety checks compare against it.
func TestGrantsAreExact(t *testing.T) {
	for _, rate := range []float64{1, 0.99, 1.01, 1.37, 0.7} {
		synctest.Test(t, func(t *testing.T) {
			s := azleasetest.New(nil)
			time.Sleep(1234567 * time.Nanosecond) // a base that is not round
			s.SetClockRate(rate)
			time.Sleep(7654321 * time.Nanosecond)
			cc, ctx := withBlob(t, s, "")
			lc, err := lease.NewBlobClient(cc.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr("aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa")})
			require.NoError(t, err)
			start := time.Now()
			_, err = lc.AcquireLease(ctx, 15, nil)
			require.NoError(t, err)
			g := s.Grants("grants", "b")
			require.Len(t, g, 1)
			assert.Equal(t, start, g[0].Start)
			assert.InDelta(t, float64(15*time.Second)/rate, float64(g[0].End.Sub(start)), 2)

			time.Sleep(time.Until(g[0].End) - time.Nanosecond)
			p, err := cc.NewBlobClient("b").GetProperties(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, lease.StateTypeLeased, *p.LeaseState, "rate %v: held 1 ns before the grant ends", rate)
			time.Sleep(time.Nanosecond) // exactly onto the grant's end
			p, err = cc.NewBlobClient("b").GetProperties(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, lease.StateTypeExpired, *p.LeaseState, "rate %v: expired when the grant ends", rate)

			_, err = lc.AcquireLease(ctx, 15, nil)
			require.NoError(t, err)
			time.Sleep(3 * time.Second)
			released := time.Now()
			_, err = lc.ReleaseLease(ctx, nil)
			require.NoError(t, err)
			g = s.Grants("grants", "b")
			require.Len(t, g, 2)
			assert.Equal(t, released, g[1].End, "a release ends the grant at the local instant it happened")
		})
	}
}

// TestGrantsFollowClockRateChanges: a lease granted before the server's clock
// speeds up ends when the server's clock reaches its expiry, and Grants says
// so: ends are converted through the rate in force when they happen.
func TestGrantsFollowClockRateChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.New(nil)
		cc, ctx := withBlob(t, s, "")
		lc, err := lease.NewBlobClient(cc.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
		require.NoError(t, err)
		start := time.Now()
		_, err = lc.AcquireLease(ctx, 15, nil)
		require.NoError(t, err)
		time.Sleep(5 * time.Second)
		s.SetClockRate(2) // 10 server seconds left: 5 local seconds
		g := s.Grants("grants", "b")
		assert.Equal(t, start.Add(10*time.Second), g[0].End)
		time.Sleep(5*time.Second - time.Nanosecond)
		p, err := cc.NewBlobClient("b").GetProperties(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, lease.StateTypeLeased, *p.LeaseState)
		time.Sleep(time.Nanosecond) // exactly onto the grant's end
		p, err = cc.NewBlobClient("b").GetProperties(ctx, nil)
		require.NoError(t, err)
		assert.Equal(t, lease.StateTypeExpired, *p.LeaseState)
		s.SetClockRate(0.5) // a later change does not move a past end
		assert.Equal(t, start.Add(10*time.Second), s.Grants("grants", "b")[0].End)

		// Grants outlive the blob.
		_, err = cc.NewBlobClient("b").Delete(ctx, nil)
		require.NoError(t, err)
		assert.Len(t, s.Grants("grants", "b"), 1)
	})
}

// TestApplyThenDropLosesEveryAnswer: the answer is lost whether the server
// applied the request or refused it.
func TestApplyThenDropLosesEveryAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.New(nil)
		_, ctx := withBlob(t, s, "x")
		cc, err := s.ContainerClient("grants", "x")
		require.NoError(t, err)
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpReleaseLease {
				return azleasetest.Fault{Action: azleasetest.ApplyThenDrop}
			}
			return azleasetest.Fault{}
		})
		lc, err := lease.NewBlobClient(cc.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
		require.NoError(t, err)
		_, err = lc.ReleaseLease(ctx, nil) // refused (409): the refusal is lost too
		assert.ErrorIs(t, err, azleasetest.ErrConnectionLost)
	})
}

// TestConditionalReads: a read whose If-None-Match fails answers 304, one
// whose If-Match fails answers 412.
func TestConditionalReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.New(nil)
		cc, ctx := withBlob(t, s, "")
		up, err := cc.NewBlockBlobClient("b").UploadBuffer(ctx, []byte("x"), nil)
		require.NoError(t, err)
		_, err = cc.NewBlobClient("b").GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: up.ETag}}})
		var re *azcore.ResponseError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 304, re.StatusCode)
		other := azcore.ETag(`"0x1"`)
		_, err = cc.NewBlobClient("b").GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &other}}})
		require.ErrorAs(t, err, &re)
		assert.Equal(t, 412, re.StatusCode)
	})
}

// TestBlobNamesAreChecked: the emulator refuses what Azure's naming rules
// refuse, including a path segment that ends with a dot anywhere in the name.
func TestBlobNamesAreChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.New(nil)
		cc, ctx := withBlob(t, s, "")
		for _, bad := range []string{"a.", "a/./b", "x./y", "a/../b"} {
			_, err := cc.NewBlockBlobClient(bad).UploadBuffer(ctx, nil, nil)
			var re *azcore.ResponseError
			require.ErrorAs(t, err, &re, bad)
			assert.Equal(t, 400, re.StatusCode, bad)
			assert.Equal(t, "InvalidResourceName", re.ErrorCode, bad)
		}
		for _, ok := range []string{"a.b/c", ".a/b"} {
			_, err := cc.NewBlockBlobClient(ok).UploadBuffer(ctx, nil, nil)
			require.NoError(t, err, ok)
		}
	})
}

// withBlob creates the container "grants" and an empty blob "b" on s, and
// returns a client for client label and a context without SDK retries.
func withBlob(t *testing.T, s *azleasetest.Server, label string) (*container.Client, context.Context) {
	t.Helper()
	cc, err := s.ContainerClient("grants", label)
	require.NoError(t, err)
	ctx := raw(context.Background())
	_, err = cc.Create(ctx, nil)
	require.NoError(t, err)
	_, err = cc.NewBlockBlobClient("b").UploadBuffer(ctx, nil, nil)
	require.NoError(t, err)
	return cc, ctx
}

// TestApplyLate: a request held by the ApplyLate fault is not applied while
// its client waits, and is applied LateBy after the client gave up, whatever
// happened meanwhile: here a release sent for an old term frees the lease a
// newer acquisition with the same ID holds. Close drops what is still waiting.
func TestApplyLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.New(nil)
		t.Cleanup(s.Close)
		cc, ctx := withBlob(t, s, "")
		lc, err := lease.NewBlobClient(cc.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
		require.NoError(t, err)
		state := func() lease.StateType {
			p, err := cc.NewBlobClient("b").GetProperties(ctx, nil)
			require.NoError(t, err)
			return *p.LeaseState
		}

		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpAcquireLease {
				return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: 5 * time.Second}
			}
			return azleasetest.Fault{}
		})
		actx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = lc.AcquireLease(actx, 15, nil)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, lease.StateTypeAvailable, state(), "not applied while the client waited")
		time.Sleep(5*time.Second - time.Nanosecond)
		assert.Equal(t, lease.StateTypeAvailable, state())
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, lease.StateTypeLeased, state(), "applied LateBy after the client gave up")

		// A release from an earlier attempt lands on a newer acquisition
		// that reused its lease ID: what azlease must never allow to matter.
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpReleaseLease {
				return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: time.Second}
			}
			return azleasetest.Fault{}
		})
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, err = lc.ReleaseLease(rctx, nil)
		cancel()
		require.Error(t, err)
		assert.Equal(t, lease.StateTypeLeased, state())
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, lease.StateTypeAvailable, state(), "the late release freed the lease")

		// Close drops a request still waiting, and waits for its goroutine.
		s.SetFaults(func(azleasetest.Request) azleasetest.Fault {
			return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: time.Hour}
		})
		actx, cancel = context.WithTimeout(ctx, time.Second)
		_, err = lc.AcquireLease(actx, 15, nil)
		cancel()
		require.Error(t, err)
		s.Close()
		s.SetFaults(nil)
		assert.Equal(t, lease.StateTypeAvailable, state(), "dropped at Close")
	})
}
