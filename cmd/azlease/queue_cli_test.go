//go:build linux

package main

import (
	"encoding/json"
	"fmt"
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
func TestLockServesInOrder(t *testing.T) {
	onBoth(t, func(t *testing.T, w *world) {
		log := w.path("log")
		run := func(id string, extra ...string) *proc {
			script := fmt.Sprintf(`echo "%s" >> %s; sleep 0.3`, id, log)
			args := append([]string{"lock", fast, "--identity", id}, extra...)
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
		assert.Equal(t, []string{"holder", "w1", "w2", "w3"}, ls[:4], "served in the order they asked")
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
	})
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
