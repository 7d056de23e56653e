package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestWatchTracker: which polls of a lock's status print which lines.
func TestWatchTracker(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	term := func(holder string, epoch uint64, s int) azlease.HistoryEntry {
		return azlease.HistoryEntry{Holder: holder, Epoch: epoch, Acquired: at(s)}
	}
	leased := func(h azlease.HistoryEntry, history ...azlease.HistoryEntry) azlease.Status {
		return azlease.Status{Exists: true, Leased: true, State: "leased", Holder: h.Holder, Epoch: h.Epoch, Acquired: h.Acquired,
			History: append([]azlease.HistoryEntry{h}, history...)}
	}
	with := func(st azlease.Status, state string, released bool) azlease.Status {
		st.State, st.Leased, st.Released = state, state == "leased" || state == "breaking", released
		return st
	}
	a5, b6, c7, d8, e9 := term("a", 5, 1), term("b b", 6, 2), term("c", 7, 3), term("d", 8, 4), term("e", 9, 21)

	w := &watchTracker{name: "jobs"}
	var got []string
	poll := func(s int, st azlease.Status) {
		for _, e := range w.observe(at(s), st) {
			got = append(got, e.String())
		}
	}
	poll(10, azlease.Status{})                                            // never used
	poll(11, azlease.Status{})                                            // unchanged
	poll(12, azlease.Status{Exists: true, State: "available"})            // created: the same line
	poll(13, azlease.Status{Exists: true, Leased: true, State: "leased"}) // taken, term not recorded yet
	poll(14, leased(a5))                                                  // recorded
	poll(15, leased(a5))
	poll(16, leased(d8, c7, b6, a5))                         // two terms began and ended between polls
	poll(17, with(leased(d8, c7, b6, a5), "expired", false)) // d stopped renewing
	poll(18, leased(d8, c7, b6, a5))                         // leased at the epoch last seen expired: not printed yet
	poll(19, leased(d8, c7, b6, a5))                         // still: it may be a new holder about to record its term
	poll(21, leased(d8, c7, b6, a5))                         // unchanged for 3 s: d renewed its expired lease
	poll(22, with(leased(d8, c7, b6, a5), "available", true))
	poll(23, with(leased(d8, c7, b6, a5), "leased", true)) // taken again, d's record still says released
	poll(24, leased(e9, d8, c7, b6, a5))                   // recorded
	poll(25, with(leased(e9, d8, c7, b6, a5), "breaking", false))
	poll(26, with(leased(e9, d8, c7, b6, a5), "broken", false))
	want := []string{
		"2026-11-24T10:00:10.000Z jobs free epoch=0",
		"2026-11-24T10:00:14.000Z jobs leased holder=a epoch=5 since=2026-11-24T10:00:01.000Z",
		`2026-11-24T10:00:16.000Z jobs unseen holder="b b" epoch=6 since=2026-11-24T10:00:02.000Z`,
		"2026-11-24T10:00:16.000Z jobs unseen holder=c epoch=7 since=2026-11-24T10:00:03.000Z",
		"2026-11-24T10:00:16.000Z jobs leased holder=d epoch=8 since=2026-11-24T10:00:04.000Z",
		"2026-11-24T10:00:17.000Z jobs expired holder=d epoch=8 since=2026-11-24T10:00:04.000Z",
		"2026-11-24T10:00:21.000Z jobs leased holder=d epoch=8 since=2026-11-24T10:00:04.000Z",
		"2026-11-24T10:00:22.000Z jobs free holder=d epoch=8 since=2026-11-24T10:00:04.000Z",
		"2026-11-24T10:00:24.000Z jobs leased holder=e epoch=9 since=2026-11-24T10:00:21.000Z",
		"2026-11-24T10:00:25.000Z jobs breaking holder=e epoch=9 since=2026-11-24T10:00:21.000Z",
		"2026-11-24T10:00:26.000Z jobs broken holder=e epoch=9 since=2026-11-24T10:00:21.000Z",
	}
	assert.Equal(t, want, got)

	// The JSON form of a line.
	b, err := json.Marshal(w.observe(at(30), leased(term("f", 10, 29)))[0])
	require.NoError(t, err)
	assert.JSONEq(t, `{"time":"2026-11-24T10:00:30Z","name":"jobs","state":"leased","holder":"f","epoch":10,
		"since":"2026-11-24T10:00:29Z","released":false}`, string(b))
}
