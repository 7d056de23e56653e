package shards

// Inspect's view of a hand-off under way, from a made-up listing.

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestAssignmentMisplacedWhileHandingOver: a shard that its holder is
// handing to the member the plan puts it with is not balanced yet: the
// replicas plan as if it were the successor's already, but Inspect reports
// where the shards are (as the ui's grid marks them), so Balanced waits for
// the successor to hold it.
func TestAssignmentMisplacedWhileHandingOver(t *testing.T) {
	n := leaseNames{group: "g"}
	member := func(id string) azlease.Status {
		return azlease.Status{Name: n.member(id), Exists: true, Leased: true, State: "leased", Holder: id, Epoch: 1,
			Metadata: map[string]string{metaWeight: "1"}}
	}
	shard := func(name, holder string, epoch uint64, handingTo string) azlease.Status {
		st := azlease.Status{Name: n.shard(name), Exists: true, Leased: true, State: "leased", Holder: holder, Epoch: epoch}
		if handingTo != "" {
			st.Metadata = map[string]string{metaTo: handingTo, metaEpoch: "7"}
		}
		return st
	}
	list := []string{"0", "1"}

	moving := AssignmentOf("g", []azlease.Status{member("a"), member("b"), shard("0", "b", 5, ""), shard("1", "b", 7, "a")}, list)
	require.True(t, moving.PlanKnown, moving.Note)
	require.Len(t, moving.Shards, 2)
	assert.Equal(t, "b", moving.Shards[1].Owner)
	assert.Equal(t, "a", moving.Shards[1].HandingTo)
	assert.Equal(t, "a", moving.Shards[1].Planned, "the plan counts it as a's already")
	assert.Equal(t, 1, moving.Misplaced, "still b's")
	assert.False(t, moving.Balanced())
	for _, m := range moving.Members {
		assert.Equal(t, 1, m.Share, "%+v", m)
	}

	done := AssignmentOf("g", []azlease.Status{member("a"), member("b"), shard("0", "b", 5, ""), shard("1", "a", 8, "")}, list)
	assert.Zero(t, done.Misplaced)
	assert.True(t, done.Balanced())
}
