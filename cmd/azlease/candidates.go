package main

// The candidates of an election and its yield request, as status, watch,
// /leader and the ui show them (never an announced lease ID).

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// candidateJSON is one candidate of an election. Ready is false for a
// candidate that is gone (its instance stopped writing its candidacy,
// whatever the candidacy says): no leader hands over to it.
type candidateJSON struct {
	Identity     string            `json:"identity"`
	Priority     int               `json:"priority"`
	Labels       map[string]string `json:"labels,omitempty"`
	Ready        bool              `json:"ready"`
	Gone         bool              `json:"gone,omitempty"` // its instance stopped writing its candidacy (crashed, hangs, cut off)
	Stopping     bool              `json:"stopping,omitempty"`
	Yielded      bool              `json:"yielded,omitempty"`
	Since        *time.Time        `json:"since,omitempty"`
	Refreshed    *time.Time        `json:"refreshed,omitempty"`    // when it last wrote its candidacy (storage's clock)
	Standby      bool              `json:"standby,omitempty"`      // the leader keeps it ready to take over
	Designated   bool              `json:"designated,omitempty"`   // the leader is handing over to it
	Acknowledged bool              `json:"acknowledged,omitempty"` // and it acknowledged: it polls fast
}

// yieldJSON is an election's latest yield request. Stale: the term it asks
// to yield is over (answered or not, it no longer applies).
type yieldJSON struct {
	Epoch  uint64     `json:"epoch"`
	To     string     `json:"to,omitempty"`
	By     string     `json:"by,omitempty"`
	At     *time.Time `json:"at,omitempty"`
	Answer string     `json:"answer,omitempty"`
	Stale  bool       `json:"stale,omitempty"`
}

// successorOf is the one candidate the lock blob st shows the leader
// handing over to: the one the hand-off marker names, else the first
// designated one that acknowledged, else the first designated; "" when
// nobody leads or no hand-off is under way. A designation names up to two
// candidates (the second in case the first does not take over), but one
// takes over: showing two as "designated successor" misled.
func successorOf(cs []azlease.Candidate, st azlease.Status) string {
	if !st.Leased || len(st.Designated) == 0 {
		return ""
	}
	if st.Next != "" {
		return st.Next
	}
	for _, d := range st.Designated {
		for _, c := range cs {
			if c.Identity == d && c.Acknowledged == st.Epoch && !c.Gone {
				return d
			}
		}
	}
	return st.Designated[0]
}

// candidatesJSON turns candidates into their JSON, marking the one the
// lock blob st shows the leader handing over to (successorOf), and the
// leader's standby.
func candidatesJSON(cs []azlease.Candidate, st azlease.Status) []candidateJSON {
	succ := successorOf(cs, st)
	out := make([]candidateJSON, 0, len(cs))
	for _, c := range cs {
		designated := succ != "" && c.Identity == succ
		out = append(out, candidateJSON{
			Identity: c.Identity, Priority: c.Priority, Labels: c.Labels, Ready: c.Ready && !c.Gone, Gone: c.Gone,
			Stopping: c.Stopping, Yielded: c.Yielded, Since: timePtr(c.Since), Refreshed: timePtr(c.Refreshed),
			Standby:    succ == "" && st.Leased && st.Standby == c.Identity && !c.Gone,
			Designated: designated, Acknowledged: designated && c.Acknowledged == st.Epoch,
		})
	}
	return out
}

// yieldOf is y's JSON, stale when the lock blob st shows a later term.
func yieldOf(y *azlease.YieldRequest, st azlease.Status) *yieldJSON {
	if y == nil {
		return nil
	}
	return &yieldJSON{Epoch: y.Epoch, To: y.To, By: y.By, At: timePtr(y.At), Answer: y.Answer, Stale: y.Epoch != st.Epoch || !st.Leased}
}

// readCandidates reads the election's candidates and yield request (one
// List Blobs request) into out.
func readCandidates(ctx context.Context, cc *container.Client, name string, st azlease.Status, out *statusJSON) error {
	cs, y, err := azlease.InspectCandidates(ctx, cc, name)
	if err != nil {
		return err
	}
	out.Candidates = candidatesJSON(cs, st)
	out.Yield = yieldOf(y, st)
	if succ := successorOf(cs, st); succ != "" {
		out.Designated = []string{succ}
	}
	return nil
}

// printCandidates prints an election's candidates, and its yield request
// while the term it asks to yield lasts (JSON shows an older one, marked
// stale).
func printCandidates(tw io.Writer, s statusJSON) {
	if len(s.Designated) > 0 {
		fmt.Fprintf(tw, "handing over to\t%s\n", s.Designated[0])
	}
	for i, c := range s.Candidates {
		label := ""
		if i == 0 {
			label = "candidates"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, candidateLine(c))
	}
	if y := s.Yield; y != nil && !y.Stale {
		fmt.Fprintf(tw, "yield request\t%s\n", yieldLine(*y))
	}
}

// candidateLine is one candidate as text: "web-2 priority 1 ready zone=a
// since 2026-…".
func candidateLine(c candidateJSON) string {
	var b strings.Builder
	b.WriteString(quoteIfNeeded(c.Identity) + "  priority " + strconv.Itoa(c.Priority))
	switch {
	case c.Gone && c.Refreshed != nil:
		b.WriteString("  gone (last seen " + c.Refreshed.Format(time.RFC3339) + ")")
	case c.Gone:
		b.WriteString("  gone")
	case c.Stopping:
		b.WriteString("  stopping")
	case c.Ready:
		b.WriteString("  ready")
	default:
		b.WriteString("  not ready")
	}
	if c.Yielded && !c.Gone {
		b.WriteString("  yielded recently")
	}
	switch {
	case c.Acknowledged:
		b.WriteString("  designated successor (ready to take over)")
	case c.Designated:
		b.WriteString("  designated successor")
	case c.Standby:
		b.WriteString("  standby")
	}
	if len(c.Labels) > 0 {
		keys := make([]string, 0, len(c.Labels))
		for k := range c.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			b.WriteString("  " + k + "=" + quoteIfNeeded(c.Labels[k]))
		}
	}
	if c.Since != nil {
		b.WriteString("  since " + c.Since.Format(time.RFC3339))
	}
	return b.String()
}

func yieldLine(y yieldJSON) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d", y.Epoch)
	if y.To != "" {
		b.WriteString(" to " + y.To)
	}
	if y.By != "" {
		b.WriteString(" by " + y.By)
	}
	if y.At != nil {
		b.WriteString(" at " + y.At.Format(time.RFC3339))
	}
	switch {
	case y.Answer != "":
		b.WriteString(": " + y.Answer)
	case y.Stale:
		b.WriteString(": not answered; that term is over")
	default:
		b.WriteString(": not answered yet")
	}
	return b.String()
}

// The states of watch's candidate lines.
const (
	watchCandidateJoined  = "candidate-joined"
	watchCandidateChanged = "candidate-changed"
	watchCandidateLeft    = "candidate-left"
	watchYield            = "yield"
)

// candidateTracker follows an election's candidates and yield request from
// poll to poll for watch --candidates.
type candidateTracker struct {
	name   string
	last   map[string]candidateJSON // by identity; nil before the first poll
	yield  *yieldJSON
	polled bool
}

// observe returns the lines to print for the candidates and yield request
// a poll at now found: candidates that joined, changed (priority, ready,
// stopping, designated, labels) or left, and a new or newly answered yield
// request.
func (ct *candidateTracker) observe(now time.Time, cs []candidateJSON, y *yieldJSON) []watchEvent {
	at := now.UTC().Round(0)
	cur := make(map[string]candidateJSON, len(cs))
	for _, c := range cs {
		cur[c.Identity] = c
	}
	var out []watchEvent
	for _, c := range cs {
		prev, seen := ct.last[c.Identity]
		switch {
		case !seen:
			out = append(out, watchEvent{Time: at, Name: ct.name, State: watchCandidateJoined, Candidate: &c})
		case candidateLine(prev) != candidateLine(c):
			out = append(out, watchEvent{Time: at, Name: ct.name, State: watchCandidateChanged, Candidate: &c})
		}
	}
	gone := make([]string, 0)
	for id := range ct.last {
		if _, ok := cur[id]; !ok {
			gone = append(gone, id)
		}
	}
	sort.Strings(gone)
	for _, id := range gone {
		c := ct.last[id]
		out = append(out, watchEvent{Time: at, Name: ct.name, State: watchCandidateLeft, Candidate: &c})
	}
	ct.last = cur
	// A yield line once per request and answer (not per poll: the old
	// comparison of pointers made every poll a change); a request that is
	// stale when first seen is history, not an event.
	first := !ct.polled
	ct.polled = true
	if y != nil && (ct.yield == nil || !sameYield(*ct.yield, *y)) && !(first && y.Stale) {
		yy := *y
		out = append(out, watchEvent{Time: at, Name: ct.name, State: watchYield, Yield: &yy})
	}
	if y != nil || first {
		ct.yield = y
	}
	return out
}

// sameYield reports whether a and b are the same request with the same
// answer (staleness aside).
func sameYield(a, b yieldJSON) bool {
	return a.Epoch == b.Epoch && a.To == b.To && a.By == b.By && a.Answer == b.Answer &&
		(a.At == nil) == (b.At == nil) && (a.At == nil || a.At.Equal(*b.At))
}

// readCandidateEvents lists the election's candidates (one List Blobs
// request) and returns watch's lines for what changed.
func (ct *candidateTracker) read(ctx context.Context, cc *container.Client, st azlease.Status, now time.Time) ([]watchEvent, error) {
	cs, y, err := azlease.InspectCandidates(ctx, cc, ct.name)
	if err != nil {
		return nil, err
	}
	return ct.observe(now, candidatesJSON(cs, st), yieldOf(y, st)), nil
}

// candidateEventText is the text of a candidate or yield line after its
// time, name and state.
func candidateEventText(e watchEvent) string {
	switch {
	case e.Candidate != nil && e.State == watchCandidateLeft:
		return " " + quoteIfNeeded(e.Candidate.Identity)
	case e.Candidate != nil:
		return " " + candidateLine(*e.Candidate)
	case e.Yield != nil:
		return " " + yieldLine(*e.Yield)
	}
	return ""
}

// candidatesCache is /leader's last listing of the candidates.
type candidatesCache struct {
	mu    sync.Mutex
	at    time.Time
	cands []candidateJSON
	yield *yieldJSON
}

// candidates lists the election's candidates for /leader, at most once a
// second however often it is asked (one List Blobs request, and one read of
// the lock blob for who is designated).
func (hs *healthServer) candidates(ctx context.Context) ([]candidateJSON, *yieldJSON) {
	c := &hs.cands
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < leaderCacheFor && c.cands != nil {
		return c.cands, c.yield
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	cs, y, err := azlease.InspectCandidates(ctx, hs.cc, hs.name)
	if err != nil {
		return []candidateJSON{}, nil
	}
	st, _ := azlease.Inspect(ctx, hs.cc, hs.name)
	c.cands, c.yield, c.at = candidatesJSON(cs, st), yieldOf(y, st), time.Now()
	return c.cands, c.yield
}
