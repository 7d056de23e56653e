package shards_test

// The steady state of a group, in fake time: no move and no loss for an
// hour while a fifth of all requests fail (503 or a lost answer), no
// failed (4xx) request while nothing changes, and the requests per
// replica-hour of the package documentation's Cost section.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// steadyGroup starts n replicas on k shards within a second with opts, and
// waits until they are balanced.
func steadyGroup(t *testing.T, w *simWorld, n int, opts shards.Options) {
	t.Helper()
	for i := range n {
		w.start(fmt.Sprintf("r%02d", i), opts, 0)
		time.Sleep(time.Second / time.Duration(n+1))
	}
	_, ok, why := w.waitBalanced(w.liveIDs(), time.Minute, 100*time.Millisecond)
	require.True(t, ok, "not balanced after the start: %s", why)
}

// TestShardsNoPingPong: four replicas on 32 shards, balanced, then an hour
// during which a fifth of all requests fail with 503 or lose their answer
// after being applied: not one shard moves, no term is lost, no work is
// interrupted, and the group is still balanced at the end.
//
// make test simulates 5 minutes of one seed, to stay short; -seeds 20 or
// more simulates the hour, for -seeds/20 seeds (at most 10).
func TestShardsNoPingPong(t *testing.T) {
	n, length := 1, 5*time.Minute
	if thorough() {
		n, length = min(simSeeds()/20, 10), time.Hour
	}
	var summary []string
	for seed := range uint64(n) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newSimWorld(t, 32, seed)
				w.rec.writeGap = 10 * time.Second
				steadyGroup(t, w, 4, shards.Options{})
				mix := newFaultMix(seed, 0.2, 15*time.Second)
				mix.kinds = []azleasetest.Fault{{Action: azleasetest.Fail}, {Action: azleasetest.ApplyThenDrop}}
				w.setFaults(mix.draw)
				since := time.Now()
				time.Sleep(length)
				ok, why := w.balance(w.liveIDs())
				until := time.Now()
				w.setFaults(nil)
				w.shutdown()
				terms, restarts, losses := countChanges(runsBefore(w.rec.allRuns(), until), since)
				s := w.rec.check(w.srv, w.obs, w.group, w.names, nil)
				mix.mu.Lock()
				requests := mix.requests
				mix.mu.Unlock()
				summary = append(summary, fmt.Sprintf("seed %d: %d requests, %d moves, %d runs interrupted, %d losses, balanced at the end %v, %v",
					seed, requests, terms, restarts, losses, ok, s))
				assert.True(t, ok, "unbalanced at the end: %s", why)
				assert.Zero(t, terms, "moves")
				assert.Zero(t, restarts, "runs of the work interrupted")
				assert.Zero(t, losses, "terms lost")
				assert.True(t, s.ok(), "%v\n%s", s, strings.Join(s.report, "\n"))
			})
		})
	}
	t.Logf("%v with 20 %% of requests failing (503, lost answers), 4 replicas on 32 shards:\n%s", length, strings.Join(summary, "\n"))
}

// steadyCase is a group whose steady state is measured.
type steadyCase struct {
	k, n        int
	lease, poll time.Duration
}

// formula is the Cost section's requests per replica-hour for a replica
// owning s shards: 3600/P listings and renewals of the membership and each
// shard every D/3, up to 10 % sooner (0.95 D/3 on average).
func (c steadyCase) formula(s int) float64 {
	return 3600/c.poll.Seconds() + float64(1+s)*3600/(0.95*c.lease.Seconds()/3)
}

// TestShardsSteadyState: a balanced group whose work writes a checkpoint
// every 3 to 23 s, then idle minutes without a fault (5 in make test, an
// hour and two more groups with -seeds 20 or more): not one request
// fails (4xx), nothing moves, and each replica's own requests (every
// request but its work's content reads and writes) per hour match the
// package documentation's formula within 10 %.
func TestShardsSteadyState(t *testing.T) {
	cases := []steadyCase{{k: 32, n: 4, lease: 15 * time.Second, poll: 2 * time.Second}}
	idle := 5 * time.Minute
	if thorough() {
		cases = append(cases,
			steadyCase{k: 128, n: 8, lease: 30 * time.Second, poll: 5 * time.Second},
			steadyCase{k: 16, n: 3, lease: 60 * time.Second, poll: time.Second})
		idle = time.Hour
	}
	var summary []string
	for _, c := range cases {
		t.Run(fmt.Sprintf("K%d/N%d/D%v/P%v", c.k, c.n, c.lease, c.poll), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := newSimWorld(t, c.k, 1)
				w.rec.writeGap = 10 * time.Second
				steadyGroup(t, w, c.n, shards.Options{LeaseDuration: c.lease, PollInterval: c.poll})
				time.Sleep(time.Minute) // past the start's acquisitions and epoch writes
				a, err := shards.Inspect(context.Background(), w.obs, w.group, w.names)
				require.NoError(t, err)
				_, failed0, by0 := w.resp.snapshot()
				work0 := w.resp.workRequests()
				since := time.Now()
				time.Sleep(idle)
				_, failed1, by1 := w.resp.snapshot()
				work1 := w.resp.workRequests()
				until := time.Now()
				live := w.liveIDs()
				w.shutdown()
				terms, restarts, losses := countChanges(runsBefore(w.rec.allRuns(), until), since)
				assert.Zero(t, terms+restarts+losses, "moves, interrupted runs and losses while idle")
				assert.Zero(t, failed1-failed0, "failed (4xx) requests while idle:\n%s", w.resp.failureLog())
				perMinute := float64(failed1-failed0) / idle.Minutes()
				var lines []string
				for _, m := range a.Members {
					client := live[m.Name].client
					got := float64(by1[client]-by0[client]-(work1[client]-work0[client])) * float64(time.Hour) / float64(idle)
					want := c.formula(m.Owns)
					lines = append(lines, fmt.Sprintf("%s (%d shards) %.0f/h, formula %.0f/h (%+.1f %%)", m.Name, m.Owns, got, want, 100*(got-want)/want))
					assert.Less(t, math.Abs(got-want)/want, 0.10, "%s owning %d shards: %.0f requests per hour, the formula says %.0f", m.Name, m.Owns, got, want)
				}
				summary = append(summary, fmt.Sprintf("K=%d N=%d D=%v P=%v: %.2f failed requests per idle minute; %s",
					c.k, c.n, c.lease, c.poll, perMinute, strings.Join(lines, "; ")))
			})
		})
	}
	t.Logf("steady state over %v:\n%s", idle, strings.Join(summary, "\n"))
}
