package shards_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// owners records which replica believes it owns which shard, when.
type owners struct {
	mu  sync.Mutex
	now map[string]string // shard → replica, while owned
	ivs map[string][]azleasetest.Interval
}

func newOwners() *owners {
	return &owners{now: map[string]string{}, ivs: map[string][]azleasetest.Interval{}}
}

// work is the replicas' work: it records the believed interval of each
// shard until its context ends, bounded by the term's validity.
func (o *owners) work(replica string) shards.Work {
	return func(ctx context.Context, s *shards.Shard) error {
		start := time.Now()
		o.mu.Lock()
		o.now[s.Name] = replica
		o.mu.Unlock()
		<-ctx.Done()
		end := time.Now()
		if vu := s.Term.ValidUntil(); vu.Before(end) {
			end = vu
		}
		o.mu.Lock()
		if o.now[s.Name] == replica {
			delete(o.now, s.Name)
		}
		o.ivs[s.Name] = append(o.ivs[s.Name], azleasetest.Interval{
			Holder: replica, LeaseID: s.Term.Token().LeaseID, Epoch: s.Term.Epoch(), Start: start, End: end,
		})
		o.mu.Unlock()
		return nil
	}
}

func (o *owners) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := map[string]int{}
	for _, r := range o.now {
		c[r]++
	}
	return c
}

// check checks every shard's believed intervals against the server's
// grants: never owned twice, never outside a grant.
func (o *owners) check(t *testing.T, srv *azleasetest.Server, group string, names []string) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range names {
		if err := azleasetest.CheckIntervals(srv.Grants(azleasetest.Container, group+"/shards/"+s), o.ivs[s]); err != nil {
			t.Errorf("shard %s: %v", s, err)
		}
	}
}

// TestGroupBalances: three replicas on 32 shards settle at 11/11/10, a
// fourth joining brings them to 8 each with the minimum of moves, a clean
// stop and a crash give only their shards away, and no shard is ever
// owned twice.
func TestGroupBalances(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(32)
		o := newOwners()
		groups := map[string]*shards.Group{}
		start := func(id string) {
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Logger: testLogger(id)})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), o.work(id)))
			groups[id] = g
		}
		for _, id := range []string{"a", "b", "c"} {
			start(id)
		}
		time.Sleep(10 * time.Second)
		c := o.counts()
		assert.Equal(t, 32, c["a"]+c["b"]+c["c"], "%v", c)
		for _, id := range []string{"a", "b", "c"} {
			assert.Contains(t, []int{10, 11}, c[id], "%v", c)
		}

		start("d")
		time.Sleep(10 * time.Second)
		c = o.counts()
		assert.Equal(t, map[string]int{"a": 8, "b": 8, "c": 8, "d": 8}, c)

		require.NoError(t, groups["a"].Stop(context.Background()))
		time.Sleep(10 * time.Second)
		c = o.counts()
		assert.Equal(t, 32, c["b"]+c["c"]+c["d"], "%v", c)

		srv.Partition("b", azleasetest.Blackhole)
		time.Sleep(40 * time.Second)
		c = o.counts()
		assert.Equal(t, 16, c["c"], "%v", c)
		assert.Equal(t, 16, c["d"], "%v", c)
		srv.Heal("b")

		for id, g := range groups {
			require.NoError(t, g.Stop(context.Background()), id)
		}
		o.check(t, srv, "g", names)
		fmt.Println()
	})
}

// testLogger logs a replica's group at Debug when AZLEASE_DEBUG_SHARDS is
// set.
func testLogger(id string) *slog.Logger {
	if os.Getenv("AZLEASE_DEBUG_SHARDS") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("replica", id)
}
