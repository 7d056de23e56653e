// This file tests handOffID: the lease ID of one term's hand-off to one
// successor, and takenBy: whose term followed a hand-off (succession.go).
package azlease

import (
	"fmt"
	"regexp"
	"testing"
)

// TestHandOffIDPerTerm: two terms handing the lease to the same successor
// (the same announced ID) use two lease IDs, neither the announced one, so
// no two terms ever share a lease ID; the successor derives the same one
// from the epoch it reads; every one is a GUID, as Azure requires.
func TestHandOffIDPerTerm(t *testing.T) {
	guid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a, b := newLeaseID(), newLeaseID()
	seen := map[string]string{}
	for _, c := range []struct {
		announced string
		epoch     uint64
	}{{a, 946684800009}, {a, 946684800010}, {b, 946684800009}, {b, 946684800010}, {a, 0}} {
		id := handOffID(c.announced, c.epoch)
		if !guid.MatchString(id) {
			t.Errorf("handOffID(%s, %d) = %q: not a version-4-shaped GUID", c.announced, c.epoch, id)
		}
		if id == a || id == b {
			t.Errorf("handOffID(%s, %d) is an announced ID", c.announced, c.epoch)
		}
		if id != handOffID(c.announced, c.epoch) {
			t.Errorf("handOffID(%s, %d) is not the same on the successor's side", c.announced, c.epoch)
		}
		key := fmt.Sprintf("%s/%d", c.announced, c.epoch)
		if prev, ok := seen[id]; ok {
			t.Errorf("handOffID(%s, %d) = handOffID of %s", c.announced, c.epoch, prev)
		}
		seen[id] = key
	}
}

// TestTakenBy: the term that followed a hand-off (of epoch 10) is the first
// recorded after it, not the latest: a successor that handed the lease on
// already took it; a newer term of another holder (after a break) is not
// the successor's; an unknown successor counts every newer term; without
// that term recorded, the latest holder decides.
func TestTakenBy(t *testing.T) {
	hist := func(hs ...HistoryEntry) Status {
		return Status{Epoch: hs[0].Epoch, Holder: hs[0].Holder, History: hs}
	}
	for _, c := range []struct {
		name   string
		st     Status
		holder string
		want   bool
	}{
		{"the successor's term", hist(HistoryEntry{Holder: "b", Epoch: 11}, HistoryEntry{Holder: "a", Epoch: 10}), "b", true},
		{"another holder's, after a break", hist(HistoryEntry{Holder: "x", Epoch: 11}, HistoryEntry{Holder: "a", Epoch: 10}), "b", false},
		{"the successor handed it on already", hist(HistoryEntry{Holder: "c", Epoch: 12}, HistoryEntry{Holder: "b", Epoch: 11}, HistoryEntry{Holder: "a", Epoch: 10}), "b", true},
		{"another took it, then the successor", hist(HistoryEntry{Holder: "b", Epoch: 12}, HistoryEntry{Holder: "x", Epoch: 11}, HistoryEntry{Holder: "a", Epoch: 10}), "b", false},
		{"successor unknown", hist(HistoryEntry{Holder: "x", Epoch: 11}, HistoryEntry{Holder: "a", Epoch: 10}), "", true},
		{"no history: the latest holder", Status{Epoch: 11, Holder: "b"}, "b", true},
		{"no history, another holder", Status{Epoch: 11, Holder: "x"}, "b", false},
	} {
		if got := takenBy(c.st, 10, c.holder); got != c.want {
			t.Errorf("%s: takenBy = %v, want %v", c.name, got, c.want)
		}
	}
}
