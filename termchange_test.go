package azlease_test

// How each term began and ended (termchange.go), as Status and its History
// say, for every way a term can give way to the next: a free lease, a
// release, an expiry, a break, an Elector's planned stop, a yield, a
// priority move, a fair lock's queue, and an acquisition that did not look.

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// entry returns the history entry of epoch.
func entry(t *testing.T, st azlease.Status, epoch uint64) azlease.HistoryEntry {
	t.Helper()
	for _, h := range st.History {
		if h.Epoch == epoch {
			return h
		}
	}
	t.Fatalf("no history entry for epoch %d in %+v", epoch, st.History)
	return azlease.HistoryEntry{}
}

// inspect reads the election's lock blob.
func (c *cluster) inspect() azlease.Status {
	c.t.Helper()
	st, err := azlease.Inspect(context.Background(), c.emu.client("look"), c.blob)
	require.NoError(c.t, err)
	return st
}

// waitHolder waits until the lock blob records a term of holder after
// epoch, and returns its status.
func (c *cluster) waitHolder(holder string, after uint64, limit time.Duration) azlease.Status {
	c.t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st := c.inspect(); st.Holder == holder && st.Epoch > after && st.Leased {
			return st
		}
	}
	c.t.Fatalf("%s did not lead after epoch %d within %v", holder, after, limit)
	return azlease.Status{}
}

// waitTerm waits until the lock blob records a held term after epoch.
func (c *cluster) waitTerm(after uint64, limit time.Duration) azlease.Status {
	c.t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if st := c.inspect(); st.Epoch > after && st.Leased {
			return st
		}
	}
	c.t.Fatalf("no term after epoch %d within %v", after, limit)
	return azlease.Status{}
}

// within asserts that got is want to the millisecond the record keeps.
func within(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	assert.WithinDuration(t, want, got, time.Millisecond, what)
}

// TestTermChangesOfAnElection: the first term began free; a planned stop,
// a yield and a priority move each hand the lease over, and the terms say
// so, with the instant the former leader stopped its work and a leaderless
// time of a fraction of a second; a crash ends in an expiry that the next
// leader records honestly (at or before when it found the lease expired,
// after it last saw it held, with the lease duration that bounds the last
// renewal), and the emulator's grant confirms the bounds; a break is
// recorded as a break.
func TestTermChangesOfAnElection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSuccessionCluster(t, azlease.ElectorOptions{StabilityWindow: 5 * time.Second, Cooldown: 10 * time.Second})
		a := c.start("a", nil)
		c.waitLeader(time.Minute)
		st := c.inspect()
		require.Equal(t, "a", st.Holder)
		assert.Equal(t, azlease.ChangeFree, st.Began)
		assert.Equal(t, azlease.ChangeUnknown, st.EndedBy, "held now")
		assert.Equal(t, azlease.DefaultDuration, entry(t, st, st.Epoch).LeaseDuration)
		first := st.Epoch

		// A planned stop, with a ready standby.
		b := c.start("b", nil)
		time.Sleep(20 * time.Second)
		stopped := time.Now()
		require.NoError(t, a.Stop(context.Background()))
		st = c.waitHolder("b", first, time.Minute)
		assert.Equal(t, azlease.ChangeStop, st.Began)
		ha := entry(t, st, first)
		assert.Equal(t, azlease.ChangeFree, ha.Began)
		assert.Equal(t, azlease.ChangeStop, ha.EndedBy)
		assert.True(t, !ha.Ended.Before(stopped.Add(-time.Millisecond)) && !ha.Ended.After(st.Acquired), "a stopped its work at %v, between the Stop call (%v) and b's term (%v)", ha.Ended, stopped, st.Acquired)
		assert.Less(t, st.Acquired.Sub(ha.Ended), 500*time.Millisecond, "leaderless time of a planned stop")
		assert.True(t, ha.SeenHeld.IsZero(), "a planned end needs no observation")
		second := st.Epoch

		// A yield.
		c.start("a", nil)
		time.Sleep(20 * time.Second)
		_, err := b.Yield(context.Background())
		require.NoError(t, err)
		st = c.waitHolder("a", second, time.Minute)
		assert.Equal(t, azlease.ChangeYield, st.Began)
		assert.Equal(t, azlease.ChangeYield, entry(t, st, second).EndedBy)
		third := st.Epoch

		// A candidate of higher priority.
		c.start("p", c.withPriority(1))
		st = c.waitHolder("p", third, 2*time.Minute)
		assert.Equal(t, azlease.ChangePriority, st.Began)
		assert.Equal(t, azlease.ChangePriority, entry(t, st, third).EndedBy)
		fourth := st.Epoch

		// A crash: p's requests hang from now on; a standby takes over
		// once the lease has expired.
		crashed := time.Now()
		c.partition("p", azleasetest.Hang)
		st = c.waitTerm(fourth, time.Minute) // a or b
		assert.Equal(t, azlease.ChangeExpired, st.Began)
		hp := entry(t, st, fourth)
		assert.Equal(t, azlease.ChangeExpired, hp.EndedBy)
		assert.Equal(t, azlease.DefaultDuration, hp.LeaseDuration)
		grants := c.emu.Grants(testContainer, c.blob)
		var expiry time.Time
		for _, g := range grants {
			if g.Holder == "p" && !g.End.After(st.Acquired) {
				expiry = g.End
			}
		}
		require.False(t, expiry.IsZero(), "p's grant: %+v", grants)
		assert.False(t, hp.Ended.Before(expiry.Add(-time.Millisecond)), "the lease expired (%v) at or before the recorded end (%v)", expiry, hp.Ended)
		assert.False(t, hp.Ended.After(st.Acquired), "the end is no later than the next term")
		require.False(t, hp.SeenHeld.IsZero(), "the standby polled and saw the lease held")
		assert.True(t, hp.SeenHeld.Before(expiry), "the lease was still held when last seen held (%v < %v)", hp.SeenHeld, expiry)
		lastRenewal := expiry.Add(-hp.LeaseDuration)
		assert.False(t, lastRenewal.After(hp.Ended.Add(-hp.LeaseDuration)), "last renewed at or before Ended − LeaseDuration")
		assert.True(t, lastRenewal.After(hp.SeenHeld.Add(-hp.LeaseDuration)), "and after SeenHeld − LeaseDuration")
		assert.False(t, lastRenewal.After(crashed), "p could not renew after its crash")
		t.Logf("crash at %v; lease expired at %v; recorded: ended at or before %v, seen held at %v; next term at %v",
			crashed.Format(time.TimeOnly), expiry.Format(time.TimeOnly), hp.Ended.Format(time.TimeOnly), hp.SeenHeld.Format(time.TimeOnly), st.Acquired.Format(time.TimeOnly))
		fifth := st.Epoch

		// A break.
		operator := newLease(t, c.emu.client("operator"), c.blob, nil)
		_, err = operator.Break(context.Background(), 0)
		require.NoError(t, err)
		st = c.waitTerm(fifth, time.Minute) // either standby (the broken leader contends again)
		assert.Equal(t, azlease.ChangeBroken, st.Began)
		hb := entry(t, st, fifth)
		assert.Equal(t, azlease.ChangeBroken, hb.EndedBy)
		assert.False(t, hb.Ended.After(st.Acquired))
		// (No checkSafety: a break with no period ends a lease its holder
		// believes until its next request, by design.)
		c.stopAll()
	})
}

// TestTermChangeRelease: a leader with no standby ready (succession off)
// releases; the next takes the free lease at its poll. The release is
// recorded with the instant the leader stopped its work, and the
// leaderless time until the next term shows (about a poll). While nobody
// holds the lease, Status says the latest term was released.
func TestTermChangeRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newSuccessionCluster(t, azlease.ElectorOptions{NoSuccession: true})
		a := c.start("a", nil)
		c.waitLeader(time.Minute)
		first := c.inspect().Epoch
		stopped := time.Now()
		require.NoError(t, a.Stop(context.Background()))
		st := c.inspect()
		if !st.Leased {
			assert.Equal(t, azlease.ChangeReleased, st.EndedBy, "released, nobody holds it yet")
			assert.False(t, st.Ended.IsZero())
		}
		time.Sleep(time.Second)
		c.start("b", nil)
		st = c.waitHolder("b", first, time.Minute)
		assert.Equal(t, azlease.ChangeReleased, st.Began)
		h := entry(t, st, first)
		assert.Equal(t, azlease.ChangeReleased, h.EndedBy)
		assert.True(t, !h.Ended.Before(stopped.Add(-time.Millisecond)) && h.Ended.Before(stopped.Add(time.Second)), "released at %v, stopped at %v", h.Ended, stopped)
		assert.GreaterOrEqual(t, st.Acquired.Sub(h.Ended), time.Second, "leaderless until b started")
		c.stopAll()
	})
}

// TestTermChangeCurrentEnd: while a lease is expired or broken and nobody
// took it yet, Status and the latest history entry say so; an acquisition
// that did not look (a bare Lease) records the end as unobserved, at or
// before its own start.
func TestTermChangeCurrentEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		a := newLease(t, e.client("a"), "lock", &azlease.LeaseOptions{Identity: "a"})
		b := newLease(t, e.client("b"), "lock", &azlease.LeaseOptions{Identity: "b"})
		look := func() azlease.Status {
			st, err := azlease.Inspect(ctx, e.client("look"), "lock")
			require.NoError(t, err)
			return st
		}
		tokA, err := a.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, azlease.ChangeFree, look().Began)
		time.Sleep(azlease.DefaultDuration + time.Second) // never renewed
		st := look()
		assert.Equal(t, azlease.ChangeExpired, st.EndedBy)
		assert.True(t, st.Ended.IsZero(), "when is not known")
		assert.Equal(t, azlease.ChangeExpired, entry(t, st, tokA.Epoch).EndedBy)

		tokB, err := b.Acquire(ctx)
		require.NoError(t, err)
		st = look()
		assert.Equal(t, azlease.ChangeUnobserved, st.Began)
		h := entry(t, st, tokA.Epoch)
		assert.Equal(t, azlease.ChangeUnobserved, h.EndedBy)
		within(t, st.Acquired, h.Ended, "at or before the next term's start: all the acquirer knows")

		_, err = newLease(t, e.client("operator"), "lock", nil).Break(ctx, 0)
		require.NoError(t, err)
		st = look()
		assert.Equal(t, azlease.ChangeBroken, st.EndedBy)
		assert.Equal(t, tokB.Epoch, st.Epoch)
		require.ErrorIs(t, b.Renew(ctx), azlease.ErrLeaseLost)
	})
}

// TestTermChangeQueue: a fair Mutex's Unlock hands the lock to the first
// waiter: its term began by the queue, and the holder's ended by it, with
// the instant of the Unlock.
func TestTermChangeQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newEmu(t)
		ctx := context.Background()
		m1, err := azlease.NewMutex(e.client("one"), "jobs", &azlease.MutexOptions{Identity: "one"})
		require.NoError(t, err)
		m2, err := azlease.NewMutex(e.client("two"), "jobs", &azlease.MutexOptions{Identity: "two"})
		require.NoError(t, err)
		l1, err := m1.Lock(ctx)
		require.NoError(t, err)
		got := make(chan *azlease.Lock, 1)
		go func() {
			l2, err := m2.Lock(ctx)
			assert.NoError(t, err)
			got <- l2
		}()
		time.Sleep(10 * time.Second) // two queues up
		unlocked := time.Now()
		require.NoError(t, l1.Unlock(ctx))
		l2 := <-got
		st, err := azlease.Inspect(ctx, e.client("look"), "jobs")
		require.NoError(t, err)
		assert.Equal(t, "two", st.Holder)
		assert.Equal(t, azlease.ChangeQueue, st.Began)
		h := entry(t, st, l1.Epoch())
		assert.Equal(t, azlease.ChangeFree, h.Began)
		assert.Equal(t, azlease.ChangeQueue, h.EndedBy)
		within(t, unlocked, h.Ended, "the Unlock")
		require.NoError(t, l2.Unlock(ctx))
		st, err = azlease.Inspect(ctx, e.client("look"), "jobs")
		require.NoError(t, err)
		assert.Equal(t, azlease.ChangeReleased, st.EndedBy, "nobody waits: released")
	})
}

// TestTermChangeText: the names read back, and an unknown name reads as
// unknown.
func TestTermChangeText(t *testing.T) {
	for c := azlease.ChangeUnknown; c <= azlease.ChangeHandOff; c++ {
		b, err := c.MarshalText()
		require.NoError(t, err)
		var back azlease.TermChange
		require.NoError(t, back.UnmarshalText(b))
		assert.Equal(t, c, back, string(b))
	}
	var x azlease.TermChange
	require.NoError(t, x.UnmarshalText([]byte("teleported")))
	assert.Equal(t, azlease.ChangeUnknown, x)
	assert.Equal(t, "unknown", azlease.TermChange(200).String())
	assert.True(t, azlease.ChangeQueue.Planned() && azlease.ChangeReleased.Planned() && !azlease.ChangeExpired.Planned())
	assert.True(t, azlease.ChangeStop.HandOver() && !azlease.ChangeReleased.HandOver())
}
