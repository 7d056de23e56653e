package azleasetest_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// put writes blob "b" through cc with SDK retries off, under a 3 s deadline,
// and reports how long it took (fake time) and the error.
func put(cc *container.Client) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(raw(context.Background()), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := cc.NewBlockBlobClient("b").UploadBuffer(ctx, []byte("x"), nil)
	return time.Since(start), err
}

// TestClientContainerExists: Client's container exists at once, without a
// request, and creating it again is refused as Azure refuses it.
func TestClientContainerExists(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		cc := srv.Client("a")
		_, err := cc.GetProperties(raw(context.Background()), nil)
		require.NoError(t, err)
		_, err = cc.Create(raw(context.Background()), nil)
		assert.True(t, bloberror.HasCode(err, bloberror.ContainerAlreadyExists), "%v", err)
	})
}

// TestNamedFaults: each named fault does what its documentation says, to the
// client it names only, until it is undone.
func TestNamedFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		a, b := srv.Client("a"), srv.Client("b")

		srv.Partition("a", azleasetest.Blackhole)
		took, err := put(a)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 3*time.Second, took, "a blackholed request waits for its deadline")
		_, err = put(b)
		assert.NoError(t, err, "b is not partitioned")

		srv.Partition("a", azleasetest.Refuse)
		took, err = put(a)
		assert.ErrorIs(t, err, azleasetest.ErrConnectionLost)
		assert.Zero(t, took, "a refused request fails at once")
		srv.Heal("a")
		_, err = put(a)
		assert.NoError(t, err)

		srv.Partition("", azleasetest.Refuse)
		_, err = put(b)
		assert.ErrorIs(t, err, azleasetest.ErrConnectionLost, `"" partitions everyone`)
		srv.Heal("")

		srv.Outage()
		_, err = put(a)
		requireStatus(t, err, http.StatusServiceUnavailable, "ServerBusy")
		srv.Restore()
		_, err = put(a)
		assert.NoError(t, err)

		srv.FailRequests(1, http.StatusInternalServerError)
		_, err = put(b)
		requireStatus(t, err, http.StatusInternalServerError, "InternalError")
		srv.FailRequests(0, http.StatusInternalServerError)

		srv.Slow("a", 2*time.Second)
		took, err = put(a)
		assert.NoError(t, err)
		assert.Equal(t, 2*time.Second, took)
		srv.Slow("a", 4*time.Second)
		_, err = put(a)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "slower than the deadline")
		srv.Slow("a", 0)

		// A lost response: the write happened, the client cannot know.
		srv.LoseResponses("a", 1)
		before := etag(t, b)
		_, err = put(a)
		assert.ErrorIs(t, err, azleasetest.ErrConnectionLost)
		assert.NotEqual(t, before, etag(t, b), "applied although the answer was lost")
		srv.LoseResponses("a", 0)

		// A late request: applied only after the client gave up, 5 s later.
		srv.ApplyLate("a", 1, 5*time.Second)
		before = etag(t, b)
		took, err = put(a)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 3*time.Second, took)
		assert.Equal(t, before, etag(t, b), "not applied while the client waited")
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.NotEqual(t, before, etag(t, b), "applied 5 s after the client gave up")

		// ClearFaults removes the named faults and the hook.
		srv.SetFaults(func(azleasetest.Request) azleasetest.Fault { return azleasetest.Fault{Action: azleasetest.Fail} })
		srv.Partition("b", azleasetest.Refuse)
		srv.ClearFaults()
		_, err = put(a)
		assert.NoError(t, err)
		_, err = put(b)
		assert.NoError(t, err)
	})
}

// TestNamedFaultsBeforeHook: the fault hook sees the requests the named
// faults leave alone, after a Slow delay.
func TestNamedFaultsBeforeHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		a, b := srv.Client("a"), srv.Client("b")
		var seen []string
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			seen = append(seen, r.Client) // requests run one at a time here
			return azleasetest.Fault{}
		})
		srv.Partition("a", azleasetest.Refuse)
		srv.Slow("b", time.Second)
		_, err := put(a)
		assert.Error(t, err)
		took, err := put(b)
		assert.NoError(t, err)
		assert.Equal(t, time.Second, took)
		assert.Equal(t, []string{"b"}, seen)
	})
}

// TestFailRequestsShare: about the share asked for fails, and the same seed
// fails the same requests.
func TestFailRequestsShare(t *testing.T) {
	failed := func() []int {
		var out []int
		synctest.Test(t, func(t *testing.T) {
			srv := azleasetest.NewServer(t, &azleasetest.Options{Seed: 7})
			srv.FailRequests(0.25, http.StatusServiceUnavailable)
			a := srv.Client("a")
			for i := range 400 {
				if _, err := put(a); err != nil {
					out = append(out, i)
				}
			}
		})
		return out
	}
	first := failed()
	assert.InDelta(t, 100, len(first), 40)
	assert.Equal(t, first, failed())
}

func TestNamedFaultsRefuseBadArguments(t *testing.T) {
	srv := azleasetest.New(nil)
	defer srv.Close()
	assert.Panics(t, func() { srv.FailRequests(1.5, 503) })
	assert.Panics(t, func() { srv.FailRequests(0.5, 404) })
	assert.Panics(t, func() { srv.LoseResponses("a", -0.1) })
	assert.Panics(t, func() { srv.ApplyLate("a", 0.5, -time.Second) })
	assert.Panics(t, func() { srv.Slow("a", -time.Second) })
	assert.Panics(t, func() { srv.Partition("a", azleasetest.PartitionMode(9)) })
}

func requireStatus(t *testing.T, err error, status int, code string) {
	t.Helper()
	var re *azcore.ResponseError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, status, re.StatusCode)
	assert.Equal(t, code, re.ErrorCode)
}

func etag(t *testing.T, cc *container.Client) azcore.ETag {
	t.Helper()
	p, err := cc.NewBlobClient("b").GetProperties(raw(context.Background()), nil)
	require.NoError(t, err)
	return *p.ETag
}

// TestBreakAndHistory: grants name the client that got them; an operator's
// break ends the current grant at once and lets another client acquire.
func TestBreakAndHistory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		ctx := raw(context.Background())
		a, b := srv.Client("a"), srv.Client("b")
		_, err := put(a)
		require.NoError(t, err)
		la, err := lease.NewBlobClient(a.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["A"])})
		require.NoError(t, err)
		lb, err := lease.NewBlobClient(b.NewBlobClient("b"), &lease.BlobClientOptions{LeaseID: to.Ptr(ids["B"])})
		require.NoError(t, err)

		start := time.Now()
		_, err = la.AcquireLease(ctx, 15, nil)
		require.NoError(t, err)
		time.Sleep(4 * time.Second)
		broken := time.Now()
		require.NoError(t, srv.Break("b"))
		_, err = la.RenewLease(ctx, nil)
		assert.True(t, bloberror.HasCode(err, bloberror.LeaseIsBrokenAndCannotBeRenewed), "%v", err)
		time.Sleep(time.Second)
		_, err = lb.AcquireLease(ctx, 15, nil)
		require.NoError(t, err)

		assert.Equal(t, []azleasetest.Grant{
			{LeaseID: ids["A"], Holder: "a", Start: start, End: broken},
			{LeaseID: ids["B"], Holder: "b", Start: broken.Add(time.Second), End: broken.Add(16 * time.Second)},
		}, srv.History("b"))

		assert.Error(t, srv.Break("nothing"), "no such blob")
		_, err = lb.ReleaseLease(ctx, nil)
		require.NoError(t, err)
		assert.Error(t, srv.Break("b"), "no lease to break")
	})
}

// TestCheckIntervals: the checker accepts what the server granted, and
// names each kind of violation.
func TestCheckIntervals(t *testing.T) {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	grants := []azleasetest.Grant{
		{LeaseID: "aaaa", Holder: "a", Start: at(0), End: at(15)},
		{LeaseID: "bbbb", Holder: "b", Start: at(20), End: at(35)},
		{LeaseID: "cccc", Holder: "a", Start: at(40)}, // infinite
	}
	ok := []azleasetest.Interval{
		{Holder: "a", Epoch: 1, Start: at(0), End: at(10)},
		{Holder: "a", Epoch: 1, Start: at(5), End: at(15)}, // the same holder may overlap itself
		{Holder: "b", Epoch: 2, Start: at(21), End: at(35)},
		{Holder: "whoever", LeaseID: "CCCC", Epoch: 3, Start: at(40), End: at(400)},
	}
	require.NoError(t, azleasetest.CheckIntervals(grants, ok))
	require.NoError(t, azleasetest.CheckIntervals(nil, nil))

	for name, c := range map[string]struct {
		iv   []azleasetest.Interval
		want string
	}{
		"past its grant":    {[]azleasetest.Interval{{Holder: "a", Start: at(1), End: at(16)}}, "outside every lease"},
		"someone else's":    {[]azleasetest.Interval{{Holder: "b", Start: at(1), End: at(2)}}, "outside every lease"},
		"wrong lease ID":    {[]azleasetest.Interval{{Holder: "a", LeaseID: "bbbb", Start: at(1), End: at(2)}}, "outside every lease"},
		"between grants":    {[]azleasetest.Interval{{Holder: "a", Start: at(16), End: at(17)}}, "outside every lease"},
		"ends before start": {[]azleasetest.Interval{{Holder: "a", Start: at(2), End: at(1)}}, "ends before it starts"},
		"two holders": {[]azleasetest.Interval{
			{Holder: "a", Start: at(0), End: at(15)}, {Holder: "x", LeaseID: "aaaa", Start: at(14), End: at(15)},
		}, "overlap"},
		"epoch backwards": {[]azleasetest.Interval{
			{Holder: "a", Epoch: 5, Start: at(0), End: at(15)}, {Holder: "b", Epoch: 4, Start: at(20), End: at(30)},
		}, "epoch does not grow"},
		"epoch reused by another holder": {[]azleasetest.Interval{
			{Holder: "a", Epoch: 5, Start: at(0), End: at(15)}, {Holder: "b", Epoch: 5, Start: at(20), End: at(30)},
		}, "epoch does not grow"},
	} {
		t.Run(name, func(t *testing.T) {
			err := azleasetest.CheckIntervals(grants, c.iv)
			var ee *azleasetest.ExclusionError
			require.ErrorAs(t, err, &ee)
			require.Len(t, ee.Violations, 1)
			assert.Equal(t, 1, ee.Count(ee.Violations[0].Kind))
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), `aaaa to "a" [00:00:00.000000000, 00:00:15.000000000)`, "lists the grants")
		})
	}
}

// TestCheckExclusiveFails: CheckExclusive fails the test it is given.
func TestCheckExclusiveFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var rec azleasetest.Recorder
		end := rec.Begin("a")
		time.Sleep(time.Second)
		end()
		end() // once only
		require.Len(t, rec.Intervals(), 1)
		var ft fakeTB
		srv.CheckExclusive(&ft, "worker", rec.Intervals())
		assert.True(t, ft.failed, "an interval with no grant at all fails")
		assert.Contains(t, ft.msg, `blob "worker"`)
	})
}

// fakeTB records a failure instead of failing the test.
type fakeTB struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}

// TestCheckExclusiveCatchesLateWork: a leader task that goes on working for
// a few seconds after its term ended (it did not check its context) is caught,
// both as work outside the lease and as overlapping the next leader's.
func TestCheckExclusiveCatchesLateWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var rec azleasetest.Recorder
		var electors []*azlease.Elector
		for _, name := range []string{"a", "b"} {
			e, err := azlease.NewElector(srv.Client(name), "worker", &azlease.ElectorOptions{Identity: name, PollInterval: time.Second})
			require.NoError(t, err)
			require.NoError(t, e.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
				defer rec.Begin(name)()
				<-ctx.Done()
				time.Sleep(5 * time.Second) // the bug: a last unit of work after the term ended
				return nil
			}))
			electors = append(electors, e)
		}
		time.Sleep(30 * time.Second)
		st, err := azlease.Inspect(context.Background(), srv.Client("test"), "worker")
		require.NoError(t, err)
		srv.Partition(st.Holder, azleasetest.Blackhole)
		time.Sleep(30 * time.Second)
		srv.Heal(st.Holder)
		for _, e := range electors {
			require.NoError(t, e.Stop(context.Background()))
		}

		var ft fakeTB
		srv.CheckExclusive(&ft, "worker", rec.Intervals())
		require.True(t, ft.failed)
		assert.Contains(t, ft.msg, "lies outside every lease")
		assert.Contains(t, ft.msg, "overlap")

		var ee *azleasetest.ExclusionError
		require.ErrorAs(t, azleasetest.CheckIntervals(srv.History("worker"), rec.Intervals()), &ee)
		assert.Equal(t, 1, ee.Count(azleasetest.OutsideGrant))
		assert.Equal(t, 1, ee.Count(azleasetest.Overlap))
		assert.Zero(t, ee.Count(azleasetest.EpochBackwards))
	})
}
