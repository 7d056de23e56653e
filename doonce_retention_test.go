package azlease_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// Retention of DoOnce records (DoOnceOptions.Retention): keys made per
// tick do not pile up, what is in use is never deleted, and a caller that
// comes back after its key's record was deleted does not run it again.

// blobNames lists the blobs under prefix.
func blobNames(t *testing.T, cc *container.Client, prefix string) []string {
	t.Helper()
	sts, err := azlease.InspectPrefix(context.Background(), cc, prefix)
	require.NoError(t, err)
	names := make([]string, len(sts))
	for i, st := range sts {
		names[i] = st.Name
	}
	return names
}

// TestDoOnceRetentionBoundsBlobs: 2,000 ticks of a job every 5 s, each run
// by one of two callers firing 1 s apart, with a Retention of a minute,
// leave at most Retention/period + 3 blobs at any time, and keep every
// record younger than Retention.
func TestDoOnceRetentionBoundsBlobs(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		const (
			period    = 5 * time.Second
			ticks     = 2000
			retention = time.Minute
			kept      = int(retention / period) // records younger than Retention
		)
		ctx := context.Background()
		callers := []*container.Client{e.client("a"), e.client("b")}
		runs := 0
		fn := func(ctx context.Context, _ azlease.Token) error {
			runs++
			time.Sleep(10 * time.Millisecond)
			return nil
		}
		most := 0
		for k := range ticks {
			key := fmt.Sprintf("job/%08d", k) // the oldest sorts first
			ran := 0
			for i, cc := range callers {
				res, err := azlease.DoOnce(ctx, cc, key, &azlease.DoOnceOptions{Identity: fmt.Sprint(i), Retention: retention}, fn)
				require.NoError(t, err)
				if res.Ran {
					ran++
				}
				time.Sleep(time.Second)
			}
			require.Equal(t, 1, ran, "tick %d", k)
			time.Sleep(period - time.Duration(len(callers))*time.Second)
			if k%25 == 0 || k == ticks-1 {
				most = max(most, len(blobNames(t, callers[0], "once/job/")))
			}
		}
		assert.Equal(t, ticks, runs)
		assert.LessOrEqual(t, most, kept+3, "blobs at most")
		names := blobNames(t, callers[0], "once/job/")
		assert.GreaterOrEqual(t, len(names), kept, "every record younger than Retention is kept")
		assert.Equal(t, fmt.Sprintf("once/job/%08d", ticks-1), names[len(names)-1])
		t.Logf("%d ticks: at most %d blobs (Retention/period = %d), %d at the end", ticks, most, kept, len(names))
	})
}

// TestDoOnceRetentionKeepsWhatIsInUse: a sweep deletes an expired record,
// and keeps a record whose run is still in progress (leased), one written
// again between the listing and the delete (the delete is conditional on
// the ETag listed), one with a corrupt marker, a blob that is not a DoOnce
// record (a Mutex's), and a record a level further down (another family).
func TestDoOnceRetentionKeepsWhatIsInUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("a")
		opts := &azlease.DoOnceOptions{Identity: "a", Retention: time.Minute}
		nop := func(context.Context, azlease.Token) error { return nil }
		for _, k := range []string{"job/old-done", "job/old-rewritten", "job/old-corrupt", "job/sub/old-done"} {
			_, err := azlease.DoOnce(ctx, cc, k, opts, nop)
			require.NoError(t, err)
		}
		corrupt := "x"
		_, err := cc.NewBlobClient("once/job/old-corrupt").SetMetadata(raw(ctx), map[string]*string{"azleaseoncestate": &corrupt, "azleaseonceattempts": to.Ptr("1")}, nil)
		require.NoError(t, err)
		m, err := azlease.NewMutex(cc, "once/job/mutex", nil)
		require.NoError(t, err)
		lk, err := m.Lock(ctx)
		require.NoError(t, err)
		require.NoError(t, lk.Unlock(ctx))

		// A run that lasts 5 minutes, started now: its record is written
		// once (running), then only its lease is renewed.
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := azlease.DoOnce(ctx, e.client("long"), "job/old-running", &azlease.DoOnceOptions{Identity: "long", Retention: time.Minute},
				func(ctx context.Context, _ azlease.Token) error {
					time.Sleep(5 * time.Minute)
					return ctx.Err()
				})
			assert.NoError(t, err)
			assert.True(t, res.Ran, "the long run completes: its record was kept")
		}()
		time.Sleep(3 * time.Minute)

		// The sweeper's delete of old-rewritten arrives after someone wrote
		// the record again.
		var rewrote atomic.Bool
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Client == "sweeper" && r.Op == azleasetest.OpDeleteBlob && r.Blob == "once/job/old-rewritten" && !rewrote.Swap(true) {
				_, err := e.client("writer").NewBlobClient(r.Blob).SetMetadata(raw(ctx),
					map[string]*string{"azleaseoncestate": to.Ptr("done"), "azleaseonceattempts": to.Ptr("1"), "note": to.Ptr("newer")}, nil)
				assert.NoError(t, err)
			}
			return azleasetest.Fault{}
		})
		res, err := azlease.DoOnce(ctx, e.client("sweeper"), "job/new", &azlease.DoOnceOptions{Identity: "sweeper", Retention: time.Minute}, nop)
		require.NoError(t, err)
		require.True(t, res.Ran)
		e.SetFaults(nil)
		require.True(t, rewrote.Load(), "the sweep tried to delete old-rewritten")
		// once/job/mutex's queue (its tickets, made by its first holder) is
		// the mutex's, under it: never a sibling record.
		assert.Equal(t, []string{"once/job/mutex", "once/job/mutex/queue/tickets-00000000000000000000", "once/job/new", "once/job/old-corrupt", "once/job/old-rewritten", "once/job/old-running", "once/job/sub/old-done"},
			blobNames(t, cc, "once/job/"), "old-done deleted, the others kept (job/sub/ is not job/new's siblings)")
		wg.Wait()
	})
}

// TestDoOnceTooLateNeverRunsADeletedKeyAgain: a caller paused between its
// look at a key and its acquisition, for longer than Retention, comes back
// after the key ran elsewhere and its record was deleted: it must not run
// fn again (it would, without ErrOnceTooLate: the key's record is gone). A
// caller that waits for a run longer than Retention/2 gives up the same
// way, without running fn.
func TestDoOnceTooLateNeverRunsADeletedKeyAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		const retention = 2 * time.Minute
		var runs atomic.Int32
		fn := func(context.Context, azlease.Token) error { runs.Add(1); return nil }
		opts := func(id string) *azlease.DoOnceOptions {
			return &azlease.DoOnceOptions{Identity: id, Retention: retention}
		}

		resume := make(chan struct{})
		var paused atomic.Bool
		defer azlease.SetOnceBeforeAcquire(func(key string) {
			if key == "job/k" && paused.CompareAndSwap(false, true) {
				<-resume // the first caller to get here: x
			}
		})()
		xerr := make(chan error, 1)
		go func() {
			_, err := azlease.DoOnce(ctx, e.client("x"), "job/k", opts("x"), fn)
			xerr <- err
		}()
		synctest.Wait() // x looked, found nothing, and is paused before acquiring
		require.True(t, paused.Load())

		res, err := azlease.DoOnce(ctx, e.client("y"), "job/k", opts("y"), fn)
		require.NoError(t, err)
		require.True(t, res.Ran)
		time.Sleep(retention + 10*time.Second)
		_, err = azlease.DoOnce(ctx, e.client("z"), "job/k2", opts("z"), fn)
		require.NoError(t, err)
		require.Equal(t, []string{"once/job/k2"}, blobNames(t, e.client("z"), "once/job/"), "job/k's record was deleted")

		close(resume)
		err = <-xerr
		require.ErrorIs(t, err, azlease.ErrOnceTooLate)
		assert.Equal(t, int32(2), runs.Load(), "job/k ran once (y), job/k2 once (z); x ran nothing")

		// Waiting for a run that lasts longer than Retention/2.
		long := make(chan struct{})
		go func() {
			_, err := azlease.DoOnce(ctx, e.client("l"), "job/long", opts("l"), func(context.Context, azlease.Token) error {
				<-long
				return nil
			})
			assert.NoError(t, err)
		}()
		synctest.Wait()
		start := time.Now()
		_, err = azlease.DoOnce(ctx, e.client("w"), "job/long", opts("w"), fn)
		require.ErrorIs(t, err, azlease.ErrOnceTooLate)
		assert.InDelta(t, (retention / 2).Seconds(), time.Since(start).Seconds(), 3, "gives up after Retention/2 and a poll")
		close(long)
		synctest.Wait()
		assert.Equal(t, int32(2), runs.Load())
	})
}

// TestDoOnceRetentionOptions: Retention's bounds, and a key without "/".
func TestDoOnceRetentionOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		cc := e.client("a")
		ctx := context.Background()
		nop := func(context.Context, azlease.Token) error { return nil }
		for _, r := range []time.Duration{-time.Minute, 59 * time.Second, 87601 * time.Hour} {
			_, err := azlease.DoOnce(ctx, cc, "job/k", &azlease.DoOnceOptions{Retention: r}, nop)
			requireOptionError(t, err, "DoOnceOptions.Retention")
		}
		_, err := azlease.DoOnce(ctx, cc, "k", &azlease.DoOnceOptions{Retention: time.Hour}, nop)
		requireOptionError(t, err, "key")
		assert.Contains(t, err.Error(), `"/"`)
		for _, r := range []time.Duration{time.Minute, 87600 * time.Hour} {
			_, err := azlease.DoOnce(ctx, cc, "job/k", &azlease.DoOnceOptions{Retention: r}, nop)
			require.NoError(t, err)
		}
	})
}

// TestDoOnceRetentionRefusedIsLogged: a role that may not delete (403 on
// Delete Blob) does not fail the runner's call, and is logged at Warn, since
// the records then pile up.
func TestDoOnceRetentionRefusedIsLogged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("a")
		nop := func(context.Context, azlease.Token) error { return nil }
		_, err := azlease.DoOnce(ctx, cc, "job/1", &azlease.DoOnceOptions{Retention: time.Minute}, nop)
		require.NoError(t, err)
		time.Sleep(2 * time.Minute)
		e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpDeleteBlob {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusForbidden, Code: "AuthorizationPermissionMismatch"}
			}
			return azleasetest.Fault{}
		})
		var logs bytes.Buffer
		res, err := azlease.DoOnce(ctx, cc, "job/2", &azlease.DoOnceOptions{Retention: time.Minute,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}, nop)
		require.NoError(t, err)
		assert.True(t, res.Ran)
		assert.Equal(t, 1, strings.Count(logs.String(), "cannot delete expired records"), logs.String())
		assert.Len(t, blobNames(t, cc, "once/job/"), 2)
	})
}
