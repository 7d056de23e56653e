package shards

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
)

// TestAnnounceBudget pins the figures the documentation gives: the room
// for the announced IDs, how many fit for names of 43 bytes, and that one
// fits for the longest name a group allows, escaped at its longest.
func TestAnnounceBudget(t *testing.T) {
	assert.Equal(t, 3294, initialIDBudget)
	srv := azleasetest.New(nil)
	defer srv.Close()
	cc, err := srv.ContainerClient("announce", "")
	require.NoError(t, err)
	count := func(names []string) int {
		g, err := New(cc, "g", names, nil)
		require.NoError(t, err)
		a := g.announce(names, initialIDBudget)
		assert.LessOrEqual(t, len(a), initialIDBudget)
		return len(parseAccept(a))
	}
	tenants := make([]string, 100)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%08x-0000-4000-8000-%012x", i, i)
		require.Len(t, tenants[i], 43)
	}
	assert.Equal(t, 40, count(tenants))
	longest := make([]string, 3)
	for i := range longest {
		longest[i] = fmt.Sprint(i) + strings.Repeat("%", 1014)
	}
	assert.Equal(t, 1, count(longest))
}

// TestLoadsChangedSeesAShardRiseBehindAMove: a member's published loads
// are written at once when one shard's load moved by loadTotalStep of the
// total, even when another shard left and the total stayed (it waited for
// loadRepublish: the balancer saw the rise 10 s late); noise within it
// waits.
func TestLoadsChangedSeesAShardRiseBehindAMove(t *testing.T) {
	ann := func(items ...loadItem) *announcement {
		a := &announcement{}
		a.loads, a.rest = formatLoads(items)
		return a
	}
	before := ann(loadItem{"x", 1.0}, loadItem{"y", 0.5}, loadItem{"z", 0.5})
	big, small := loadsChanged(before, ann(loadItem{"x", 1.5}, loadItem{"z", 0.5}))
	assert.True(t, small)
	assert.True(t, big, "x rose by half of its load while y left: the same total")
	big, small = loadsChanged(before, ann(loadItem{"x", 1.02}, loadItem{"y", 0.49}, loadItem{"z", 0.5}))
	assert.True(t, small)
	assert.False(t, big, "noise")
}
