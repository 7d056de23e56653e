package azlease

// An election's candidates, and the records planned succession keeps
// (elector_succession.go is the Elector's side):
//
//   - NAME/candidates/<identity, escaped> is a candidate: every running
//     Elector of the election NAME (unless ElectorOptions.NoSuccession)
//     writes one when it starts and whenever what it says changes, writes
//     it again (Set Blob Metadata) every third of its time to live, and
//     deletes it when it stops. Its metadata holds the lease ID it
//     announces (a leader hands the lease to it), its priority, labels,
//     whether it is ready, stopping, or yielded recently, when it started
//     (its wall clock, for display and to prefer the newest), how long it
//     goes between polls, how fast it polls while designated, the
//     designation it acknowledged, its time to live (its lease duration)
//     and when what it says last changed (storage's clock). Candidate blobs
//     have no lease: liveness is the blob's age on storage's clock (a
//     listing's Date less its Last-Modified), so a candidate whose instance
//     stopped writing is gone one time to live after its last write. The
//     leader lists them all with one List Blobs request per poll.
//   - NAME/candidates/~yield is a yield request ('azlease yield NAME', or
//     RequestYield): the epoch of the term asked to yield, the candidate to
//     yield to (or anyone), who asked and when; the leader of that epoch
//     answers it in the same blob. "~y" never starts an escaped identity.
//     A leader creates it empty (epoch 0: no request) if it is missing, so
//     that its frequent look at it (yieldLook) always finds a blob.
//   - On the lock blob, under the lease, the record's designation (metaHeir:
//     the successors the leader designated, best first, with a token that
//     names the designation, and how long they may poll fast) and the list
//     of recent terms that ended without a clean release (metaFails).
//
// Identities are escaped for blob names byte by byte: letters, digits, '.',
// '_' and '-' stay, every other byte becomes "~" and two upper-case hex
// digits.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Metadata keys of candidate and yield request blobs.
const (
	metaCandidate   = "azleasecandidate" // the candidacy format's version: "1"
	metaCandID      = "azleaseid"        // the lease ID it announces
	metaCandPrio    = "azleaseprio"
	metaCandLabels  = "azleaselabels"   // URL-query encoded
	metaCandReady   = "azleaseready"    // "1" or "0"
	metaCandStop    = "azleasestopping" // "1" while it stops
	metaCandYielded = "azleaseyielded"  // "1" for its Cooldown after it yielded
	metaCandSince   = "azleasesince"    // ms since 1970, its clock
	metaCandPoll    = "azleasepoll"     // ms: the longest it goes between two polls of the lock
	metaCandFast    = "azleasefast"     // ms: how often it polls while designated
	metaCandAck     = "azleaseack"      // the designation token it acknowledged
	metaCandTTL     = "azleasettl"      // ms: gone when not written for this long (storage's clock)
	metaCandChanged = "azleasechanged"  // ms since 1970, storage's clock: when what it says last changed
	metaYieldEpoch  = "azleaseyieldepoch"
	metaYieldTo     = "azleaseyieldto"
	metaYieldBy     = "azleaseyieldby"
	metaYieldAt     = "azleaseyieldat"
	metaYieldAnswer = "azleaseyieldanswer"

	candidatesSuffix = "/candidates/"
	yieldKey         = "~yield"
	candidateVersion = "1"
)

// A running Elector writes its candidacy again every third of its time to
// live (its lease duration), whether or not it changed; one not written for
// its time to live, by storage's clock, is gone (see Candidate.Gone).
// candidateStale is the time to live of a candidacy that publishes none
// (azlease versions that wrote it every 10 minutes). A leader deletes a
// candidacy gone for goneKeep, so that status shows a crashed instance for
// a while before it disappears.
const (
	candidateStale = 30 * time.Minute
	goneKeep       = 5 * time.Minute
)

// Limits on ElectorOptions.Labels, so that a candidate's metadata stays far
// below Azure's 8 KiB.
const (
	MaxLabels          = 16
	maxLabelName       = 63
	maxLabelValue      = 255
	maxLabelsEncoded   = 2048
	maxRecordedFailure = 8 // failures kept in the lock blob's record
)

// CandidatesName returns the prefix of the candidate blobs of the election
// name: name + "/candidates/".
func CandidatesName(name string) string { return name + candidatesSuffix }

// candidateKey escapes an identity for a blob name (see the top of this
// file).
func candidateKey(identity string) string {
	var b strings.Builder
	for i := 0; i < len(identity); i++ {
		c := identity[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "~%02X", c)
		}
	}
	return b.String()
}

// Candidate is one contender of a leader election, as it published itself
// ([InspectCandidates], [Status.Candidate]).
type Candidate struct {
	// Identity is its ElectorOptions.Identity.
	Identity string
	// Priority is its ElectorOptions.Priority: the leader yields to a
	// ready candidate of strictly higher priority, and a stopping leader
	// hands over to the best one.
	Priority int
	// Labels are its ElectorOptions.Labels (zone, version, …), for display.
	Labels map[string]string
	// Ready is false while the instance says it cannot lead
	// ([Elector.SetReady]): no leader hands over to it.
	Ready bool
	// Stopping is true while it stops: no leader hands over to it.
	Stopping bool
	// Yielded is true for its Cooldown after it yielded leadership: no
	// leader yields back to it for its priority meanwhile.
	Yielded bool
	// Since is when it started, by its own wall clock; among candidates of
	// equal priority the newest is preferred (in a rolling deploy, the new
	// generation).
	Since time.Time
	// Acknowledged is the epoch of the term whose leader designated it as
	// successor and whose designation it acknowledged (it then looks at the
	// lock blob every SuccessorPollInterval); 0 when none.
	Acknowledged uint64
	// Gone is true when its instance stopped writing the candidacy: it
	// crashed, hangs, or cannot reach storage. A running Elector writes it
	// every third of its lease duration; it is gone once not written for a
	// lease duration by storage's clock (to the second), so a crashed
	// instance is gone within a lease duration and a second. Leaders never
	// hand over to it, and delete it after 5 minutes. One not written for
	// two thirds of a lease duration (it missed a refresh) is not gone yet
	// but is not made a standby or handed over to either.
	Gone bool
	// Refreshed is when the candidacy was last written, by storage's clock
	// (to the second); zero when unknown.
	Refreshed time.Time
}

// candidate is a Candidate as a listing found it.
type candidate struct {
	Candidate
	id   string        // the lease ID it announces
	poll time.Duration // the longest it goes between two polls
	fast time.Duration // its poll while designated
	ack  string        // the designation token it acknowledged
	name string        // its blob
	ttl  time.Duration // gone when not written for this long
	// modified is its blob's Last-Modified (storage's clock): when it last
	// wrote its candidacy; changed when what it says last changed (the
	// same clock; modified when it does not say); etag its ETag as listed.
	modified time.Time
	changed  time.Time
	etag     azcore.ETag
	// late is true when it missed a refresh (lateAt): not gone yet, but
	// not chosen as a successor until it writes again.
	late bool
}

// YieldRequest is a request to the leader of an election to hand
// leadership over ('azlease yield', [RequestYield]), and the leader's
// answer.
type YieldRequest struct {
	// Epoch is the term asked to yield: only its leader acts on it.
	Epoch uint64
	// To names the candidate to yield to; "" means the best one.
	To string
	// By is who asked; At when, by its clock.
	By string
	At time.Time
	// Answer is "" until the leader of Epoch answers: "handing over to X",
	// or "declined: why".
	Answer string
	etag   azcore.ETag
}

// errNoCandidate means that no other ready candidate is there to take
// leadership over (or not the one asked for).
var errNoCandidate = errors.New("no other ready candidate")

// notReadyError is errNoCandidate for a named successor that is not a
// ready candidate: the others may be.
type notReadyError struct{ to string }

func (e notReadyError) Error() string        { return fmt.Sprintf("%q is not a ready candidate", e.to) }
func (e notReadyError) Is(target error) bool { return target == errNoCandidate }

// ErrNoSuccessor is returned by [Elector.Yield] and [Elector.YieldTo] when
// no candidate could take leadership over: none is ready (or the one named
// is not), or none took it in time (the lease was then released).
var ErrNoSuccessor = errors.New("azlease: no successor took leadership")

// ErrNotLeader is returned by [Elector.Yield] and [Elector.YieldTo] when
// this instance does not lead, and by [RequestYield] when nobody leads.
var ErrNotLeader = errors.New("azlease: not the leader")

// Candidate reads the candidate an election's candidate blob (listed by
// [InspectPrefix]) publishes, and the election's name; ok is false for a
// blob that is not a candidate.
func (st Status) Candidate() (c Candidate, election string, ok bool) {
	cd, election, ok := parseCandidate(st)
	return cd.Candidate, election, ok
}

// YieldRequest reads the yield request an election's yield blob (listed by
// [InspectPrefix]) holds, and the election's name; ok is false for a blob
// that is not one.
func (st Status) YieldRequest() (y YieldRequest, election string, ok bool) {
	return parseYield(st)
}

// candidateElection splits a candidate or yield blob's name into the
// election and the key after "/candidates/".
func candidateElection(name string) (election, key string, ok bool) {
	i := strings.LastIndex(name, candidatesSuffix)
	if i <= 0 || i+len(candidatesSuffix) >= len(name) {
		return "", "", false
	}
	return name[:i], name[i+len(candidatesSuffix):], true
}

func parseCandidate(st Status) (candidate, string, bool) {
	election, key, ok := candidateElection(st.Name)
	if !ok || key == yieldKey {
		return candidate{}, "", false
	}
	if v, ok := lookup(st.raw, metaCandidate); !ok || v != candidateVersion {
		return candidate{}, "", false
	}
	id, ok := lookup(st.raw, metaCandID)
	if !ok || id == "" {
		return candidate{}, "", false
	}
	c := candidate{id: id, name: st.Name, modified: st.modified, etag: st.etag}
	if v, ok := lookup(st.raw, metaWaiterHolder); ok {
		c.Identity, _ = url.QueryUnescape(v)
	}
	if c.Identity == "" || candidateKey(c.Identity) != key {
		return candidate{}, "", false
	}
	num := func(k string) int64 {
		v, _ := lookup(st.raw, k)
		n, _ := strconv.ParseInt(v, 10, 64)
		return n
	}
	c.Priority = int(num(metaCandPrio))
	if v, ok := lookup(st.raw, metaCandLabels); ok && v != "" {
		if vals, err := url.ParseQuery(v); err == nil {
			c.Labels = map[string]string{}
			for k, vs := range vals {
				if len(vs) > 0 {
					c.Labels[k] = vs[0]
				}
			}
		}
	}
	flag := func(k string) bool { v, _ := lookup(st.raw, k); return v == "1" }
	c.Ready, c.Stopping, c.Yielded = flag(metaCandReady), flag(metaCandStop), flag(metaCandYielded)
	if ms := num(metaCandSince); ms > 0 {
		c.Since = time.UnixMilli(ms).UTC()
	}
	c.poll = time.Duration(num(metaCandPoll)) * time.Millisecond
	c.fast = time.Duration(num(metaCandFast)) * time.Millisecond
	if c.poll <= 0 || c.poll > 2*MaxPollInterval {
		c.poll = 2 * MaxPollInterval // unknown: never wait for it
	}
	if c.fast <= 0 || c.fast > c.poll {
		c.fast = c.poll
	}
	c.ack, _ = lookup(st.raw, metaCandAck)
	if d, ok := parseToken(c.ack); ok {
		c.Acknowledged = d.epoch
	}
	c.ttl = time.Duration(num(metaCandTTL)) * time.Millisecond
	if c.ttl <= 0 || c.ttl > candidateStale {
		c.ttl = candidateStale // none published (an older azlease), or nonsense
	}
	c.changed = c.modified
	if ms := num(metaCandChanged); ms > 0 {
		if t := time.UnixMilli(ms).UTC(); !c.modified.IsZero() && t.Before(c.modified) {
			c.changed = t
		}
	}
	if !c.modified.IsZero() {
		c.Refreshed = c.modified.UTC()
	}
	c.Gone = goneAt(st.listed, c.modified, c.ttl)
	c.late = lateAt(st.listed, c.modified, c.ttl)
	return c, election, true
}

// lateAt reports whether a candidacy last written at modified, with time to
// live ttl, missed a refresh at date (both storage's clock, to the second):
// not written for two refresh intervals (a third of ttl each), and at least
// a refresh interval and two seconds (the seconds both clocks round away
// and the write's own time), so that a running instance, which writes it
// every refresh interval, is never late. A leader that crashed is late
// when its lease runs out: its last write was at most a refresh interval
// before its last renewal, so at the take-over, a lease duration later, its
// candidacy is two thirds of ttl old, and the new leader does not make it
// its standby in the third of ttl before it is gone.
func lateAt(date, modified time.Time, ttl time.Duration) bool {
	after := max(2*(ttl/3), ttl/3+2*time.Second)
	return !date.IsZero() && !modified.IsZero() && date.Sub(modified) >= after
}

// goneAt reports whether a candidacy last written at modified, with time
// to live ttl, is gone at date (both storage's clock, to the second): not
// written for ttl. Unknown times say nothing.
func goneAt(date, modified time.Time, ttl time.Duration) bool {
	return !date.IsZero() && !modified.IsZero() && date.Sub(modified) >= ttl
}

func parseYield(st Status) (YieldRequest, string, bool) {
	election, key, ok := candidateElection(st.Name)
	if !ok || key != yieldKey {
		return YieldRequest{}, "", false
	}
	v, ok := lookup(st.raw, metaYieldEpoch)
	e, err := strconv.ParseUint(v, 10, 64)
	if !ok || err != nil || e == 0 {
		return YieldRequest{}, "", false
	}
	y := YieldRequest{Epoch: e, etag: st.etag}
	if v, ok := lookup(st.raw, metaYieldTo); ok {
		y.To, _ = url.QueryUnescape(v)
	}
	if v, ok := lookup(st.raw, metaYieldBy); ok {
		y.By, _ = url.QueryUnescape(v)
	}
	if v, ok := lookup(st.raw, metaYieldAt); ok {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			y.At = time.UnixMilli(ms).UTC()
		}
	}
	if v, ok := lookup(st.raw, metaYieldAnswer); ok {
		y.Answer, _ = url.QueryUnescape(v)
	}
	return y, election, true
}

// candidateMetadata is c's blob metadata.
func candidateMetadata(c candidate) map[string]*string {
	b := func(v bool) *string {
		if v {
			return to.Ptr("1")
		}
		return to.Ptr("0")
	}
	md := map[string]*string{
		metaCandidate:    to.Ptr(candidateVersion),
		metaCandID:       to.Ptr(c.id),
		metaWaiterHolder: to.Ptr(url.QueryEscape(c.Identity)),
		metaCandPrio:     to.Ptr(strconv.Itoa(c.Priority)),
		metaCandReady:    b(c.Ready),
		metaCandSince:    to.Ptr(strconv.FormatInt(c.Since.UnixMilli(), 10)),
		metaCandPoll:     to.Ptr(strconv.FormatInt(c.poll.Milliseconds(), 10)),
		metaCandFast:     to.Ptr(strconv.FormatInt(max(1, c.fast.Milliseconds()), 10)),
	}
	if len(c.Labels) > 0 {
		md[metaCandLabels] = to.Ptr(encodeLabels(c.Labels))
	}
	if c.Stopping {
		md[metaCandStop] = to.Ptr("1")
	}
	if c.Yielded {
		md[metaCandYielded] = to.Ptr("1")
	}
	if c.ack != "" {
		md[metaCandAck] = to.Ptr(c.ack)
	}
	if c.ttl > 0 {
		md[metaCandTTL] = to.Ptr(strconv.FormatInt(c.ttl.Milliseconds(), 10))
	}
	return md
}

// encodeLabels encodes labels as a URL query, names in order.
func encodeLabels(labels map[string]string) string {
	v := url.Values{}
	for k, x := range labels {
		v.Set(k, x)
	}
	return v.Encode()
}

// labelsProblem says what is wrong with ElectorOptions.Labels, or "".
func labelsProblem(labels map[string]string) string {
	if len(labels) > MaxLabels {
		return fmt.Sprintf("%d labels: at most %d", len(labels), MaxLabels)
	}
	names := make([]string, 0, len(labels))
	for k := range labels {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := labels[k]
		if k == "" || len(k) > maxLabelName {
			return fmt.Sprintf("name %q: 1 to %d bytes", k, maxLabelName)
		}
		for _, c := range k {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '/') {
				return fmt.Sprintf("name %q: letters, digits, '.', '_', '-' and '/' only", k)
			}
		}
		if len(v) > maxLabelValue || !utf8.ValidString(v) || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return fmt.Sprintf("value of %q: at most %d bytes of printable UTF-8", k, maxLabelValue)
		}
	}
	if n := len(encodeLabels(labels)); n > maxLabelsEncoded {
		return fmt.Sprintf("%d bytes encoded: at most %d", n, maxLabelsEncoded)
	}
	return ""
}

// designation is a leader's choice of successors, written into the lock
// blob's record (metaHeir): "EPOCH-SERIAL-HOLDMS,heir,heir…", heirs
// query-escaped. Its token ("EPOCH-SERIAL") names it: a candidate
// acknowledges that exact designation, so that an acknowledgement of an
// earlier one is never taken for a new one. hold is how long a heir may
// poll fast for it from when it first saw it. A hold of 0 is a standing
// designation: the leader's standby, which polls every standbyPoll while
// the record names it and acknowledges nothing (azlease versions before it
// acknowledge it and poll as usual).
type designation struct {
	epoch  uint64
	serial uint64
	hold   time.Duration
	heirs  []string
}

func (d designation) token() string {
	if d.epoch == 0 {
		return ""
	}
	return strconv.FormatUint(d.epoch, 10) + "-" + strconv.FormatUint(d.serial, 10)
}

func (d designation) format() string {
	parts := []string{d.token() + "-" + strconv.FormatInt(d.hold.Milliseconds(), 10)}
	for _, h := range d.heirs {
		parts = append(parts, url.QueryEscape(h))
	}
	return strings.Join(parts, ",")
}

// standing reports whether d names the leader's standby rather than
// successors for a hand-off.
func (d designation) standing() bool { return d.hold == 0 }

// shown is d as Status shows it: the successors of a hand-off, or the
// standby of a standing designation.
func (d designation) shown() (designated []string, standby string) {
	if d.standing() && len(d.heirs) > 0 {
		return nil, d.heirs[0]
	}
	return d.heirs, ""
}

// names reports whether d designates identity.
func (d designation) names(identity string) bool { return slices.Contains(d.heirs, identity) }

func parseToken(v string) (designation, bool) {
	f := strings.Split(v, "-")
	if len(f) != 2 {
		return designation{}, false
	}
	e, err1 := strconv.ParseUint(f[0], 10, 64)
	s, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || e == 0 {
		return designation{}, false
	}
	return designation{epoch: e, serial: s}, true
}

func parseDesignation(v string) (designation, bool) {
	parts := strings.Split(v, ",")
	if len(parts) < 2 {
		return designation{}, false
	}
	f := strings.Split(parts[0], "-")
	if len(f) != 3 {
		return designation{}, false
	}
	d, ok := parseToken(f[0] + "-" + f[1])
	ms, err := strconv.ParseInt(f[2], 10, 64)
	if !ok || err != nil || ms < 0 {
		return designation{}, false
	}
	d.hold = time.Duration(ms) * time.Millisecond
	for _, p := range parts[1:] {
		if h, err := url.QueryUnescape(p); err == nil && h != "" {
			d.heirs = append(d.heirs, h)
		}
	}
	return d, len(d.heirs) > 0
}

// failure is an Elector term that ended without a clean release: its
// holder, and when the next holder found that out (its clock).
type failure struct {
	holder string
	at     time.Time
}

// failShort is the longest term whose unclean end counts as a failure of
// its holder: a leader that crashes after days is not "failing".
const failShort = time.Hour

// failPenalty is how long a candidate that failed is not preferred after
// its latest failure: this, doubled for each earlier failure within a day,
// at most a day.
const failPenalty = 10 * time.Minute

func parseFailures(v string) []failure {
	var out []failure
	for _, item := range strings.Split(v, ";") {
		f := strings.Split(item, ",")
		if len(f) != 2 {
			continue
		}
		ms, err1 := strconv.ParseInt(f[0], 10, 64)
		h, err2 := url.QueryUnescape(f[1])
		if err1 != nil || err2 != nil || h == "" {
			continue
		}
		out = append(out, failure{holder: h, at: time.UnixMilli(ms).UTC()})
	}
	return out
}

func formatFailures(fs []failure) string {
	items := make([]string, len(fs))
	for i, f := range fs {
		items[i] = strconv.FormatInt(f.at.UnixMilli(), 10) + "," + url.QueryEscape(f.holder)
	}
	return strings.Join(items, ";")
}

// recentFailures drops failures older than a day (by now, this holder's
// clock).
func recentFailures(fs []failure, now time.Time) []failure {
	var out []failure
	for _, f := range fs {
		if now.Sub(f.at) < 24*time.Hour {
			out = append(out, f)
		}
	}
	return out
}

// noteFailure adds prev's holder to fs (newest first, at most
// maxRecordedFailure) when prev, the term before a new one, ended without a
// clean release within failShort of its start.
func noteFailure(fs []failure, prev record, now time.Time) []failure {
	if prev.epoch == 0 || prev.released || prev.holder == "" || prev.acquired.IsZero() || now.Sub(prev.acquired) >= failShort {
		return fs
	}
	out := append([]failure{{holder: prev.holder, at: now.UTC().Truncate(time.Millisecond)}}, fs...)
	if len(out) > maxRecordedFailure {
		out = out[:maxRecordedFailure]
	}
	return out
}

// penalisedUntil is when identity becomes preferable again after the
// failures fs record (zero when it has none): failPenalty after its latest,
// doubled for each other within the day, at most a day.
func penalisedUntil(fs []failure, identity string) time.Time {
	var latest time.Time
	n := 0
	for _, f := range fs {
		if f.holder == identity {
			n++
			if f.at.After(latest) {
				latest = f.at
			}
		}
	}
	if n == 0 {
		return time.Time{}
	}
	p := failPenalty << min(n-1, 8)
	return latest.Add(min(p, 24*time.Hour))
}

// rankCandidates orders candidates for a hand-off, best first: ready,
// not stopping, not gone and not late (lateAt) before the others (which
// are dropped), not penalised
// (penalised reports it) before penalised, higher priority first, then the
// most recently started.
func rankCandidates(cs []candidate, penalised func(candidate) bool) []candidate {
	out := make([]candidate, 0, len(cs))
	for _, c := range cs {
		if c.Ready && !c.Stopping && !c.Gone && !c.late {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if pa, pb := penalised(a), penalised(b); pa != pb {
			return !pa
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.Since.Equal(b.Since) {
			return a.Since.After(b.Since)
		}
		return a.Identity < b.Identity
	})
	return out
}

// candidacy is an Elector's candidate blob and the listing of its
// election's candidates. Its refresh timer writes the blob again every third
// of its time to live: a timer and no goroutine of its own (the write runs
// on the goroutine of the timer that fired, as a keeper's renewal does);
// stop ends it and waits for a write in flight.
type candidacy struct {
	election string
	ops      *Lease        // writes and deletes of this candidate's blob
	quiet    *Lease        // the refresh timer's writes: ops without logs (refreshFired logs at Debug)
	lister   *Lease        // listings of the candidates
	ttl      time.Duration // gone when not written for this long: the Elector's lease duration

	// writing makes writes one at a time, each sending what the blob
	// should say when it starts: the last one to end says the latest. A
	// channel rather than a mutex: a write waits on it for as long as
	// another write takes (testing/synctest sees that wait as durable).
	writing chan struct{}

	mu        sync.Mutex
	want      candidate // what the blob should say
	written   candidate // what it says, as far as this process knows
	writtenAt time.Time // when the last write that succeeded was sent (this process's clock)
	changedAt time.Time // storage's Last-Modified of the write that published what written says
	exists    bool      // written at least once and not deleted since
	dirty     bool      // want changed since the last write
	container bool      // the container was created by this candidacy

	// The refresh timer (see refreshFired). healthy, when set, says
	// whether its owner reaches storage: a refresh waits until it does,
	// so that an outage is reported (and retried) once, by the owner.
	healthy   func() bool
	timer     *time.Timer
	started   bool
	stopped   bool
	rctx      context.Context // its writes; cancelled by stop
	rcancel   context.CancelFunc
	ownerDone <-chan struct{} // closed when the owner stops: no more refreshes
	pending   sync.WaitGroup  // the armed timer until its function returns
}

func newCandidacy(t target, cfg leaseConfig, self candidate) *candidacy {
	name := CandidatesName(t.blob) + candidateKey(self.Identity)
	ct := t
	ct.blob = name
	ops := newLease(ct, cfg)
	qcfg := cfg
	qcfg.log = slog.New(slog.DiscardHandler)
	quiet := newLease(ct, qcfg)
	quiet.tm = ops.tm
	lister := newListLease(t, CandidatesName(t.blob), cfg)
	self.name = name
	self.ttl = cfg.duration
	return &candidacy{election: t.blob, ops: ops, quiet: quiet, lister: lister, ttl: cfg.duration, want: self, dirty: true, writing: make(chan struct{}, 1)}
}

// refreshEvery is how often the candidacy is written again: a third of its
// time to live, so that a write that fails and one retry still keep it
// alive.
func (c *candidacy) refreshEvery() time.Duration { return c.ttl / 3 }

// update changes what the blob should say; the next sync writes it.
func (c *candidacy) update(change func(*candidate)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	before := candidateMetadata(c.want)
	change(&c.want)
	if !sameMetadata(before, candidateMetadata(c.want)) {
		c.dirty = true
	}
}

// self returns what the blob should say.
func (c *candidacy) self() candidate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.want
}

func sameMetadata(a, b map[string]*string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || (v == nil) != (w == nil) || (v != nil && *v != *w) {
			return false
		}
	}
	return true
}

// sync writes the blob if what it should say changed, or if a third of its
// time to live has passed since the last write, within AttemptTimeout.
func (c *candidacy) sync(ctx context.Context) error { return c.syncWith(ctx, c.ops, c.refreshEvery()) }

// syncWith is sync sending its requests through l (ops or quiet), writing
// again once every has passed since the last write.
func (c *candidacy) syncWith(ctx context.Context, l *Lease, every time.Duration) error {
	select {
	case c.writing <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	defer func() { <-c.writing }()
	c.mu.Lock()
	if !c.dirty && c.exists && time.Since(c.writtenAt) < every {
		c.mu.Unlock()
		return nil
	}
	want, changed, exists := c.want, c.changedAt, c.exists
	// A candidacy not written for its time to live may have been seen
	// gone: coming back is a change (a leader's StabilityWindow counts
	// from it).
	dirty := c.dirty || changed.IsZero() || time.Since(c.writtenAt) >= c.ttl
	c.dirty = false
	c.mu.Unlock()
	if dirty {
		changed = time.Time{}
	}
	send := time.Now()
	modified, err := c.write(ctx, l, want, changed, exists)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.dirty = c.dirty || dirty
		return err
	}
	c.written, c.exists, c.writtenAt = want, true, send
	if changed.IsZero() {
		c.changedAt = modified
	}
	return nil
}

// write sends want's metadata (with changed, when not zero, as when what
// it says last changed): Set Blob Metadata when the blob exists, or an
// upload of the zero-byte blob (creating the container on first use unless
// NoCreate), within AttemptTimeout. It returns the blob's Last-Modified as
// storage answered (zero if it did not say).
func (c *candidacy) write(ctx context.Context, l *Lease, want candidate, changed time.Time, exists bool) (time.Time, error) {
	md := candidateMetadata(want)
	if !changed.IsZero() {
		md[metaCandChanged] = to.Ptr(strconv.FormatInt(changed.UnixMilli(), 10))
	}
	var modified time.Time
	err := l.loop(ctx, "write", time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		var err error
		if exists {
			var resp blob.SetMetadataResponse
			resp, err = l.bc.SetMetadata(actx, md, nil)
			if err == nil && resp.LastModified != nil {
				modified = *resp.LastModified
			}
			if classify(ctx, err) == classNotFound {
				// Deleted (a leader took it for gone): write it whole,
				// as new.
				exists = false
				delete(md, metaCandChanged)
				return false, l.errorf("write", ErrTransient, err)
			}
		} else {
			var resp blockblob.UploadResponse
			resp, err = l.bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md})
			if err == nil && resp.LastModified != nil {
				modified = *resp.LastModified
			}
			if bloberror.HasCode(err, bloberror.ContainerNotFound) && l.cfg.create {
				c.mu.Lock()
				first := !c.container
				c.container = true
				c.mu.Unlock()
				if first {
					if _, cerr := l.t.cc.Create(actx, nil); cerr != nil && !bloberror.HasCode(cerr, bloberror.ContainerAlreadyExists) {
						return false, l.errorf("create", kindOf(classify(ctx, cerr)), cerr)
					}
					return false, l.errorf("create", ErrTransient, errors.New("created the container"))
				}
			}
		}
		switch cl := classify(ctx, err); cl {
		case classOK:
			return true, nil
		case classConflict:
			return l.attemptEnd("write", classTransient, err)
		default:
			return l.attemptEnd("write", cl, err)
		}
	})
	return modified, err
}

// startRefresh arms the refresh timer. ctx's values go with the writes;
// once ctx ends (its owner stops) the timer writes no more, and
// stopRefresh ends it.
func (c *candidacy) startRefresh(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started || c.stopped {
		return
	}
	c.started = true
	c.ownerDone = ctx.Done()
	c.rctx, c.rcancel = context.WithCancel(context.WithoutCancel(ctx))
	c.arm(c.nextRefreshLocked(nil))
}

// nextRefreshLocked is how long until the next refresh after one that
// ended with err: a third of the time to live after the last write (up to
// a tenth sooner, so that candidates started together do not write
// together), or a fifteenth of it after a failure. c.mu is held.
func (c *candidacy) nextRefreshLocked(err error) time.Duration {
	if err != nil {
		return max(c.ttl/15, 10*time.Millisecond)
	}
	every := time.Duration(float64(c.refreshEvery()) * (1 - 0.1*mrand.Float64()))
	if c.writtenAt.IsZero() {
		return every
	}
	return max(every-time.Since(c.writtenAt), 10*time.Millisecond)
}

// arm sets the refresh timer to fire after d, counted in pending; c.mu is
// held and stopped is false.
func (c *candidacy) arm(d time.Duration) {
	c.pending.Add(1)
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.refreshFired)
	} else if c.timer.Reset(d) {
		c.pending.Done()
	}
}

// refreshFired writes the candidacy again if it is due (sync), on the
// timer's goroutine, and arms the timer for the next time.
func (c *candidacy) refreshFired() {
	defer c.pending.Done()
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return
	}
	rctx, healthy, exists := c.rctx, c.healthy, c.exists
	c.mu.Unlock()
	select {
	case <-c.ownerDone:
		return // stopping: it takes its candidacy back, or leaves it to turn gone
	default:
	}
	var err error
	switch {
	case !exists:
		// Not published yet: its owner does that first, after a
		// request that reached storage.
	case healthy != nil && !healthy():
		err = errors.New("storage is failing") // look again soon
	default:
		// Due by the timer's jittered schedule, unless the owner wrote
		// it meanwhile.
		err = c.syncWith(rctx, c.quiet, c.refreshEvery()*8/10)
	}
	if err != nil && rctx.Err() == nil {
		c.ops.cfg.log.Debug("azlease: could not write this instance's candidacy again; retrying soon", slog.Any("error", err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		c.arm(c.nextRefreshLocked(err))
	}
}

// stopRefresh ends the refresh timer, cutting a write in flight short, and
// waits for its function. It may be called more than once.
func (c *candidacy) stopRefresh() {
	c.mu.Lock()
	if !c.stopped {
		c.stopped = true
		if c.rcancel != nil {
			c.rcancel()
		}
		if c.timer != nil && c.timer.Stop() {
			c.pending.Done()
		}
	}
	c.mu.Unlock()
	c.pending.Wait()
}

// remove deletes the blob, within AttemptTimeout, whatever ctx says: an
// Elector that stops takes its candidacy back (after stopRefresh).
func (c *candidacy) remove(ctx context.Context) {
	c.writing <- struct{}{} // no write in flight after stopRefresh, unless the loop's own
	defer func() { <-c.writing }()
	c.mu.Lock()
	exists := c.exists
	c.exists, c.dirty = false, true
	c.mu.Unlock()
	if !exists {
		return
	}
	l := c.ops
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.attemptTimeout)
	defer cancel()
	_ = l.loop(cctx, "write", time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		_, err := l.bc.Delete(actx, nil)
		switch cl := classify(cctx, err); cl {
		case classOK, classNotFound:
			return true, nil
		case classConflict:
			return l.attemptEnd("write", classTransient, err)
		default:
			return l.attemptEnd("write", cl, err)
		}
	})
}

// removeGone deletes the blob of a gone candidate, conditional on its ETag
// as listed (a candidate that wrote it again since keeps it), in one
// AttemptTimeout; best effort.
func (c *candidacy) removeGone(ctx context.Context, cd candidate) {
	l := c.ops
	bc := l.t.cc.NewBlobClient(cd.name)
	opts := &blob.DeleteOptions{}
	if cd.etag != "" {
		opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(cd.etag)}}
	}
	_ = l.loopOn(ctx, "write", cd.name, time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		_, err := bc.Delete(actx, opts)
		switch cl := classify(ctx, err); cl {
		case classTransient:
			return false, l.errorf("write", ErrTransient, err)
		case classCanceled:
			return true, err
		default:
			return true, nil
		}
	})
}

// listing is what one listing of an election's candidates found.
type listing struct {
	candidates []candidate // in name order
	yield      *YieldRequest
	// date is storage's clock when it answered (zero if unknown), to tell
	// how long ago a candidate published itself.
	date time.Time
}

// list lists the election's candidates and its yield request with one List
// Blobs request (per 5,000), retrying transient failures until limit.
func (c *candidacy) list(ctx context.Context, limit time.Time) (listing, error) {
	return listCandidates(ctx, c.lister, c.election, limit)
}

func listCandidates(ctx context.Context, lister *Lease, election string, limit time.Time) (listing, error) {
	sts, date, err := lister.listPrefixAt(ctx, CandidatesName(election), limit)
	if err != nil {
		return listing{}, err
	}
	out := listing{date: date}
	for _, st := range sts {
		if cd, el, ok := parseCandidate(st); ok && el == election {
			out.candidates = append(out.candidates, cd)
		} else if y, el, ok := parseYield(st); ok && el == election {
			out.yield = &y
		}
	}
	return out, nil
}

// InspectCandidates reads the candidates of the election name (an
// [Elector]'s lock blob name) in the container cc points at, as
// [SortCandidates] orders them (gone ones last: [Candidate.Gone]), and the
// pending or latest yield request, if any ([RequestYield]). It needs only read
// access: one List Blobs request per 5,000 candidates. Transient failures
// are retried for at most 6 s, never past ctx's deadline. Electors with
// NoSuccession, and those of azlease versions before succession, publish no
// candidacy.
func InspectCandidates(ctx context.Context, cc *container.Client, name string) ([]Candidate, *YieldRequest, error) {
	t, err := newTarget(cc, name, "name")
	if err != nil {
		return nil, nil, err
	}
	cfg, _ := (*LeaseOptions)(nil).config("")
	lister := newListLease(t, CandidatesName(name), cfg)
	ls, err := listCandidates(ctx, lister, name, time.Now().Add(2*cfg.attemptTimeout))
	if err != nil {
		return nil, nil, err
	}
	out := make([]Candidate, 0, len(ls.candidates))
	for _, c := range ls.candidates {
		out = append(out, c.Candidate)
	}
	SortCandidates(out)
	return out, ls.yield, nil
}

// SortCandidates orders candidates as a leader ranks them for a hand-off
// (failures left aside): ready, not stopping and not gone first, gone ones
// last, then higher priority, then the most recently started, then by
// identity.
func SortCandidates(cs []Candidate) {
	sort.SliceStable(cs, func(i, j int) bool {
		a, b := cs[i], cs[j]
		if ea, eb := a.Ready && !a.Stopping && !a.Gone, b.Ready && !b.Stopping && !b.Gone; ea != eb {
			return ea
		}
		if a.Gone != b.Gone {
			return !a.Gone
		}
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		if !a.Since.Equal(b.Since) {
			return a.Since.After(b.Since)
		}
		return a.Identity < b.Identity
	})
}

// YieldOptions configures [RequestYield]. A nil *YieldOptions means the
// defaults.
type YieldOptions struct {
	// To names the candidate to yield to (its identity); "" means the best
	// ready one, as for a planned stop.
	To string
	// Identity says who asks, for the record. Zero means "<hostname>-<pid>".
	Identity string
}

// RequestYield asks the leader of the election name (an [Elector]'s lock
// blob name) in the container cc points at to hand leadership over to
// another candidate without stopping, from any process: it reads the lock
// blob and writes a yield request for the current term (the blob
// name + "/candidates/~yield", replacing any earlier request). The leader
// acts on it at its next look (within a fifth of its PollInterval: a second
// by default): it answers it
// ("handing over to X", or "declined: why"), designates the successor and
// hands over once it is ready, as [Elector.YieldTo] does. Follow the
// outcome with [Inspect] (a new epoch, another holder) and
// [InspectCandidates] (the answer).
//
// It returns the request as written: its Epoch is the term asked to yield.
// It returns an error wrapping [ErrNotLeader] when nobody leads. Needs
// write access to the container (not to the lease). Leaders with
// NoSuccession, and those of azlease versions before succession, never
// answer.
func RequestYield(ctx context.Context, cc *container.Client, name string, opts *YieldOptions) (YieldRequest, error) {
	t, err := newTarget(cc, name, "name")
	if err != nil {
		return YieldRequest{}, err
	}
	var o YieldOptions
	if opts != nil {
		o = *opts
	}
	cfg, err := (&LeaseOptions{Identity: o.Identity, NoCreate: true}).config("YieldOptions.")
	if err != nil {
		return YieldRequest{}, err
	}
	if o.To != "" {
		if err := validIdentity(o.To); err != "" {
			return YieldRequest{}, optionErr("YieldOptions.To", "%q: %s", o.To, err)
		}
	}
	l := newLease(t, cfg)
	st, err := l.inspect(ctx, time.Now().Add(2*cfg.attemptTimeout))
	if err != nil {
		return YieldRequest{}, err
	}
	if !st.Leased || st.Epoch == 0 {
		return YieldRequest{}, fmt.Errorf("%w: nobody leads %s", ErrNotLeader, name)
	}
	y := YieldRequest{Epoch: st.Epoch, To: o.To, By: cfg.identity, At: time.Now().UTC().Truncate(time.Millisecond)}
	md := map[string]*string{
		metaYieldEpoch: to.Ptr(strconv.FormatUint(y.Epoch, 10)),
		metaYieldTo:    to.Ptr(url.QueryEscape(y.To)),
		metaYieldBy:    to.Ptr(url.QueryEscape(y.By)),
		metaYieldAt:    to.Ptr(strconv.FormatInt(y.At.UnixMilli(), 10)),
	}
	yname := CandidatesName(name) + yieldKey
	bbc := t.cc.NewBlockBlobClient(yname)
	err = l.loopOn(ctx, "write", yname, time.Now().Add(2*cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		resp, err := bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{Metadata: md})
		switch c := classify(ctx, err); c {
		case classOK:
			y.etag = *resp.ETag
			return true, nil
		case classConflict:
			return l.attemptEnd("write", classTransient, err)
		default:
			return l.attemptEnd("write", c, err)
		}
	})
	return y, err
}

// answerYield writes the leader's answer into the yield request y,
// conditional on the request being the one listed (a newer request is
// never answered by mistake), in one AttemptTimeout.
func answerYield(ctx context.Context, l *Lease, election string, y YieldRequest, answer string) error {
	name := CandidatesName(election) + yieldKey
	md := map[string]*string{
		metaYieldEpoch:  to.Ptr(strconv.FormatUint(y.Epoch, 10)),
		metaYieldTo:     to.Ptr(url.QueryEscape(y.To)),
		metaYieldBy:     to.Ptr(url.QueryEscape(y.By)),
		metaYieldAt:     to.Ptr(strconv.FormatInt(y.At.UnixMilli(), 10)),
		metaYieldAnswer: to.Ptr(url.QueryEscape(answer)),
	}
	return l.setMetadataIf(ctx, name, md, y.etag)
}

// readYield reads the election's yield request blob (one Get Blob
// Properties, retried within AttemptTimeout): found is false when there is
// none, and y nil when it holds no request (created empty by a leader).
func readYield(ctx context.Context, l *Lease, election string) (y *YieldRequest, found bool, err error) {
	name := CandidatesName(election) + yieldKey
	bc := l.t.cc.NewBlobClient(name)
	err = l.loopOn(ctx, "read", name, time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		props, err := bc.GetProperties(actx, nil)
		switch c := classify(ctx, err); c {
		case classOK:
		case classNotFound:
			return true, nil
		default:
			return l.attemptEnd("read", c, err)
		}
		found = true
		st := Status{Name: name, raw: props.Metadata}
		if props.ETag != nil {
			st.etag = *props.ETag
		}
		if got, _, ok := parseYield(st); ok {
			y = &got
		}
		return true, nil
	})
	return y, found, err
}

// createYield creates the election's yield request blob empty (epoch 0: no
// request) unless it exists, in one AttemptTimeout; best effort.
func createYield(ctx context.Context, l *Lease, election string) {
	name := CandidatesName(election) + yieldKey
	bbc := l.t.cc.NewBlockBlobClient(name)
	md := map[string]*string{metaYieldEpoch: to.Ptr("0")}
	opts := &blockblob.UploadOptions{Metadata: md, AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}}}
	_ = l.loopOn(ctx, "write", name, time.Now().Add(l.cfg.attemptTimeout), func(actx context.Context, _ time.Time) (bool, error) {
		_, err := bbc.Upload(actx, streaming.NopCloser(bytes.NewReader(nil)), opts)
		switch c := classify(ctx, err); c {
		case classOK, classExists, classConflict:
			return true, nil // there now, whoever wrote it
		default:
			return l.attemptEnd("write", c, err)
		}
	})
}
