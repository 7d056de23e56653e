package shards_test

// Zones (issue 33 item 5): each zone's load within 10 % of its share of the
// capacity while capacity allows; a zone lost, its shards are owned again
// within D + L + 2P and the survivors back within the band a minute later.

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// zoneLoads is each zone's load over its share of the capacity, from
// Inspect (every member's weight 1 here).
func zoneLoads(a shards.Assignment, zoneOf map[string]string) map[string]float64 {
	load, members := map[string]float64{}, map[string]int{}
	total := 0.0
	for _, m := range a.Members {
		load[zoneOf[m.Name]] += m.Load
		members[zoneOf[m.Name]]++
		total += m.Load
	}
	out := map[string]float64{}
	for z, l := range load {
		out[z] = l / (total * float64(members[z]) / float64(len(a.Members)))
	}
	return out
}

// TestZonesShareTheLoad: three zones of two replicas on 48 shards with
// Zipf(0.8) loads, the heaviest with neighbouring names (the count plan
// gives them to one zone): each zone ends within 10 % of its share. Then
// zone "c" is lost (both replicas cut off): every shard is owned again
// within D + L + 2P, by zones a and b, and those are within the band a
// minute later; nothing is owned twice.
func TestZonesShareTheLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(48)
		l := zipfLoads(names, 0.8)
		o := newOwners()
		zoneOf := map[string]string{}
		var groups []*shards.Group
		for i := range 6 {
			id, zone := fmt.Sprintf("r%d", i), string(rune('a'+i/2))
			zoneOf[id] = zone
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Zone: zone, LeaseDuration: 15 * time.Second})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), reporting(o, id, l, nil)))
			groups = append(groups, g)
		}
		obs := srv.Client("observer")
		inspect := func() shards.Assignment {
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			return a
		}
		var a shards.Assignment
		for start := time.Now(); time.Since(start) < 3*time.Minute; time.Sleep(time.Second) {
			a = inspect()
			ok := a.ByLoad && a.Misplaced == 0
			for _, zl := range zoneLoads(a, zoneOf) {
				ok = ok && zl <= 1.10 && zl >= 0.90
			}
			if ok {
				break
			}
		}
		t.Logf("zones: %v, members max/mean %.3f", zoneLoads(a, zoneOf), imbalance(a))
		for z, zl := range zoneLoads(a, zoneOf) {
			assert.InDelta(t, 1, zl, 0.10, "zone %s", z)
		}

		// Zone c (r4 and r5) is lost.
		srv.Partition("r4", azleasetest.Blackhole)
		srv.Partition("r5", azleasetest.Blackhole)
		lost := time.Now()
		D, L, P := 15*time.Second, shards.DefaultListInterval, longestPoll(shards.DefaultPollInterval)
		var owned time.Duration
		for time.Since(lost) < D+L+2*P+time.Minute {
			time.Sleep(500 * time.Millisecond)
			c := o.counts()
			if c["r4"] == 0 && c["r5"] == 0 && c["r0"]+c["r1"]+c["r2"]+c["r3"] == len(names) {
				owned = time.Since(lost)
				break
			}
		}
		t.Logf("zone c lost: every shard owned again after %v (bound D + L + 2P = %v)", owned, D+L+2*P)
		require.NotZero(t, owned)
		assert.LessOrEqual(t, owned, D+L+2*P)
		time.Sleep(time.Minute)
		a = inspect()
		assert.LessOrEqual(t, imbalance(a), 1.10, "within the band a minute later")
		for z, zl := range zoneLoads(a, zoneOf) {
			if z != "c" {
				assert.InDelta(t, 1, zl, 0.10, "zone %s", z)
			}
		}
		srv.Heal("r4")
		srv.Heal("r5")
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}
