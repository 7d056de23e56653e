package shards_test

// Deterministic reproductions of the bugs the simulation found, one test
// each, on the simulation's world (simworld_test.go).

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// TestSimHandOffNotTaken: a shard handed to a replica that never takes it
// (its acquisitions fail, then it stops) expires under the replica that
// handed it on. That replica must take it back once it is alone. It used
// to be held a suspect ("a shard's lease expired under it: it probably
// crashed") and planned no shard at all, for as long as the expired shard
// lay under its name, which nobody else was left to take: the group never
// balanced again.
func TestSimHandOffNotTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, 2, 1)
		w.setFaults(func(r azleasetest.Request) azleasetest.Fault {
			if strings.HasPrefix(r.Client, "b#") && r.Op == azleasetest.OpAcquireLease && strings.Contains(r.Blob, "/shards/") {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: 503}
			}
			return azleasetest.Fault{}
		})
		o := shards.Options{}
		a := w.start("a", o, 0)
		_, ok, why := w.waitBalanced(map[string]bool{"a": true}, 10*time.Second, 100*time.Millisecond)
		require.True(t, ok, why)
		b := w.start("b", o, 0)
		time.Sleep(45 * time.Second) // a hands b its share; b cannot take it; the lease expires
		w.stopNow(b)
		P := longestPoll(shards.DefaultPollInterval)
		d, ok, why := w.waitBalanced(map[string]bool{"a": true}, 15*time.Second+2*P+time.Second, 100*time.Millisecond)
		require.True(t, ok, "a alone again does not take back the shard handed to b: %s", why)
		t.Logf("balanced %v after b stopped", d)
		w.stopNow(a)
		s := w.rec.check(w.srv, w.obs, w.group, w.names)
		require.True(t, s.ok(), "%v\n%s", s, strings.Join(s.report, "\n"))
	})
}
