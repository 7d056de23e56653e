package azlease_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// public is st without what only azlease reads (the raw metadata), so that
// statuses read by Inspect and by InspectPrefix compare: a listing gives
// metadata names in lower case, Get Blob Properties as stored.
func public(st azlease.Status) azlease.Status {
	return azlease.Status{
		Name: st.Name, Exists: st.Exists, Leased: st.Leased, State: st.State, Holder: st.Holder, Epoch: st.Epoch,
		Acquired: st.Acquired, Released: st.Released, History: st.History, Metadata: st.Metadata, Err: st.Err,
	}
}

func names(sts []azlease.Status) []string {
	out := make([]string, len(sts))
	for i, st := range sts {
		out[i] = st.Name
	}
	return out
}

// putBlob creates the blob name with metadata md, and the container if
// need be.
func putBlob(t *testing.T, cc *container.Client, name string, md map[string]*string) {
	t.Helper()
	if _, err := cc.Create(raw(context.Background()), nil); err != nil {
		require.True(t, bloberror.HasCode(err, bloberror.ContainerAlreadyExists), "%v", err)
	}
	_, err := cc.NewBlockBlobClient(name).Upload(raw(context.Background()), streaming.NopCloser(bytes.NewReader(nil)),
		&blockblob.UploadOptions{Metadata: md})
	require.NoError(t, err)
}

// TestInspectPrefix: every blob under the prefix, in name order, each
// status what Inspect reads for it, in every lease state: held, released,
// expired, breaking and broken; a plain blob azlease never touched; and a
// prefix that is only a string prefix ("sem/slot-1" lists "sem/slot-10").
func TestInspectPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("reader")
		lease := func(name, who string, d time.Duration) *azlease.Lease {
			l := newLease(t, e.client(who), name, &azlease.LeaseOptions{Identity: who, LeaseDuration: d})
			_, err := l.Acquire(ctx)
			require.NoError(t, err)
			return l
		}
		held := lease("sem/slot-1", "node-a", time.Minute)
		require.NoError(t, held.SetMetadata(ctx, map[string]string{"Owner": "ops"}))
		require.NoError(t, lease("sem/slot-10", "node-b", 0).Release(ctx))
		expired := lease("sem/slot-2", "node-c", 0) // 15 s, and nobody renews it
		breaking := lease("sem/slot-3", "node-d", time.Minute)
		broken := lease("sem/slot-4", "node-e", time.Minute)
		putBlob(t, cc, "sem/plain", map[string]*string{"note": to.Ptr("not a lock")})
		putBlob(t, cc, "other", nil)

		// An operator breaks slot-3 with a period, slot-4 at once.
		_, err := breaking.Break(ctx, 30*time.Second)
		require.NoError(t, err)
		_, err = broken.Break(ctx, 0)
		require.NoError(t, err)
		time.Sleep(azlease.DefaultDuration + time.Second)
		require.False(t, expired.Held())

		sts, err := azlease.InspectPrefix(ctx, cc, "sem/")
		require.NoError(t, err)
		require.Equal(t, []string{"sem/plain", "sem/slot-1", "sem/slot-10", "sem/slot-2", "sem/slot-3", "sem/slot-4"}, names(sts))
		states := map[string]string{}
		for _, st := range sts {
			one, err := azlease.Inspect(ctx, cc, st.Name)
			require.NoError(t, err)
			assert.Equal(t, public(one), public(st), st.Name)
			assert.NoError(t, st.Err)
			states[st.Name] = st.State
		}
		assert.Equal(t, map[string]string{
			"sem/plain": "available", "sem/slot-1": "leased", "sem/slot-10": "available",
			"sem/slot-2": "expired", "sem/slot-3": "breaking", "sem/slot-4": "broken",
		}, states)
		assert.Equal(t, map[string]string{"owner": "ops"}, sts[1].Metadata)
		assert.Equal(t, "node-a", sts[1].Holder)
		assert.True(t, sts[1].Leased)
		assert.True(t, sts[4].Leased, "a breaking lease is still held")
		assert.Zero(t, sts[0].Epoch, "a plain blob has no term")

		sts, err = azlease.InspectPrefix(ctx, cc, "sem/slot-1")
		require.NoError(t, err)
		assert.Equal(t, []string{"sem/slot-1", "sem/slot-10"}, names(sts), "a string prefix, not a path")

		sts, err = azlease.InspectPrefix(ctx, cc, "")
		require.NoError(t, err)
		assert.Len(t, sts, 7, "an empty prefix lists the whole container")
		assert.Equal(t, "other", sts[0].Name)

		sts, err = azlease.InspectPrefix(ctx, cc, "nothing/")
		require.NoError(t, err)
		assert.Empty(t, sts)

		time.Sleep(15 * time.Second) // the break period passes
		sts, err = azlease.InspectPrefix(ctx, cc, "sem/slot-3")
		require.NoError(t, err)
		require.Len(t, sts, 1)
		assert.Equal(t, "broken", sts[0].State)
		assert.False(t, sts[0].Leased)

		require.NoError(t, held.Release(ctx))
	})
}

// TestInspectPrefixBadEpoch: a blob whose epoch metadata is malformed does
// not fail the listing; its status carries the error Inspect returns, with
// the lease state and user metadata still read.
func TestInspectPrefixBadEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("reader")
		putBlob(t, cc, "locks/a", nil)
		putBlob(t, cc, "locks/bad", map[string]*string{"AzLeaseEpoch": to.Ptr("seven"), "team": to.Ptr("x")})
		putBlob(t, cc, "locks/c", map[string]*string{"azleaseepoch": to.Ptr("18446744073709551615")}) // 2^64−1
		_, err := azlease.Inspect(ctx, cc, "locks/bad")
		require.ErrorIs(t, err, azlease.ErrPermanent)

		sts, err := azlease.InspectPrefix(ctx, cc, "locks/")
		require.NoError(t, err)
		require.Equal(t, []string{"locks/a", "locks/bad", "locks/c"}, names(sts))
		assert.NoError(t, sts[0].Err)
		for _, st := range sts[1:] {
			require.ErrorIs(t, st.Err, azlease.ErrPermanent, st.Name)
			assert.Contains(t, st.Err.Error(), "azleaseepoch")
			var ae *azlease.Error
			require.ErrorAs(t, st.Err, &ae)
			assert.Equal(t, "list", ae.Op)
			assert.Equal(t, st.Name, ae.Blob)
			assert.True(t, st.Exists)
			assert.Equal(t, "available", st.State)
			assert.Zero(t, st.Epoch)
		}
		assert.Equal(t, map[string]string{"team": "x"}, sts[1].Metadata)
	})
}

// TestInspectPrefixManyPages: more than 5,000 blobs take one request per
// 5,000, and come back whole and in order.
func TestInspectPrefixManyPages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := azleasetest.NewServer(t, &azleasetest.Options{AllowAnyKey: true})
		base := "http://127.0.0.1:10000/" + azleasetest.Account + "/" + azleasetest.Container
		cc := s.Client("reader") // creates the container
		const n = 10003
		for i := range n { // straight to the handler: azblob's pipeline would take seconds
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, fmt.Sprintf("%s/many/%05d", base, n-1-i), nil))
			require.Equal(t, http.StatusCreated, rec.Code)
		}
		putBlob(t, cc, "manz", nil) // outside the prefix
		var lists atomic.Int32
		s.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpListBlobs {
				lists.Add(1)
			}
			return azleasetest.Fault{}
		})
		sts, err := azlease.InspectPrefix(context.Background(), cc, "many/")
		require.NoError(t, err)
		require.Len(t, sts, n)
		for i, st := range sts {
			require.Equal(t, fmt.Sprintf("many/%05d", i), st.Name)
		}
		assert.Equal(t, int32(3), lists.Load(), "5,000 blobs a request")
	})
}

// TestInspectPrefixRetries: a lost answer and a 503 are retried, within
// 2 × AttemptTimeout; a refusal (403) is returned at once, with Azure's
// code; an outage or a hang ends in ErrTransient after 6 s; the caller's
// deadline ends it sooner; a missing container lists nothing.
func TestInspectPrefixRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		cc := e.client("reader")
		putBlob(t, cc, "p/a", nil)
		var lists atomic.Int32
		fault := func(faults ...azleasetest.Fault) {
			lists.Store(0)
			e.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
				if r.Op != azleasetest.OpListBlobs {
					return azleasetest.Fault{}
				}
				if i := int(lists.Add(1)) - 1; i < len(faults) {
					return faults[i]
				}
				return azleasetest.Fault{}
			})
		}

		fault(azleasetest.Fault{Action: azleasetest.ApplyThenDrop}, azleasetest.Fault{Action: azleasetest.Fail})
		start := time.Now()
		sts, err := azlease.InspectPrefix(ctx, cc, "p/")
		require.NoError(t, err)
		assert.Equal(t, []string{"p/a"}, names(sts))
		assert.Equal(t, int32(3), lists.Load(), "a lost answer and a 503, each retried once: no SDK retries")
		assert.Less(t, time.Since(start), time.Second)

		forbidden := azleasetest.Fault{Action: azleasetest.Fail, Status: http.StatusForbidden, Code: "AuthorizationPermissionMismatch"}
		fault(forbidden, forbidden)
		start = time.Now()
		_, err = azlease.InspectPrefix(ctx, cc, "p/")
		require.ErrorIs(t, err, azlease.ErrPermanent)
		var ae *azlease.Error
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, "list", ae.Op)
		assert.Equal(t, "p/", ae.Blob)
		assert.Equal(t, "AuthorizationPermissionMismatch", ae.Code)
		assert.Equal(t, http.StatusForbidden, ae.StatusCode)
		assert.Equal(t, int32(1), lists.Load(), "a refusal is not retried")
		assert.Zero(t, time.Since(start))

		e.SetFaults(nil)
		e.Outage()
		start = time.Now()
		_, err = azlease.InspectPrefix(ctx, cc, "p/")
		require.ErrorIs(t, err, azlease.ErrTransient)
		assert.Contains(t, err.Error(), "ServerBusy")
		assert.LessOrEqual(t, time.Since(start), 6*time.Second, "2 × AttemptTimeout")
		assert.Greater(t, time.Since(start), 4*time.Second)
		e.Restore()

		e.Partition("reader", azleasetest.Blackhole)
		start = time.Now()
		_, err = azlease.InspectPrefix(ctx, cc, "p/")
		require.ErrorIs(t, err, azlease.ErrTransient)
		assert.Equal(t, 6*time.Second, time.Since(start), "two attempts of AttemptTimeout (3 s) each")

		dctx, cancel := context.WithTimeout(ctx, time.Second)
		start = time.Now()
		_, err = azlease.InspectPrefix(dctx, cc, "p/")
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "never past the caller's deadline")
		e.Heal("reader")

		sts, err = azlease.InspectPrefix(ctx, e.client("reader"), "p/")
		require.NoError(t, err)
		assert.Len(t, sts, 1)
		missing, err := e.ContainerClient("no-such-container", "reader")
		require.NoError(t, err)
		sts, err = azlease.InspectPrefix(ctx, missing, "p/")
		require.NoError(t, err, "a missing container lists nothing, as Inspect finds no blob")
		assert.Empty(t, sts)
	})
}

// TestInspectPrefixArguments: what no listing could need is refused before
// any request.
func TestInspectPrefixArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		for _, bad := range []string{strings.Repeat("a", 1025), "a\xff"} {
			_, err := azlease.InspectPrefix(context.Background(), e.client("a"), bad)
			var oe *azlease.OptionError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, "prefix", oe.Field)
		}
		_, err := azlease.InspectPrefix(context.Background(), nil, "x")
		require.ErrorIs(t, err, azlease.ErrInvalidOptions)
		_, err = azlease.InspectPrefix(context.Background(), e.client("a"), strings.Repeat("a", 1024))
		require.NoError(t, err)
	})
}

// TestInspectNameSet: Inspect names the blob it read, whether it exists or
// not.
func TestInspectNameSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		st, err := azlease.Inspect(context.Background(), e.client("a"), "nothing")
		require.NoError(t, err)
		assert.Equal(t, "nothing", st.Name)
		l := newLease(t, e.client("a"), "x", nil)
		_, err = l.Acquire(context.Background())
		require.NoError(t, err)
		st, err = l.Inspect(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "x", st.Name)
		require.NoError(t, l.Release(context.Background()))
	})
}

// TestAzuriteInspectPrefix: the same on the real wire (Azurite, or a live
// account under make live-azure): lease states, metadata, name order in
// UTF-8 bytes whatever order the service lists in, and paging.
func TestAzuriteInspectPrefix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := newWire(t, "list")
	cc := w.client()
	held := newLease(t, cc, "sem/slot-1", &azlease.LeaseOptions{Identity: "node-a"}) // creates the container
	tok, err := held.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, held.SetMetadata(ctx, map[string]string{"owner": "ops"}))
	released := newLease(t, cc, "sem/slot-10", &azlease.LeaseOptions{Identity: "node-b"})
	_, err = released.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, released.Release(ctx))
	broken := newLease(t, cc, "sem/slot-2", &azlease.LeaseOptions{Identity: "node-c"})
	_, err = broken.Acquire(ctx)
	require.NoError(t, err)
	_, err = broken.Break(ctx, 0)
	require.NoError(t, err)
	putBlob(t, cc, "sem/slot-ｚ", nil)
	putBlob(t, cc, "sem/slot-😀", map[string]*string{"azleaseepoch": to.Ptr("bad")})
	putBlob(t, cc, "semaphore", nil)

	sts, err := azlease.InspectPrefix(ctx, cc, "sem/")
	require.NoError(t, err)
	require.Equal(t, []string{"sem/slot-1", "sem/slot-10", "sem/slot-2", "sem/slot-ｚ", "sem/slot-😀"}, names(sts),
		"UTF-8 byte order (Azurite lists U+1F600 before U+FF5A)")
	assert.Equal(t, "leased", sts[0].State)
	assert.True(t, sts[0].Leased)
	assert.Equal(t, tok.Epoch, sts[0].Epoch)
	assert.Equal(t, "node-a", sts[0].Holder)
	assert.Equal(t, map[string]string{"owner": "ops"}, sts[0].Metadata)
	assert.Equal(t, "available", sts[1].State)
	assert.Equal(t, "broken", sts[2].State)
	assert.False(t, sts[2].Leased)
	assert.Equal(t, "available", sts[3].State)
	require.ErrorIs(t, sts[4].Err, azlease.ErrPermanent)
	for _, st := range sts[:4] {
		one, err := azlease.Inspect(ctx, cc, st.Name)
		require.NoError(t, err)
		assert.Equal(t, public(one), public(st), st.Name)
	}
	require.NoError(t, held.Release(ctx))

	// Across pages: 5,001 blobs take two requests. Created in parallel
	// batches to keep the test short.
	const n = 5001
	errs := make(chan error, 50)
	for b := range 50 {
		go func() {
			var err error
			for i := b; i < n && err == nil; i += 50 {
				_, err = cc.NewBlockBlobClient(fmt.Sprintf("page/%05d", i)).Upload(raw(ctx), streaming.NopCloser(bytes.NewReader(nil)), nil)
			}
			errs <- err
		}()
	}
	for range 50 {
		require.NoError(t, <-errs)
	}
	sts, err = azlease.InspectPrefix(ctx, cc, "page/")
	require.NoError(t, err)
	require.Len(t, sts, n)
	for i, st := range sts {
		if st.Name != fmt.Sprintf("page/%05d", i) {
			require.FailNow(t, "out of order", "%d: %s", i, st.Name)
		}
	}
}
