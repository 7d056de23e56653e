package shards_test

// A cold start of many shards on one replica (issue 33 item 6): all owned
// within 5 s, whether their blobs exist (a restart) or not (a group created
// from nothing), never more than about 500 requests in a second, and the
// poll's cadence kept meanwhile.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// requestRate counts a client's requests by second, and its listings and
// beacon reads.
type requestRate struct {
	mu     sync.Mutex
	client string
	t0     time.Time
	per    map[int]int
	polls  []time.Time
	stop   int // the second the replica was stopped in
}

func (r *requestRate) fault(req azleasetest.Request) azleasetest.Fault {
	if req.Client != r.client {
		return azleasetest.Fault{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.per[int(time.Since(r.t0)/time.Second)]++
	if req.Op == azleasetest.OpListBlobs || req.Op == azleasetest.OpGetProperties && req.Blob == "g/shardset" {
		r.polls = append(r.polls, time.Now())
	}
	return azleasetest.Fault{}
}

// TestColdStartOfAThousandShards: one replica alone takes 1,000 shards
// within 5 s, from nothing (no blob exists yet: each is created with its
// first epoch record, then acquired) and again when their blobs exist
// (the group ran before), sending at most about 500 requests in any
// second, its polls never more than a poll interval and its jitter apart.
func TestColdStartOfAThousandShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(1000)
		run := func(id string) (time.Duration, *requestRate) {
			r := &requestRate{client: id, t0: time.Now(), per: map[int]int{}}
			srv.SetFaults(r.fault)
			o := newOwners()
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Settle: -1})
			require.NoError(t, err)
			start := time.Now()
			require.NoError(t, g.Start(context.Background(), o.work(id)))
			for len(o.counts()) == 0 || o.counts()[id] < len(names) {
				if time.Since(start) > time.Minute {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			took := time.Since(start)
			time.Sleep(5 * time.Second)
			r.mu.Lock()
			r.stop = int((time.Since(r.t0) / time.Second))
			r.mu.Unlock()
			require.NoError(t, g.Stop(context.Background()))
			o.check(t, srv, "g", names)
			return took, r
		}
		measure := func(r *requestRate) (peak, stopPeak int, gap time.Duration) {
			r.mu.Lock()
			defer r.mu.Unlock()
			for s, n := range r.per {
				if s < r.stop {
					peak = max(peak, n)
				} else {
					stopPeak = max(stopPeak, n)
				}
			}
			for i := 1; i < len(r.polls); i++ {
				if int(r.polls[i].Sub(r.t0)/time.Second) < r.stop {
					gap = max(gap, r.polls[i].Sub(r.polls[i-1]))
				}
			}
			return peak, stopPeak, gap
		}
		for _, c := range []string{"from nothing", "when their blobs exist"} {
			took, r := run(c[:4])
			peak, stopPeak, gap := measure(r)
			t.Logf("1,000 shards %s: all owned after %v; peak %d requests in a second while running, %d as it stopped; longest gap between polls %v",
				c, took, peak, stopPeak, gap)
			assert.LessOrEqual(t, took, 5*time.Second, c)
			assert.LessOrEqual(t, peak, 500+10, "%s: about 500 requests a second at most", c)
			assert.LessOrEqual(t, gap, shards.DefaultPollInterval*6/5+50*time.Millisecond, "%s: the poll keeps its cadence", c)
		}
		_ = fmt.Sprint
	})
}
