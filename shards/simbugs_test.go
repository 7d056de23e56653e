package shards_test

// Deterministic reproductions of the bugs the simulation found, one test
// each, on the simulation's world (simworld_test.go).

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
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
		_, ok, why := w.waitBalanced(w.liveIDs(), 10*time.Second, 100*time.Millisecond)
		require.True(t, ok, why)
		b := w.start("b", o, 0)
		time.Sleep(45 * time.Second) // a hands b its share; b cannot take it; the lease expires
		w.stopNow(b)
		P := longestPoll(shards.DefaultPollInterval)
		d, ok, why := w.waitBalanced(w.liveIDs(), 15*time.Second+2*P+time.Second, 100*time.Millisecond)
		require.True(t, ok, "a alone again does not take back the shard handed to b: %s", why)
		t.Logf("balanced %v after b stopped", d)
		w.stopNow(a)
		w.requireSafe()
	})
}

// TestSimNoReceiverLeavesWorkAlone: a member that announces no lease ID for
// the shards the plan gives it (here a membership held by hand, as a
// replica's looks between its join and its next poll, or when its view
// differs) gets nothing, and the shards' work goes on undisturbed. The
// owner used to end the work's context first and only then read the
// receiver's ID: finding none, it called the work again, once per poll,
// and could even call it again after the term had ended meanwhile
// (simulation seed 19: a run of the work that started 5 s after its term's
// validity deadline).
func TestSimNoReceiverLeavesWorkAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, 2, 1)
		a := w.startAlone("a")
		ml, err := azlease.NewLease(w.obs, "g/members/x", &azlease.LeaseOptions{Identity: "x"})
		require.NoError(t, err)
		lk, err := ml.Hold(context.Background())
		require.NoError(t, err)
		require.NoError(t, lk.SetMetadata(context.Background(), map[string]string{"shardweight": "1"}))
		// a's works may have started at this very instant of fake time
		// (startAlone returns once they run): since is just after.
		time.Sleep(time.Millisecond)
		since := time.Now()
		time.Sleep(30 * time.Second)
		terms, restarts, _ := countChanges(w.rec.allRuns(), since)
		require.NoError(t, lk.Unlock(context.Background()))
		w.stopNow(a)
		terms2, restarts2, _ := countChanges(w.rec.allRuns(), since)
		require.Zero(t, terms+restarts, "while x announced nothing")
		require.Zero(t, terms2+restarts2, "as a stopped") // a's runs that ended at its stop started before since
	})
}

// TestSimSlowHandOff: a hand-off whose Change Lease is slow (2.5 s here) is
// seen by the receiver as pending before its lease carries the receiver's
// ID: the receiver's attempt to take it is refused. It must try again at
// its next poll. It used to give up on the shard for the whole term
// ("handed here under an ID this replica no longer proposes"), so the
// shard reached it only once the changed lease had expired, a lease
// duration later, instead of a poll later.
func TestSimSlowHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, 2, 1)
		const slow = 2500 * time.Millisecond
		w.setFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpChangeLease {
				return azleasetest.Fault{Delay: slow}
			}
			return azleasetest.Fault{}
		})
		w.start("a", shards.Options{}, 0)
		_, ok, why := w.waitBalanced(w.liveIDs(), 10*time.Second, 100*time.Millisecond)
		require.True(t, ok, why)
		w.start("b", shards.Options{}, 0)
		P := longestPoll(shards.DefaultPollInterval)
		d, ok, why := w.waitBalanced(w.liveIDs(), time.Minute, 100*time.Millisecond)
		require.True(t, ok, why)
		require.LessOrEqual(t, d, 2*P+slow+time.Second, "join with a slow hand-off")
		t.Logf("balanced %v after b started", d)
	})
}

// TestSimAcceptWhileHandingOn: a replica whose hand-off of a shard is still
// under way (its Change Lease hangs and is retried) may see, at its next
// poll, the plan give that shard back to it (here the receiver stopped).
// It used to announce a lease ID for the shard from the shard's Lease,
// whose NextLeaseID waits for the hand-off in progress on that Lease: the
// poll loop stalled until the hand-off gave up (up to the lease's validity)
// and, in fake time, forever, since a goroutine waiting on a mutex does not
// let synctest's clock advance (simulation seed 239 hung). A replica now
// announces no ID for a shard it still holds.
func TestSimAcceptWhileHandingOn(t *testing.T) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		synctest.Test(t, func(t *testing.T) {
			w := newSimWorld(t, 2, 1)
			w.setFaults(func(r azleasetest.Request) azleasetest.Fault {
				if r.Op == azleasetest.OpChangeLease {
					return azleasetest.Fault{Action: azleasetest.Hang}
				}
				return azleasetest.Fault{}
			})
			a := w.start("a", shards.Options{}, 0)
			_, ok, why := w.waitBalanced(w.liveIDs(), 10*time.Second, 100*time.Millisecond)
			require.True(t, ok, why)
			b := w.start("b", shards.Options{}, 0)
			time.Sleep(3 * time.Second) // a sees b and hands it a shard: the Change Lease hangs
			w.stopNow(b)
			time.Sleep(10 * time.Second) // a polls while its hand-off is retried
			w.setFaults(nil)
			_, ok, why = w.waitBalanced(w.liveIDs(), time.Minute, 100*time.Millisecond)
			require.True(t, ok, why)
			w.stopNow(a)
			w.requireSafe()
		})
	}()
	select {
	case <-done:
	case <-time.After(time.Minute): // real time: the bubble's clock stopped
		panic("TestSimAcceptWhileHandingOn hung: a replica's poll waits on a Lease whose hand-off is under way")
	}
}

// TestSimStaleHandOffMarker: a move's hand-off marker write gets no
// answer, its retries fail until the write gives up, and the owner takes
// the move for failed and keeps the shard in the same term; then the first
// attempt is applied late, leaving a marker that names the receiver on a
// shard the owner still works on (forged here through the term's lease
// ID). Every replica then counted the shard as the receiver's, which could
// not take it (the lease never changed hands): the receiver asked for no
// more, the owner's moves found no lease ID to hand to, and the group
// stayed unbalanced for as long as the term lasted, the receiver's take
// refused every poll (simulation seeds 77 and 323). The owner now clears a
// marker of its own term when no hand-off of its is under way.
func TestSimStaleHandOffMarker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, 2, 1)
		a := w.start("a", shards.Options{}, 0)
		b := w.start("b", shards.Options{}, 0)
		_, ok, why := w.waitBalanced(w.liveIDs(), 20*time.Second, 100*time.Millisecond)
		require.True(t, ok, why)
		var shard string
		for s, c := range w.rec.running() {
			if c == a.client {
				shard = s
			}
		}
		term := w.rec.workingTerm(shard)
		require.NotNil(t, term)
		bc := w.obs.NewBlobClient(w.group + "/shards/" + shard)
		props, err := bc.GetProperties(context.Background(), nil)
		require.NoError(t, err)
		md := props.Metadata
		md["shardto"] = to.Ptr("b")
		md["shardepoch"] = to.Ptr(strconv.FormatUint(term.Epoch(), 10))
		_, err = bc.SetMetadata(context.Background(), md, &blob.SetMetadataOptions{
			AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(term.Token().LeaseID)}},
		})
		require.NoError(t, err, "the late marker")
		time.Sleep(100 * time.Millisecond)
		P := longestPoll(shards.DefaultPollInterval)
		d, ok, why := w.waitBalanced(w.liveIDs(), time.Minute, 100*time.Millisecond)
		require.True(t, ok, "a hand-off marker that landed after the move failed: %s", why)
		// The owner clears the marker at its next poll. Until then the
		// receiver counts the shard as its own, and may hand one of its
		// own shards to the owner, which then hands one back: two polls
		// more. Before the fix it stayed unbalanced for the whole term.
		require.LessOrEqual(t, d, 4*P+time.Second, "balanced again after the marker landed")
		t.Logf("balanced %v after the marker landed", d)
		w.stopNow(b)
		w.stopNow(a)
		w.requireSafe()
	})
}

// TestSimLateMembershipAcquire: a replica that announced a lease ID for a
// shard stops before it gets it; then an Acquire of its membership,
// applied late, leases the membership again for a lease duration, as if it
// were live (done by hand here). Its metadata used to still announce the
// ID: the owner handed the shard to it, nobody took it, and the shard stood
// still until its lease expired (simulation seed 868). A leaving replica
// now withdraws its IDs first.
func TestSimLateMembershipAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newSimWorld(t, 2, 1)
		a := w.startAlone("a")
		// a's hand-off markers fail for a while: b announces an ID, and
		// gets nothing yet.
		w.setFaults(func(r azleasetest.Request) azleasetest.Fault {
			if strings.HasPrefix(r.Client, "a#") && r.Op == azleasetest.OpSetMetadata && strings.Contains(r.Blob, "/shards/") {
				return azleasetest.Fault{Action: azleasetest.Fail, Status: 503}
			}
			return azleasetest.Fault{}
		})
		b := w.start("b", shards.Options{}, 0)
		time.Sleep(3 * shards.DefaultPollInterval)
		st, err := azlease.Inspect(context.Background(), w.obs, "g/members/b")
		require.NoError(t, err)
		require.NotEmpty(t, st.Metadata["shardin"], "b announces an ID for a shard")
		w.stopNow(b)
		w.setFaults(nil)
		time.Sleep(30 * time.Second) // whatever was handed to b expires; a takes it back
		_, ok, why := w.waitBalanced(w.liveIDs(), 10*time.Second, 100*time.Millisecond)
		require.True(t, ok, why)
		// The late Acquire of b's membership.
		lc, err := lease.NewBlobClient(w.obs.NewBlobClient("g/members/b"), nil)
		require.NoError(t, err)
		_, err = lc.AcquireLease(context.Background(), 15, nil)
		require.NoError(t, err)
		since := time.Now()
		time.Sleep(20 * time.Second)
		until := time.Now()
		w.stopNow(a)
		terms, restarts := countWindow(w.rec.allRuns(), since, until)
		require.Zero(t, terms+restarts, "terms begun and runs restarted while b's membership was leased again")
		w.requireSafe()
	})
}
