package shards

// The choice of zone probers (probe.go).

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

func zonedMembers(zoneOf map[string]string) map[string]memberInfo {
	out := map[string]memberInfo{}
	for n, z := range zoneOf {
		out[n] = memberInfo{name: n, weight: 1, zone: z}
	}
	return out
}

// TestZoneProbers: without zones (or with one), nobody probes; with two or
// more, every zone has exactly one prober, outside it, the same whatever
// order the members are listed in; a zone losing its own members keeps
// its prober; a member without a zone counts as the zone "".
func TestZoneProbers(t *testing.T) {
	assert.Nil(t, zoneProbers(nil))
	assert.Nil(t, zoneProbers(zonedMembers(map[string]string{"a": "", "b": "", "c": ""})), "no zones: no probes")
	assert.Nil(t, zoneProbers(zonedMembers(map[string]string{"a": "z1", "b": "z1"})), "one zone: no probes")

	for n := 2; n <= 12; n++ {
		for z := 2; z <= min(n, 4); z++ {
			zoneOf := map[string]string{}
			for i := range n {
				zoneOf[fmt.Sprintf("r%d", i)] = fmt.Sprintf("zone-%d", i%z)
			}
			members := zonedMembers(zoneOf)
			p := zoneProbers(members)
			require.Len(t, p, z, "n=%d z=%d: one prober per zone", n, z)
			for zone, prober := range p {
				require.Contains(t, zoneOf, prober)
				assert.NotEqual(t, zone, zoneOf[prober], "n=%d z=%d: zone %s probed from outside", n, z, zone)
			}
			for range 5 { // the same from the same members (maps iterate in random order)
				assert.Equal(t, p, zoneProbers(zonedMembers(maps.Clone(zoneOf))))
			}
			// zone-0 loses all its members but one: its prober stays.
			fewer := maps.Clone(zoneOf)
			kept := false
			for m, mz := range zoneOf {
				if mz == "zone-0" && kept {
					delete(fewer, m)
				}
				kept = kept || mz == "zone-0"
			}
			assert.Equal(t, p["zone-0"], zoneProbers(zonedMembers(fewer))["zone-0"], "n=%d z=%d", n, z)
		}
	}

	// A member without a zone is the zone "", probed like any other.
	p := zoneProbers(zonedMembers(map[string]string{"a": "", "b": "x", "c": "x"}))
	assert.Equal(t, "a", p["x"])
	assert.Contains(t, []string{"b", "c"}, p[""])
}

// TestLastLoadsOfTheGone: a shard whose holder went without leaving (its
// membership expired with its loads published) counts at the load that
// holder last published, while free and once taken free by a replica that
// has not published it yet; a shard of a live member, and one whose gone
// holder did not publish it, keep what their blob says; the load of a
// membership that published none (an older version's leave withdrew
// them) gives nothing; one that did not fit the holder's entries counts at
// the mean of those that did not (as for a live member).
func TestLastLoadsOfTheGone(t *testing.T) {
	names := leaseNames{group: "g"}
	member := func(id string, leased bool, loads map[string]float64) azlease.Status {
		md := map[string]string{metaWeight: "1"}
		var b strings.Builder
		for s, l := range loads {
			b.WriteString(loadKey(s) + encodeLoad(l))
		}
		if b.Len() > 0 {
			md[metaLoads] = b.String()
		}
		st := azlease.Status{Name: names.member(id), Exists: true, Leased: leased, State: "expired", Metadata: md}
		if leased {
			st.State = "leased"
		}
		return st
	}
	shard := func(s, holder string, epoch uint64, leased bool, prev string, carried string) azlease.Status {
		st := azlease.Status{Name: names.shard(s), Exists: true, Leased: leased, State: "expired", Holder: holder, Epoch: epoch,
			Metadata: map[string]string{}}
		if leased {
			st.State = "leased"
		}
		st.History = []azlease.HistoryEntry{{Holder: holder, Epoch: epoch}}
		if prev != "" {
			st.History = append(st.History, azlease.HistoryEntry{Holder: prev, Epoch: epoch - 1})
		}
		if carried != "" {
			st.Metadata[metaLoad] = carried
		}
		return st
	}
	big := member("big", false, map[string]float64{"g": 4})
	big.Metadata[metaLoadRest] = "2:" + encodeLoad(0.5) // two more that did not fit
	v := parseView(names, []azlease.Status{
		member("live", true, map[string]float64{"a": 5}),
		member("gone", false, map[string]float64{"b": 7, "c": 9, "d": 11}),
		big,
		shard("g", "big", 3, false, "", encodeLoad(2)), // free: big's entry, 4
		shard("h", "live", 5, true, "big", ""),         // taken free from big, not in its entries: the rest's mean
		member("left", false, nil),
		shard("a", "live", 3, true, "", ""),             // a live member's
		shard("b", "gone", 4, false, "", encodeLoad(1)), // free: its gone holder's 7, not the blob's 1
		shard("c", "live", 6, true, "gone", ""),         // taken free from gone: 9 until live publishes it
		shard("e", "gone", 2, false, "", encodeLoad(3)), // gone did not publish it: the blob's
		shard("f", "left", 2, false, "", ""),            // its holder left: nothing
		shard("d", "gone", 8, true, "", ""),             // still leased by gone (its lease not expired yet): 11
	})
	require.Contains(t, v.members, "live")
	require.NotContains(t, v.members, "gone")
	load := func(s string) float64 {
		l, ok := v.shardLoad(s)
		if !ok {
			return -1
		}
		return l
	}
	assert.InDelta(t, 5, load("a"), 0.05)
	assert.InDelta(t, 7, load("b"), 0.05)
	assert.InDelta(t, 9, load("c"), 0.05)
	assert.InDelta(t, 11, load("d"), 0.1)
	assert.InDelta(t, 3, load("e"), 0.05)
	assert.Equal(t, -1.0, load("f"))
	assert.InDelta(t, 4, load("g"), 0.05)
	assert.InDelta(t, 0.5, load("h"), 0.01)
}
