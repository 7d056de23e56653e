package ehbalance

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func parts(k int) []string {
	out := make([]string, k)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

func partitionsOf(rs []record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.partition)
	}
	return out
}

var t0 = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// owned returns fresh records of owner for the given partitions.
func owned(owner string, ps ...int) []record {
	var out []record
	for _, p := range ps {
		out = append(out, record{partition: strconv.Itoa(p), owner: owner, etag: "e" + strconv.Itoa(p), lastModified: t0})
	}
	return out
}

// TestAssessShares checks the share arithmetic of the Go processor: the
// extra partition of a remainder is allowed only to an owner that already
// holds the minimum, and owners above the maximum are steal targets.
func TestAssessShares(t *testing.T) {
	now := t0.Add(10 * time.Second)
	// 8 partitions, a holds 6, b holds 2, c (self) holds none: 3 owners,
	// minRequired 2, remainder → c (0 < 2) may hold at most 2; a is above.
	listed := append(owned("a", 0, 1, 2, 3, 4, 5), owned("b", 6, 7)...)
	v := assess("c", parts(8), listed, now, time.Minute)
	assert.Equal(t, 3, v.owners)
	assert.Equal(t, 2, v.maxAllowed)
	assert.True(t, v.claimMore)
	assert.Empty(t, v.free)
	assert.Equal(t, []string{"0", "1", "2", "3", "4", "5"}, partitionsOf(v.aboveMax))

	// b (self) sees only a and itself (c holds nothing, so nobody knows
	// it exists): 2 owners, maximum 4; a (6) is above it.
	v = assess("b", parts(8), listed, now, time.Minute)
	assert.Equal(t, 2, v.owners)
	assert.Equal(t, 4, v.maxAllowed)
	assert.True(t, v.claimMore)
	assert.Len(t, v.aboveMax, 6)

	// 7 partitions, 3 owners: minRequired 2 and a remainder. b holds 2, so
	// its maximum is 3, and it claims one more only if something is free
	// or someone is above 3 (a, with 4).
	listed = append(owned("a", 0, 1, 2, 3), owned("b", 4, 5)...)
	listed = append(listed, owned("c", 6)...)
	v = assess("b", parts(7), listed, now, time.Minute)
	assert.Equal(t, 3, v.maxAllowed)
	assert.True(t, v.claimMore, "one under the max with a remainder and someone above")
	assert.Equal(t, []string{"0", "1", "2", "3"}, partitionsOf(v.aboveMax))
	// c holds 1, below minRequired: its maximum stays 2 (no extra before
	// the minimum), and only a (4) is above that.
	v = assess("c", parts(7), listed, now, time.Minute)
	assert.Equal(t, 2, v.maxAllowed)
	assert.Equal(t, []string{"0", "1", "2", "3"}, partitionsOf(v.aboveMax))

	// a (self) holds 6: nothing to claim, nobody above.
	v = assess("a", parts(8), listed, now, time.Minute)
	assert.False(t, v.claimMore)
	assert.Empty(t, v.aboveMax)
}

// TestAssessFree: records older than the expiration by the local clock,
// relinquished records and partitions without a blob are free, in that
// order (the never-owned in partition order); expired owners do not count.
func TestAssessFree(t *testing.T) {
	listed := []record{
		{partition: "2", owner: "old", etag: "x", lastModified: t0},
		{partition: "0", owner: "", etag: "y", lastModified: t0.Add(59 * time.Second)},
		{partition: "1", owner: "b", etag: "z", lastModified: t0.Add(59 * time.Second)},
	}
	v := assess("me", parts(5), listed, t0.Add(60*time.Second+time.Millisecond), time.Minute)
	assert.Equal(t, []string{"2", "0", "3", "4"}, partitionsOf(v.free))
	assert.Equal(t, "", v.free[2].etag, "a never-owned partition has no ETag")
	assert.Equal(t, 2, v.owners, "me and b; the expired owner does not count")
	assert.Equal(t, 2, v.maxAllowed, "5 / 2 = 2, plus one for the remainder only once me holds 2")
}

// TestDecideBalanced claims one partition per cycle, free ones first, and
// keeps what it holds.
func TestDecideBalanced(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	listed := append(owned("me", 0), owned("a", 1, 2, 3, 4, 5, 6, 7)...)
	v := assess("me", parts(9), listed, t0, time.Minute)
	got := decide(v, Balanced, rnd)
	assert.Equal(t, []string{"0", "8"}, partitionsOf(got), "keeps 0, claims the only free one")

	listed = append(owned("me", 0), owned("a", 1, 2, 3, 4, 5, 6, 7, 8)...)
	v = assess("me", parts(9), listed, t0, time.Minute)
	got = decide(v, Balanced, rnd)
	assert.Len(t, got, 2)
	assert.Equal(t, "0", got[0].partition)
	assert.Equal(t, "a", got[1].owner, "steals one of a's, with a's ETag")
}

// TestDecideGreedy claims every partition it lacks at once: the first n
// free ones in list order (in a random order among themselves), then
// stolen ones.
func TestDecideGreedy(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 4))
	v := assess("me", parts(8), owned("a", 0, 1, 2, 3), t0, time.Minute)
	// 2 owners, max 4: the free partitions are 4..7, all claimed.
	got := decide(v, Greedy, rnd)
	assert.ElementsMatch(t, []string{"4", "5", "6", "7"}, partitionsOf(got))

	// 3 owners (me, a, b) on 12: max 4; a holds 10, b holds 2. me takes
	// the first 4 of a's in list order.
	listed := append(owned("a", 0, 1, 2, 3, 4, 5, 6, 7, 8, 9), owned("b", 10, 11)...)
	v = assess("me", parts(12), listed, t0, time.Minute)
	got = decide(v, Greedy, rnd)
	assert.ElementsMatch(t, []string{"0", "1", "2", "3"}, partitionsOf(got))
}
