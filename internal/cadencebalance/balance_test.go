package cadencebalance

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestPass: unassigned shards go to the least loaded executor; a source
// above the upper band hands the shard nearest half the gap to the least
// loaded executor below the lower band, within the budget; a shard moved
// stays for the cooldown; within the bands nothing moves.
func TestPass(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := New(Defaults)
	var shards []string
	loads := map[string]float64{}
	for i := range 200 {
		s := strconv.Itoa(i)
		shards = append(shards, s)
		loads[s] = 1
	}
	for i, s := range shards {
		l.Assign(s, []string{"a", "a", "b", "c"}[i%4]) // a holds half
	}
	moves := l.Pass(now, []string{"a", "b", "c"}, shards, loads)
	assert.Len(t, moves, 2, "1 %% of 200 shards per pass")
	for _, m := range moves {
		assert.Equal(t, "a", m.From)
	}
	for range 100 {
		now = now.Add(2 * time.Second)
		l.Pass(now, []string{"a", "b", "c"}, shards, loads)
	}
	count := map[string]int{}
	for _, s := range shards {
		count[l.Owner(s)]++
	}
	// The bands leave a source above 1.15 when nobody is below 0.90: a
	// stops at 78 (1.17 × the mean), b and c at 61 (0.915).
	assert.True(t, float64(count["a"]) <= 1.15*200/3 || float64(min(count["b"], count["c"])) >= 0.90*200/3, "%v", count)
	assert.Empty(t, l.Pass(now.Add(time.Hour), []string{"a", "b", "c"}, shards, loads), "within the bands")

	moves = l.Pass(now, []string{"a", "b", "c", "d"}, append(shards, "new"), loads)
	assert.Equal(t, Move{Shard: "new", To: "d"}, moves[0], "a new shard to the least loaded")
}
