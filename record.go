package azlease

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/azname"
)

// Metadata keys azlease owns on a lock blob. Azure returns metadata names
// with changed case (Go canonicalises "azleaseepoch" to "Azleaseepoch"), so
// every lookup is case-insensitive. User metadata must not start with
// metaPrefix.
const (
	metaPrefix   = "azlease"
	metaEpoch    = "azleaseepoch"
	metaHolder   = "azleaseholder"
	metaAcquired = "azleaseacquired"
	metaReleased = "azleasereleased"
	metaHistory  = "azleasehistory"
	// metaNext names the successor the holder of the record's epoch is
	// handing the lease to (succession.go): a queue ticket or a
	// candidate's identity.
	metaNext = "azleasenext"
	// metaNextID is the lease ID a fair lock's successor announced (its
	// queue entry shows it too), beside metaNext: a waiter that finds the
	// successor gone from the queue derives the hand-off's ID from it and
	// takes the hand-off over (issue 35: no holder waits for a successor).
	metaNextID = "azleasenextid"
	metaRole   = "azleaserole"
	// metaHolds is a fair lock's published pace (issue 35, design section
	// 4): the last 32 holds, newest first, each measured by its holder on its
	// own clock from the send of the look (or listing) that gave it the lock
	// to its Unlock, so the take's round trips count, in microseconds,
	// comma-separated; written with the hand-off marker (no extra request)
	// and carried through every record write.
	metaHolds = "azleaseholds"
	// metaHeir names the successors an Elector's leader has designated
	// (elector_succession.go): who should get ready to take the lease over.
	metaHeir = "azleaseheir"
	// metaFails lists the recent Elector terms that ended without a clean
	// release (candidates.go): a preferred candidate that keeps failing
	// stops being preferred.
	metaFails = "azleasefails"
	// metaTerms keeps how the latest term and those in the history began
	// and ended (termchange.go).
	metaTerms = "azleaseterms"
)

// Token is the fencing token of one term: the lease ID Azure enforces on the
// lock blob, and an epoch larger than every earlier term's on that blob.
//
// Pass Epoch to anything the holder writes outside the lock blob and have it
// reject writes whose epoch is lower than the highest it has seen (a SQL
// "WHERE epoch <= @epoch" guard, a conditional update): that, not timing,
// keeps a paused or partitioned former holder from doing damage. Epochs count
// per lock blob and look alike across blobs (they start near the blob's
// creation time in milliseconds), so a store fenced by several locks keeps
// the highest epoch per lock name and compares an incoming epoch only with
// its own lock's (docs/design/terms-and-fencing.md).
//
// The lease ID lets its holder write the lock blob itself; treat it as a
// secret. Token's String and LogValue omit it.
type Token struct {
	LeaseID string
	Epoch   uint64
}

// String returns "epoch N" without the lease ID.
func (t Token) String() string { return "epoch " + strconv.FormatUint(t.Epoch, 10) }

// LogValue logs only the epoch: the lease ID is a write capability.
func (t Token) LogValue() slog.Value { return slog.GroupValue(slog.Uint64("epoch", t.Epoch)) }

// HistoryEntry is one recorded term of a lock blob: the first of
// [Status.History] is the latest term. Its Epoch is the blob's own (see
// [Token]). Everything in it is informational, by the clock of whoever
// recorded it; docs/design/terms-and-fencing.md says who records what.
type HistoryEntry struct {
	Holder   string
	Epoch    uint64
	Acquired time.Time // the holder's wall clock; informational only

	// Began is how the term began: what its holder found when it took
	// the lease (a free lease, one released, expired or broken, or one
	// handed to it, and why). ChangeUnknown when not recorded.
	Began TermChange
	// EndedBy is how the term ended: the next term's Began, or, for the
	// latest term, what its holder recorded (a release, a hand-over under
	// way) or the lease state (expired, broken). ChangeUnknown while the
	// term lasts, or when not recorded.
	EndedBy TermChange
	// Ended is when the term ended, or zero when not known. When
	// EndedBy.Planned() (a release or a hand-over) it is when the holder
	// stopped its work, by its clock. Otherwise nobody saw the instant:
	// it is when the next holder found the lease free, by its clock, and
	// the term ended at or before it.
	Ended time.Time
	// SeenHeld, when not zero, is the last time the next holder saw this
	// term's lease still held before finding it expired, broken or free
	// (its clock): the lease ended after it.
	SeenHeld time.Time
	// LeaseDuration is the lease duration the holder used (0: not
	// recorded). Azure expires a lease exactly this long after its last
	// renewal, so a term that ended by ChangeExpired was last renewed at or
	// before Ended − LeaseDuration, and after SeenHeld − LeaseDuration.
	LeaseDuration time.Duration
}

// record is azlease's part of a lock blob's metadata.
type record struct {
	epoch     uint64
	holder    string
	acquired  time.Time
	released  bool // the holder of epoch released the lease cleanly
	history   []HistoryEntry
	successor string // the successor the holder of epoch hands the lease to, if any
	// successorID is the lease ID a fair lock's successor announced, if
	// the marker says (metaNextID); only with a successor.
	successorID string
	// holds are the last fair holds (metaHolds), newest first, at most
	// maxHolds: the pace waiters behind the first sleep by
	// (timing.Pace).
	holds []time.Duration
	// role is the kind of holder that began the term: "elector", "mutex",
	// "once" or "lease" (see Status.Role); "" when not recorded.
	role string
	// heir is the holder's designation of its successors, if any (only
	// when it was made in this record's epoch).
	heir designation
	// fails lists recent terms that ended without a clean release,
	// newest first (an Elector's lock blob only).
	fails []failure
	// cur is how the term of epoch began and, when its holder recorded
	// it (a release, a hand-over), ended (termchange.go). history's entry
	// of epoch carries the same.
	cur termFacts
}

// maxHolds is how many holds the lock record keeps (metaHolds): the pace
// is the median of the newest timing.PaceHolds, and the older ones let a
// watcher that read the record up to maxHolds − PaceHolds hand-offs ago
// know every pace published since (timing.PaceSince).
const maxHolds = 32

// maxHold is the longest hold the record keeps as it is (longer ones are
// written as this): about 11.6 days, far beyond any pace that matters.
const maxHold = 1_000_000 * time.Second

// parseHolds reads metaHolds: remote data, so anything but up to maxHolds
// comma-separated non-negative integers of microseconds (each at most
// maxHold) reads as none (the pace is then zero until maxHolds holds are
// published again: waiters look more often, never less).
func parseHolds(v string) []time.Duration {
	if v == "" || len(v) > maxHolds*14 {
		return nil
	}
	parts := strings.Split(v, ",")
	if len(parts) > maxHolds {
		return nil
	}
	out := make([]time.Duration, 0, len(parts))
	for _, p := range parts {
		us, err := strconv.ParseUint(p, 10, 64)
		if err != nil || us > uint64(maxHold/time.Microsecond) {
			return nil
		}
		out = append(out, time.Duration(us)*time.Microsecond)
	}
	return out
}

// formatHolds writes holds for metaHolds (newest first, at most maxHolds,
// each within [0, maxHold]).
func formatHolds(holds []time.Duration) string {
	items := make([]string, 0, min(len(holds), maxHolds))
	for _, h := range holds[:min(len(holds), maxHolds)] {
		items = append(items, strconv.FormatInt(int64(min(max(h, 0), maxHold)/time.Microsecond), 10))
	}
	return strings.Join(items, ",")
}

// pushHold is holds with h in front (the newest), at most maxHolds.
func pushHold(holds []time.Duration, h time.Duration) []time.Duration {
	out := append([]time.Duration{min(max(h, 0), maxHold)}, holds...)
	return out[:min(len(out), maxHolds)]
}

// lookup finds a metadata value by case-insensitive name.
func lookup(md map[string]*string, name string) (string, bool) {
	for k, v := range md {
		if strings.EqualFold(k, name) && v != nil {
			return *v, true
		}
	}
	return "", false
}

// foldedMeta answers lookup's question for many names with one pass over
// the metadata (parseRecord asks for a dozen): ASCII names are indexed in
// lower case, where strings.EqualFold between ASCII strings is equality;
// the rare other names are compared as lookup compares them.
type foldedMeta struct {
	md    map[string]*string
	ascii map[string]*string // lower-cased ASCII names, non-nil values
	other []string           // names with bytes outside ASCII, non-nil values
}

func foldMeta(md map[string]*string) foldedMeta {
	f := foldedMeta{md: md, ascii: make(map[string]*string, len(md))}
	for k, v := range md {
		switch {
		case v == nil:
		case isASCII(k):
			f.ascii[asciiLower(k)] = v
		default:
			f.other = append(f.other, k)
		}
	}
	return f
}

// lookup is lookup(f.md, name).
func (f foldedMeta) lookup(name string) (string, bool) {
	if !isASCII(name) {
		return lookup(f.md, name)
	}
	if v, ok := f.ascii[asciiLower(name)]; ok {
		return *v, true
	}
	for _, k := range f.other {
		if strings.EqualFold(k, name) {
			return *f.md[k], true
		}
	}
	return "", false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// asciiLower is strings.ToLower for an ASCII string.
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// errBadEpoch means the epoch in a lock blob's metadata is not a number, or
// cannot grow any more. Fencing depends on the epoch only ever growing, so
// azlease refuses to guess: an operator must fix or remove the value.
var errBadEpoch = errors.New("the lock blob's " + metaEpoch + " metadata is not a number below 2^64-1; fix or remove it")

// parseRecord reads azlease's keys from metadata. A malformed epoch is an
// error, since guessing it could make it go backwards; other malformed
// values are informational and read as absent.
func parseRecord(md map[string]*string) (record, error) {
	var r record
	f := foldMeta(md)
	if v, ok := f.lookup(metaEpoch); ok {
		e, err := strconv.ParseUint(v, 10, 64)
		if err != nil || e == math.MaxUint64 {
			return r, errBadEpoch
		}
		r.epoch = e
	}
	if v, ok := f.lookup(metaHolder); ok {
		r.holder, _ = url.QueryUnescape(v)
	}
	if v, ok := f.lookup(metaAcquired); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			r.acquired = time.UnixMilli(ms).UTC()
		}
	}
	if v, ok := f.lookup(metaReleased); ok {
		e, err := strconv.ParseUint(v, 10, 64)
		r.released = err == nil && e == r.epoch && r.epoch > 0
	}
	if v, ok := f.lookup(metaNext); ok {
		r.successor, _ = url.QueryUnescape(v)
	}
	if v, ok := f.lookup(metaNextID); ok && r.successor != "" {
		if _, ok := azname.GUID(v); ok {
			r.successorID = v
		}
	}
	if v, ok := f.lookup(metaHolds); ok {
		r.holds = parseHolds(v)
	}
	if v, ok := f.lookup(metaRole); ok && validRole(v) {
		r.role = v
	}
	if v, ok := f.lookup(metaHeir); ok {
		if d, ok := parseDesignation(v); ok && d.epoch == r.epoch {
			r.heir = d
		}
	}
	if v, ok := f.lookup(metaFails); ok {
		r.fails = parseFailures(v)
	}
	if v, ok := f.lookup(metaHistory); ok && v != "" {
		for _, item := range strings.Split(v, ";") {
			f := strings.Split(item, ",")
			if len(f) != 3 {
				continue
			}
			e, err1 := strconv.ParseUint(f[0], 10, 64)
			ms, err2 := strconv.ParseInt(f[1], 10, 64)
			h, err3 := url.QueryUnescape(f[2])
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			r.history = append(r.history, HistoryEntry{Holder: h, Epoch: e, Acquired: time.UnixMilli(ms).UTC()})
		}
	}
	if v, ok := f.lookup(metaTerms); ok && r.epoch > 0 {
		facts := parseTerms(v, func(epoch uint64) (time.Time, bool) {
			switch {
			case epoch == r.epoch:
				return r.acquired, true
			case epoch > r.epoch:
				return time.Time{}, false // a term the record does not have yet: not one of its own
			}
			for _, h := range r.history {
				if h.Epoch == epoch {
					return h.Acquired, true
				}
			}
			return time.Time{}, false
		})
		r.cur = facts[r.epoch]
		for i := range r.history {
			// The first entry of an epoch (a history never repeats one).
			r.history[i].setFacts(facts[r.history[i].Epoch])
			delete(facts, r.history[i].Epoch)
		}
	}
	return r, nil
}

// setCur sets the facts of the record's latest term, in its history entry
// too.
func (r *record) setCur(f termFacts) {
	r.cur = f
	for i := range r.history {
		if r.history[i].Epoch == r.epoch {
			r.history[i].setFacts(f)
		}
	}
}

// validRole reports whether a recorded role reads as one: a short word of
// lower-case letters. Anything else is informational damage and reads as
// absent.
func validRole(v string) bool {
	if v == "" || len(v) > 16 {
		return false
	}
	for _, c := range v {
		if c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// nextEpoch is the epoch of the term that follows one with epoch prev on a
// lock blob created at created (Azure's clock; zero when unknown), by a
// holder that has seen epochs up to seen on this lock blob before.
//
// It is the largest of prev+1, seen+1 and created's Unix time in
// milliseconds plus one. The last makes epochs keep growing when a lock blob
// is deleted and created again (a storage account restored, an emulator
// restarted, an operator's cleanup): the new blob's first epoch is above
// every epoch of the old one, as long as the old one averaged fewer than
// 1,000 acquisitions a second over its life and Azure's clock did not go
// back. seen covers a blob created again within the same second, for holders
// that saw the old one. The result never overflows: epochs are refused at
// 2^64−1 (errBadEpoch).
func nextEpoch(prev uint64, created time.Time, seen uint64) uint64 {
	next := max(prev, seen) + 1
	if !created.IsZero() && created.Unix() > 0 {
		next = max(next, uint64(created.Unix())*1000+1)
	}
	return next
}

// recordKeys are the keys format owns; other azlease keys (DoOnce's marker)
// and user keys pass through it untouched.
var recordKeys = []string{metaEpoch, metaHolder, metaAcquired, metaReleased, metaHistory, metaNext, metaNextID, metaHolds, metaRole, metaHeir, metaFails, metaTerms}

func isRecordKey(k string) bool {
	for _, rk := range recordKeys {
		if strings.EqualFold(k, rk) {
			return true
		}
	}
	return false
}

// format writes the record into a copy of md, replacing the record's keys
// whatever their case and keeping every other key.
func (r record) format(md map[string]*string) map[string]*string {
	out := make(map[string]*string, len(md)+6)
	for k, v := range md {
		if !isRecordKey(k) {
			out[k] = v
		}
	}
	set := func(k, v string) { out[k] = &v }
	set(metaEpoch, strconv.FormatUint(r.epoch, 10))
	set(metaHolder, url.QueryEscape(r.holder))
	set(metaAcquired, strconv.FormatInt(r.acquired.UnixMilli(), 10))
	if r.released {
		set(metaReleased, strconv.FormatUint(r.epoch, 10))
	}
	if r.successor != "" {
		set(metaNext, url.QueryEscape(r.successor))
		if r.successorID != "" {
			set(metaNextID, r.successorID)
		}
	}
	if len(r.holds) > 0 {
		set(metaHolds, formatHolds(r.holds))
	}
	if r.role != "" {
		set(metaRole, r.role)
	}
	if len(r.heir.heirs) > 0 {
		set(metaHeir, r.heir.format())
	}
	if len(r.fails) > 0 {
		set(metaFails, formatFailures(r.fails))
	}
	if len(r.history) > 0 {
		items := make([]string, len(r.history))
		for i, h := range r.history {
			items[i] = strconv.FormatUint(h.Epoch, 10) + "," + strconv.FormatInt(h.Acquired.UnixMilli(), 10) + "," + url.QueryEscape(h.Holder)
		}
		set(metaHistory, strings.Join(items, ";"))
	}
	terms := append([]HistoryEntry{{Epoch: r.epoch, Acquired: r.acquired}}, r.history...)
	terms[0].setFacts(r.cur)
	for i := 1; i < len(terms); i++ {
		if terms[i].Epoch == r.epoch {
			terms = append(terms[:i], terms[i+1:]...) // the latest term: r.cur
			break
		}
	}
	if v := formatTerms(r.epoch, terms); v != "" {
		set(metaTerms, v)
	}
	return out
}

// next is the record of the term that follows r, with the given epoch
// (nextEpoch): the new term goes first in a history of at most keep entries.
// Its role is left for the caller to set; the failures recorded so far are
// kept (those older than a day dropped), and no successor is designated.
func (r record) next(epoch uint64, holder string, now time.Time, keep int) record {
	n := record{epoch: epoch, holder: holder, acquired: now.UTC().Truncate(time.Millisecond), fails: recentFailures(r.fails, now), holds: r.holds}
	if keep > 0 {
		n.history = append([]HistoryEntry{{Holder: holder, Epoch: n.epoch, Acquired: n.acquired}}, r.history...)
		if len(n.history) > keep {
			n.history = n.history[:keep]
		}
	}
	return n
}

// noteChange records how n's term began (began), with the lease duration
// its holder uses, and how the term of epoch prev ended (end: judgeChange),
// in its history entry.
func (n *record) noteChange(began TermChange, duration time.Duration, prev uint64, end termFacts) {
	for i := range n.history {
		if h := &n.history[i]; h.Epoch == prev && prev != n.epoch {
			h.EndedBy, h.Ended, h.SeenHeld = end.endedBy, end.ended, end.seenHeld
			if h.Began == ChangeUnknown {
				h.Began = end.began
			}
			if h.LeaseDuration == 0 {
				h.LeaseDuration = end.duration
			}
		}
	}
	n.setCur(termFacts{began: began, duration: duration})
}

// userMetadata returns the metadata that is not azlease's, with lower-case
// names.
func userMetadata(md map[string]*string) map[string]string {
	out := make(map[string]string)
	for k, v := range md {
		if lk := strings.ToLower(k); !strings.HasPrefix(lk, metaPrefix) && v != nil {
			out[lk] = *v
		}
	}
	return out
}

// Status is what anyone can read about a lock blob, holder or not: the lease
// state Azure reports and the record azlease keeps in the blob's metadata.
// [Inspect] reads one with one request, [InspectPrefix] many with one request
// per 5,000 blobs, with read access only. It decides nothing: its times are
// informational, by the clocks of whoever recorded them.
type Status struct {
	// Name is the lock blob's name.
	Name string
	// Exists is false when the lock blob has never been created; the other
	// fields but Name are then zero. ([InspectPrefix] lists only blobs
	// that exist.)
	Exists bool
	// Leased is true while some holder has the lease (Azure's lease state
	// "leased" or "breaking").
	Leased bool
	// State is Azure's lease state: "available", "leased", "expired",
	// "breaking" or "broken".
	State string
	// Holder, Epoch and Acquired describe the latest term: the current one
	// when Leased is true. Acquired is the holder's wall clock, for display.
	// Epoch is this lock blob's, comparable only with its own (see [Token]).
	Holder   string
	Epoch    uint64
	Acquired time.Time
	// Released is true when the holder of Epoch released the lease cleanly,
	// after stopping its work (an Elector, a Mutex's or Semaphore's Unlock, a
	// DoOnce runner), recorded with one write just before the release, in one
	// attempt (if it fails, Released reads false). A bare [Lease]'s Release
	// and [Lease.HandOff] record nothing (their holders read as not released,
	// like a holder that crashed), but for a release within 2 × AttemptTimeout
	// of the blob's creation by [Lease.HoldAfter].
	Released bool
	// Next names the successor the holder of Epoch is handing the lease to
	// (a queue ticket of a fair Mutex or Semaphore, or an Elector
	// candidate's identity), or "": the holder has stopped its work and
	// passes the lease on without releasing it. It is cleared when the
	// successor's term begins.
	Next string
	// Designated names the candidates the leader of Epoch (an [Elector])
	// has designated as its successors, best first: it is about to hand
	// leadership to the first of them that is ready (it stops, yields, or
	// prefers a candidate of higher priority). Empty otherwise.
	Designated []string
	// Standby names the candidate the leader of Epoch keeps ready to take
	// over (it polls faster than the other followers), when no hand-off is
	// under way; "" otherwise.
	Standby string
	// Began is how the latest term began, EndedBy and Ended how and when
	// it ended, as in its [HistoryEntry] (History's first, when kept):
	// EndedBy is ChangeUnknown while the term lasts, unless its holder
	// has recorded a release or a hand-over under way (Next); a lease
	// that is expired or broken now reads ChangeExpired or ChangeBroken
	// with Ended zero (it ended before the read; when is not known).
	Began   TermChange
	EndedBy TermChange
	Ended   time.Time
	// History lists the recorded terms, newest first: the latest term
	// first. Each says how it began and ended (see [HistoryEntry]).
	History []HistoryEntry
	// Role is the kind of holder that began the latest term, as it recorded
	// it: "elector", "mutex" (a Mutex, or a Semaphore's slot), "once" (a
	// DoOnce runner) or "lease" (a bare [Lease], as package shards uses); ""
	// when not recorded (an older azlease, or never leased). For display.
	Role string
	// Metadata is the lock blob's metadata that is not azlease's, with
	// lower-case names.
	Metadata map[string]string
	// Err is set by [InspectPrefix] alone, for a blob whose azlease record
	// cannot be read: its epoch metadata is not a number below 2^64−1 (an
	// *[Error] wrapping [ErrPermanent], Op "list", Blob the blob's name).
	// Holder, Epoch, Acquired, Released, History and Role are then zero; Name,
	// Exists, State, Leased and Metadata are set. [Inspect] returns that
	// error instead of a Status, so Err is nil in what it returns.
	Err error

	raw map[string]*string // all metadata as read, for DoOnce's marker and an epoch write after a look
	// etag and created are the blob's ETag (quoted, as the ETag header
	// carries it) and creation time as read, or zero when unknown: with raw
	// they let an acquisition that follows the read write the next epoch
	// without reading again (bumpEpoch, conditional on etag).
	etag    azcore.ETag
	created time.Time
	// modified is the blob's Last-Modified, on storage's clock, as a
	// listing or a read gives it; listed is that answer's Date (the same
	// clock), to tell how long ago the blob was written.
	modified time.Time
	listed   time.Time
	// nextID is the lease ID the successor Next names announced, when the
	// hand-off marker says (a fair lock's); "" otherwise.
	nextID string
	// holds are the fair holds the record publishes (record.holds).
	holds []time.Duration
	// readAt is when the answer that gave this status came (this
	// process's clock): the lease state was so at or before it.
	readAt time.Time
	// fresh is true for the status of a lock blob this Lease has just
	// created with its next term's record (Lease.createWithRecord): the
	// acquisition that follows needs no epoch write when nothing was
	// written since (see bumpEpoch).
	fresh bool
}

// setRecord fills the fields the record gives, after the lease state's:
// the latest term's end is what its holder recorded, or what the lease
// state says now.
func (st *Status) setRecord(r record) {
	st.Holder, st.Epoch, st.Acquired, st.Released, st.Next, st.Role = r.holder, r.epoch, r.acquired, r.released, r.successor, r.role
	st.nextID, st.holds = r.successorID, r.holds
	st.History = r.history
	st.Designated, st.Standby = r.heir.shown()
	st.Began = r.cur.began
	if r.cur.endedBy.Planned() {
		st.EndedBy, st.Ended = r.cur.endedBy, r.cur.ended
	}
	if st.Exists && st.Epoch > 0 && !st.Leased {
		switch st.State {
		case "expired":
			st.EndedBy, st.Ended = ChangeExpired, time.Time{}
		case "broken":
			st.EndedBy, st.Ended = ChangeBroken, time.Time{}
		default:
			if !st.EndedBy.Planned() {
				st.EndedBy, st.Ended = ChangeReleased, time.Time{} // by a holder that did not record it
			}
			st.EndedBy = ChangeReleased // a hand-over nobody took ends in a release
		}
	}
	for i := range st.History {
		if st.History[i].Epoch == st.Epoch {
			st.History[i].EndedBy, st.History[i].Ended = st.EndedBy, st.Ended
		}
	}
}

// Inspect reads the status of the lock blob blobName in the container cc
// points at. It needs only read access and holds no lease. Transient
// failures are retried for at most 6 s, never past ctx's deadline.
func Inspect(ctx context.Context, cc *container.Client, blobName string) (Status, error) {
	t, err := newTarget(cc, blobName, "blobName")
	if err != nil {
		return Status{}, err
	}
	cfg, _ := (*LeaseOptions)(nil).config("")
	return newLease(t, cfg).Inspect(ctx)
}

// Inspect reads the status of the lease's lock blob, retrying transient
// failures for at most 2 × AttemptTimeout (6 s by default) and never past
// ctx's deadline.
func (l *Lease) Inspect(ctx context.Context) (Status, error) {
	if err := l.initErr(); err != nil {
		return Status{}, err
	}
	return l.inspect(ctx, time.Now().Add(2*l.cfg.attemptTimeout))
}

// inspect reads the status, retrying transient failures until limit.
func (l *Lease) inspect(ctx context.Context, limit time.Time) (Status, error) {
	var st Status
	err := l.loop(ctx, "read", limit, func(actx context.Context, send time.Time) (bool, error) {
		props, err := l.bc.GetProperties(actx, nil)
		switch c := classify(ctx, err); c {
		case classOK:
		case classNotFound:
			st = Status{Name: l.t.blob}
			return true, nil
		case classTransient, classConflict:
			return false, l.errorf("read", ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, l.errorf("read", ErrPermanent, err)
		}
		r, err := parseRecord(props.Metadata)
		if err != nil {
			return true, l.errorf("read", ErrPermanent, err)
		}
		st = Status{Name: l.t.blob, Exists: true, Metadata: userMetadata(props.Metadata), raw: props.Metadata, readAt: time.Now()}
		if props.ETag != nil {
			st.etag = *props.ETag
		}
		if props.CreationTime != nil {
			st.created = *props.CreationTime
		}
		if props.LastModified != nil && props.Date != nil {
			st.modified, st.listed = *props.LastModified, *props.Date
		}
		l.see(r.epoch)
		if props.LeaseState != nil {
			st.State = string(*props.LeaseState)
			st.Leased = st.State == "leased" || st.State == "breaking"
		}
		st.setRecord(r)
		if st.Leased {
			l.sawHeld(r.epoch, send)
		}
		return true, nil
	})
	return st, err
}
