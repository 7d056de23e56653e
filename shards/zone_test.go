package shards_test

// Zones (issue 33 item 5): each zone's load within 10 % of its share of the
// capacity while capacity allows; a zone lost, its shards are owned again
// within D + 2P (the zone probes: probe.go) and the survivors back within
// the band a minute later.

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
// within D + 2P + 1 s, by zones a and b, and those are within the band a
// minute later; nothing is owned twice. The bound: the last membership of
// zone c expires within D; its prober (outside c) reads one of c's
// memberships every poll, finds one gone within P of that at the latest
// (and reads the rest of c at once), and touches the registry; every other
// replica lists at its next poll, within P more, and takes its share of
// the shards, whose leases expired by then, or at the next poll after
// (the group lists every poll while a shard is held by a non-member). The
// 1 s is the acquisitions' two requests and the work starting, and this
// test's sampling every 500 ms. Without the probes it takes up to
// D + L + 2P: a crash shows only in a listing.
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
		bound := D + 2*P + time.Second
		var owned time.Duration
		for time.Since(lost) < D+L+2*P+time.Minute {
			time.Sleep(500 * time.Millisecond)
			c := o.counts()
			if c["r4"] == 0 && c["r5"] == 0 && c["r0"]+c["r1"]+c["r2"]+c["r3"] == len(names) {
				owned = time.Since(lost)
				break
			}
		}
		t.Logf("zone c lost: every shard owned again after %v (bound D + 2P + 1 s = %v)", owned, bound)
		require.NotZero(t, owned)
		assert.LessOrEqual(t, owned, bound)
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

// TestLostZoneIsSeenByProbes: with a listing interval of an hour, only the
// zone probes show a crash (probe.go). Three zones of two replicas on 24
// shards, balanced by count. One replica of zone a crashes: its shards
// are owned again within D + 3P + 1 s (its zone's prober reads one of the
// zone's two memberships per poll, in turn: up to 2P after the expiry,
// then P for the others to list). Then zone c is lost: every shard is
// owned again within D + 2P + 1 s (see TestZonesShareTheLoad for the
// bound: whichever membership of c the prober reads after the last of them
// expired is gone, and it reads the rest of the zone at once). Nothing is
// owned twice. Without the probes neither is seen within the hour.
func TestLostZoneIsSeenByProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		names := shards.Numbered(24)
		o := newOwners()
		D, P := 15*time.Second, longestPoll(shards.DefaultPollInterval)
		var groups []*shards.Group
		for i := range 6 {
			id, zone := fmt.Sprintf("r%d", i), string(rune('a'+i/2))
			g, err := shards.New(srv.Client(id), "g", names, &shards.Options{Identity: id, Zone: zone, LeaseDuration: D,
				ListInterval: time.Hour, Logger: testLogger(id)})
			require.NoError(t, err)
			require.NoError(t, g.Start(context.Background(), o.work(id)))
			groups = append(groups, g)
		}
		obs := srv.Client("observer")
		for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(time.Second) {
			a, err := shards.Inspect(context.Background(), obs, "g", nil)
			require.NoError(t, err)
			c := o.counts()
			if a.Misplaced == 0 && c["r0"]+c["r1"]+c["r2"]+c["r3"]+c["r4"]+c["r5"] == len(names) {
				break
			}
		}
		c := o.counts()
		require.Equal(t, len(names), c["r0"]+c["r1"]+c["r2"]+c["r3"]+c["r4"]+c["r5"], "balanced first: %v", c)
		time.Sleep(30 * time.Second) // calm: no listing but each hour

		// ownedAgain waits until the live replicas own every shard (at most
		// 30 s past the bound: it then returns how long it waited, and the
		// test goes on, to stop the replicas).
		ownedAgain := func(live []string, bound time.Duration) time.Duration {
			lost := time.Now()
			for time.Since(lost) < bound+30*time.Second {
				time.Sleep(250 * time.Millisecond)
				c, n := o.counts(), 0
				for _, id := range live {
					n += c[id]
				}
				if n == len(names) {
					break
				}
			}
			return time.Since(lost)
		}

		srv.Partition("r0", azleasetest.Blackhole)
		bound := D + 3*P + time.Second
		took := ownedAgain([]string{"r1", "r2", "r3", "r4", "r5"}, bound)
		t.Logf("r0 (zone a) lost: every shard owned again after %v (bound D + 3P + 1 s = %v)", took, bound)
		assert.LessOrEqual(t, took, bound, "%v", o.counts())
		time.Sleep(30 * time.Second)

		srv.Partition("r4", azleasetest.Blackhole)
		srv.Partition("r5", azleasetest.Blackhole)
		bound = D + 2*P + time.Second
		took = ownedAgain([]string{"r1", "r2", "r3"}, bound)
		t.Logf("zone c lost: every shard owned again after %v (bound D + 2P + 1 s = %v)", took, bound)
		assert.LessOrEqual(t, took, bound, "%v", o.counts())

		for _, id := range []string{"r0", "r4", "r5"} {
			srv.Heal(id)
		}
		for _, g := range groups {
			require.NoError(t, g.Stop(context.Background()))
		}
		o.check(t, srv, "g", names)
	})
}
