// terms.go: how each term of a lock blob began and ended, as 'status',
// 'watch' and 'ui' say it: the JSON fields they share and the words they
// use. What is recorded, by whom and how precisely is the library's
// (azlease.TermChange; docs/design/terms-and-fencing.md).

package main

import (
	"time"

	"github.com/azlease/azlease"
)

// termEndJSON is how a term began and ended, in the JSON of 'status' (the
// latest term and each of its history) and 'watch'.
type termEndJSON struct {
	// Began is how the term began: a TermChange's name ("free",
	// "released", "expired", "broken", "unobserved", "stop", "yield",
	// "priority", "queue", "handoff"); absent when not recorded (an
	// older azlease).
	Began string `json:"began,omitempty"`
	// EndedBy is how it ended, the same names; absent while it lasts or
	// when not recorded.
	EndedBy string `json:"ended_by,omitempty"`
	// Ended is when its holder stopped its work (a release or a
	// hand-over), by its clock; EndedAtOrBefore, for any other end, when
	// the next holder (or this read) found the lease free: nobody saw the
	// instant.
	Ended           *time.Time `json:"ended,omitempty"`
	EndedAtOrBefore *time.Time `json:"ended_at_or_before,omitempty"`
	// SeenHeld is the last time the next holder saw the lease still held;
	// LeaseSeconds the lease duration the holder used.
	SeenHeld     *time.Time `json:"seen_held,omitempty"`
	LeaseSeconds int        `json:"lease_seconds,omitempty"`
}

func termEnd(h azlease.HistoryEntry) termEndJSON {
	out := termEndJSON{SeenHeld: timePtr(h.SeenHeld), LeaseSeconds: int(h.LeaseDuration / time.Second)}
	if h.Began != azlease.ChangeUnknown {
		out.Began = h.Began.String()
	}
	if h.EndedBy != azlease.ChangeUnknown {
		out.EndedBy = h.EndedBy.String()
		if h.EndedBy.Planned() {
			out.Ended = timePtr(h.Ended)
		} else {
			out.EndedAtOrBefore = timePtr(h.Ended)
		}
	}
	return out
}

// latestTerm is the latest term of st as a history entry: the first of its
// history when kept, with the status's own end (the lease state now).
func latestTerm(st azlease.Status) azlease.HistoryEntry {
	h := azlease.HistoryEntry{Holder: st.Holder, Epoch: st.Epoch, Acquired: st.Acquired, Began: st.Began}
	if len(st.History) > 0 && st.History[0].Epoch == st.Epoch {
		h = st.History[0]
	}
	h.EndedBy, h.Ended = st.EndedBy, st.Ended
	return h
}

// beganText says how a term began, for a person.
func beganText(c azlease.TermChange) string {
	switch c {
	case azlease.ChangeFree:
		return "took the free lease: the first term"
	case azlease.ChangeReleased:
		return "took the lease after the previous holder released it"
	case azlease.ChangeExpired:
		return "took over after the previous holder's lease expired (it crashed, hung or was cut off)"
	case azlease.ChangeBroken:
		return "took over after the previous lease was broken"
	case azlease.ChangeUnobserved:
		return "acquired without looking first: how the previous term ended was not observed"
	case azlease.ChangeStop:
		return "handed over: the previous leader stopped (planned succession)"
	case azlease.ChangeYield:
		return "handed over: the previous leader yielded"
	case azlease.ChangePriority:
		return "handed over: a candidate of higher priority"
	case azlease.ChangeQueue:
		return "handed over: first in the queue"
	case azlease.ChangeHandOff:
		return "handed over (why is not recorded)"
	}
	return "not recorded (an older azlease)"
}

// endedText says how and when a term ended, for a person; "" when it
// has not ended (or how is not recorded). at formats a time.
func endedText(h azlease.HistoryEntry, at func(time.Time) string) string {
	when := func(prefix string) string {
		if h.Ended.IsZero() {
			return ""
		}
		return " " + prefix + at(h.Ended)
	}
	switch c := h.EndedBy; {
	case c == azlease.ChangeReleased:
		if h.Ended.IsZero() {
			return "released (when is not recorded)"
		}
		return "released by its holder at " + at(h.Ended)
	case c.HandOver():
		return "handed over (" + handOverWhy(c) + ")" + when("at ")
	case c == azlease.ChangeExpired:
		s := "its lease expired"
		if h.Ended.IsZero() {
			return s + " (before this read; when is not known)"
		}
		s += " at or before " + at(h.Ended)
		if !h.SeenHeld.IsZero() {
			s += ", after " + at(h.SeenHeld)
		}
		if h.LeaseDuration > 0 {
			s += "; last renewed at or before " + at(h.Ended.Add(-h.LeaseDuration))
		}
		return s
	case c == azlease.ChangeBroken:
		if h.Ended.IsZero() {
			return "its lease was broken (before this read)"
		}
		return "its lease was broken at or before " + at(h.Ended)
	case c == azlease.ChangeUnobserved:
		return "ended at or before " + at(h.Ended) + " (how was not observed)"
	}
	return ""
}

func handOverWhy(c azlease.TermChange) string {
	switch c {
	case azlease.ChangeStop:
		return "planned stop"
	case azlease.ChangeYield:
		return "yield"
	case azlease.ChangePriority:
		return "higher priority"
	case azlease.ChangeQueue:
		return "queue"
	}
	return "reason not recorded"
}

// clock formats a time as status and watch do: UTC, to the millisecond.
func clock(t time.Time) string { return t.UTC().Format(watchTime) }
