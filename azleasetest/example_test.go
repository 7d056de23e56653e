package azleasetest_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var rec azleasetest.Recorder
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
		srv.Partition(first, azleasetest.Blackhole) // its machine crashes
		crashed := time.Now()
		second := waitForLeader(t, replicas, first)
		if took, limit := time.Since(crashed), opts.LeaseDuration+opts.PollInterval*12/10; took > limit {
			t.Errorf("%s took over %v after the crash, more than %v", second, took, limit)
		}

		srv.Heal(first) // so that its Elector can stop
		for _, e := range replicas {
			_ = e.Stop(context.Background())
		}
		srv.CheckExclusive(t, "worker", rec.Intervals())
	})
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
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		srv.FailRequests(0.2, http.StatusServiceUnavailable)
		srv.LoseResponses("", 0.2) // "": every replica

		var runs atomic.Int32
		var wg sync.WaitGroup
		for i := range 5 {
			name := fmt.Sprintf("replica-%d", i+1)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				defer cancel()
				_, err := azlease.DoOnce(ctx, srv.Client(name), "migrate-v2", nil, func(ctx context.Context, tok azlease.Token) error {
					runs.Add(1)
					time.Sleep(2 * time.Second) // the migration
					return nil
				})
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
			})
		}
		wg.Wait()
		if n := runs.Load(); n != 1 {
			t.Errorf("the migration ran %d times", n)
		}
	})
}
