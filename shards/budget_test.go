package shards_test

// The group-wide move budget on the public API: however the replicas'
// polls and listings fall, no more than max(1, 2 % of the shards) are
// being handed on at once.

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// TestMovesStayWithinTheGroupBudget: four replicas on 100 shards (a budget
// of 2), every request and answer delayed 0–200 ms at random, so that
// each replica decides from listings of its own time. From the count plan
// to Zipf(0.8) loads, then the loads of two replicas' shards ×4: dozens of
// hand-ons by load, never more than 2 at once (from the end of the old
// owner's run to the start of the new one's), never a shard owned twice.
// Rounds may follow each other within less than a poll (each replica's
// poll is jittered): the budget bounds the hand-ons in flight, and so
// each round's.
func TestMovesStayWithinTheGroupBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		var rmu sync.Mutex
		rng := rand.New(rand.NewPCG(7, 7))
		srv.SetFaults(func(azleasetest.Request) azleasetest.Fault {
			rmu.Lock()
			defer rmu.Unlock()
			return azleasetest.Fault{Delay: time.Duration(rng.IntN(200)) * time.Millisecond, DelayResponse: time.Duration(rng.IntN(200)) * time.Millisecond}
		})
		const k, n, budget = 100, 4, 2
		names := shards.Numbered(k)
		l := &loads{v: map[string]float64{}}
		o := newOwners()
		groups := startReporting(t, srv, names, n, o, l)
		time.Sleep(30 * time.Second) // the count plan, no load reported
		from := time.Now()
		z := zipfLoads(names, 0.8)
		l.mu.Lock()
		l.v = z.v
		l.mu.Unlock()
		time.Sleep(2 * time.Minute)
		l.mu.Lock()
		o.mu.Lock()
		for s, r := range o.now {
			if r == "r0" || r == "r1" {
				l.v[s] *= 4
			}
		}
		o.mu.Unlock()
		l.mu.Unlock()
		time.Sleep(3 * time.Minute)
		until := time.Now()               // stopping hands every shard on: not counted
		stopAll(t, srv, groups, o, names) // a run's interval is recorded as it ends

		// +1 as an old owner's run ends, -1 as the next owner's begins.
		type edge struct {
			at time.Time
			d  int
		}
		var edges []edge
		moves := 0
		o.mu.Lock()
		for _, ivs := range o.ivs {
			for i, iv := range ivs {
				if i > 0 && iv.Start.After(from) && iv.Start.Before(until) && iv.Holder != ivs[i-1].Holder {
					edges = append(edges, edge{ivs[i-1].End, 1}, edge{iv.Start, -1})
					moves++
				}
			}
		}
		o.mu.Unlock()
		slices.SortFunc(edges, func(a, b edge) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return a.d - b.d // a run that begins as another ends: not both at once
		})
		now, most := 0, 0
		for _, e := range edges {
			now += e.d
			most = max(most, now)
		}
		t.Logf("%d hand-ons by load, at most %d at once", moves, most)
		assert.Greater(t, moves, 3*budget, "the loads called for rounds of moves")
		assert.LessOrEqual(t, most, budget, "hand-ons at once across the group")
	})
}
