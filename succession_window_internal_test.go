// This file tests firstSeen: since when a leader reckons a candidate has
// been there, for the StabilityWindow (issue 26's "preferred candidate
// appears → it leads" target).
package azlease

import (
	"testing"
	"time"
)

// TestFirstSeenWithinStoragesSecond: storage's clock gives a candidate's age
// to the second; within that second the candidate's own start time decides,
// and outside it storage's second bounds the error. With the old estimate
// (storage's second alone) a candidate that published at 10:00:00.900 and was
// listed at 10:00:05.100 (Date 10:00:05, Last-Modified 10:00:00) seemed 5 s
// old instead of 4.2 s, and a preferred candidate led up to a second after
// its window.
func TestFirstSeenWithinStoragesSecond(t *testing.T) {
	wall := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse("15:04:05.000", s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	now := time.Now()                // the leader's clock; its wall reading is what the candidate's clock is compared with
	at := func(s string) time.Time { // a wall time of the candidate, placed on now's wall clock as 10:00:05.100
		return now.Round(0).Add(wall(s).Sub(wall("10:00:05.100")))
	}
	date, modified := wall("10:00:05.000"), wall("10:00:00.000")
	cases := []struct {
		name  string
		since time.Time // the candidate's start, by its clock
		want  time.Duration
	}{
		{"clocks agree", at("10:00:00.900"), 4200 * time.Millisecond},
		{"written again since it started: storage's second bounds it", at("09:50:00.000"), 6 * time.Second},
		{"its clock a minute ahead: storage's second bounds it", at("10:01:00.900"), 4 * time.Second},
		{"no start time", time.Time{}, 5 * time.Second},
	}
	for _, tc := range cases {
		c := candidate{Candidate: Candidate{Identity: "b", Since: tc.since}, modified: modified}
		if got := now.Sub(firstSeen(now, date, c)); got != tc.want {
			t.Errorf("%s: there for %v, want %v", tc.name, got, tc.want)
		}
	}
	if got := firstSeen(now, time.Time{}, candidate{modified: modified}); !got.Equal(now) {
		t.Errorf("without storage's Date: %v, want now", got)
	}
}
