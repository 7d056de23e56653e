package shards_test

// How fast a shard added at run time is owned, over many adds (issue 33,
// item 4: within P + 1 s at p99, on the least loaded replica): a group
// balanced by load, shards added one at a time at random moments of the
// replicas' polls, each timed from AddShards to its work's start.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// TestAddedShardsOwnedWithinAPollAtP99: four replicas of 16 shards whose
// loads follow Zipf(0.8); 100 shards added one at a time, 3 to 9 s apart
// (seeded), none of them reporting a load (each counts as the mean). Every
// one is owned within P + 1 s (P the longest jittered poll interval), so
// the p99 is too; and 95 or more by a replica whose load per capacity, as
// Inspect showed it just before the add, was within 3 % of the least
// (published loads move between the look and the owner's listing). The
// others (0 to 1 a run, the first add) went where the plan's band put
// them: the least loaded, shard 0 alone at 0.87 × the level, would have
// gone above the band with it. Never owned twice.
func TestAddedShardsOwnedWithinAPollAtP99(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(16)
		l := zipfLoads(names, 0.8)
		o := newOwners()
		st := newStarted()
		var groups []*shards.Group
		for i := range 4 {
			id := fmt.Sprintf("r%d", i)
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), st.wrap(id, reporting(o, id, l, nil))))
			groups = append(groups, g)
		}
		obs := srv.Client("observer")
		time.Sleep(90 * time.Second) // balanced by load (TestGroupBalancesByLoad)
		rng := rand.New(rand.NewPCG(33, 4))
		P := longestPoll(shards.DefaultPollInterval)
		var (
			took    []time.Duration
			least   int
			added   = slices.Clone(names)
			perLoad = func(m shards.MemberStatus) float64 { return m.Load / float64(max(m.Weight, 1)) }
		)
		for i := range 100 {
			time.Sleep(3*time.Second + time.Duration(rng.Int64N(int64(6*time.Second))))
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			hosts := map[string]bool{} // a hot shard's member takes nothing more
			for _, s := range a.Shards {
				if slices.Contains(a.Hot, s.Name) {
					hosts[s.Owner] = true
				}
			}
			low := math.Inf(1)
			for _, m := range a.Members {
				if !hosts[m.Name] {
					low = min(low, perLoad(m))
				}
			}
			name := fmt.Sprintf("added-%d", i)
			at := time.Now()
			require.NoError(t, shards.AddShards(context.Background(), obs, "g", name))
			added = append(added, name)
			for {
				st.mu.Lock()
				_, ok := st.first[name]
				st.mu.Unlock()
				if ok || time.Since(at) > time.Minute {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			st.mu.Lock()
			first, where := st.first[name], st.where[name]
			st.mu.Unlock()
			require.False(t, first.IsZero(), "%s never owned", name)
			took = append(took, first.Sub(at))
			for _, m := range a.Members {
				if m.Name == where && perLoad(m) <= low*1.03 {
					least++
				}
			}
		}
		slices.Sort(took)
		t.Logf("%d adds owned after p50 %v, p99 %v, max %v (bound P + 1 s = %v); %d on the least loaded (within 3 %%) as listed just before",
			len(took), took[len(took)/2], took[len(took)*99/100-1], took[len(took)-1], P+time.Second, least)
		assert.LessOrEqual(t, took[len(took)-1], P+time.Second)
		assert.GreaterOrEqual(t, least, 95, "added shards on the least loaded")
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", added)
	})
}
