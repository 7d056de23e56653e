package azlease_test

import (
	"context"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// gaps returns, for the cluster's recorded terms in order, the leaderless
// time before each term after the first (its start minus the previous
// term's end) and the holders in order.
func (c *cluster) gaps() (gaps []time.Duration, holders []string) {
	c.mu.Lock()
	terms := append([]believed(nil), c.terms...)
	c.mu.Unlock()
	sort.Slice(terms, func(i, j int) bool { return terms[i].start.Before(terms[j].start) })
	for i, b := range terms {
		holders = append(holders, b.node)
		if i > 0 {
			gaps = append(gaps, b.start.Sub(terms[i-1].end))
		}
	}
	return gaps, holders
}

// TestSuccessionPlannedStop: a leader that stops hands leadership to the most
// recently started ready standby, which leads within its successor poll of
// the leader's term ending: the leaderless time is a fraction of a second,
// not a follower's poll.
func TestSuccessionPlannedStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, azlease.ElectorOptions{})
		a := c.start("a", nil)
		c.waitLeader(time.Minute)
		c.start("b", nil)
		time.Sleep(time.Second)
		c.start("c", nil)
		time.Sleep(20 * time.Second)
		stopped := time.Now()
		require.NoError(t, a.Stop(context.Background()))
		took := time.Since(stopped)
		t.Logf("stop took %v; leaders %v", took, c.leaders())
		leader := c.waitLeader(time.Minute)
		c.stopAll()
		c.checkSafety()
		require.Equal(t, "c", leader)
		gaps, holders := c.gaps()
		require.Equal(t, []string{"a", "c"}, holders)
		require.Less(t, gaps[0], 500*time.Millisecond, "leaderless time")
		t.Logf("stop took %v, leaderless %v", took, gaps[0])
	})
}
