package shards

// The band's edge: nearBand, the filter that spares the decision at polls
// where no member is near the band's edge, never says far when the
// decision would not be calm.

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestNearBandIsASafeFilter: on random listings (members of weights 1 to
// 3, shards held, handed on, cooling down or pinned, loads near even or
// spread, hot shards, a second zone, free shards), a replica's loads
// changed by a little or a lot: whenever nearBand says far, the decision
// on the listing with the new loads is calm (no shard misplaced, no
// hand-on, every shard with its owner), as loadsCross takes it to be; and
// whenever inputNearBand (the model's) says far on the balancer's input,
// the balancer plans no move. The filters must also say far often enough
// to be worth having.
func TestNearBandIsASafeFilter(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 0xed9e))
	now := time.Unix(1_700_000_000, 0)
	far, calmNear, inputFar := 0, 0, 0
	const runs = 20000
	for run := range runs {
		n := 1 + rng.IntN(6)
		k := n + rng.IntN(40)
		noise := []float64{0.01, 0.05, 0.2, 0.6}[rng.IntN(4)]
		v := view{members: map[string]memberInfo{}, shards: map[string]shardInfo{}}
		var names []string
		for i := range n {
			m := memberInfo{name: fmt.Sprintf("m%d", i), weight: 1 + rng.IntN(3)*rng.IntN(2), loads: map[string]float64{}}
			if rng.IntN(20) == 0 {
				m.zone = "z2"
			}
			v.members[m.name] = m
			names = append(names, m.name)
		}
		set := shardSet{names: Numbered(k)}
		// Held round-robin by weight, so that count and load are near even.
		var seats []string
		for _, name := range names {
			for range v.members[name].weight {
				seats = append(seats, name)
			}
		}
		for i, s := range set.names {
			info := shardInfo{name: s, leased: true, holder: seats[i%len(seats)], epoch: 1}
			switch rng.IntN(30) {
			case 0:
				info.leased, info.holder = false, "" // free
			case 1:
				info.pendingTo = names[rng.IntN(n)] // handed on
				info.carried, info.hasCarried, info.handed = 0.5+rng.Float64(), true, true
			case 2:
				info.handedIn, info.since = true, now.Add(-time.Duration(rng.IntN(120))*time.Second)
			case 3:
				info.pinned = now.Add(time.Minute)
			}
			v.shards[s] = info
			l := 1 + noise*(2*rng.Float64()-1)
			if rng.IntN(60) == 0 {
				l *= 5 + 20*rng.Float64() // hot, or nearly
			}
			if rng.IntN(15) != 0 && info.leased { // some never report
				v.members[info.holder].loads[loadKey(s)] = quantize(l)
			}
		}
		// self's new loads: its shards' published loads, changed a little
		// or a lot.
		self := names[rng.IntN(n)]
		step := []float64{0.005, 0.02, 0.1, 0.5}[rng.IntN(4)]
		var items []loadItem
		for _, s := range set.names {
			if info := v.shards[s]; info.leased && info.holder == self {
				l, ok := v.members[self].loads[loadKey(s)]
				if !ok {
					l = 1
				}
				items = append(items, loadItem{name: s, v: l * (1 + step*(2*rng.Float64()-1))})
			}
		}
		next := &announcement{}
		next.loads, next.rest = formatLoads(items)
		w, ok := v.withLoads(self, next)
		require.True(t, ok)
		m := v.members[self]
		d := w.decide(set, self, m.weight, m.zone, now, DefaultCooldown)
		calm := d.misplaced == 0 && len(d.round) == 0
		if d.input.members != nil && !inputNearBand(d.input) {
			inputFar++
			p := balance(d.input)
			require.Empty(t, p.moves, "run %d: inputNearBand says far", run)
			for _, b := range d.input.shards {
				require.Equal(t, b.owner, p.owner[b.name], "run %d: inputNearBand says far; shard %s", run, b.name)
			}
		}
		if w.nearBand(set, self, m.weight, m.zone) {
			if calm {
				calmNear++
			}
			continue
		}
		far++
		require.True(t, calm, "run %d: nearBand says far, yet the decision is not calm: misplaced %d, round %v, members %v, level %v",
			run, d.misplaced, d.round, d.members, d.level)
		for _, s := range set.names {
			require.Equal(t, w.shards[s].owner(), d.owner[s], "run %d: shard %s", run, s)
		}
	}
	t.Logf("%d runs: far %d (all calm), near %d of which calm %d; the balancer's input far %d", runs, far, runs-far, calmNear, inputFar)
	require.Greater(t, far, runs/10, "the filter says far too rarely to spare anything")
	require.Greater(t, inputFar, runs/10)
}
