package shards

// The balancer's choice of moves, on hand-made inputs.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHeavyShardGoesWhereRoomIsCheap: a member far above the band whose
// other shards are light (a shard of its jumped tenfold) would need eight
// moves to shed its excess one light shard at a time; handing the heavy
// shard to a member whose three shards fit the others' room (its former
// owner's included) takes four. The plan takes the four, and leaves every
// member within the band. (The balancer before it planned eight.)
func TestHeavyShardGoesWhereRoomIsCheap(t *testing.T) {
	in := balanceInput{now: time.Unix(1_700_000_000, 0), cooldown: DefaultCooldown}
	for _, m := range []string{"a", "b", "c", "d"} {
		in.members = append(in.members, bmember{name: m, capacity: 1})
	}
	add := func(owner, name string, load float64) {
		in.shards = append(in.shards, bshard{name: name, owner: owner, load: load, known: true})
	}
	add("a", "jumped", 5)
	for i := range 10 {
		add("a", fmt.Sprintf("a%d", i), 0.3)
	}
	add("b", "b0", 2)
	add("b", "b1", 1.5)
	add("b", "b2", 1.5)
	for _, m := range []string{"c", "d"} {
		for i := range 18 {
			add(m, fmt.Sprintf("%s%d", m, i), 0.25)
		}
	}
	p := balance(in)
	assert.Empty(t, p.hot)
	assert.LessOrEqual(t, len(p.moves), 4, "%v", p.moves)
	for m, l := range p.load {
		assert.LessOrEqual(t, l, bandHigh*p.level+1e-9, "%s within the band: %v", m, p.load)
	}
	assert.Equal(t, "jumped", p.moves[len(p.moves)-1].shard, "the heavy shard moves last, once its receiver made room: %v", p.moves)
	// The same input, the same plan.
	assert.Equal(t, p.moves, balance(in).moves)
}
