package azleasetest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"
)

// The named faults below are the usual ways a storage service and the
// network in front of it misbehave, one call each. They target requests by
// the name given to [Server.Client]; the name "" targets every client (and
// is the name of every request that arrives over HTTP). Each lasts until it
// is undone ([Server.Heal], [Server.Restore], a zero share or duration) or
// [Server.ClearFaults]. Shares are drawn from a random source seeded by
// [Options.Seed].
//
// When several apply to one request, the first of these wins: a partition,
// the outage, FailRequests, ApplyLate, LoseResponses; a request none of them
// picks goes to the [FaultFunc] set by [Server.SetFaults], if any. A Slow
// delay applies before whichever wins.

// PartitionMode is how the requests of a partitioned client die.
type PartitionMode int

const (
	// Blackhole: requests get no answer and change nothing; each waits
	// until its client gives up (its deadline passes or it is cancelled),
	// as when packets are dropped on the way.
	Blackhole PartitionMode = iota
	// Refuse: requests fail at once with a connection error
	// ([ErrConnectionLost]) and change nothing, as when the connection is
	// refused or reset.
	Refuse
)

// String returns the mode's name.
func (m PartitionMode) String() string {
	switch m {
	case Blackhole:
		return "Blackhole"
	case Refuse:
		return "Refuse"
	}
	return fmt.Sprintf("PartitionMode(%d)", int(m))
}

// namedFaults is the state of the named faults; the Server's mutex guards it.
type namedFaults struct {
	partitions map[string]PartitionMode
	outage     bool
	failShare  float64
	failStatus int
	late       map[string]lateRule
	lose       map[string]float64
	slow       map[string]time.Duration
	rng        *rand.Rand
}

type lateRule struct {
	share float64
	after time.Duration
}

func newNamedFaults(seed uint64) namedFaults {
	return namedFaults{
		partitions: map[string]PartitionMode{},
		late:       map[string]lateRule{},
		lose:       map[string]float64{},
		slow:       map[string]time.Duration{},
		rng:        rand.New(rand.NewPCG(seed, 0xa21ea5e)),
	}
}

// forClient returns the rule for client, or else the rule for everyone.
func forClient[T any](m map[string]T, client string) (T, bool) {
	if v, ok := m[client]; ok {
		return v, true
	}
	v, ok := m[""]
	return v, ok
}

// choose returns the fault the named faults give r, and whether one of them
// decided it (otherwise the fault hook decides, after the returned Delay).
// The caller holds the Server's mutex.
func (n *namedFaults) choose(r Request) (Fault, bool) {
	var f Fault
	f.Delay, _ = forClient(n.slow, r.Client)
	if mode, ok := forClient(n.partitions, r.Client); ok {
		f.Action = Hang
		if mode == Refuse {
			f.Action = Drop
		}
		return f, true
	}
	if n.outage {
		f.Action, f.Status, f.Code = Fail, http.StatusServiceUnavailable, "ServerBusy"
		return f, true
	}
	if n.failShare > 0 && n.rng.Float64() < n.failShare {
		f.Action, f.Status, f.Code = Fail, n.failStatus, "ServerBusy"
		if n.failStatus == http.StatusInternalServerError {
			f.Code = "InternalError"
		}
		return f, true
	}
	if lr, ok := forClient(n.late, r.Client); ok && n.rng.Float64() < lr.share {
		f.Action, f.LateBy = ApplyLate, lr.after
		return f, true
	}
	if share, ok := forClient(n.lose, r.Client); ok && n.rng.Float64() < share {
		f.Action = ApplyThenDrop
		return f, true
	}
	return f, false
}

func checkShare(method string, share float64) {
	if !(share >= 0 && share <= 1) {
		panic(fmt.Sprintf("azleasetest: %s: share %v outside [0, 1]", method, share))
	}
}

// Partition cuts client name off from the server until [Server.Heal]: none
// of its requests is applied, and each dies as mode says. Use it to crash a
// machine as far as storage can tell (its process keeps running, as a
// paused or isolated machine's would) or to isolate it from the network.
// The name "" cuts every client off.
func (s *Server) Partition(name string, mode PartitionMode) {
	if !s.usable() {
		return
	}
	if mode != Blackhole && mode != Refuse {
		panic(fmt.Sprintf("azleasetest: Partition: unknown mode %v", mode))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules.partitions[name] = mode
}

// Heal ends the partition of client name (the partition of everyone, for
// ""). Requests sent from now on are served; requests that were hanging
// stay hung until their clients give up.
func (s *Server) Heal(name string) {
	if !s.usable() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.rules.partitions, name)
}

// Outage makes the whole service unavailable until [Server.Restore]: every
// request is answered 503 ServerBusy and not applied. For an outage in
// which requests get no answer at all, use Partition("", Blackhole).
func (s *Server) Outage() {
	if !s.usable() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules.outage = true
}

// Restore ends the [Server.Outage].
func (s *Server) Restore() {
	if !s.usable() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules.outage = false
}

// FailRequests makes the service refuse a share (from 0 to 1) of all
// requests, from every client, with status 500 (InternalError) or 503
// (ServerBusy), without applying them: the transient errors a client must
// retry. A share of 0 turns it off. It panics on a share outside [0, 1] or
// another status.
func (s *Server) FailRequests(share float64, status int) {
	if !s.usable() {
		return
	}
	checkShare("FailRequests", share)
	if status != http.StatusInternalServerError && status != http.StatusServiceUnavailable {
		panic(fmt.Sprintf("azleasetest: FailRequests: status %d is neither 500 nor 503", status))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rules.failShare, s.rules.failStatus = share, status
}

// LoseResponses makes a share (from 0 to 1) of client name's requests take
// effect and then lose their answer: the server applies the request (if it
// would succeed) and the client sees a connection error, so it cannot know
// whether it did. A share of 0 turns it off; it panics on a share outside
// [0, 1].
func (s *Server) LoseResponses(name string, share float64) {
	if !s.usable() {
		return
	}
	checkShare("LoseResponses", share)
	s.mu.Lock()
	defer s.mu.Unlock()
	if share == 0 {
		delete(s.rules.lose, name)
		return
	}
	s.rules.lose[name] = share
}

// ApplyLate makes a share (from 0 to 1) of client name's requests arrive
// late: the client gets no answer, and the server applies the request only
// once the client has given up on it (its deadline passed or it was
// cancelled) and a further delay of after has passed. It is a request that
// sat in a queue on the way and reached the service after its sender had
// moved on: a release or renewal from a term that already ended, for
// instance. Requests still waiting when the server closes are dropped. A
// share of 0 turns it off; it panics on a share outside [0, 1] or a
// negative after.
func (s *Server) ApplyLate(name string, share float64, after time.Duration) {
	if !s.usable() {
		return
	}
	checkShare("ApplyLate", share)
	if after < 0 {
		panic(fmt.Sprintf("azleasetest: ApplyLate: negative delay %v", after))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if share == 0 {
		delete(s.rules.late, name)
		return
	}
	s.rules.late[name] = lateRule{share: share, after: after}
}

// Slow holds each request of client name for d before the server acts on
// it, as a slow network or an overloaded service would; a client whose
// deadline passes first gives up, and the request is not applied. Zero
// turns it off; it panics on a negative d.
func (s *Server) Slow(name string, d time.Duration) {
	if !s.usable() {
		return
	}
	if d < 0 {
		panic(fmt.Sprintf("azleasetest: Slow: negative delay %v", d))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d == 0 {
		delete(s.rules.slow, name)
		return
	}
	s.rules.slow[name] = d
}

// ClearFaults removes every fault: partitions, the outage, FailRequests,
// LoseResponses, ApplyLate, Slow and the [FaultFunc] set by
// [Server.SetFaults]. Requests already hanging or waiting to be applied late
// are not affected, and the clock keeps its rate ([Server.SetClockRate]).
func (s *Server) ClearFaults() {
	if !s.usable() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rng := s.rules.rng
	s.rules = newNamedFaults(0)
	s.rules.rng = rng
	s.faults = nil
}
