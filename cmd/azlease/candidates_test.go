package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestCandidateTracker: watch --candidates prints a line when a candidate
// joins, changes (readiness, designation, priority) or leaves, and one per
// new or newly answered yield request; nothing when nothing changed. No line
// carries a lease ID.
func TestCandidateTracker(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	ct := candidateTracker{name: "sched"}
	st := azlease.Status{Leased: true, Epoch: 7}
	a := azlease.Candidate{Identity: "a", Priority: 1, Ready: true, Labels: map[string]string{"zone": "z1"}}
	b := azlease.Candidate{Identity: "b", Ready: true}
	states := func(evs []watchEvent) (out []string) {
		for _, e := range evs {
			out = append(out, e.String()[len("2026-11-24T10:00:00.000Z sched "):])
		}
		return out
	}
	evs := ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), nil)
	assert.Equal(t, []string{
		"candidate-joined a  priority 1  ready  zone=z1",
		"candidate-joined b  priority 0  ready",
	}, states(evs))
	assert.Empty(t, ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), nil), "nothing changed")

	st.Designated = []string{"b"}
	b.Acknowledged = 7
	y := &azlease.YieldRequest{Epoch: 7, To: "b", By: "ops"}
	evs = ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), yieldOf(y))
	assert.Equal(t, []string{
		"candidate-changed b  priority 0  ready  designated successor (ready to take over)",
		"yield epoch 7 to b by ops: not answered yet",
	}, states(evs))
	y.Answer = "handing over to b"
	evs = ct.observe(now, candidatesJSON([]azlease.Candidate{b}, st), yieldOf(y))
	assert.Equal(t, []string{
		"candidate-left a",
		"yield epoch 7 to b by ops: handing over to b",
	}, states(evs))
	require.NotNil(t, evs[0].Candidate)
}
