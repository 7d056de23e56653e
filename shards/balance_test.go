package shards

// The load balancer's choices on small hand-made groups: the fewest
// hand-ons back into the band (a swap included), a plan recomputed after
// part of it ran gives the rest.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// balanceOf is a balancer input: members of capacity 1, and shards by
// owner as name → load.
func balanceOf(owners map[string]map[string]float64) balanceInput {
	in := balanceInput{now: time.Unix(1_000_000, 0), cooldown: DefaultCooldown}
	for _, m := range []string{"a", "b", "c", "d"} {
		if _, ok := owners[m]; ok {
			in.members = append(in.members, bmember{name: m, capacity: 1})
		}
	}
	for _, m := range []string{"a", "b", "c", "d"} {
		for s, l := range owners[m] {
			in.shards = append(in.shards, bshard{name: s, owner: m, load: l, known: true})
		}
	}
	return in
}

func movesOf(p balancePlan) []string {
	var out []string
	for _, mv := range p.moves {
		out = append(out, fmt.Sprintf("%s %s>%s", mv.shard, mv.from, mv.to))
	}
	return out
}

// TestBalanceFewestMovesBySwap: a's shard J jumps; shedding a's light
// shards takes three hand-ons, a swap two: J to b, below the level, and
// b's heavy X to a. The plan is the swap, J first; planned again with J
// being handed on it is X's move alone, and with X being handed on J's
// alone: the rest of the same plan, not a new one. (Shedding one shard at
// a time made three moves.)
func TestBalanceFewestMovesBySwap(t *testing.T) {
	a := map[string]float64{"J": 0.7}
	for i := range 10 {
		a[fmt.Sprintf("l%d", i)] = 0.05
	}
	owners := map[string]map[string]float64{
		"a": a,
		"b": {"X": 0.45, "y": 0.3},
		"c": {"c1": 0.5, "c2": 0.525},
		"d": {"d1": 0.5, "d2": 0.525},
	}
	in := balanceOf(owners)
	p := balance(in)
	require.Equal(t, []string{"J a>b", "X b>a"}, movesOf(p))
	assert.InDelta(t, 1.0, p.level, 1e-9)

	for i := range in.shards { // J under way to b
		if in.shards[i].name == "J" {
			in.shards[i].owner, in.shards[i].pending = "b", true
		}
	}
	assert.Equal(t, []string{"X b>a"}, movesOf(balance(in)), "the rest of the plan")

	in = balanceOf(owners)
	for i := range in.shards { // X under way to a first
		if in.shards[i].name == "X" {
			in.shards[i].owner, in.shards[i].pending = "a", true
		}
	}
	assert.Equal(t, []string{"J a>b"}, movesOf(balance(in)), "the rest of the plan")
}

// TestBalanceFewestMovesDirect: a member just above the band hands on its
// one shard that fits, rather than several light ones.
func TestBalanceFewestMovesDirect(t *testing.T) {
	in := balanceOf(map[string]map[string]float64{
		"a": {"a1": 0.3, "a2": 0.3, "a3": 0.1, "a4": 0.1, "a5": 0.1, "a6": 0.1, "a7": 0.1, "a8": 0.1},
		"b": {"b1": 0.5, "b2": 0.2},
		"c": {"c1": 0.6, "c2": 0.3},
	})
	p := balance(in)
	require.Len(t, p.moves, 1, movesOf(p))
	assert.Equal(t, "a", p.moves[0].from)
	assert.Equal(t, "b", p.moves[0].to)
}

// TestBalanceFewestMovesInALargeGroup: with 64 members, one above the
// band whose shards fit no receiver, the search finds no plan of three
// moves after trying all it may, and the balancer sheds one shard at a
// time. BenchmarkBalanceLargeGroup times it (20 ms on the 2-core machine;
// 640 ms when every receiver was tried).
func TestBalanceFewestMovesInALargeGroup(t *testing.T) {
	p := balance(largeGroup())
	assert.NotEmpty(t, p.moves)
}

func BenchmarkBalanceLargeGroup(b *testing.B) {
	in := largeGroup()
	for b.Loop() {
		balance(in)
	}
}

// largeGroup is 64 members of 8 shards each, the first one's heavier.
func largeGroup() balanceInput {
	in := balanceInput{now: time.Unix(1_000_000, 0), cooldown: DefaultCooldown}
	for i := range 64 {
		m := fmt.Sprintf("m%02d", i)
		in.members = append(in.members, bmember{name: m, capacity: 1})
		for j := range 8 {
			l := 1.0
			if i == 0 {
				l = 1.3 // the first member's shards are heavier: it is above the band
			}
			in.shards = append(in.shards, bshard{name: fmt.Sprintf("%s-%d", m, j), owner: m, load: l, known: true})
		}
	}
	return in
}
