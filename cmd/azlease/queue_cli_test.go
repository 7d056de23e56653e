//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockServesInOrder: 'azlease lock' processes that ask one after
// another while the lock is held run their commands in that order;
// meanwhile 'azlease status' shows them queued in that order (text and
// JSON), the first in line marked, and 'azlease watch --json' prints a line
// as each joins and as each is served. An --unordered lock waits too, and
// runs once the others are done.
//
// A waiter whose process does not look within its promise after its turn
// comes (here, about 250 ms after the hand-off: its schedule and a margin
// of 50 ms or four round trips) is passed over by the one behind it, by
// design, as a paused one is (TestLockPassesOverPausedWaiter); a
// race-built process on 2 cores shared with the race-built simulations can
// be starved that long. The one that took over says so: an order changed
// that way is checked to be only that, and the scenario runs again in a
// fresh container, three times at most; the order is required in full of
// the run where nobody was passed over.
func TestLockServesInOrder(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		for attempt := 1; !servesInOrder(t, w, attempt); attempt++ {
			require.Less(t, attempt, 3, "a waiter was passed over %d times", attempt)
			w = newWorld(t, w.conn)
		}
	})
}

// servesInOrder is TestLockServesInOrder's scenario; false when a waiter
// was passed over (checked, and the scenario stopped there).
func servesInOrder(t *testing.T, w *world, attempt int) bool {
	log := w.path("log")
	run := func(id string, extra ...string) *proc {
		script := fmt.Sprintf(`echo "%s" >> %s; sleep 0.3`, id, log)
		args := append([]string{"lock", "--log-level", "info", fast, "--identity", id}, extra...)
		return w.az(append(args, "q", "--", "sh", "-c", script)...)
	}
	watch := w.az("watch", "--json", "--poll-interval", "200ms", "q")
	holder := w.az("lock", "--identity", "holder", "q", "--", "sh", "-c", fmt.Sprintf(`echo holder >> %s; sleep 600`, log))
	waitLine(t, log, "holder", 30*time.Second)
	ids := []string{"w1", "w2", "w3"}
	var ps []*proc
	for i, id := range ids {
		ps = append(ps, run(id))
		// The next asks once this one is in the queue.
		deadline := time.Now().Add(30 * time.Second)
		for len(queued(t, w)) < i+1 {
			require.True(t, time.Now().Before(deadline), "%s not queued within 30 s", id)
			time.Sleep(100 * time.Millisecond)
		}
	}
	q := queued(t, w)
	require.Len(t, q, 3)
	for i, wj := range q {
		assert.Equal(t, ids[i], wj.Identity)
		assert.Equal(t, i+1, wj.Position)
		assert.Equal(t, i == 0, wj.FirstInLine)
		assert.False(t, wj.Missed)
		require.NotNil(t, wj.Since)
		assert.WithinDuration(t, time.Now(), *wj.Since, time.Minute)
	}
	text := w.run(30*time.Second, "status", "q")
	require.Equal(t, 0, text.status(), text.stderr())
	assert.Regexp(t, `(?m)^queue\s+3 waiting$`, text.stdout())
	assert.Regexp(t, `(?m)^\s+1  w1  since \S+ \(\S+ ago, by its clock\)  first in line$`, text.stdout())
	assert.Regexp(t, `(?m)^\s+3  w3  since `, text.stdout())

	unordered := run("u", "--unordered")
	time.Sleep(time.Second)
	holder.signal(syscall.SIGTERM) // sleep ends; the hand-off goes to w1
	for _, p := range ps {
		p.expect(0, 60*time.Second)
	}
	unordered.expect(0, 60*time.Second)
	holder.wait(30 * time.Second)
	ls := lines(t, log)
	require.Len(t, ls, 5, "%v", ls)
	if !slices.Equal(ls[:4], []string{"holder", "w1", "w2", "w3"}) {
		var took []string
		for i, p := range ps {
			if strings.Contains(p.stderr(), "took over a hand-off to the first in line") {
				took = append(took, ids[i])
			}
		}
		t.Logf("attempt %d: served %v; took over a hand-off to a waiter that did not come: %v", attempt, ls[:4], took)
		require.ElementsMatch(t, []string{"holder", "w1", "w2", "w3"}, ls[:4], "each served once")
		for i := range ls[:4] {
			for _, later := range ls[i+1 : 4] {
				if later < ls[i] { // the names sort as they asked: served before one that asked earlier, only by a take-over
					assert.Contains(t, took, ls[i], "served %v: %s before %s, and %s took over no hand-off", ls[:4], ls[i], later, ls[i])
				}
			}
		}
		watch.signal(syscall.SIGINT)
		watch.expect(0, 10*time.Second)
		return false
	}
	assert.Empty(t, queued(t, w), "every waiter left the queue")

	// watch: each joined, in order, and each was served. (A watch whose
	// first poll comes after a waiter joined, on a loaded machine,
	// shows it "waiting" rather than "joined".)
	waitLine(t, watch.outPath, `"queue":"served","waiter":"w3"`, 10*time.Second)
	watch.signal(syscall.SIGINT)
	watch.expect(0, 10*time.Second)
	var joined, served []string
	for _, l := range lines(t, watch.outPath) {
		var e queueEvent
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		switch e.Queue {
		case queueJoined, queueWaiting:
			joined = append(joined, e.Waiter)
		case queueServed:
			served = append(served, e.Waiter)
		}
	}
	require.GreaterOrEqual(t, len(joined), 3, "watch lines:\n%s", watch.stdout())
	assert.Equal(t, ids, joined[:3])
	assert.Subset(t, served, ids, "watch lines:\n%s", watch.stdout())
	return true
}

// TestLockPassesOverPausedWaiter: a waiter paused (SIGSTOP) when its turn
// comes is passed over by the one behind it once it would surely have
// looked, as for a waiter starved of CPU past that: the one behind takes
// the lock and says so (at --log-level info), and the paused one keeps its
// place and is served right after.
func TestLockPassesOverPausedWaiter(t *testing.T) {
	t.Parallel()
	w := newWorld(t, emulatorConn(t))
	log := w.path("log")
	run := func(id string) *proc {
		script := fmt.Sprintf(`echo "%s" >> %s; sleep 0.3`, id, log)
		return w.az("lock", "--log-level", "info", fast, "--identity", id, "q", "--", "sh", "-c", script)
	}
	holder := w.az("lock", "--identity", "holder", "q", "--", "sh", "-c", fmt.Sprintf(`echo holder >> %s; sleep 600`, log))
	waitLine(t, log, "holder", 30*time.Second)
	var ps []*proc
	for i, id := range []string{"w1", "w2", "w3"} {
		ps = append(ps, run(id))
		deadline := time.Now().Add(30 * time.Second)
		for len(queued(t, w)) < i+1 {
			require.True(t, time.Now().Before(deadline), "%s not queued within 30 s", id)
			time.Sleep(100 * time.Millisecond)
		}
	}
	holder.signal(syscall.SIGTERM)
	waitLine(t, log, "w1", 30*time.Second) // w1 holds for 0.3 s; then its turn is w2's
	ps[1].signal(syscall.SIGSTOP)
	waitLine(t, log, "w3", 30*time.Second)
	ps[1].signal(syscall.SIGCONT)
	for _, p := range ps {
		p.expect(0, 60*time.Second)
	}
	holder.wait(30 * time.Second)
	assert.Equal(t, []string{"holder", "w1", "w3", "w2"}, lines(t, log))
	assert.Contains(t, ps[2].stderr(), "took over a hand-off to the first in line", ps[2].stderr())
	for _, p := range []*proc{ps[0], ps[1]} {
		assert.NotContains(t, p.stderr(), "took over a hand-off", p.stderr())
	}
}

// queued is 'azlease status --json q's queue.
func queued(t *testing.T, w *world) []waiterJSON {
	t.Helper()
	p := w.run(30*time.Second, "status", "--json", "q")
	require.Equal(t, 0, p.status(), p.stderr())
	var s statusJSON
	require.NoError(t, json.Unmarshal([]byte(p.stdout()), &s), p.stdout())
	assert.NotContains(t, p.stdout(), "waiterid", "never a lease ID")
	return s.Queue
}

// TestLockOrderFlags: --unordered and --head-poll are checked before
// anything runs, naming the flags.
func TestLockOrderFlags(t *testing.T) {
	t.Parallel()
	w := &world{t: t, conn: "", container: "usage", dir: t.TempDir()}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"lock", "--unordered", "--head-poll", "1s", "x", "--", "true"}, "give --head-poll or --unordered, not both"},
		{[]string{"lock", "--head-poll", "10ms", "x", "--", "true"}, "invalid --head-poll 10ms: from 20ms to --poll-interval (1s)"},
		{[]string{"lock", "--head-poll", "2s", "x", "--", "true"}, "invalid --head-poll 2s: from 20ms to --poll-interval (1s)"},
		{[]string{"lock", "--head-poll", "2s", "--poll-interval", "1500ms", "x", "--", "true"}, "invalid --head-poll 2s: from 20ms to --poll-interval (1.5s)"},
	} {
		t.Run(strings.Join(tc.args[1:len(tc.args)-3], " "), func(t *testing.T) {
			w.t = t
			p := w.run(30*time.Second, tc.args...)
			assert.Equal(t, exitUsage, p.status(), p.stderr())
			assert.Contains(t, oneLine(t, p), tc.says)
		})
	}
	// Back to the test's own t: a finished subtest's TempDir is never
	// cleaned up, and its t must not be failed.
	w.t = t
	// Accepted: the defaults, a head poll within --poll-interval, and
	// --unordered alone (they then fail for want of connection settings).
	for _, args := range [][]string{
		{"lock", "--head-poll", "1s", "x", "--", "true"},
		{"lock", "--poll-interval", "100ms", "x", "--", "true"}, // the head poll follows it down
		{"lock", "--unordered", "-n", "2", "x", "--", "true"},
	} {
		p := w.run(30*time.Second, args...)
		assert.Equal(t, exitUsage, p.status(), p.stderr())
		assert.Contains(t, oneLine(t, p), "AZURE_STORAGE_CONNECTION_STRING", "%v", args)
	}
}
