package azlease_test

// What an election's candidates cost, counted with their answers by a
// transport in front of the emulator, in fake time: the figures of
// docs/design/succession.md ("Costs").

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestCandidateCosts counts, over an idle hour with the default options, the
// requests of an Elector's leader, of its standby (the best candidate, which
// polls every second so that a hand-off's preparation takes about a
// second), and of another follower, by kind, and checks them against the
// cost model: a follower polls every PollInterval (5 s) and writes its
// candidacy every third of its lease duration (5 s: its liveness, Set Blob
// Metadata); the standby polls every standbyPoll (1 s) instead; the leader
// renews every 4.5–5 s, lists its candidates every PollInterval, looks at
// its yield request (Get Blob Properties) every second in between, and
// writes its own candidacy every 5 s. None fails. It asserts counts, not
// times.
func TestCandidateCosts(t *testing.T) {
	azlease.HeavyTest(t)
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		var leaderC, standbyC, followerC counter
		start := func(id string, c *counter) *azlease.Elector {
			el, err := azlease.NewElector(countedClient(t, e.Server, id, c), "svc", &azlease.ElectorOptions{Identity: id})
			require.NoError(t, err)
			require.NoError(t, el.Start(ctx, nil))
			return el
		}
		leader := start("leader", &leaderC)
		time.Sleep(time.Second)
		require.True(t, leader.IsLeader())
		follower := start("follower", &followerC)
		time.Sleep(time.Second)
		standby := start("standby", &standbyC) // the most recently started: the leader's standby
		time.Sleep(time.Minute)
		st, err := azlease.Inspect(ctx, e.client("x"), "svc")
		require.NoError(t, err)
		require.Equal(t, "standby", st.Standby)

		counters := []*counter{&leaderC, &standbyC, &followerC}
		marks := make([][2]int, len(counters))
		for i, c := range counters {
			o, f := c.mark()
			marks[i] = [2]int{o, f}
		}
		const window = time.Hour
		time.Sleep(window)
		per := make([]map[string]int, len(counters))
		for i, c := range counters {
			ops, failed := c.since(marks[i][0], marks[i][1])
			assert.Empty(t, failed, "no failed request")
			per[i] = tally(ops)
		}
		lead, stby, foll := per[0], per[1], per[2]
		t.Logf("requests in an idle hour: leader %v, standby %v, follower %v", lead, stby, foll)

		// Each count within the bounds its jittered period allows.
		within := func(what string, n int, period time.Duration, jitterUp, jitterDown float64) {
			t.Helper()
			lo := int(float64(window)/(float64(period)*(1+jitterUp))) - 2
			hi := int(float64(window)/(float64(period)*(1-jitterDown))) + 2
			assert.True(t, n >= lo && n <= hi, "%s: %d, want %d to %d", what, n, lo, hi)
		}
		within("follower's polls", foll[opRead], 5*time.Second, 0.2, 0.2)
		within("follower's candidacy writes", foll["candidate "+opWrite], 5*time.Second, 0, 0.1)
		within("standby's polls", stby[opRead], time.Second, 0, 0.1)
		within("standby's candidacy writes", stby["candidate "+opWrite], 5*time.Second, 0, 0.1)
		within("leader's renewals", lead[opRenew], 5*time.Second, 0, 0.1)
		within("leader's listings", lead[opList], 5*time.Second, 0.2, 0.2)
		within("leader's candidacy writes", lead["candidate "+opWrite], 5*time.Second, 0, 0.1)
		// The yield look: every second, except the second after a listing.
		looks := lead["candidate "+opRead]
		assert.True(t, looks > 2500 && looks < 3600, "leader's looks at the yield request: %d", looks)
		for _, m := range []map[string]int{lead, stby, foll} {
			total := 0
			for _, n := range m {
				total += n
			}
			m["total"] = total
		}
		var b strings.Builder
		fmt.Fprintf(&b, "| role | polls (Get Blob Properties) | candidacy writes (Set Blob Metadata) | other | total |\n")
		fmt.Fprintf(&b, "| leader | %d yield looks | %d | %d renewals, %d listings | %d |\n", looks, lead["candidate "+opWrite], lead[opRenew], lead[opList], lead["total"])
		fmt.Fprintf(&b, "| standby | %d | %d | | %d |\n", stby[opRead], stby["candidate "+opWrite], stby["total"])
		fmt.Fprintf(&b, "| other follower | %d | %d | | %d |\n", foll[opRead], foll["candidate "+opWrite], foll["total"])
		t.Logf("requests per hour, default options:\n%s", b.String())
		for _, el := range []*azlease.Elector{follower, standby, leader} {
			require.NoError(t, el.Stop(ctx))
		}
	})
}
