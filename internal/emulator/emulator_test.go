package emulator_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/internal/emulator"
)

// TestGrantsAreExact: whatever the server's clock rate, a grant ends at the
// first local instant at which the lease is no longer held, to the
// nanosecond; safety checks compare against it.
func TestGrantsAreExact(t *testing.T) {
	for _, rate := range []float64{1, 0.99, 1.01, 1.37, 0.7} {
		synctest.Test(t, func(t *testing.T) {
			s := emulator.New(nil)
			time.Sleep(1234567 * time.Nanosecond) // a base that is not round
			s.SetClockRate(rate)
			time.Sleep(7654321 * time.Nanosecond)
			cc, err := s.ContainerClient("grants", "")
			require.NoError(t, err)
			ctx := raw(context.Background())
			_, err = cc.Create(ctx, nil)
			require.NoError(t, err)
			_, err = cc.NewBlockBlobClient("b").UploadBuffer(ctx, nil, nil)
			require.NoError(t, err)
			lc, err := lease.NewBlobClient(cc.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr("aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa")})
			require.NoError(t, err)
			start := time.Now()
			_, err = lc.AcquireLease(ctx, 15, nil)
			require.NoError(t, err)
			g := s.Grants("grants", "b")
			require.Len(t, g, 1)
			assert.Equal(t, start, g[0].Start)
			assert.InDelta(t, float64(15*time.Second)/rate, float64(g[0].End.Sub(start)), 2)

			time.Sleep(time.Until(g[0].End) - 1)
			p, err := cc.NewBlobClient("b").GetProperties(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, lease.StateTypeLeased, *p.LeaseState, "rate %v: held 1 ns before the grant ends", rate)
			time.Sleep(1)
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
