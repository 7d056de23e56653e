package azleasetest_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The two tests below are written as a service that uses azlease would test
// itself: they are the examples of the package documentation. They run in
// testing/synctest, so they need a *testing.T and cannot be Example
// functions; each takes milliseconds of real time.

// TestExampleLeaderFailover: three replicas of a worker that must run on one
// machine at a time. The leader's machine crashes (storage hears nothing
// more from it); another replica takes over within the lease duration plus
// a poll interval, and the work never ran on two replicas at once.
func TestExampleLeaderFailover(t *testing.T) {
	defer logRealTime(t, time.Now())
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var rec azleasetest.Recorder
		// Cleanups run last first: this one after every replica stopped.
		t.Cleanup(func() { srv.CheckExclusive(t, "worker", rec.Intervals()) })

		opts := azlease.ElectorOptions{LeaseDuration: 15 * time.Second, PollInterval: time.Second}
		replicas := map[string]*azlease.Elector{}
		for _, name := range []string{"replica-1", "replica-2", "replica-3"} {
			o := opts
			o.Identity = name
			e, err := azlease.NewElector(srv.Client(name), "worker", &o)
			if err != nil {
				t.Fatal(err)
			}
			err = e.Start(context.Background(), func(ctx context.Context, term *azlease.Term) error {
				defer rec.Begin(name)() // the leader-only work runs from here…
				<-ctx.Done()            // …until the term ends
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			replicas[name] = e
			t.Cleanup(func() { _ = e.Stop(context.Background()) })
		}

		first := waitForLeader(t, replicas, "")
		time.Sleep(time.Minute)                     // it works for a while, renewing its lease
		srv.Partition(first, azleasetest.Blackhole) // then its machine crashes
		crashed := time.Now()
		second := waitForLeader(t, replicas, first)
		took := time.Since(crashed)
		// Within a lease duration and a poll interval (plus its 20 % jitter).
		if limit := opts.LeaseDuration + opts.PollInterval*12/10; took > limit {
			t.Errorf("%s took over %v after the crash, more than %v", second, took, limit)
		}
		t.Logf("%s led; it crashed; %s took over %v later", first, second, took)
	})
}

// logRealTime logs how much real time a test took: milliseconds, although it
// covers minutes of fake time.
func logRealTime(t *testing.T, start time.Time) {
	t.Helper()
	t.Logf("real time: %v", time.Since(start).Round(time.Millisecond))
}

// waitForLeader waits, in fake time, until one replica other than old leads.
func waitForLeader(t *testing.T, replicas map[string]*azlease.Elector, old string) string {
	t.Helper()
	for range 600 { // a minute
		for name, e := range replicas {
			if name != old && e.IsLeader() {
				return name
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no new leader within a minute")
	return ""
}

// TestExampleMigrationOnce: five replicas start at once and each runs the
// schema migration through DoOnce, while the storage service refuses 20 %
// of requests with 503 and loses the answer to another 20 % after applying
// them. The migration runs exactly once, and every replica learns it is done.
func TestExampleMigrationOnce(t *testing.T) {
	defer logRealTime(t, time.Now())
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		srv.FailRequests(0.2, http.StatusServiceUnavailable)
		srv.LoseResponses("", 0.2) // "": every replica

		var runs, ran, done atomic.Int32
		var wg sync.WaitGroup
		for i := range 5 {
			name := fmt.Sprintf("replica-%d", i+1)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				res, err := azlease.DoOnce(ctx, srv.Client(name), "migrate-v2", nil, func(ctx context.Context, tok azlease.Token) error {
					runs.Add(1)
					time.Sleep(2 * time.Second) // the migration
					return nil
				})
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				if res.Ran {
					ran.Add(1)
				}
				if res.Status.State == azlease.OnceDone {
					done.Add(1)
				}
			})
		}
		wg.Wait()
		if runs.Load() != 1 || ran.Load() != 1 || done.Load() != 5 {
			t.Errorf("the migration ran %d times; %d replicas say they ran it, %d that it is done", runs.Load(), ran.Load(), done.Load())
		}
	})
}

// A test of a service whose replicas run leader-only work: the leader's
// machine crashes, another replica takes over, and the work never ran on two
// replicas at once. This example is compiled but not run, as it needs a
// test's *testing.T; TestExampleLeaderFailover in this package runs the same
// test and also measures the takeover.
func ExampleNewServer() {
	TestOneWorkerAtATime := func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // fake time: minutes pass in milliseconds
			srv := azleasetest.NewServer(t, nil)
			var rec azleasetest.Recorder // who believed it led, and when
			t.Cleanup(func() { srv.CheckExclusive(t, "worker", rec.Intervals()) })
			for _, name := range []string{"a", "b", "c"} {
				e, err := azlease.NewElector(srv.Client(name), "worker", &azlease.ElectorOptions{Identity: name})
				if err != nil {
					t.Fatal(err)
				}
				err = e.Start(context.Background(), func(ctx context.Context, _ *azlease.Term) error {
					defer rec.Begin(name)() // the leader-only work runs from here…
					<-ctx.Done()            // …until the term ends
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Stop(context.Background()) }) // runs before the check
			}

			time.Sleep(time.Minute)
			st, _ := azlease.Inspect(context.Background(), srv.Client("test"), "worker")
			srv.Partition(st.Holder, azleasetest.Blackhole) // the leader's machine crashes
			time.Sleep(21 * time.Second)                    // lease + poll interval + jitter
			now, _ := azlease.Inspect(context.Background(), srv.Client("test"), "worker")
			if !now.Leased || now.Holder == st.Holder {
				t.Errorf("no replica took over from %s", st.Holder)
			}
		})
	}
	_ = TestOneWorkerAtATime
}

// An operator breaks a lock's lease: the next machine takes it at once, and
// the server's history says who held it when.
func ExampleServer_Break() {
	srv := azleasetest.New(nil) // in a test: azleasetest.NewServer(t, nil)
	defer srv.Close()
	ctx := context.Background()

	a, _ := azlease.NewMutex(srv.Client("machine-a"), "report", nil)
	b, _ := azlease.NewMutex(srv.Client("machine-b"), "report", nil)
	lockA, ok, _ := a.TryLock(ctx)
	fmt.Println("machine-a locked:", ok)
	_, ok, _ = b.TryLock(ctx)
	fmt.Println("machine-b locked:", ok)

	if err := srv.Break("report"); err != nil {
		panic(err)
	}
	lockB, ok, _ := b.TryLock(ctx)
	fmt.Println("after the break, machine-b locked:", ok)
	_ = lockB.Unlock(ctx)
	_ = lockA.Unlock(ctx) // the lock was lost: nothing to release

	for _, g := range srv.History("report") {
		fmt.Println("granted to", g.Holder)
	}
	// Output:
	// machine-a locked: true
	// machine-b locked: false
	// after the break, machine-b locked: true
	// granted to machine-a
	// granted to machine-b
}

// CheckIntervals compares what clients believed with what the server
// granted. Here machine-b went on working after its lease had expired.
func ExampleCheckIntervals() {
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	grants := []azleasetest.Grant{
		{LeaseID: "1f0e…", Holder: "machine-a", Start: t0, End: t0.Add(15 * time.Second)},
		{LeaseID: "9c4d…", Holder: "machine-b", Start: t0.Add(15 * time.Second), End: t0.Add(30 * time.Second)},
	}
	believed := []azleasetest.Interval{
		{Holder: "machine-a", Start: t0, End: t0.Add(14 * time.Second)},
		{Holder: "machine-b", Start: t0.Add(16 * time.Second), End: t0.Add(31 * time.Second)},
	}
	fmt.Println(azleasetest.CheckIntervals(grants, believed))
	// Output:
	// 1 violation(s) of exclusive holding:
	//   "machine-b" [00:00:16.000000000, 00:00:31.000000000] lies outside every lease the server granted to it
	// the server's grants:
	//   1f0e… to "machine-a" [00:00:00.000000000, 00:00:15.000000000)
	//   9c4d… to "machine-b" [00:00:15.000000000, 00:00:30.000000000)
}

// A server on a loopback port, for other processes (or the `azlease
// emulator` command, which does this). Its account is Azurite's well-known
// development account; a client with another key is refused as Azure
// refuses it.
func ExampleServer_Listen() {
	srv := azleasetest.New(nil)
	defer srv.Close()
	ep, err := srv.Listen("127.0.0.1:0") // port 0: any free port
	if err != nil {
		panic(err)
	}
	defer ep.Close()
	// Hand ep.ConnectionString() to the processes under test, as
	// AZURE_STORAGE_CONNECTION_STRING for instance.

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	opts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}}
	good, _ := azlease.ContainerClientFromConnectionString(ep.ConnectionString(), "locks", opts)
	wrongKey := strings.Replace(ep.ConnectionString(), "AccountKey=Eby8", "AccountKey=Xby8", 1)
	bad, _ := azlease.ContainerClientFromConnectionString(wrongKey, "locks", opts)

	_, err = good.Create(context.Background(), nil)
	fmt.Println("right key:", err)
	_, err = bad.GetProperties(context.Background(), nil)
	fmt.Println("wrong key:", bloberror.HasCode(err, bloberror.AuthenticationFailed))
	// Output:
	// right key: <nil>
	// wrong key: true
}
