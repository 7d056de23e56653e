package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
)

// TestCandidateTracker: watch --candidates prints a line when a candidate
// joins, changes (readiness, designation, priority, gone) or leaves, and one
// per new or newly answered yield request; nothing when nothing changed,
// however many polls read the same request (each poll gives a new
// *azlease.YieldRequest). No line carries a lease ID.
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
	asked := time.Date(2026, 11, 24, 9, 59, 0, 0, time.UTC)
	request := func(answer string) *azlease.YieldRequest {
		return &azlease.YieldRequest{Epoch: 7, To: "b", By: "ops", At: asked, Answer: answer}
	}
	evs = ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), yieldOf(request(""), st))
	assert.Equal(t, []string{
		"candidate-changed b  priority 0  ready  designated successor (ready to take over)",
		"yield epoch 7 to b by ops at 2026-11-24T09:59:00Z: not answered yet",
	}, states(evs))
	for range 5 {
		assert.Empty(t, ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), yieldOf(request(""), st)),
			"the same request, read again: no line")
	}
	evs = ct.observe(now, candidatesJSON([]azlease.Candidate{b}, st), yieldOf(request("handing over to b"), st))
	assert.Equal(t, []string{
		"candidate-left a",
		"yield epoch 7 to b by ops at 2026-11-24T09:59:00Z: handing over to b",
	}, states(evs))
	require.NotNil(t, evs[0].Candidate)
	// b leads now (epoch 8): the answered request is stale, and no line
	// says so again.
	st = azlease.Status{Leased: true, Epoch: 8, Holder: "b"}
	b.Acknowledged = 0
	evs = ct.observe(now, candidatesJSON([]azlease.Candidate{b}, st), yieldOf(request("handing over to b"), st))
	assert.Equal(t, []string{"candidate-changed b  priority 0  ready"}, states(evs))

	// A candidate whose instance stopped writing its candidacy turns gone:
	// one line, and it is not ready.
	seen := time.Date(2026, 11, 24, 9, 58, 0, 0, time.UTC)
	a.Gone, a.Refreshed = true, seen
	evs = ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), nil)
	assert.Equal(t, []string{"candidate-joined a  priority 1  gone (last seen 2026-11-24T09:58:00Z)  zone=z1"}, states(evs))
	assert.False(t, evs[0].Candidate.Ready)
	assert.True(t, evs[0].Candidate.Gone)
	assert.Empty(t, ct.observe(now, candidatesJSON([]azlease.Candidate{a, b}, st), nil))

	// A watch that starts after a yield request's term ended does not
	// report it.
	late := candidateTracker{name: "sched"}
	evs = late.observe(now, candidatesJSON([]azlease.Candidate{b}, st), yieldOf(request("handing over to b"), st))
	assert.Equal(t, []string{"candidate-joined b  priority 0  ready"}, states(evs))
}

// TestStatusShowsOneSuccessor: a designation names up to two candidates
// (the second in case the first does not take over); status shows one of
// them as the designated successor: the one the hand-off names, else the
// first that acknowledged, else the first. None while nobody leads; the
// leader's standby is marked as such when no hand-off is under way.
func TestStatusShowsOneSuccessor(t *testing.T) {
	a := azlease.Candidate{Identity: "a", Ready: true}
	b := azlease.Candidate{Identity: "b", Ready: true}
	c := azlease.Candidate{Identity: "c", Ready: true}
	marks := func(cs []candidateJSON) (out []string) {
		for _, c := range cs {
			switch {
			case c.Acknowledged:
				out = append(out, c.Identity+":acknowledged")
			case c.Designated:
				out = append(out, c.Identity+":designated")
			case c.Standby:
				out = append(out, c.Identity+":standby")
			}
		}
		return out
	}
	st := azlease.Status{Leased: true, Epoch: 4, Standby: "b"}
	assert.Equal(t, []string{"b:standby"}, marks(candidatesJSON([]azlease.Candidate{a, b, c}, st)))

	st = azlease.Status{Leased: true, Epoch: 4, Designated: []string{"b", "c"}}
	assert.Equal(t, []string{"b:designated"}, marks(candidatesJSON([]azlease.Candidate{a, b, c}, st)))
	c.Acknowledged = 4
	assert.Equal(t, []string{"c:acknowledged"}, marks(candidatesJSON([]azlease.Candidate{a, b, c}, st)), "b did not acknowledge, c did")
	st.Next = "b"
	assert.Equal(t, []string{"b:designated"}, marks(candidatesJSON([]azlease.Candidate{a, b, c}, st)), "handed to b")
	st.Leased = false
	assert.Empty(t, marks(candidatesJSON([]azlease.Candidate{a, b, c}, st)), "nobody leads: no hand-off is under way")

	// The text of status: one "handing over to" line; a yield request of
	// a term that is over is left out of the text (the JSON keeps it,
	// marked stale).
	st = azlease.Status{Leased: true, Epoch: 9, Designated: []string{"b", "c"}}
	cs := []azlease.Candidate{a, b, c}
	var out statusJSON
	out.Candidates = candidatesJSON(cs, st)
	out.Designated = []string{successorOf(cs, st)}
	out.Yield = yieldOf(&azlease.YieldRequest{Epoch: 3, By: "ops", Answer: "handing over to a"}, st)
	require.True(t, out.Yield.Stale)
	var buf bytes.Buffer
	printCandidates(&buf, out)
	text := buf.String()
	assert.Equal(t, 1, strings.Count(text, "designated successor"), text)
	assert.Contains(t, text, "handing over to\tb")
	assert.NotContains(t, text, "yield request", text)
	out.Yield = yieldOf(&azlease.YieldRequest{Epoch: 9, By: "ops"}, st)
	buf.Reset()
	printCandidates(&buf, out)
	assert.Contains(t, buf.String(), "yield request\tepoch 9 by ops: not answered yet")
}

// TestUICandidatesShowGone: the ui's data marks a candidate whose instance
// stopped writing its candidacy gone and not ready (the page said "ready"
// for a standby killed 20 minutes earlier), and the leader's standby.
func TestUICandidatesShowGone(t *testing.T) {
	seen := time.Date(2026, 11, 24, 9, 58, 0, 0, time.UTC)
	st := azlease.Status{Leased: true, Epoch: 3, Standby: "live"}
	got := candidatesOf(st, []azlease.Candidate{
		{Identity: "live", Priority: 0, Ready: true},
		{Identity: "dead", Priority: 5, Ready: true, Gone: true, Refreshed: seen},
	})
	require.Len(t, got, 2)
	assert.True(t, got[0].Ready)
	assert.True(t, got[0].Standby)
	assert.False(t, got[0].Gone)
	assert.False(t, got[1].Ready, "a gone candidate is not ready")
	assert.True(t, got[1].Gone)
	assert.False(t, got[1].Standby)
	require.NotNil(t, got[1].Refreshed)
	assert.Equal(t, seen, *got[1].Refreshed)
}
