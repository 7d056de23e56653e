package shards

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func names(k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func members(n int) []member {
	out := make([]member, n)
	for i := range out {
		out[i] = member{name: fmt.Sprintf("m%02d", i), weight: 1}
	}
	return out
}

func counts(p map[string]string) map[string]int {
	c := map[string]int{}
	for _, o := range p {
		c[o]++
	}
	return c
}

// TestPlanColdStart: with nothing owned, every member gets floor or ceil of
// its share, and every shard an owner.
func TestPlanColdStart(t *testing.T) {
	in := planInput{members: members(5), shards: names(32), owner: map[string]string{}}
	p := plan(in)
	c := counts(p)
	assert.Zero(t, c[""])
	for _, m := range in.members {
		assert.Contains(t, []int{6, 7}, c[m.name])
	}
}

// TestPlanJoinMovesTheMinimum: a fifth member joining four on 32 shards
// gets 6 (the minimum), a ninth joining eight on 128 gets 14, and nothing
// else moves.
func TestPlanJoinMovesTheMinimum(t *testing.T) {
	for _, tc := range []struct{ k, n, moves int }{{32, 4, 6}, {128, 8, 14}, {16, 4, 3}, {1024, 63, 16}} {
		t.Run(fmt.Sprintf("%d/%d", tc.k, tc.n), func(t *testing.T) {
			ms := members(tc.n)
			before := plan(planInput{members: ms, shards: names(tc.k), owner: map[string]string{}})
			joined := append(ms, member{name: "zz-new", weight: 1})
			in := planInput{members: joined, shards: names(tc.k), owner: before}
			after := plan(in)
			a := assess(in, after)
			assert.Equal(t, tc.moves, a.moves)
			assert.Equal(t, tc.moves, counts(after)["zz-new"])
			for s, o := range after {
				if o != "zz-new" {
					assert.Equal(t, before[s], o, "shard %s stays where it was", s)
				}
			}
		})
	}
}

// TestPlanWeights: a member of weight 2 gets twice the shards.
func TestPlanWeights(t *testing.T) {
	ms := []member{{"a", 1}, {"b", 2}, {"c", 1}}
	p := plan(planInput{members: ms, shards: names(32), owner: map[string]string{}})
	c := counts(p)
	assert.Equal(t, 16, c["b"])
	assert.Equal(t, 8, c["a"])
	assert.Equal(t, 8, c["c"])
}

// TestPlanLeaveMovesOnlyItsShards: when a member leaves, only its shards
// move.
func TestPlanLeaveMovesOnlyItsShards(t *testing.T) {
	ms := members(4)
	before := plan(planInput{members: ms, shards: names(32), owner: map[string]string{}})
	after := plan(planInput{members: ms[1:], shards: names(32), owner: before})
	for s, o := range before {
		if o != ms[0].name {
			assert.Equal(t, o, after[s], "shard %s stays", s)
		}
	}
	c := counts(after)
	for _, m := range ms[1:] {
		assert.Contains(t, []int{10, 11}, c[m.name])
	}
}

// TestPlanProperties: for random members, weights and owners, the plan is
// balanced (each member floor or ceil of its share), keeps every shard
// whose owner is within its share, moves no more than the surplus, is a
// fixed point (planning from the plan changes nothing), and does not
// depend on the order members are listed in.
func TestPlanProperties(t *testing.T) {
	for seed := range 2000 {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		n := 1 + r.IntN(12)
		k := r.IntN(200)
		ms := make([]member, n)
		W := 0
		for i := range ms {
			ms[i] = member{name: fmt.Sprintf("m%d", i), weight: 1 + r.IntN(4)}
			W += ms[i].weight
		}
		owner := map[string]string{}
		for _, s := range names(k) {
			switch x := r.IntN(n + 2); {
			case x < n:
				owner[s] = ms[x].name
			case x == n:
				owner[s] = "gone"
			}
		}
		in := planInput{members: ms, shards: names(k), owner: owner}
		p := plan(in)
		c := counts(p)
		require.Zero(t, c[""], "seed %d", seed)
		held := map[string]int{}
		for _, o := range owner {
			held[o]++
		}
		surplus := 0
		for _, m := range ms {
			lo := k * m.weight / W
			require.True(t, c[m.name] == lo || c[m.name] == lo+1, "seed %d: %s gets %d, share %d·%d/%d", seed, m.name, c[m.name], k, m.weight, W)
			surplus += max(0, held[m.name]-c[m.name])
		}
		moved := 0
		for s, o := range owner {
			if o != "" && o != "gone" && p[s] != o {
				moved++
			}
		}
		require.Equal(t, surplus, moved, "seed %d: only the surplus moves", seed)
		again := plan(planInput{members: ms, shards: names(k), owner: p})
		require.Equal(t, p, again, "seed %d: a fixed point", seed)
		rev := make([]member, n)
		for i := range ms {
			rev[i] = ms[n-1-i]
		}
		require.Equal(t, p, plan(planInput{members: rev, shards: names(k), owner: owner}), "seed %d: member order does not matter", seed)
	}
}
