package shardbench

// Tests of the measurements themselves: the observer's balance, moves and
// double ownership, and the fewest moves.

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/azlease/azlease/azleasetest"
)

func TestMinMoves(t *testing.T) {
	assert.Equal(t, 32, minMoves(32, []int{0, 0, 0, 0}), "cold start: every shard once")
	assert.Equal(t, 6, minMoves(32, []int{8, 8, 8, 8, 0}), "32 shards, 4 → 5")
	assert.Equal(t, 14, minMoves(128, []int{16, 16, 16, 16, 16, 16, 16, 16, 0}), "128 shards, 8 → 9")
	assert.Equal(t, 8, minMoves(32, []int{8, 8, 8}), "32 shards, 4 → 3: the leaver's 8")
	assert.Equal(t, 16, minMoves(128, []int{16, 16, 16, 16, 16, 16, 16}), "128 shards, 8 → 7")
	assert.Equal(t, 1, minMoves(10, []int{5, 3, 2}), "the ceil seats go to those that hold most")
}

// TestObserver: a steal believed on both sides until the victim lets go
// counts one move and the overlap; after a take-back within one cycle (the
// victim never stopped believing) the victim is the owner again; a work
// restart on the same replica is not a move; balance needs every shard
// believed by one live replica and shares of floor or ceil.
func TestObserver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := newObserver([]string{"0", "1", "2"})
		begin := func(r, s string) { o.begin(r, s, azleasetest.Interval{Start: time.Now()}) }
		o.setLive("a", true)
		o.setLive("b", true)
		o.markEvent(time.Now())
		begin("a", "0")
		begin("a", "1")
		begin("b", "2")
		since, moves, twice := o.snapshot(time.Now())
		assert.False(t, since.IsZero(), "2 and 1 of 3: balanced")
		assert.Equal(t, 3, moves)
		assert.Zero(t, twice)

		time.Sleep(time.Second)
		begin("b", "1") // b steals 1; a believes it until its next cycle
		since, _, _ = o.snapshot(time.Now())
		assert.True(t, since.IsZero(), "1 believed twice: not balanced")
		time.Sleep(3 * time.Second)
		o.end("a", "1", time.Now())
		_, moves, twice = o.snapshot(time.Now())
		assert.Equal(t, 4, moves)
		assert.Equal(t, 3*time.Second, twice)

		// b steals 0, and a takes it back within its cycle: a never stops
		// believing it, so the observer sees b's move only; once b lets
		// go, a is the owner again, and a move away from a counts.
		begin("b", "0")
		time.Sleep(time.Second)
		o.end("b", "0", time.Now())
		_, moves, twice = o.snapshot(time.Now())
		assert.Equal(t, 5, moves)
		assert.Equal(t, 4*time.Second, twice)
		o.end("a", "0", time.Now())
		begin("b", "0")
		_, moves, _ = o.snapshot(time.Now())
		assert.Equal(t, 6, moves)
		o.end("b", "0", time.Now())
		begin("a", "0")

		// A restart of the work on the same replica is not a move.
		_, moves, _ = o.snapshot(time.Now())
		o.end("b", "1", time.Now())
		begin("b", "1")
		_, again, _ := o.snapshot(time.Now())
		assert.Equal(t, moves, again)

		// b leaves: its shard has no live believer.
		o.setLive("b", false)
		since, _, _ = o.snapshot(time.Now())
		assert.True(t, since.IsZero())
	})
}
