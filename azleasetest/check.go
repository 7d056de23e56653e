package azleasetest

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Interval is a span of time during which a client believed it held a
// lease, or did the work a lease guards: what [Server.CheckExclusive] checks
// against the server's grants.
type Interval struct {
	// Holder names who believed it: the name given to [Server.Client] for
	// the client that holds the lease. Intervals of one holder may overlap
	// (work done concurrently under one lease); intervals of different
	// holders must not.
	Holder string
	// LeaseID, when set, is the lease ID the holder believed it held; the
	// interval must then lie inside a grant of that lease ID, whatever its
	// Holder (use it over HTTP, where grants have no holder name). When
	// empty, it must lie inside a grant whose Holder is Holder.
	LeaseID string
	// Epoch, when not zero, is the fencing epoch of the holder's term:
	// epochs must never go backwards from one interval to a later one, and
	// must grow from one holder to the next.
	Epoch uint64
	// Start and End bound the interval, in local time (time.Now, the fake
	// clock inside a synctest bubble). End must not be before Start.
	Start, End time.Time
}

// Recorder collects intervals from concurrent goroutines. The zero value is
// ready to use; a nil *Recorder records nothing.
type Recorder struct {
	mu        sync.Mutex
	intervals []Interval
}

// Begin records that holder starts believing it holds the lease now, and
// returns the function that ends the interval: call it (once) when the
// holder stops, typically with defer.
func (r *Recorder) Begin(holder string) (end func()) {
	iv := Interval{Holder: holder, Start: time.Now()}
	var once sync.Once
	return func() {
		once.Do(func() {
			iv.End = time.Now()
			r.Add(iv)
		})
	}
}

// Add records a complete interval.
func (r *Recorder) Add(iv Interval) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.intervals = append(r.intervals, iv)
}

// Intervals returns a copy of the intervals recorded so far, in the order
// they ended.
func (r *Recorder) Intervals() []Interval {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.intervals)
}

// CheckExclusive fails the test (tb.Errorf) unless the intervals on blob in
// [Container] were exclusive as the server saw them: each lies inside one
// lease grant the server made to its holder ([Server.History]), no two
// holders' intervals overlap, and epochs never go backwards. The message
// lists the violations and the grants. It may be called from any goroutine.
func (s *Server) CheckExclusive(tb testing.TB, blob string, intervals []Interval) {
	tb.Helper()
	if !s.usable() {
		tb.Errorf("blob %q: %v", blob, errNotCreated)
		return
	}
	if err := CheckIntervals(s.History(blob), intervals); err != nil {
		tb.Errorf("blob %q: %v", blob, err)
	}
}

// maxReported bounds how many violations an error message lists.
const maxReported = 10

// CheckIntervals checks believed intervals against a blob's lease grants as
// [Server.CheckExclusive] does. It returns nil, or an [*ExclusionError]
// listing the violations. Use it with [Server.Grants] for blobs in other
// containers, or to count violations rather than fail.
func CheckIntervals(grants []Grant, intervals []Interval) error {
	var vs []Violation
	for _, iv := range intervals {
		switch {
		case iv.End.Before(iv.Start):
			vs = append(vs, Violation{Kind: EndsBeforeStart, Interval: iv})
		case !insideGrant(iv, grants):
			vs = append(vs, Violation{Kind: OutsideGrant, Interval: iv})
		}
	}
	sorted := slices.Clone(intervals)
	slices.SortStableFunc(sorted, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	for i, a := range sorted {
		for _, b := range sorted[i+1:] {
			if b.Start.Before(a.End) && a.Holder != b.Holder {
				vs = append(vs, Violation{Kind: Overlap, Interval: b, Other: a})
			}
			if a.Epoch == 0 || b.Epoch == 0 || b.Start.Before(a.End) {
				continue
			}
			if b.Epoch < a.Epoch || (b.Epoch == a.Epoch && a.Holder != b.Holder) {
				vs = append(vs, Violation{Kind: EpochBackwards, Interval: b, Other: a})
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	return &ExclusionError{Violations: vs, Grants: slices.Clone(grants)}
}

// ViolationKind says how an interval broke exclusion.
type ViolationKind int

const (
	// OutsideGrant: the interval does not lie inside any one grant to its
	// holder (or of its lease ID): the holder believed it held a lease the
	// server did not give it, or no longer gave it.
	OutsideGrant ViolationKind = iota + 1
	// Overlap: the interval overlaps Other, another holder's.
	Overlap
	// EpochBackwards: the interval starts after Other ended, but its epoch
	// is smaller, or equal for another holder.
	EpochBackwards
	// EndsBeforeStart: the interval's End is before its Start (a recording
	// mistake).
	EndsBeforeStart
)

// String describes the kind in words.
func (k ViolationKind) String() string {
	switch k {
	case OutsideGrant:
		return "lies outside every lease the server granted to it"
	case Overlap:
		return "overlaps"
	case EpochBackwards:
		return "comes after another but its epoch does not grow"
	case EndsBeforeStart:
		return "ends before it starts"
	}
	return fmt.Sprintf("ViolationKind(%d)", int(k))
}

// Violation is one way in which believed intervals were not exclusive.
type Violation struct {
	// Kind says what is wrong.
	Kind ViolationKind
	// Interval is the offending interval.
	Interval Interval
	// Other is, for Overlap and EpochBackwards, the earlier interval it
	// conflicts with.
	Other Interval
}

// String describes the violation in a line: who, when, what.
func (v Violation) String() string {
	switch v.Kind {
	case Overlap:
		return fmt.Sprintf("%s and %s overlap", describe(v.Other), describe(v.Interval))
	case EpochBackwards:
		return fmt.Sprintf("%s comes after %s but its epoch does not grow", describe(v.Interval), describe(v.Other))
	}
	return describe(v.Interval) + " " + v.Kind.String()
}

// ExclusionError is the error [CheckIntervals] returns: every violation it
// found, and the grants it checked against.
type ExclusionError struct {
	// Violations lists what is wrong: first the intervals outside every
	// grant (or ending before they start), then the conflicts between
	// intervals, earlier first.
	Violations []Violation
	// Grants are the lease grants the intervals were checked against.
	Grants []Grant
}

// Count returns how many violations are of kind.
func (e *ExclusionError) Count(kind ViolationKind) int {
	if e == nil {
		return 0
	}
	n := 0
	for _, v := range e.Violations {
		if v.Kind == kind {
			n++
		}
	}
	return n
}

// Error lists the first violations and the grants.
func (e *ExclusionError) Error() string {
	if e == nil {
		return "<nil>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d violation(s) of exclusive holding:", len(e.Violations))
	for i, v := range e.Violations {
		if i == maxReported {
			fmt.Fprintf(&b, "\n  … and %d more", len(e.Violations)-maxReported)
			break
		}
		b.WriteString("\n  " + v.String())
	}
	b.WriteString("\nthe server's grants:")
	if len(e.Grants) == 0 {
		b.WriteString(" none")
	}
	for _, g := range e.Grants {
		end := "∞"
		if !g.End.IsZero() {
			end = stamp15(g.End)
		}
		fmt.Fprintf(&b, "\n  %s to %q [%s, %s)", g.LeaseID, g.Holder, stamp15(g.Start), end)
	}
	return b.String()
}

// insideGrant reports whether iv lies inside one grant to its holder (or of
// its lease ID).
func insideGrant(iv Interval, grants []Grant) bool {
	for _, g := range grants {
		if iv.LeaseID != "" && !strings.EqualFold(g.LeaseID, iv.LeaseID) {
			continue
		}
		if iv.LeaseID == "" && g.Holder != iv.Holder {
			continue
		}
		if !iv.Start.Before(g.Start) && (g.End.IsZero() || !iv.End.After(g.End)) {
			return true
		}
	}
	return false
}

func describe(iv Interval) string {
	s := fmt.Sprintf("%q [%s, %s]", iv.Holder, stamp15(iv.Start), stamp15(iv.End))
	if iv.Epoch != 0 {
		s += fmt.Sprintf(" epoch %d", iv.Epoch)
	}
	return s
}

// stamp15 formats a time to the nanosecond, the precision of fake time.
func stamp15(t time.Time) string {
	return t.UTC().Format("15:04:05.000000000")
}
