package azlease

// An Elector's planned succession (the records are in candidates.go, the
// hand-off itself in succession.go):
//
//   - As a follower, an Elector publishes its candidacy (written when it
//     starts, when it changes, and every third of its lease duration: see
//     candidates.go) and polls the lock blob as before. When the leader's
//     record names it as its standby (a standing designation), it polls
//     every standbyPoll; when the record designates it as successor for a
//     hand-off, it acknowledges (one write to its candidacy) and polls
//     every SuccessorPollInterval while the designation stands (at most the
//     time the designation gives); when the record's hand-off marker names
//     it, it takes the lease over (takeOver: Change Lease from the
//     hand-off's ID, derived from the one it announced, to a fresh one,
//     Renew, epoch write). Finding the lease free, it leaves it for a
//     while to a live ready candidate of higher priority (holdBack).
//   - As the leader, it lists the candidates (one List Blobs) every
//     PollInterval: it names the best one its standby, yields to a
//     candidate of higher priority after the StabilityWindow (and its own
//     Cooldown), and acts on a yield request for its term, which it also
//     looks for every standbyPoll (one Get Blob Properties).
//   - Handing over, for any reason (Stop, the task returning after
//     PrepareStop, Yield, YieldTo, a yield request, a preferred candidate):
//     while still leading, it designates the best ready candidates (two at
//     most, best first) in its record and waits, at most HandOffWait, for
//     the first to acknowledge; then it ends its term, waits for its work to
//     return (DrainTimeout), and hands the lease to the acknowledged
//     successors in order (succession.go: the lease is never free). If none
//     acknowledged, a planned stop releases the lease as before, and a yield
//     is called off.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/azlease/azlease/internal/timing"
)

// ErrYielded is the cause of a term that ended because its leader handed
// leadership over while going on as a candidate: a yield, or a candidate of
// higher priority. It wraps [ErrStopped].
var ErrYielded = fmt.Errorf("%w: leadership handed over to a successor", ErrStopped)

// errNoAck means that no designated successor acknowledged in time.
var errNoAck = errors.New("no designated successor acknowledged")

// Reasons for a hand-off, as metrics and logs name them.
const (
	reasonStop      = "stop"       // Stop, or the task returning after PrepareStop
	reasonYield     = "yield"      // Yield or YieldTo
	reasonRequest   = "request"    // a yield request ('azlease yield')
	reasonPriority  = "priority"   // a ready candidate of higher priority
	reasonNeverLead = "never_lead" // a negative-priority leader gives way
)

// ackMargin is what a leader adds to a candidate's poll interval when it
// waits for its acknowledgement: the candidate's read, its write, and the
// leader's own listing.
const ackMargin = 500 * time.Millisecond

// stopListLimit bounds the listing of the candidates a stopping leader
// makes when it has no recent one.
const stopListLimit = time.Second

// standbyPoll is how often a leader's standby polls the lock blob, and how
// often a leader looks at its yield request: a fifth of PollInterval, at
// least SuccessorPollInterval, at most PollInterval (1 s by default). It
// makes a hand-off's preparation take about this long rather than a
// follower's poll.
func (s *succession) standbyPoll() time.Duration {
	return min(max(s.e.cfg.poll/5, s.cfg.successPoll), s.e.cfg.poll)
}

// successionTakeMargin is what a leader adds to a designated successor's
// fast poll when it waits for it to take a hand-off over (Change, Renew and
// the epoch write after the read that found the marker).
const successionTakeMargin = 100 * time.Millisecond

// succession is an Elector's side of planned succession (nil with
// NoSuccession).
type succession struct {
	e        *Elector
	cfg      successionConfig
	cand     *candidacy
	identity string

	// calls carries Yield, YieldTo and PrepareStop to the loop goroutine.
	calls chan *handOverCall

	// The follower's state (loop goroutine only).
	announced string    // the lease ID the candidacy announces
	ackToken  string    // the designation acknowledged
	fastUntil time.Time // polling every SuccessorPollInterval until then
	standby   bool      // the leader's record names it as standby: polling every standbyPoll
	freeSince time.Time // when it found the lock free while a candidate of higher priority was there

	mu sync.Mutex
	// The leader's state, for its current term.
	termEpoch    uint64
	firstSeen    map[string]time.Time // candidates by key: when this leader first listed them
	unresponsive map[string]time.Time // candidates that did not acknowledge, until when they are passed over
	serial       uint64
	prepared     *preparedHandOff // PrepareStop's successors, for this term
	candidates   int64            // ready candidates other than itself at the last listing (metrics)
	yieldedAt    time.Time        // when this instance last yielded (its Cooldown)
	listed       listing          // the leader's last listing of the candidates
	listedAt     time.Time        // when (zero: none in this term)
	standbyOf    string           // the standby the record names in this term ("" none)
	standbyKnown bool             // standbyOf is what the record says (false after a hand-off's designation)

	// unanswered is set when the release or hand-off of a stop got no
	// answer: the candidacy is then not taken back when the Elector stops
	// (remove), which would take the stop past its bound; it turns gone
	// within a lease duration.
	unanswered atomic.Bool
}

// preparedHandOff is a designation whose successors acknowledged.
type preparedHandOff struct {
	epoch  uint64
	succs  []successor
	heirs  []string
	until  time.Time // the designation's hold ends (the heirs stop polling fast)
	reason string
}

// handOverCall is a request to the loop goroutine: Yield, YieldTo, or
// PrepareStop (prepareOnly).
type handOverCall struct {
	reason      string
	to          string
	notBefore   time.Time     // a preferred candidate: not before its StabilityWindow (and the Cooldown) has passed
	yieldReq    *YieldRequest // a yield request to answer
	prepareOnly bool
	fromTask    bool
	reply       chan handOverReply // buffered: the loop never blocks on it
}

type handOverReply struct {
	committed bool   // the term has ended and the hand-off goes on (sent first, for a call from the task)
	taker     string // who took leadership over ("" when none did)
	err       error
}

func newSuccession(e *Elector) *succession {
	c := e.cfg.succession
	s := &succession{e: e, cfg: c, identity: e.cfg.lease.identity, calls: make(chan *handOverCall), announced: newLeaseID()}
	self := candidate{
		Candidate: Candidate{Identity: s.identity, Priority: c.priority, Labels: c.labels, Ready: true},
		id:        s.announced,
		poll:      timing.MaxJittered(e.cfg.poll, e.cfg.jitter),
		fast:      c.successPoll,
	}
	cfg := e.cfg.lease
	s.cand = newCandidacy(e.t, cfg, self)
	// Written again only while the Elector reaches storage: one that
	// cannot is gone, and reports the outage itself.
	s.cand.healthy = func() bool { return e.lease.health.snapshot().streak == 0 }
	return s
}

// started stamps the candidacy with the Elector's start.
func (s *succession) started() {
	now := time.Now().UTC().Truncate(time.Millisecond)
	s.cand.update(func(c *candidate) { c.Since = now })
}

// key names a candidate for this leader's memory: a restarted instance
// (another start time) is a new candidate.
func candKey(c candidate) string { return c.Identity + "\x00" + c.Since.String() }

// goOn ends the Stopping mark of a planned stop that did not stop this
// instance (PrepareStop answered by nobody, or its designation lapsed, or
// the Elector contends again after the term): it is a successor again.
func (s *succession) goOn() {
	s.cand.update(func(c *candidate) { c.Stopping = false })
}

// syncCandidacy writes the candidacy if it changed (and clears the Yielded
// flag after Cooldown).
func (s *succession) syncCandidacy(ctx context.Context) {
	s.mu.Lock()
	yielded := !s.yieldedAt.IsZero() && time.Since(s.yieldedAt) < s.cfg.cooldown
	s.mu.Unlock()
	s.cand.update(func(c *candidate) { c.Yielded = yielded })
	if err := s.cand.sync(ctx); err != nil && ctx.Err() == nil {
		s.e.log.Debug("azlease: could not publish this instance's candidacy; trying again at the next poll", slog.Any("error", err))
	}
}

// --- The follower's side ---------------------------------------------------

// designationOf reads the designation in a status's record, if it was made
// in the status's epoch.
func designationOf(st *Status) (designation, bool) {
	v, ok := lookup(st.raw, metaHeir)
	if !ok {
		return designation{}, false
	}
	d, ok := parseDesignation(v)
	return d, ok && d.epoch == st.Epoch && st.Epoch > 0
}

// onLeased handles a poll that found the lease held: it takes the lease
// over when the hand-off marker names this instance, and acknowledges a
// designation. It returns the token of the term taken over, if any.
func (s *succession) onLeased(ctx context.Context, st *Status) (Token, bool) {
	s.freeSince = time.Time{}
	if st.Next == s.identity && st.Epoch > 0 {
		// The lease is handed to an ID derived from the one this
		// candidacy announced and the leader's epoch: take it under a
		// fresh one (succession.go). The announced ID is proposed again
		// at every attempt (never for a term: takeOver changes it), as a
		// fair lock's waiter does.
		s.e.lease.announce(s.announced)
		tok, err := s.e.lease.takeOver(context.WithValue(ctx, cleanUpAfterCancelKey{}, true), s.e.lease.cfg.duration, st)
		if err == nil {
			s.tookOver()
			return tok, true
		}
		s.e.lease.announce("")
		if !errors.Is(err, ErrLeaseHeld) && !errors.Is(err, errHandOffGone) && ctx.Err() == nil {
			s.e.log.Debug("azlease: taking the hand-off over failed", slog.Any("error", err))
		}
		// Not changed to the hand-off's ID yet, or passed on to someone
		// else, or gone (then the lock is free): look again soon.
		s.fastUntil = later(s.fastUntil, time.Now().Add(s.e.cfg.poll))
		return Token{}, false
	}
	d, ok := designationOf(st)
	named := ok && d.names(s.identity)
	s.standby = named && d.standing()
	if !named || d.standing() {
		if s.ackToken != "" || !s.fastUntil.IsZero() {
			s.ackToken, s.fastUntil = "", time.Time{}
			s.cand.update(func(c *candidate) { c.ack = "" })
		}
		return Token{}, false
	}
	if tok := d.token(); tok != s.ackToken {
		self := s.cand.self()
		if !self.Ready || self.Stopping {
			return Token{}, false
		}
		s.cand.update(func(c *candidate) { c.ack = tok })
		if err := s.cand.sync(ctx); err != nil {
			s.e.log.Debug("azlease: could not acknowledge the designation as successor", slog.Any("error", err))
			return Token{}, false
		}
		s.ackToken = tok
		s.fastUntil = time.Now().Add(d.hold)
		s.e.log.Info("azlease: designated as the leader's successor; polling every SuccessorPollInterval",
			slog.String("leader", st.Holder), slog.Uint64("epoch", st.Epoch), slog.Duration("for", d.hold))
	}
	return Token{}, false
}

// tookOver is called when this instance took a hand-off over: the
// announced ID is spent.
func (s *succession) tookOver() {
	s.announced = newLeaseID()
	s.ackToken, s.fastUntil, s.standby = "", time.Time{}, false
	id := s.announced
	s.cand.update(func(c *candidate) { c.id, c.ack = id, "" })
}

// holdBack reports whether this instance, having found the lease free
// (st), should leave it to a candidate of higher priority this time: one
// that is ready, alive (neither gone nor late), not stopping, not penalised for
// failures, not yielded recently, and not the holder of the term that just
// ended. It leaves it at most that candidate's poll plus ackMargin (at
// most HandOffWait) from when it first found it free, then takes it: a dead
// or slow preferred candidate never keeps the lease free for longer. One
// listing per poll, only while the lease is free.
func (s *succession) holdBack(ctx context.Context, st *Status) bool {
	ls, err := s.cand.list(ctx, time.Now().Add(s.e.cfg.lease.attemptTimeout))
	if err != nil {
		return false // cannot tell: lead rather than leave it free
	}
	var fails []failure
	if r, err := parseRecord(st.raw); err == nil {
		fails = r.fails
	}
	now := time.Now()
	var wait time.Duration
	for _, c := range ls.candidates {
		switch {
		case c.Identity == s.identity || c.Identity == st.Holder, c.Priority <= s.cfg.priority,
			!c.Ready, c.Stopping, c.Gone, c.late, c.Yielded, now.Before(penalisedUntil(fails, c.Identity)):
		default:
			wait = max(wait, c.poll+ackMargin)
		}
	}
	if wait == 0 {
		s.freeSince = time.Time{}
		return false
	}
	wait = min(wait, s.cfg.handOffWait)
	if s.freeSince.IsZero() {
		s.freeSince = now
	}
	if time.Since(s.freeSince) < wait {
		s.e.log.Debug("azlease: the lease is free; leaving it to a candidate of higher priority", slog.Duration("for", wait))
		return true
	}
	return false
}

// pollWait is the follower's wait before its next poll: every
// SuccessorPollInterval (jitter only shortens it) while designated for a
// hand-off, every standbyPoll while the leader's standby, PollInterval
// otherwise.
func (s *succession) pollWait() time.Duration {
	switch {
	case time.Now().Before(s.fastUntil):
		return time.Duration(float64(s.cfg.successPoll) * (1 - s.e.cfg.jitter/2*mrand.Float64()))
	case s.standby:
		return time.Duration(float64(s.standbyPoll()) * (1 - s.e.cfg.jitter/2*mrand.Float64()))
	}
	return s.e.pollWait()
}

// --- The leader's side -----------------------------------------------------

// beginTerm resets the leader's memory for a new term.
func (s *succession) beginTerm(epoch uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.termEpoch != epoch {
		s.termEpoch = epoch
		s.firstSeen = map[string]time.Time{}
		s.unresponsive = map[string]time.Time{}
		s.prepared = nil
		s.listedAt = time.Time{}
		// A new term's record designates nobody: designations name
		// their epoch.
		s.standbyOf, s.standbyKnown = "", true
	}
}

// failures returns the recent failures the lease's record lists.
func (s *succession) failures() []failure {
	r, err := parseRecord(s.e.lease.metadata())
	if err != nil {
		return nil
	}
	return r.fails
}

// ranked lists the candidates other than this instance that can take over,
// best first.
func (s *succession) ranked(ls listing) []candidate {
	fails := s.failures()
	now := time.Now()
	others := make([]candidate, 0, len(ls.candidates))
	for _, c := range ls.candidates {
		if c.Identity != s.identity {
			others = append(others, c)
		}
	}
	return rankCandidates(others, func(c candidate) bool { return now.Before(penalisedUntil(fails, c.Identity)) })
}

// watcher is the leader's poll of its candidates, on a goroutine of its own
// owned by the lead loop (stop joins it). It proposes hand-offs on plans.
type watcher struct {
	plans  chan *handOverCall
	stopC  chan struct{}
	done   chan struct{}
	cancel context.CancelFunc // cuts its requests short
}

func (w *watcher) stop() {
	if w == nil {
		return
	}
	close(w.stopC)
	w.cancel()
	<-w.done
}

// planC is the channel of w's proposals (nil, which blocks, for no
// watcher).
func (w *watcher) planC() <-chan *handOverCall {
	if w == nil {
		return nil
	}
	return w.plans
}

// watch starts the leader's poll of its candidates for term.
func (s *succession) watch(term *Term) *watcher {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(term.Context()))
	w := &watcher{plans: make(chan *handOverCall), stopC: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	unhook := context.AfterFunc(term.Context(), cancel)
	go func() {
		defer close(w.done)
		defer cancel()
		defer unhook()
		// Two cadences: the listing every PollInterval (or sooner, when
		// a plan is due), and the look at the yield request every
		// standbyPoll in between.
		nextList := time.Now()
		nextLook := nextList.Add(s.standbyPoll())
		for {
			t := time.NewTimer(time.Until(earlier(nextList, nextLook)))
			select {
			case <-w.stopC:
				t.Stop()
				return
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			var plan *handOverCall
			if !time.Now().Before(nextList) {
				var wake time.Duration
				plan, wake = s.poll(ctx, term)
				nextList = time.Now().Add(min(s.e.pollWait(), wake))
			} else {
				plan = s.lookYield(ctx, term)
			}
			nextLook = time.Now().Add(s.standbyPoll())
			if plan != nil {
				select {
				case w.plans <- plan:
				case <-w.stopC:
					return
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return w
}

// lookYield is the leader's quick look at its election's yield request
// (one Get Blob Properties): a plan when it asks this term to yield and is
// not answered yet. A missing request blob is created empty (once), so
// that the looks find a blob rather than fail.
func (s *succession) lookYield(ctx context.Context, term *Term) *handOverCall {
	s.mu.Lock()
	prepared := s.prepared != nil
	s.mu.Unlock()
	if prepared {
		return nil
	}
	y, found, err := readYield(ctx, s.cand.ops, s.cand.election)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.e.log.Debug("azlease: could not read the yield request", slog.Any("error", err))
		}
	case !found:
		createYield(ctx, s.cand.ops, s.cand.election)
	case y != nil && y.Epoch == term.Epoch() && y.Answer == "":
		return &handOverCall{reason: reasonRequest, to: y.To, yieldReq: y}
	}
	return nil
}

// poll is one poll of the leader's: it lists the candidates and decides
// whether to hand over (a plan), and when to look again at the latest.
func (s *succession) poll(ctx context.Context, term *Term) (*handOverCall, time.Duration) {
	far := time.Duration(1<<63 - 1)
	s.syncCandidacy(ctx)
	ls, err := s.cand.list(ctx, time.Now().Add(2*s.e.cfg.lease.attemptTimeout))
	if err != nil {
		if ctx.Err() == nil {
			s.e.log.Debug("azlease: could not list the candidates", slog.Any("error", err))
		}
		return nil, far
	}
	for _, c := range ls.candidates {
		if c.Gone && c.Identity != s.identity && goneAt(ls.date, c.modified, c.ttl+goneKeep) {
			// Gone without taking its candidacy back (it crashed), for
			// goneKeep: status has shown it gone for long enough.
			s.cand.removeGone(ctx, c)
		}
	}
	ranked := s.ranked(ls)
	now := time.Now()
	s.mu.Lock()
	s.candidates = int64(len(ranked))
	s.listed, s.listedAt = ls, now
	prepared := s.prepared != nil
	if prepared && !now.Before(s.prepared.until) {
		// PrepareStop's designation lapsed without a stop: this
		// instance goes on leading, and is a successor again.
		s.prepared, prepared = nil, false
		s.standbyKnown = false
		s.mu.Unlock()
		s.goOn()
		s.mu.Lock()
	}
	for _, c := range ranked {
		if _, ok := s.firstSeen[candKey(c)]; !ok {
			s.firstSeen[candKey(c)] = firstSeen(now, ls.date, c)
		}
	}
	s.mu.Unlock()
	if prepared {
		return nil, far // a stop is under way: nothing else to decide
	}
	// A yield request for this term.
	if y := ls.yield; y != nil && y.Epoch == term.Epoch() && y.Answer == "" {
		return &handOverCall{reason: reasonRequest, to: y.To, yieldReq: y}, far
	}
	plan, wake := s.priorityPlan(term, ranked, now)
	if plan == nil {
		s.keepStandby(ctx, term, ranked)
	}
	return plan, wake
}

// keepStandby names the best ready candidate the leader's standby in its
// record (a standing designation), or nobody, when that changed: one write
// under the lease per change. The standby polls every standbyPoll, so a
// hand-off's designation reaches it within about that.
func (s *succession) keepStandby(ctx context.Context, term *Term, ranked []candidate) {
	now := time.Now()
	s.mu.Lock()
	want := ""
	for _, c := range ranked {
		if !now.Before(s.unresponsive[candKey(c)]) {
			want = c.Identity
			break
		}
	}
	if s.standbyKnown && want == s.standbyOf {
		s.mu.Unlock()
		return
	}
	d := designation{}
	if want != "" {
		s.serial++
		d = designation{epoch: term.Epoch(), serial: s.serial, heirs: []string{want}}
	}
	s.mu.Unlock()
	if err := s.writeDesignation(ctx, term, d, false); err != nil {
		if ctx.Err() == nil {
			s.e.log.Debug("azlease: could not name the standby", slog.Any("error", err))
		}
		return
	}
	s.mu.Lock()
	s.standbyOf, s.standbyKnown = want, true
	s.mu.Unlock()
}

// priorityPlan is a hand-off to a candidate of higher priority, once its
// StabilityWindow (and this leader's Cooldown) has passed; or when to look
// again, if it has not.
func (s *succession) priorityPlan(term *Term, ranked []candidate, now time.Time) (*handOverCall, time.Duration) {
	far := time.Duration(1<<63 - 1)
	fails := s.failures()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range ranked {
		if c.Priority <= s.cfg.priority || c.Yielded || now.Before(penalisedUntil(fails, c.Identity)) || now.Before(s.unresponsive[candKey(c)]) {
			continue
		}
		reason := reasonPriority
		notBefore := s.firstSeen[candKey(c)].Add(s.cfg.window)
		if s.cfg.priority < 0 && c.Priority >= 0 {
			reason = reasonNeverLead
		} else {
			notBefore = later(notBefore, term.StartedAt().Add(s.cfg.cooldown))
		}
		lead := min(c.poll+ackMargin, s.cfg.handOffWait)
		if at := notBefore.Add(-lead); now.Before(at) {
			return nil, at.Sub(now)
		}
		return &handOverCall{reason: reason, to: c.Identity, notBefore: notBefore}, far
	}
	return nil, far
}

// firstSeen is since when the candidate c has been there, on the local
// clock, as a leader that lists it for the first time at now (storage's
// Date on that listing: date) reckons it. Storage's clock says it to the
// second: its blob's age is the listing's Date less its Last-Modified, each
// truncated to the second, so the truth lies within a second either way (a
// later write, ready again say, makes it younger). Within that second the
// candidate's own clock decides: it started (c.Since, its wall clock) just
// before it published, which is exact to the millisecond when the hosts'
// clocks agree; when they do not, storage's second bounds the error. So a
// preferred candidate leads StabilityWindow after it appeared, not up to a
// second later.
func firstSeen(now, date time.Time, c candidate) time.Time {
	if date.IsZero() || c.modified.IsZero() {
		return now
	}
	age := date.Sub(c.modified)
	if age < 0 {
		age = 0
	}
	seen := now.Add(-age)
	if c.Since.IsZero() {
		return seen
	}
	own := now.Add(-now.Round(0).Sub(c.Since)) // c.Since on the local (monotonic) clock
	lo, hi := seen.Add(-time.Second), seen.Add(time.Second)
	switch {
	case own.Before(lo):
		return lo
	case own.After(hi):
		return hi
	}
	return own
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// prepare designates the successors of term for a hand-off (to the
// candidate named, or the best two) and waits, still leading, until the
// first acknowledges or the wait's bound passes. It returns the
// acknowledged successors, best first, and their identities; none (and
// errNoCandidate or the failure) when nobody acknowledged, in which case
// the designation is taken back. notBefore, when not zero, is when the
// hand-off is to happen at the earliest: the designation covers the wait.
func (s *succession) prepare(ctx context.Context, term *Term, to string, notBefore time.Time, stopping bool) ([]successor, []string, time.Duration, error) {
	e := s.e
	at := e.cfg.lease.attemptTimeout
	// HandOffWait bounds all of it: the listing, the designation and the
	// wait for an acknowledgement.
	bound := time.Now().Add(s.cfg.handOffWait)
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), bound)
	defer cancel()
	stopWatch := context.AfterFunc(term.Context(), cancel)
	defer stopWatch()
	// A stop gives its listing one second (a List Blobs takes a few
	// milliseconds: when storage has stopped answering, the release still
	// fits the stop's bound), and falls back on the leader's last listing
	// if it is recent. A fresh listing matters: in a rolling deploy the
	// new replica started a moment ago.
	limit := at
	if stopping {
		limit = min(at, stopListLimit)
	}
	ls, err := s.cand.list(ctx, time.Now().Add(limit))
	if err != nil {
		s.mu.Lock()
		cached, listedAt := s.listed, s.listedAt
		s.mu.Unlock()
		if !stopping || listedAt.IsZero() || time.Since(listedAt) > 2*e.cfg.poll {
			return nil, nil, 0, err
		}
		ls = cached
	}
	ranked := s.ranked(ls)
	s.mu.Lock()
	var picked []candidate
	for _, c := range ranked {
		switch {
		case to != "" && c.Identity != to:
		case to == "" && time.Now().Before(s.unresponsive[candKey(c)]) && !stopping:
		default:
			picked = append(picked, c)
		}
		if len(picked) == 2 || (to != "" && len(picked) == 1) {
			break
		}
	}
	s.serial++
	serial := s.serial
	s.mu.Unlock()
	if len(picked) == 0 {
		if to != "" {
			return nil, nil, 0, notReadyError{to}
		}
		return nil, nil, 0, errNoCandidate
	}
	if stopping {
		// Say so in this instance's own candidacy first, so that a
		// successor that stops at once never hands back to it.
		s.cand.update(func(c *candidate) { c.Stopping = true })
		sctx, scancel := context.WithTimeout(ctx, at)
		_ = s.cand.sync(sctx)
		scancel()
	}
	wait := time.Duration(0)
	for _, c := range picked {
		wait = max(wait, c.poll+ackMargin)
	}
	wait = min(wait, s.cfg.handOffWait)
	d := designation{epoch: term.Epoch(), serial: serial, hold: wait + time.Until(notBefore) + e.cfg.drainTimeout + 2*at + time.Second}
	if d.hold < wait {
		d.hold = wait + e.cfg.drainTimeout + 2*at + time.Second
	}
	for _, c := range picked {
		d.heirs = append(d.heirs, c.Identity)
	}
	s.mu.Lock()
	s.standbyKnown = false // the record now holds this designation, or may
	s.mu.Unlock()
	if err := s.writeDesignation(ctx, term, d, stopping); err != nil {
		return nil, nil, 0, err
	}
	deadline := earlier(time.Now().Add(wait), bound)
	acked := map[string]candidate{}
	for {
		if ls, err := s.cand.list(ctx, earlier(deadline, time.Now().Add(at))); err == nil {
			for _, c := range ls.candidates {
				if d.names(c.Identity) && c.ack == d.token() && c.Ready && !c.Stopping {
					acked[c.Identity] = c
				}
			}
		}
		if _, ok := acked[d.heirs[0]]; ok || len(acked) == len(d.heirs) || ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
		if !sleepCtx(ctx, min(s.cfg.successPoll, time.Until(deadline))) {
			break
		}
	}
	var succs []successor
	var heirs []string
	for _, h := range d.heirs {
		c, ok := acked[h]
		if !ok {
			s.mu.Lock()
			s.unresponsive[candKey(picked[slices.IndexFunc(picked, func(p candidate) bool { return p.Identity == h })])] = time.Now().Add(s.cfg.cooldown)
			s.mu.Unlock()
			continue
		}
		// Its term's record names it by its Elector's identity, the one
		// its candidacy publishes: the chain tells its term from another
		// holder's by it.
		succs = append(succs, successor{key: c.Identity, id: c.id, holder: c.Identity, wait: c.fast + successionTakeMargin})
		heirs = append(heirs, c.Identity)
	}
	if term.Err() != nil {
		return nil, nil, 0, term.Err()
	}
	if len(succs) == 0 {
		s.withdraw(term)
		return nil, nil, 0, fmt.Errorf("%w: %w within %v", errNoCandidate, errNoAck, wait.Round(time.Millisecond))
	}
	return succs, heirs, d.hold, nil
}

// writeDesignation writes d into term's record, under its lease, in at most
// two AttemptTimeouts (one for a stop).
func (s *succession) writeDesignation(ctx context.Context, term *Term, d designation, stopping bool) error {
	bound := 2 * s.e.cfg.lease.attemptTimeout
	if stopping {
		bound = s.e.cfg.lease.attemptTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return s.e.lease.updateMetadataAs(ctx, term.Token().LeaseID, func(cur map[string]*string) map[string]*string {
		r, err := parseRecord(cur)
		if err != nil {
			return cur
		}
		r.heir = d
		return r.format(cur)
	})
}

// withdraw takes a designation back (best effort): the heirs stop polling
// fast at their next look.
func (s *succession) withdraw(term *Term) {
	if term.Err() != nil {
		return
	}
	if err := s.writeDesignation(context.Background(), term, designation{}, false); err != nil {
		s.e.log.Debug("azlease: could not take the designation of successors back", slog.Any("error", err))
	}
}

// call sends a request to the loop goroutine and waits for its answer.
func (e *Elector) call(ctx context.Context, c *handOverCall) (string, error) {
	if err := e.initErr(); err != nil {
		return "", err
	}
	if e.succ == nil {
		return "", fmt.Errorf("%w: succession is off (ElectorOptions.NoSuccession)", ErrNoSuccessor)
	}
	if !e.IsLeader() {
		return "", ErrNotLeader
	}
	c.fromTask = e.calledFromTask(ctx)
	c.reply = make(chan handOverReply, 2)
	select {
	case e.succ.calls <- c:
	case <-ctx.Done():
		return "", context.Cause(ctx)
	case <-e.done:
		return "", ErrNotLeader
	}
	done := ctx.Done()
	if c.fromTask {
		// The task's context ends when the hand-off ends the term: the
		// answer, which the loop sends at once then, is what counts.
		done = nil
	}
	for {
		select {
		case r := <-c.reply:
			if r.committed && !c.fromTask {
				continue // wait for the outcome
			}
			return r.taker, r.err
		case <-done:
			return "", context.Cause(ctx)
		}
	}
}

// Yield hands leadership over to the best ready candidate (the one a
// planned stop would choose) while this instance goes on as a candidate,
// whatever its task returns (AfterTask does not apply): it designates the
// successor and waits, still leading, for it to acknowledge (at most
// HandOffWait), then ends its term (cause [ErrYielded]), waits for the task
// (DrainTimeout), and hands the lease over without a moment when it is
// free. It returns the identity of the new leader. This instance is not
// preferred back for its priority for Cooldown.
//
// It fails with [ErrNotLeader] when this instance does not lead, and with
// an error wrapping [ErrNoSuccessor] when no other candidate is ready or
// none acknowledged in time (it then goes on leading), or when the
// successor did not take the lease over (the lease was then released, and
// this instance waits a poll interval before contending again). Called from
// inside the leader task, it returns once the term has ended, without
// waiting for the task to return. If ctx ends first, Yield returns its
// error; a hand-off already under way goes on.
func (e *Elector) Yield(ctx context.Context) (string, error) {
	return e.call(ctx, &handOverCall{reason: reasonYield})
}

// YieldTo is [Elector.Yield] to the candidate named identity only: it fails
// with an error wrapping [ErrNoSuccessor] when that candidate is not ready,
// or does not acknowledge in time.
func (e *Elector) YieldTo(ctx context.Context, identity string) (string, error) {
	if err := e.initErr(); err != nil {
		return "", err
	}
	if identity == "" {
		return "", optionErr("identity", "must name a candidate")
	}
	return e.call(ctx, &handOverCall{reason: reasonYield, to: identity})
}

// PrepareStop gets a successor ready while this instance goes on leading,
// for a planned stop whose work stops by other means (a command that gets
// the signal itself, as 'azlease lead' forwards SIGTERM): it designates the
// best ready candidates and waits (at most HandOffWait) until one
// acknowledges. The next end of this term that stops its work then hands
// leadership straight to it, whether it is Stop, or the task returning
// (with any AfterTask), within the designation's hold (the wait plus
// DrainTimeout plus a few seconds). Meanwhile this instance's candidacy
// says it is stopping (no leader hands back to it); that ends when nobody
// acknowledged, when the hold passes without a stop, and when the Elector
// contends again after the term. It returns the successor's identity, or
// an error wrapping [ErrNoSuccessor] when none acknowledged (the lease is
// then released as without succession), or [ErrNotLeader].
func (e *Elector) PrepareStop(ctx context.Context) (string, error) {
	return e.call(ctx, &handOverCall{reason: reasonStop, prepareOnly: true})
}

// SetReady says whether this instance can lead now: a candidate that is
// not ready is never handed leadership (the leader passes it over), and
// publishes that at its next poll. Electors start ready. It does not make
// a leader step down.
func (e *Elector) SetReady(ready bool) {
	if e == nil || e.succ == nil {
		return
	}
	e.succ.cand.update(func(c *candidate) { c.Ready = ready })
}

// handOver carries out a hand-off in the loop goroutine while this instance
// leads k's term: prepare (unless prepared), end the term, drain, hand over.
// done is false when it was called off (nobody acknowledged) and the term
// goes on.
func (e *Elector) handOver(ctx context.Context, k *keeper, taskDone chan error, c *handOverCall) (done, stop, yield bool) {
	s := e.succ
	term := k.term
	reply := func(r handOverReply) {
		if c.reply != nil {
			c.reply <- r
		}
	}
	succs, heirs, hold, err := s.prepare(ctx, term, c.to, c.notBefore, c.reason == reasonStop)
	if err != nil {
		if errors.Is(err, errNoCandidate) {
			err = fmt.Errorf("%w: %w", ErrNoSuccessor, err)
		}
		if c.yieldReq != nil {
			// Read beside the requester's own "azlease:" line: said once.
			s.answer(*c.yieldReq, "declined: "+strings.TrimPrefix(err.Error(), "azlease: "))
		}
		if c.reason == reasonYield || c.reason == reasonRequest || (c.prepareOnly && !errors.Is(err, errNoCandidate)) || errors.Is(err, errNoAck) {
			e.log.Info("azlease: not handing leadership over", slog.String("reason", c.reason), slog.Any("error", err))
		} else {
			e.log.Debug("azlease: not handing leadership over", slog.String("reason", c.reason), slog.Any("error", err))
		}
		e.lease.tm.handedOver(c.reason, "none")
		if c.prepareOnly && ctx.Err() == nil {
			s.goOn() // nobody to hand over to: no stop is prepared
		}
		reply(handOverReply{err: err})
		return false, false, false
	}
	if c.prepareOnly {
		s.mu.Lock()
		s.prepared = &preparedHandOff{epoch: term.Epoch(), succs: succs, heirs: heirs, until: time.Now().Add(hold), reason: c.reason}
		s.mu.Unlock()
		e.log.Info("azlease: successor ready for a planned stop", slog.String("successor", heirs[0]), slog.Uint64("epoch", term.Epoch()))
		reply(handOverReply{taker: heirs[0]})
		return false, false, false
	}
	if !c.notBefore.IsZero() {
		t := time.NewTimer(time.Until(c.notBefore))
		select {
		case <-t.C:
		case <-term.Done():
		case <-ctx.Done():
		}
		t.Stop()
		if term.Err() != nil {
			reply(handOverReply{err: term.Err()})
			return false, false, false // the lead loop sees the term's end
		}
	}
	if c.yieldReq != nil {
		s.answer(*c.yieldReq, "handing over to "+heirs[0])
	}
	cause := ErrYielded
	stopping := ctx.Err() != nil // a stop came while preparing: this hand-off is the stop's
	if stopping {
		cause = ErrStopped
	}
	term.end(cause)
	e.log.Info("azlease: handing leadership over", slog.String("reason", c.reason), slog.String("successor", heirs[0]), slog.Uint64("epoch", term.Epoch()))
	reply(handOverReply{committed: true})
	out := e.windUp(k, taskDone, cause, stopping, succs, c.reason)
	if c.reason == reasonYield || c.reason == reasonRequest {
		s.mu.Lock()
		s.yieldedAt = time.Now()
		s.mu.Unlock()
		s.syncCandidacy(context.WithoutCancel(ctx))
	}
	if out.taker == "" {
		what := "released"
		if out.lost != "" {
			what = "the lease was " + out.lost // expired, broken, taken by another holder…
		}
		reply(handOverReply{err: fmt.Errorf("%w: the designated successor did not take the lease over; %s", ErrNoSuccessor, what)})
	} else {
		reply(handOverReply{taker: out.taker})
	}
	// Handed over, this instance follows at once (a standby again within
	// its poll); released, it waits a poll interval first, so that
	// another takes the free lease.
	return true, stopping, out.taker == ""
}

// stopSuccessors returns the successors of a planned stop of term: those
// PrepareStop got ready, if its designation still holds, or else those a
// new designation gets ready now, while still leading. None means release.
func (e *Elector) stopSuccessors(ctx context.Context, term *Term) []successor {
	s := e.succ
	if s == nil {
		return nil
	}
	if p := s.takePrepared(term); p != nil {
		return p.succs
	}
	if e.lease.health.snapshot().streak > 0 {
		// Storage did not answer the last request: release (one
		// AttemptTimeout) rather than spend the stop's time on a
		// designation that would not be read.
		e.log.Debug("azlease: storage failing; releasing rather than handing over")
		return nil
	}
	succs, heirs, _, err := s.prepare(ctx, term, "", time.Time{}, true)
	if err != nil {
		e.log.Debug("azlease: no successor for this planned stop; releasing", slog.Any("error", err))
		e.lease.tm.handedOver(reasonStop, "none")
		return nil
	}
	e.log.Info("azlease: successor ready for a planned stop", slog.String("successor", heirs[0]), slog.Uint64("epoch", term.Epoch()))
	return succs
}

// takePrepared returns PrepareStop's successors for term if their
// designation still holds, and forgets them.
func (s *succession) takePrepared(term *Term) *preparedHandOff {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.prepared
	s.prepared = nil
	if p == nil || p.epoch != term.Epoch() || !time.Now().Before(p.until) {
		return nil
	}
	return p
}

// remove takes the candidacy back when the Elector stops, in one
// AttemptTimeout, after its refresh timer; not when storage did not answer
// the Elector's last request, or the stop's own release or hand-off (the
// stop stays within its bound; the candidacy left behind is gone within a
// lease duration, and leaders delete it later).
func (s *succession) remove(ctx context.Context) {
	s.cand.stopRefresh()
	if s.e.lease.health.snapshot().streak > 0 || s.unanswered.Load() {
		s.e.log.Debug("azlease: storage failing; leaving the candidacy to turn gone")
		return
	}
	s.cand.remove(ctx)
}

// answer writes the leader's answer into a yield request (best effort).
func (s *succession) answer(y YieldRequest, text string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.e.cfg.lease.attemptTimeout)
	defer cancel()
	if err := answerYield(ctx, s.cand.ops, s.cand.election, y, text); err != nil {
		s.e.log.Debug("azlease: could not answer the yield request", slog.Any("error", err))
	}
}

// handLeaseOn hands the lease of a term whose work has stopped to succs, in
// order, or releases it when none takes it (succession.go), within a bound:
// each successor's wait, and a few attempts. An Elector that is stopping
// gets two AttemptTimeouts besides the waits (the marker and the change, or
// the release), so that a stop fits the grace period a process manager
// allows; past the bound, the lease expires on its own.
func (e *Elector) handLeaseOn(id string, succs []successor, reason string, stopping bool) handOnOutcome {
	at := e.cfg.lease.attemptTimeout
	bound := 3 * at
	for _, s := range succs {
		bound += s.wait + at
	}
	if stopping {
		bound = 2 * at
		for _, s := range succs {
			bound += s.wait
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	for i := range succs {
		succs[i].why = reason // the marker records it: the successor's term began by it
	}
	out, err := e.lease.handOn(ctx, id, succs)
	switch {
	case err == nil && out.taker != "":
		e.log.Info("azlease: handed leadership over", slog.String("successor", out.taker), slog.String("reason", reason), slog.Int("passed_over", len(out.passed)))
		e.lease.tm.handedOver(reason, "taken")
	case err == nil:
		what := "released"
		if out.lost != "" {
			what = "the lease was " + out.lost
		}
		e.log.Info("azlease: no designated successor took leadership over; "+what, slog.String("reason", reason))
		e.lease.tm.handedOver(reason, "released")
	case errors.Is(err, ErrNotHeld):
		// The term's validity ran out before the hand-off: release what
		// may still be held, as without succession.
		_ = e.lease.releaseStopping()
		e.lease.tm.handedOver(reason, "failed")
	case errors.Is(err, errHandOffLost):
		e.lease.tm.handedOver(reason, "failed")
	default:
		e.log.Warn("azlease: handing leadership over failed; the lease will expire", slog.Any("error", err))
		e.lease.tm.handedOver(reason, "failed")
		if stopping {
			e.succ.unanswered.Store(true)
		}
	}
	return out
}

// announce sets the lease ID the next acquisition or take-over proposes
// ("" for a fresh one).
func (l *Lease) announce(id string) {
	l.opMu.Lock()
	defer l.opMu.Unlock()
	l.mu.Lock()
	l.nextID = id
	l.mu.Unlock()
}

// successionCandidates is the number of ready candidates other than this
// instance at the leader's last listing (metrics).
func (s *succession) successionCandidates() int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.candidates
}
