package azlease

// How each term of a lock blob began and ended: the TermChange type, the
// record's "terms" key that keeps it, and the new holder's judgement of the
// term before its own. docs/design/terms-and-fencing.md says who knows what
// and how precisely.

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// TermChange says how one term of a lock blob gave way to the next, as
// [HistoryEntry.Began] (what the new holder found) and
// [HistoryEntry.EndedBy] (the same change, seen from the term that ended).
// It is informational: it decides nothing.
//
// A release or a hand-over is recorded by the holder that made it, with
// the instant it stopped its work (Planned). An expiry, a break, or an
// end no one observed is judged by the next holder from the lease state it
// found: nobody saw the instant. Terms recorded by an azlease that did not
// record changes read as ChangeUnknown.
type TermChange uint8

const (
	// ChangeUnknown: not recorded (an older azlease), or the term has not
	// ended.
	ChangeUnknown TermChange = iota
	// ChangeFree: the lock blob's first term; nobody held it before.
	ChangeFree
	// ChangeReleased: the previous holder released the lease, and the new
	// one found it free.
	ChangeReleased
	// ChangeExpired: the previous holder stopped renewing (it crashed,
	// hung or was cut off) and its lease expired.
	ChangeExpired
	// ChangeBroken: the lease was broken (an operator, or Lease.Break).
	ChangeBroken
	// ChangeUnobserved: the new holder acquired the lease without looking
	// first (Lease.Acquire, a Mutex's TryLock, DoOnce, package shards): the
	// previous term ended without a recorded release, by an expiry, a break,
	// a release that was not recorded, or a bare Lease.HandOff.
	ChangeUnobserved
	// ChangeStop: an Elector's leader that was stopping handed the lease
	// to a ready standby (planned succession).
	ChangeStop
	// ChangeYield: a leader handed leadership over on Elector.Yield,
	// YieldTo or a yield request ('azlease yield').
	ChangeYield
	// ChangePriority: a leader handed leadership over to a ready candidate
	// of higher priority (or gave way with a negative priority).
	ChangePriority
	// ChangeQueue: a fair Mutex's (or Semaphore slot's) holder handed the
	// lock to the first waiter of its queue.
	ChangeQueue
	// ChangeHandOff: a hand-over whose reason was not recorded.
	ChangeHandOff
)

// changeCodes are the one-letter codes the record keeps, by TermChange.
const changeCodes = "\x00frxbusypqh"

var changeNames = [...]string{"unknown", "free", "released", "expired", "broken", "unobserved", "stop", "yield", "priority", "queue", "handoff"}

// String is a one-word name: "unknown", "free", "released", "expired",
// "broken", "unobserved", "stop", "yield", "priority", "queue" or "handoff".
func (c TermChange) String() string {
	if int(c) < len(changeNames) {
		return changeNames[c]
	}
	return "unknown"
}

// MarshalText is String, for JSON.
func (c TermChange) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads a String; a word it does not know reads as
// ChangeUnknown. A nil *TermChange is an error.
func (c *TermChange) UnmarshalText(b []byte) error {
	if c == nil {
		return errors.New("azlease: TermChange.UnmarshalText into a nil *TermChange")
	}
	*c = ChangeUnknown
	for i, n := range changeNames {
		if n == string(b) {
			*c = TermChange(i)
		}
	}
	return nil
}

// HandOver reports whether the lease passed from holder to holder without
// being free: ChangeStop, ChangeYield, ChangePriority, ChangeQueue or
// ChangeHandOff.
func (c TermChange) HandOver() bool { return c >= ChangeStop && c <= ChangeHandOff }

// Planned reports whether the holder ended its term itself and recorded
// when (a release or a hand-over): [HistoryEntry.Ended] is then the
// instant it stopped its work. Otherwise Ended is an upper bound.
func (c TermChange) Planned() bool { return c == ChangeReleased || c.HandOver() }

func changeOf(code byte) TermChange {
	if i := strings.IndexByte(changeCodes, code); i > 0 {
		return TermChange(i)
	}
	return ChangeUnknown
}

func (c TermChange) code() string {
	if c == ChangeUnknown || int(c) >= len(changeCodes) {
		return ""
	}
	return changeCodes[c : c+1]
}

// handOverChange is the TermChange of a hand-over made for why: an
// Elector's reason (elector_succession.go), or "" for the holder's role's
// default (a fair lock's queue).
func handOverChange(why, role string) TermChange {
	switch why {
	case "stop":
		return ChangeStop
	case "yield", "request":
		return ChangeYield
	case "priority", "never_lead":
		return ChangePriority
	case "":
		if role == "mutex" {
			return ChangeQueue
		}
	}
	return ChangeHandOff
}

// termFacts is what the record keeps about how one term began and ended,
// beside its history entry (HistoryEntry has the same fields, exported).
type termFacts struct {
	began, endedBy TermChange
	ended          time.Time     // exact for a planned end; else an upper bound
	seenHeld       time.Time     // the next holder saw the lease still held then
	duration       time.Duration // the lease duration the holder used
}

func (f termFacts) zero() bool { return f == termFacts{} }

func (h HistoryEntry) facts() termFacts {
	return termFacts{began: h.Began, endedBy: h.EndedBy, ended: h.Ended, seenHeld: h.SeenHeld, duration: h.LeaseDuration}
}

func (h *HistoryEntry) setFacts(f termFacts) {
	h.Began, h.EndedBy, h.Ended, h.SeenHeld, h.LeaseDuration = f.began, f.endedBy, f.ended, f.seenHeld, f.duration
}

// The "terms" key (metaTerms): the facts of the latest term and of the
// terms in the history, compactly, so that a full history stays far below
// Azure's 8 KiB:
//
//	BASE;K,B,E,ENDED,SEEN,DUR;...
//
// BASE is the epoch the key was written in; each item is the term of epoch
// BASE−K, with B and E one-letter codes (changeCodes, empty when unknown),
// ENDED and SEEN milliseconds from the term's start (its Acquired; may be
// negative: clocks differ), DUR the lease duration in seconds; trailing
// empty fields are left out. Keyed by epoch, not by place, the key stays
// true when an older azlease (which keeps keys it does not know) writes a
// newer term beside it: that term just has no facts.

// maxTermItems bounds the items parsed: the latest term and MaxHistory.
const maxTermItems = MaxHistory + 1

// parseTerms reads the terms key into facts by epoch. Malformed items read
// as absent; so does the whole key when its base is malformed.
func parseTerms(v string, start func(epoch uint64) (time.Time, bool)) map[uint64]termFacts {
	items := strings.Split(v, ";")
	base, err := strconv.ParseUint(items[0], 10, 64)
	if err != nil || len(items) == 1 {
		return nil
	}
	out := map[uint64]termFacts{}
	for _, item := range items[1:min(len(items), maxTermItems+1)] {
		f := strings.Split(item, ",")
		if len(f) > 6 {
			continue
		}
		for len(f) < 6 {
			f = append(f, "")
		}
		k, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || k > base || len(f[1]) > 1 || len(f[2]) > 1 {
			continue
		}
		epoch := base - k
		acq, ok := start(epoch)
		if !ok {
			continue
		}
		var tf termFacts
		if f[1] != "" {
			tf.began = changeOf(f[1][0])
		}
		if f[2] != "" {
			tf.endedBy = changeOf(f[2][0])
		}
		tf.ended = offsetTime(acq, f[3])
		tf.seenHeld = offsetTime(acq, f[4])
		if s, err := strconv.ParseUint(f[5], 10, 16); err == nil {
			tf.duration = time.Duration(s) * time.Second
		}
		if !tf.zero() {
			out[epoch] = tf
		}
	}
	return out
}

// offsetTime is acq plus v milliseconds, or zero when v is empty or not a
// number of milliseconds within about ten years.
func offsetTime(acq time.Time, v string) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if v == "" || err != nil || ms > 1<<38 || ms < -(1<<38) || acq.IsZero() {
		return time.Time{}
	}
	return acq.Add(time.Duration(ms) * time.Millisecond).UTC()
}

// formatTerms writes the terms key for a record of epoch base, or "" when
// no term has facts.
func formatTerms(base uint64, terms []HistoryEntry) string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(base, 10))
	n := 0
	done := map[uint64]bool{}
	for _, h := range terms {
		f := h.facts()
		if f.zero() || h.Epoch > base || n == maxTermItems || done[h.Epoch] {
			continue
		}
		done[h.Epoch] = true
		n++
		fields := []string{strconv.FormatUint(base-h.Epoch, 10), f.began.code(), f.endedBy.code(), offsetOf(h.Acquired, f.ended), offsetOf(h.Acquired, f.seenHeld), ""}
		if f.duration > 0 {
			fields[5] = strconv.FormatInt(int64(f.duration/time.Second), 10)
		}
		for len(fields) > 1 && fields[len(fields)-1] == "" {
			fields = fields[:len(fields)-1]
		}
		b.WriteString(";" + strings.Join(fields, ","))
	}
	if n == 0 {
		return ""
	}
	return b.String()
}

func offsetOf(acq, t time.Time) string {
	if t.IsZero() || acq.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.Sub(acq).Milliseconds(), 10)
}

// judgeChange is how a new term began, and so how the term before it
// (prev, as the new holder first read it) ended, as far as the new holder
// knows: handed is true when it took the lease handed to it; seen, when not
// nil, is the look that found the lease free just before acquiring;
// seenHeld is when this holder last saw prev's term held (zero if it did
// not); now is the new term's start. It returns the change and the facts
// of prev's end.
func judgeChange(prev record, handed bool, seen *Status, seenHeld, now time.Time) (TermChange, termFacts) {
	end := prev.cur
	end.seenHeld = time.Time{}
	if prev.epoch == 0 {
		return ChangeFree, end
	}
	var c TermChange
	switch {
	case handed && prev.cur.endedBy.HandOver():
		c = prev.cur.endedBy
	case handed:
		c = ChangeHandOff
	case seen != nil && seen.State == "expired":
		c = ChangeExpired
	case seen != nil && seen.State == "broken":
		c = ChangeBroken
	case seen != nil && seen.State == "available", prev.released:
		c = ChangeReleased
	default:
		c = ChangeUnobserved
	}
	planned := c.Planned() && prev.cur.endedBy.Planned() && !prev.cur.ended.IsZero()
	end.endedBy = c
	switch {
	case planned:
	case c.Planned():
		end.ended = time.Time{} // a release or hand-over whose instant was not recorded
	default:
		// Nobody saw the instant: it was at or before the look that
		// found the lease free (this acquisition, without a look).
		end.ended = now
		if seen != nil && !seen.readAt.IsZero() && seen.readAt.Before(now) {
			end.ended = seen.readAt
		}
		if seenHeld.Before(end.ended) {
			end.seenHeld = seenHeld
		}
	}
	return c, end
}

// sawHeld notes a look of this Lease that saw the lease held (sent at
// send) with the record of epoch.
func (l *Lease) sawHeld(epoch uint64, send time.Time) {
	l.mu.Lock()
	l.heldEpoch, l.heldAt = epoch, send
	l.mu.Unlock()
}

// seenHeld is when this Lease's last look saw the lease held with the
// record of epoch, or zero.
func (l *Lease) seenHeld(epoch uint64) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.heldEpoch != epoch || epoch == 0 {
		return time.Time{}
	}
	return l.heldAt.Round(0).UTC()
}
