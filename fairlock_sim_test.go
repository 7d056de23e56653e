package azlease_test

// The fair lock simulation (issue 25): random scenarios in fake time in
// which waiters, each on a client of its own, ask for one fair Mutex at
// random times, hold it for random lengths (zero included), and give up
// when their ctx ends, under the Elector simulation's fault mix (lost
// answers, hangs, slow requests, requests applied late), with waiters and
// holders cut off, paused and killed, outages and operator breaks; a clean
// third of the seeds has none of that. The checker asserts exclusion (the
// grant checker, as the Mutex simulation) and order: no waiter is served
// before one whose ticket was taken before its Lock call began and that is
// still waiting, unless that one was passed over while it did not look (the
// library's hook reported it "missed"), which is counted apart; in clean
// seeds there is no pass-over at all. A ticket's place ends when its
// waiter is served or leaves; one that ends unserved ends when storage
// applied its waiter's removal of its entry, if that came first: a
// take-over removes the entry beside its renewal, and when that renewal
// fails the waiter leaves and joins again at the back.
//
// A fourth of the seeds are hosts that die whole (issue 36): the waiters
// run on two to four hosts, and a host's death kills its holder and its
// waiters at once, on a clean network; one more host's five to eight
// waiters ask together and die together, ahead of live ones. Another fourth plays
// the same on a Semaphore of two or three slots. Besides exclusion and
// order, those seeds check that the queue never sticks: no live waiter
// waits while a slot stays free for longer than a bound derived from the
// options (livenessBound).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/timing"
)

// fairScenario is one seed's world.
type fairScenario struct {
	seed      uint64
	waiters   int  // fair waiters, each on a client of its own
	unordered bool // one more client on the lock, with MutexOptions.Unordered
	clean     bool // no faults and no events: no pass-over allowed
	faultRate float64
	clockRate float64
	opts      azlease.MutexOptions
	events    []event // cut, pause, crash, outage, break
	length    time.Duration
	badStart  time.Duration
	badLen    time.Duration
	// hosts, when not zero, makes the seed one of hosts that die whole:
	// waiter i runs on host host[i]; events are "hostdeath"; the network
	// is clean.
	hosts int
	host  []int
	// slots is 1 for a Mutex, more for a Semaphore of that many slots.
	slots int
	// pile is how many waiters of one more host ask together at pileAt
	// and die together at pileDie (an event "piledeath"), for good.
	pile   int
	pileAt time.Duration
	// hot, when not zero, makes the seed a hot lock's (newHotFairScenario):
	// every request takes hot longer, waiters ask again at once and hold
	// for a few milliseconds at most.
	hot time.Duration
}

// newFairScenario draws seed's scenario: seeds 2 and 3 of every 4 are
// hosts that die whole (on a Mutex, then a Semaphore), the others the
// original mix (a third clean).
func newFairScenario(seed uint64) fairScenario {
	switch seed % 4 {
	case 2:
		return newHostsScenario(seed, 1)
	case 3:
		return newHostsScenario(seed, 2+int(seed/4%2))
	}
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	sc := fairScenario{
		seed:      seed,
		waiters:   3 + rng.IntN(6),
		unordered: rng.IntN(4) == 0,
		clean:     rng.IntN(3) == 0,
		clockRate: 1,
		length:    5 * time.Minute,
	}
	sc.opts.LeaseDuration = time.Duration([]int{15, 15, 20, 30}[rng.IntN(4)]) * time.Second
	sc.opts.PollInterval = time.Duration([]int{1, 1, 2}[rng.IntN(3)]) * time.Second
	sc.opts.HeadPollInterval = time.Duration([]int{0, 0, 100, 500}[rng.IntN(4)]) * time.Millisecond
	if sc.clean {
		return sc
	}
	sc.faultRate = rng.Float64() * 0.2
	sc.clockRate = []float64{1, 1, 1.01, 0.99, 1.04}[rng.IntN(5)]
	nodes := sc.waiters
	if sc.unordered {
		nodes++
	}
	drawFairEvents(rng, &sc, nodes, 20*time.Second, sc.length-30*time.Second, 15, 30)
	sc.events, sc.badStart, sc.badLen = addOperatorTrouble(rng, sc.events, sc.length, sc.opts.LeaseDuration)
	sc.slots = 1
	return sc
}

// drawFairEvents draws sc's events from rng: a cut, pause, crash or outage
// of one of nodes every step to step+spread seconds from first to until.
func drawFairEvents(rng *rand.Rand, sc *fairScenario, nodes int, first, until time.Duration, step, spread int) {
	for at := first; at < until; at += time.Duration(step+rng.IntN(spread)) * time.Second {
		kind := []string{"cut", "cut", "pause", "crash", "crash", "outage"}[rng.IntN(6)]
		d := time.Duration(1+rng.IntN(40)) * time.Second
		if kind == "pause" {
			d = time.Duration(1+rng.IntN(20)) * time.Second
		}
		sc.events = append(sc.events, event{at: at, kind: kind, node: rng.IntN(nodes), dur: d})
	}
}

// newHotFairScenario draws a hot lock's scenario (TestFairHotLockSimulation):
// 24 to 35 waiters that ask again as soon as they unlock and hold for at
// most a few milliseconds, every request 0.5 to 3 ms, so that a Lock right
// after its own hand-off joins placed from it (fairjoin.go); every third
// seed (0 included: make test plays seed 0 alone) clean, the others with
// the original mix's faults and events (no operator trouble: its breaks
// and bad periods need minutes).
func newHotFairScenario(seed uint64) fairScenario {
	rng := rand.New(rand.NewPCG(seed, 0x407))
	sc := fairScenario{
		seed:      seed,
		waiters:   24 + rng.IntN(12),
		clean:     seed%3 == 0,
		clockRate: 1,
		length:    45 * time.Second,
		slots:     1,
		hot:       time.Duration(500+rng.IntN(2500)) * time.Microsecond,
	}
	sc.opts.LeaseDuration = time.Duration([]int{15, 20}[rng.IntN(2)]) * time.Second
	sc.opts.PollInterval = time.Second
	sc.opts.HeadPollInterval = time.Duration([]int{0, 100}[rng.IntN(2)]) * time.Millisecond
	if sc.clean {
		return sc
	}
	sc.faultRate = rng.Float64() * 0.05
	sc.clockRate = []float64{1, 1.01, 0.99}[rng.IntN(3)]
	drawFairEvents(rng, &sc, sc.waiters, 5*time.Second, sc.length-20*time.Second, 4, 8)
	return sc
}

// newHostsScenario draws a scenario of hosts that die whole, on a lock of
// slots slots (see the top of this file).
func newHostsScenario(seed uint64, slots int) fairScenario {
	rng := rand.New(rand.NewPCG(seed, 0xdead))
	sc := fairScenario{
		seed:      seed,
		waiters:   4 + rng.IntN(4),
		hosts:     2 + rng.IntN(3),
		slots:     slots,
		clockRate: 1,
		length:    3 * time.Minute,
	}
	sc.opts.LeaseDuration = time.Duration([]int{15, 15, 20, 30}[rng.IntN(4)]) * time.Second
	sc.opts.PollInterval = time.Second
	sc.opts.HeadPollInterval = time.Duration([]int{0, 0, 100, 500}[rng.IntN(4)]) * time.Millisecond
	sc.host = make([]int, sc.waiters)
	for i := range sc.host {
		sc.host[i] = i % sc.hosts // every host runs one at least
	}
	rng.Shuffle(len(sc.host), func(i, j int) { sc.host[i], sc.host[j] = sc.host[j], sc.host[i] })
	sc.pile = 5 + rng.IntN(4)
	sc.pileAt = time.Duration(30+rng.IntN(60)) * time.Second
	sc.events = append(sc.events, event{at: sc.pileAt + time.Duration(2+rng.IntN(6))*time.Second, kind: "piledeath"})
	for at := 20 * time.Second; at < sc.length-time.Minute; at += time.Duration(20+rng.IntN(40)) * time.Second {
		sc.events = append(sc.events, event{at: at, kind: "hostdeath", node: rng.IntN(sc.hosts), dur: time.Duration(5+rng.IntN(40)) * time.Second})
	}
	sortEvents(sc.events)
	return sc
}

// headPoll is the scenario's HeadPollInterval as the library takes it.
func (sc fairScenario) headPoll() time.Duration {
	if sc.opts.HeadPollInterval == 0 {
		return min(200*time.Millisecond, sc.opts.PollInterval)
	}
	return sc.opts.HeadPollInterval
}

// livenessBound is the longest a live waiter may wait while a slot of the
// lock is free (hosts seeds): a dead holder's lease expires within its
// duration; a holder's hand-on chain waits up to 2 × PollInterval and a
// head poll for each dead waiter it hands the lock to; a waiter listing the
// queue looks at the lock within QueueCap of its position; and each dead
// waiter ahead is passed over once the slot has stayed free for its
// reaction time (timing.PassOverFree), found by looks a position's head
// polls apart, with a second for round trips.
func (sc fairScenario) livenessBound() time.Duration {
	n := sc.waiters + sc.pile
	head, poll := sc.headPoll(), sc.opts.PollInterval
	each := 2*poll + head + timing.PassOverFree(head, poll, 50*time.Millisecond, false, 0) + time.Duration(n)*head + time.Second
	return sc.opts.LeaseDuration + timing.QueueCap(n, poll) + time.Duration(n)*each
}

func (sc fairScenario) String() string {
	if sc.hot > 0 {
		return fmt.Sprintf("hot lock, requests %v, %s", sc.hot, sc.plain())
	}
	return sc.plain()
}

// plain is String without a hot lock's request time.
func (sc fairScenario) plain() string {
	if sc.hosts > 0 {
		return fmt.Sprintf("seed %d: hosts that die, %d waiters on %d hosts and a pile of %d at %v, %d slots, lease %v, poll %v, head poll %v, %d events",
			sc.seed, sc.waiters, sc.hosts, sc.pile, sc.pileAt, sc.slots, sc.opts.LeaseDuration, sc.opts.PollInterval, sc.opts.HeadPollInterval, len(sc.events))
	}
	if sc.clean {
		return fmt.Sprintf("seed %d: clean, %d waiters, unordered %v, lease %v, poll %v, head poll %v",
			sc.seed, sc.waiters, sc.unordered, sc.opts.LeaseDuration, sc.opts.PollInterval, sc.opts.HeadPollInterval)
	}
	bad := "none"
	if sc.badLen > 0 {
		bad = fmt.Sprintf("%v+%v", sc.badStart, sc.badLen)
	}
	return fmt.Sprintf("seed %d: %d waiters, unordered %v, faults %.0f%%, server clock ×%.2f, lease %v, poll %v, head poll %v, %d events, bad period %s",
		sc.seed, sc.waiters, sc.unordered, sc.faultRate*100, sc.clockRate, sc.opts.LeaseDuration, sc.opts.PollInterval, sc.opts.HeadPollInterval, len(sc.events), bad)
}

// fairCall is one Lock call of a fair waiter, as the simulation and the
// library's hook saw it.
type fairCall struct {
	waiter   string
	start    time.Time // Lock called
	end      time.Time // Lock returned (zero while it waits)
	deadline time.Time // its ctx's deadline
	crashed  time.Time // its process was killed while it waited (its ctx cancelled then)
	served   bool
	tickets  []*fairTicket // in the order taken (a removed waiter takes another)
}

// waitingAt reports whether the call was still waiting at t: called
// before, not returned, its ctx not ended, not killed.
func (c *fairCall) waitingAt(t time.Time) bool {
	return c.start.Before(t) && (c.end.IsZero() || c.end.After(t)) && c.deadline.After(t) &&
		(c.crashed.IsZero() || c.crashed.After(t))
}

// fairTicket is one ticket a call took.
type fairTicket struct {
	call    *fairCall
	ticket  uint64
	taken   time.Time   // the ticket's conditional write succeeded
	joined  time.Time   // its queue entry was created
	gone    time.Time   // out of the queue for the order: served, left, removed
	how     string      // which of those three events it was
	missed  []time.Time // passed over while it did not look
	back    []time.Time // found itself missed and cleared the mark
	evicted time.Time   // a holder deleted its entry
}

// fairRecorder follows the waiters' calls through the library's hook
// (SetFairHook): a waiter's own events run on its goroutine, which names
// its call; "missed" and "evicted" name the ticket.
type fairRecorder struct {
	mu     sync.Mutex
	lock   string
	byG    map[uint64]*fairCall
	byT    map[uint64]*fairTicket
	calls  []*fairCall
	events map[string]int
	log    []string // with AZLEASE_DEBUG_SIM: every event, for a failing seed's report
	t0     time.Time
}

func newFairRecorder(lock string) *fairRecorder {
	return &fairRecorder{lock: lock, byG: map[uint64]*fairCall{}, byT: map[uint64]*fairTicket{}, events: map[string]int{}, t0: time.Now()}
}

// begin records a Lock call starting on this goroutine.
func (r *fairRecorder) begin(waiter string, deadline time.Time) *fairCall {
	c := &fairCall{waiter: waiter, start: time.Now(), deadline: deadline}
	r.mu.Lock()
	r.byG[azlease.GoroutineID()] = c
	r.calls = append(r.calls, c)
	r.logf("%s Lock (ctx until %v)", waiter, deadline.Sub(r.t0))
	r.mu.Unlock()
	return c
}

// end records the call's return.
func (r *fairRecorder) end(c *fairCall, served bool) {
	r.mu.Lock()
	c.end, c.served = time.Now(), served
	delete(r.byG, azlease.GoroutineID())
	r.logf("%s Lock returned, served %v", c.waiter, served)
	r.mu.Unlock()
}

func (r *fairRecorder) crash(c *fairCall) {
	r.mu.Lock()
	if c.end.IsZero() && c.crashed.IsZero() {
		c.crashed = time.Now()
	}
	r.mu.Unlock()
}

// logf keeps a line of the debug log (with AZLEASE_DEBUG_SIM); r.mu is held.
func (r *fairRecorder) logf(format string, args ...any) {
	if debugSim {
		r.log = append(r.log, fmt.Sprintf("%12v ", time.Since(r.t0))+fmt.Sprintf(format, args...))
	}
}

// note logs a line from the simulation (holding, unlocking, events).
func (r *fairRecorder) note(format string, args ...any) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.logf(format, args...)
	r.mu.Unlock()
}

// hook is the library's fairHook.
func (r *fairRecorder) hook(event, lock string, ticket uint64) {
	if lock != r.lock {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events[event]++
	by := "?"
	if c := r.byG[azlease.GoroutineID()]; c != nil {
		by = c.waiter
	}
	r.logf("%s: %s %d", by, event, ticket)
	if event == "ticket" {
		c := r.byG[azlease.GoroutineID()]
		if c == nil {
			r.events["ticket of no call"]++
			return
		}
		tk := &fairTicket{call: c, ticket: ticket, taken: now}
		c.tickets = append(c.tickets, tk)
		r.byT[ticket] = tk
		return
	}
	tk := r.byT[ticket]
	if tk == nil {
		r.events[event+" of an unknown ticket"]++
		return
	}
	switch event {
	case "joined":
		tk.joined = now
	case "served", "left", "removed":
		if tk.gone.IsZero() {
			tk.gone, tk.how = now, event
		}
	case "missed":
		tk.missed = append(tk.missed, now)
	case "back":
		tk.back = append(tk.back, now)
	case "evicted":
		tk.evicted = now
	}
}

// fairOrder is what the order check found.
type fairOrder struct {
	served    int // fair calls served
	queued    int // of which through a ticket (the others took a free lock with nobody waiting)
	violated  int // served before an earlier waiter that was still waiting and not passed over
	passed    int // served before an earlier waiter that had been passed over while it did not look
	passedBak int // of those, the earlier one had shown it was back before (a race with the holder's listing)
	backOnly  int // of those, only its coming back showed it had been missed (a mark whose answer was lost)
	asleep    int // "missed" events of waiters that had made no request since their turn came
	looking   int // "missed" events of waiters that had
	unjoined  int // served before an earlier waiter whose entry was not created yet when it could have been seen (a slow write)
	missed    int // "missed" events
	evicted   int
	removed   int
	left      int
	report    []string // the violations, for the log
}

func (o *fairOrder) add(x fairOrder) {
	o.served += x.served
	o.queued += x.queued
	o.violated += x.violated
	o.passed += x.passed
	o.passedBak += x.passedBak
	o.backOnly += x.backOnly
	o.asleep += x.asleep
	o.looking += x.looking
	o.unjoined += x.unjoined
	o.missed += x.missed
	o.evicted += x.evicted
	o.removed += x.removed
	o.left += x.left
}

func (o fairOrder) String() string {
	return fmt.Sprintf("%d served (%d through the queue), %d out of order, %d before an earlier one's entry existed (its creation slow), %d passed over a missed waiter (%d of those back already, %d known missed only by coming back), %d \"missed\" (%d had not looked since their turn came, %d had), %d evicted, %d removed, %d left",
		o.served, o.queued, o.violated, o.unjoined, o.passed, o.passedBak, o.backOnly, o.missed, o.asleep, o.looking, o.evicted, o.removed, o.left)
}

// check counts, for every served call b and every other waiter's call a
// whose ticket was taken before b began and which was still waiting (its
// ticket still in the queue) when b returned: a pass-over, excused when a
// was reported missed before b returned, a violation otherwise.
func (r *fairRecorder) check(t0 time.Time, reqs *fairRequests) fairOrder {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := fairOrder{missed: r.events["missed"], evicted: r.events["evicted"], removed: r.events["removed"], left: r.events["left"]}
	at := func(x time.Time) string { return x.Sub(t0).String() }
	for _, b := range r.calls {
		if !b.served {
			continue
		}
		o.served++
		if len(b.tickets) > 0 {
			o.queued++
		}
		for _, a := range r.calls {
			if a.waiter == b.waiter || !a.waitingAt(b.end) {
				continue
			}
			for _, tk := range a.tickets {
				// Out of line when its waiter's hook said so, or earlier,
				// when storage applied the waiter's own removal of its
				// entry and the ticket then ended unserved: a take-over
				// removes it beside the renewal, and when the renewal
				// then fails (its answer lost, then an outage) the waiter
				// joins again at the back, maybe after the next in line
				// was served (fairLock.wait). A ticket still waiting, or
				// served, after its entry's removal keeps its place: the
				// check still sees a waiter that looks on without an entry.
				gone := tk.gone
				if at := reqs.removed(tk.ticket, a.waiter); !at.IsZero() && tk.how != "" && tk.how != "served" && at.Before(gone) {
					gone = at
				}
				if !tk.taken.Before(b.start) || (!gone.IsZero() && !gone.After(b.end)) {
					continue
				}
				// Missed before b was served, as the hook said; or as the
				// waiter found (it came back): a missed mark whose write
				// lost its answer was applied without the hook's word.
				before := func(m time.Time) bool { return !m.After(b.end) }
				missed := slices.IndexFunc(tk.missed, before) >= 0
				if back := slices.IndexFunc(tk.back, before) >= 0; missed || back {
					o.passed++
					if back {
						o.passedBak++
					}
					if !missed {
						o.backOnly++
					}
					continue
				}
				// Its entry did not exist yet when b could have looked at
				// the queue (b's own entry's creation, or b's Lock call
				// for a free lock): its creation was slow, and b could
				// not know. b's entry may have existed before b heard so
				// (its creation's answer lost, a retry told "exists"): its
				// first creation request, as storage saw it, counts too.
				ref := b.start
				if n := len(b.tickets); n > 0 && !b.tickets[n-1].joined.IsZero() {
					ref = b.tickets[n-1].joined
					if at := reqs.entryAt(b.tickets[n-1].ticket); !at.IsZero() && at.Before(ref) {
						ref = at
					}
				}
				if tk.joined.IsZero() || tk.joined.After(ref) {
					o.unjoined++
					continue
				}
				o.violated++
				bt := "none (a free lock)"
				if n := len(b.tickets); n > 0 {
					bt = strconv.FormatUint(b.tickets[n-1].ticket, 10)
				}
				o.report = append(o.report, fmt.Sprintf("%s (ticket %s, Lock at %s) served at %s before %s (ticket %d taken at %s, joined at %s, Lock at %s, returned at %s, served %v)",
					b.waiter, bt, at(b.start), at(b.end), a.waiter, tk.ticket, at(tk.taken), at(tk.joined), at(a.start), at(a.end), a.served))
			}
		}
	}
	return o
}

// fairRequests is what the server saw, to tell whether a waiter passed
// over had looked since its turn came: each client's requests, the lease
// ID each waiter's entry announced, each Change Lease to an ID, and the
// epochs of the hand-off markers (a hand-off's lease ID is derived from the
// announced ID and the epoch of the term handed on: azlease.HandOffID).
type fairRequests struct {
	mu        sync.Mutex
	lock      string
	byClient  map[string][]fairReq
	announced map[uint64]string
	entryFrom map[uint64]time.Time // each ticket's first request creating its entry
	// removedAt is when each ticket's entry was first deleted, as storage
	// applied it, and removedBy by which client: when that is the ticket's
	// own waiter and the ticket then ends unserved, its place ends there
	// (fairRecorder.check).
	removedAt map[uint64]time.Time
	removedBy map[uint64]string
	handed    map[string][]time.Time
	markers   map[uint64]bool
}

func newFairRequests(lock string) *fairRequests {
	return &fairRequests{lock: lock, byClient: map[string][]fairReq{}, announced: map[uint64]string{}, entryFrom: map[uint64]time.Time{}, removedAt: map[uint64]time.Time{}, removedBy: map[uint64]string{}, handed: map[string][]time.Time{}, markers: map[uint64]bool{}}
}

func (q *fairRequests) see(r azleasetest.Request) {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.byClient[r.Client] = append(q.byClient[r.Client], fairReq{now, string(r.Op) + " " + r.Blob})
	switch {
	case r.Op == azleasetest.OpChangeLease && r.Blob == q.lock:
		id := strings.ToLower(r.Header.Get("X-Ms-Proposed-Lease-Id"))
		q.handed[id] = append(q.handed[id], now)
	case r.Op == azleasetest.OpSetMetadata && r.Blob == q.lock && r.Header.Get("X-Ms-Meta-Azleasenext") != "":
		if e, err := strconv.ParseUint(r.Header.Get("X-Ms-Meta-Azleaseepoch"), 10, 64); err == nil {
			q.markers[e] = true
		}
	case r.Op == azleasetest.OpPutBlob && strings.HasPrefix(r.Blob, azlease.QueueName(q.lock)):
		if t, err := strconv.ParseUint(strings.TrimPrefix(r.Blob, azlease.QueueName(q.lock)), 10, 64); err == nil {
			q.announced[t] = strings.ToLower(r.Header.Get("X-Ms-Meta-Azleasewaiterid"))
		}
	}
}

// fault notes the fault drawn for r: a request creating a queue entry that
// storage applies without delay of its own (passed, or applied and its
// answer lost) created it by then (its Delay later), for entryAt; one
// deleting an entry removed it by then, for removed.
func (q *fairRequests) fault(r azleasetest.Request, f azleasetest.Fault) azleasetest.Fault {
	if (r.Op != azleasetest.OpPutBlob && r.Op != azleasetest.OpDeleteBlob) || !strings.HasPrefix(r.Blob, azlease.QueueName(q.lock)) {
		return f
	}
	switch f.Action {
	case azleasetest.Pass, azleasetest.ApplyThenDrop, azleasetest.ApplyThenHang:
	default:
		return f // not applied, or applied at a time nobody knows
	}
	t, err := strconv.ParseUint(strings.TrimPrefix(r.Blob, azlease.QueueName(q.lock)), 10, 64)
	if err != nil {
		return f
	}
	at := time.Now().Add(f.Delay)
	q.mu.Lock()
	defer q.mu.Unlock()
	if r.Op == azleasetest.OpDeleteBlob {
		if prev, ok := q.removedAt[t]; !ok || at.Before(prev) {
			q.removedAt[t], q.removedBy[t] = at, r.Client
		}
		return f
	}
	if prev, ok := q.entryFrom[t]; !ok || at.Before(prev) {
		q.entryFrom[t] = at
	}
	return f
}

// removed is when ticket's entry was deleted by client, its own waiter,
// as far as the faults drawn tell (zero if unknown, or deleted by another).
func (q *fairRequests) removed(ticket uint64, client string) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.removedBy[ticket] != client {
		return time.Time{}
	}
	return q.removedAt[ticket]
}

// entryAt is when a request creating ticket's queue entry was applied at the
// latest, as far as the faults drawn tell (zero if unknown).
func (q *fairRequests) entryAt(ticket uint64) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.entryFrom[ticket]
}

// fairReq is one request as the server saw it.
type fairReq struct {
	at   time.Time
	what string // operation and blob
}

// looked returns client's requests in (from, to): a request at the
// instant of the pass-over (to) came too late to take the lock before it
// (taking it needs a Change Lease after the look), and in fake time it is
// often the waiter's answer to it (it found itself missed).
func (q *fairRequests) looked(client string, from, to time.Time) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, r := range q.byClient[client] {
		if r.at.After(from) && r.at.Before(to) {
			out = append(out, fmt.Sprintf("%s at +%v", r.what, r.at.Sub(from)))
		}
	}
	return out
}

// turn is when the lock was last handed to ticket's waiter at or before
// m, or zero.
func (q *fairRequests) turn(ticket uint64, m time.Time) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	var last time.Time
	for e := range q.markers {
		for _, at := range q.handed[azlease.HandOffID(q.announced[ticket], e)] {
			if !at.After(m) && at.After(last) {
				last = at
			}
		}
	}
	return last
}

// aheadAt reports whether, at m, a waiter with an earlier ticket than tk's
// was in line and not passed over (never missed, or back since); r.mu is
// held.
func (r *fairRecorder) aheadAt(tk *fairTicket, m time.Time) bool {
	last := func(ts []time.Time) time.Time {
		var l time.Time
		for _, t := range ts {
			if t.Before(m) {
				l = t
			}
		}
		return l
	}
	for _, o := range r.byT {
		if o.ticket >= tk.ticket || !o.call.waitingAt(m) || o.joined.IsZero() || !o.joined.Before(m) || (!o.gone.IsZero() && !o.gone.After(m)) {
			continue
		}
		if lm := last(o.missed); lm.IsZero() || last(o.back).After(lm) {
			return true
		}
	}
	return false
}

// classifyMissed sorts the "missed" events: the waiter passed over had made
// no request since its turn came (asleep: a waiter far back, after a quiet
// time, looks rarely; or cut off, paused, dead), or it had (it looked, yet
// did not take its turn in time). Its turn came when the lock was handed to
// it, or, when the one behind it passed it over, at least two head polls
// before (the lock stayed free that long).
func (r *fairRecorder) classifyMissed(q *fairRequests, headPoll time.Duration) (asleep, looking int, report []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tk := range r.byT {
		for _, m := range tk.missed {
			if !tk.call.waitingAt(m) || (!tk.gone.IsZero() && !tk.gone.After(m)) {
				continue // it had left, or was served: no pass-over
			}
			if r.aheadAt(tk, m) {
				continue // one before it in line had come back: it was not first
			}
			from := q.turn(tk.ticket, m)
			if from.IsZero() {
				from = m.Add(-2 * headPoll)
			}
			if reqs := q.looked(tk.call.waiter, from, m); len(reqs) > 0 {
				looking++
				report = append(report, fmt.Sprintf("%s (ticket %d) passed over at %v, its turn from %v: it had looked: %s", tk.call.waiter, tk.ticket, m.Sub(r.t0), from.Sub(r.t0), strings.Join(reqs, ", ")))
			} else {
				asleep++
			}
		}
	}
	return asleep, looking, report
}

// fairStats is what one run measured.
type fairStats struct {
	mutexStats
	order fairOrder
	clean bool
	// Hosts seeds: the longest a live waiter waited while a slot was free,
	// the bound, and the stretches beyond it.
	longest time.Duration
	bound   time.Duration
	stuck   []string
	// placed counts the joins placed without a listing (fairjoin.go).
	placed int
}

// add adds o's counts (not the hosts seeds' fields) to s.
func (s *fairStats) add(o fairStats) {
	s.mutexStats.add(o.mutexStats)
	s.order.add(o.order)
	s.placed += o.placed
}

// simWaiter is a fair (or the unordered) waiter's state that events act on.
type simWaiter struct {
	name string
	host int // its host, in a hosts seed (-1: the pile)
	mu   sync.Mutex
	// cancel ends the Lock call in progress, or the work under the lock.
	cancel context.CancelFunc
	call   *fairCall
	// downUntil: killed, restarting then; holding tells a kill to abandon
	// the lock (no Unlock: the lease expires).
	downUntil time.Time
	holding   bool
	killed    bool
}

// fairTerms are the terms believed, by lock blob (a Semaphore's slots).
type fairTerms struct {
	mu    sync.Mutex
	terms map[string][]believed
}

func (f *fairTerms) record(blob string, b believed) {
	f.mu.Lock()
	f.terms[blob] = append(f.terms[blob], b)
	f.mu.Unlock()
}

// fairHooks routes the library's fair-lock hook to the recorder of the
// seed whose lock it names: seeds run in parallel, each on a lock named
// after it (routeFairHooks).
var fairHooks sync.Map // lock name → *fairRecorder

// routeFairHooks installs the hook that routes events to fairHooks, for
// the whole of t (its parallel subtests included).
func routeFairHooks(t *testing.T) {
	restore := azlease.SetFairHook(func(event, lock string, ticket uint64) {
		if r, ok := fairHooks.Load(lock); ok {
			r.(*fairRecorder).hook(event, lock, ticket)
		}
	})
	t.Cleanup(restore)
}

// fairRun is one run of a scenario: what the waiters share.
type fairRun struct {
	t     *testing.T
	sc    fairScenario
	c     *cluster
	rec   *fairRecorder
	terms *fairTerms
	end   time.Time
	smu   sync.Mutex
	st    *fairStats
	// newLock starts a process of the waiter name: its Lock (a Mutex's
	// Lock or a Semaphore's Acquire).
	newLock func(name string, unordered bool) func(context.Context) (*azlease.Lock, error)
}

func (r *fairRun) count(f func(*mutexStats)) {
	r.smu.Lock()
	f(&r.st.mutexStats)
	r.smu.Unlock()
}

// runFairScenario plays sc. It must run inside a synctest bubble.
func runFairScenario(t *testing.T, sc fairScenario) fairStats {
	c := newCluster(t, azlease.ElectorOptions{})
	c.blob = fmt.Sprintf("fair-%d", sc.seed) // a lock of its own, for the hook's routing
	c.work = &workCounter{}
	c.emu.SetClockRate(sc.clockRate)
	rec := newFairRecorder(c.blob)
	fairHooks.Store(c.blob, rec)
	defer fairHooks.Delete(c.blob)
	mix := newFaultMix(sc.seed, sc.faultRate, sc.opts.LeaseDuration, false)
	t0 := time.Now()
	if sc.badLen > 0 {
		mix.bad = badPeriod(mix, t0.Add(sc.badStart), t0.Add(sc.badStart+sc.badLen))
	}
	var outage atomic.Bool
	reqs := newFairRequests(c.blob)
	c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
		reqs.see(r)
		var f azleasetest.Fault
		switch {
		case sc.clean || sc.hosts > 0:
		case outage.Load():
			return azleasetest.Fault{Action: azleasetest.Fail}
		default:
			f = mix.draw(r)
		}
		f.Delay += sc.hot
		return reqs.fault(r, f)
	})
	var st fairStats
	st.clean = sc.clean
	run := &fairRun{t: t, sc: sc, c: c, rec: rec, terms: &fairTerms{terms: map[string][]believed{}}, end: t0.Add(sc.length), st: &st}
	run.newLock = func(name string, unordered bool) func(context.Context) (*azlease.Lock, error) {
		o := sc.opts
		o.Identity, o.Unordered = name, unordered
		if sc.slots > 1 {
			s, err := azlease.NewSemaphore(c.emu.client(name), c.blob, sc.slots, &o)
			require.NoError(t, err)
			return s.Acquire
		}
		m, err := azlease.NewMutex(c.emu.client(name), c.blob, &o)
		require.NoError(t, err)
		return m.Lock
	}
	nodes := make([]*simWaiter, sc.waiters)
	var clients sync.WaitGroup
	for i := range nodes {
		w := &simWaiter{name: fmt.Sprintf("w%d", i)}
		if sc.hosts > 0 {
			w.host = sc.host[i]
			w.name = fmt.Sprintf("h%dw%d", w.host, i)
		}
		nodes[i] = w
		rng := rand.New(rand.NewPCG(sc.seed, uint64(i)))
		clients.Go(func() { run.waiterLoop(w, rng, false) })
	}
	if sc.unordered {
		w := &simWaiter{name: "u0"}
		nodes = append(nodes, w)
		rng := rand.New(rand.NewPCG(sc.seed, 0x75))
		clients.Go(func() { run.waiterLoop(w, rng, true) })
	}
	var pile []*simWaiter
	for i := range sc.pile {
		w := &simWaiter{name: fmt.Sprintf("pile%d", i), host: -1}
		pile = append(pile, w)
		rng := rand.New(rand.NewPCG(sc.seed, 0x1000+uint64(i)))
		clients.Go(func() { run.pileLoop(w, rng, t0.Add(sc.pileAt)) })
	}

	var pending sync.WaitGroup
	// kill kills ws at once, as one host that dies: cut off first, so that
	// nothing they do on the way out reaches storage; down that long (a
	// holder's until its lease has surely expired, so that no renewal of
	// the abandoned lock gets through).
	kill := func(ws []*simWaiter, down time.Duration) {
		var dead []*simWaiter
		for _, w := range ws {
			w.mu.Lock()
			if !w.downUntil.After(time.Now()) {
				c.partition(w.name, azleasetest.Hang)
				dead = append(dead, w)
			}
			w.mu.Unlock()
		}
		for _, w := range dead {
			w.mu.Lock()
			d := down
			if w.holding {
				d = max(d, sc.opts.LeaseDuration*2)
			}
			w.downUntil, w.killed = time.Now().Add(d), true
			if w.call != nil {
				rec.crash(w.call)
			}
			if w.cancel != nil {
				w.cancel()
			}
			w.mu.Unlock()
			pending.Go(func() {
				time.Sleep(d)
				c.heal(w.name)
			})
		}
	}
	for _, ev := range sc.events {
		time.Sleep(time.Until(t0.Add(ev.at)))
		switch ev.kind {
		case "outage", "break", "piledeath":
			rec.note("event: %s for %v", ev.kind, ev.dur)
		case "hostdeath":
			rec.note("event: host %d dies for %v", ev.node, ev.dur)
		default:
			rec.note("event: %s %s for %v", ev.kind, nodes[ev.node].name, ev.dur)
		}
		switch ev.kind {
		case "cut", "pause":
			w := nodes[ev.node]
			how := azleasetest.Hang
			if ev.kind == "cut" && ev.dur%2 == 0 {
				how = azleasetest.Drop
			}
			c.partition(w.name, how)
			pending.Go(func() {
				time.Sleep(ev.dur)
				c.heal(w.name)
			})
		case "crash":
			kill(nodes[ev.node:ev.node+1], ev.dur)
		case "hostdeath":
			var host []*simWaiter
			for _, w := range nodes {
				if w.host == ev.node {
					host = append(host, w)
				}
			}
			kill(host, ev.dur)
		case "piledeath":
			kill(pile, sc.length) // for good: they never come back
		case "outage":
			outage.Store(true)
			time.Sleep(min(ev.dur, 10*time.Second))
			outage.Store(false)
		case "break":
			st.breaks++
			c.operatorBreak(sc.opts.LeaseDuration, ev.dur, &pending)
		}
	}
	pending.Wait()
	clients.Wait()
	c.stopAll()
	runEnd := time.Now()

	mix.mu.Lock()
	st.requests = mix.requests
	st.late = mix.late
	faultLog := mix.log
	mix.mu.Unlock()
	st.work = c.work.snapshot()
	var checkErr error
	st.outside, st.overlaps, st.epochs, checkErr = fairViolations(c, run.terms)
	st.order = rec.check(t0, reqs)
	var missedReport []string
	st.order.asleep, st.order.looking, missedReport = rec.classifyMissed(reqs, sc.headPoll())
	if sc.clean {
		st.order.report = append(st.order.report, missedReport...)
	}
	if sc.clean {
		q, err := azlease.InspectQueue(context.Background(), c.emu.client("observer"), c.blob)
		require.NoError(t, err)
		require.Empty(t, q, "%v: every waiter left the queue", sc)
	}
	rec.mu.Lock()
	st.placed = rec.events["placed"]
	rec.mu.Unlock()
	if sc.hosts > 0 {
		st.bound = sc.livenessBound()
		st.longest, st.stuck = stuckWaits(sc.slots, run.terms, rec, st.bound, t0, runEnd)
	}
	if debugSim && (checkErr != nil || st.work.stale > 0 || st.order.violated > 0 || (sc.clean && st.order.missed > 0) || len(st.stuck) > 0) {
		t.Logf("%v: faults injected:\n%s", sc, strings.Join(faultLog, "\n"))
		t.Logf("%v: %v", sc, checkErr)
		t.Logf("%v: the waiters' events:\n%s", sc, strings.Join(rec.log, "\n"))
	}
	return st
}

// fairViolations checks every lock blob's believed terms against its
// grants (a Semaphore's slots one by one): none outside its lease, no two
// overlapping, epochs growing.
func fairViolations(c *cluster, terms *fairTerms) (outside, overlaps, epochs int, err error) {
	terms.mu.Lock()
	defer terms.mu.Unlock()
	var errs []error
	for blob, ts := range terms.terms {
		err := azleasetest.CheckIntervals(c.emu.Grants(testContainer, blob), intervalsOf(ts))
		if err == nil {
			continue
		}
		var ee *azleasetest.ExclusionError
		if !errors.As(err, &ee) {
			c.t.Errorf("the interval checker failed: %v", err)
			errs = append(errs, err)
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %w", blob, err))
		outside += ee.Count(azleasetest.OutsideGrant) + ee.Count(azleasetest.EndsBeforeStart)
		overlaps += ee.Count(azleasetest.Overlap)
		epochs += ee.Count(azleasetest.EpochBackwards)
	}
	return outside, overlaps, epochs, errors.Join(errs...)
}

// stuckWaits finds, for every call that was never killed, the stretches
// during which it waited while the lock had a free slot (fewer terms
// believed than slots), and returns the longest and those longer than
// bound. A term's lease outlives its belief when its holder died; the
// bound counts that.
func stuckWaits(slots int, terms *fairTerms, rec *fairRecorder, bound time.Duration, t0, end time.Time) (longest time.Duration, stuck []string) {
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	terms.mu.Lock()
	for _, ts := range terms.terms {
		for _, b := range ts {
			edges = append(edges, edge{b.start, 1}, edge{b.end, -1})
		}
	}
	terms.mu.Unlock()
	slices.SortStableFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	var free [][2]time.Time // stretches with a free slot
	active, from := 0, t0
	for _, e := range edges {
		if active < slots && e.at.After(from) {
			free = append(free, [2]time.Time{from, e.at})
		}
		active += e.d
		from = e.at
	}
	if active < slots && end.After(from) {
		free = append(free, [2]time.Time{from, end})
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, c := range rec.calls {
		if !c.crashed.IsZero() {
			continue
		}
		cend := c.end
		if cend.IsZero() {
			cend = end
		}
		if c.deadline.Before(cend) {
			cend = c.deadline
		}
		for _, f := range free {
			a, b := f[0], f[1]
			if c.start.After(a) {
				a = c.start
			}
			if cend.Before(b) {
				b = cend
			}
			if d := b.Sub(a); d > longest {
				longest = d
			}
			if b.Sub(a) > bound {
				stuck = append(stuck, fmt.Sprintf("%s waited from %v to %v while a slot was free (%v, beyond %v)", c.waiter, a.Sub(t0), b.Sub(t0), b.Sub(a), bound))
			}
		}
	}
	return longest, stuck
}

// waiterLoop is one waiter: it asks at random times, gives up when its
// ctx ends (sometimes soon), holds the lock for a random length (zero
// included) while working through its term, and unlocks; killed, it stays
// down and starts again as a new process. An unordered waiter is not
// recorded.
func (r *fairRun) waiterLoop(w *simWaiter, rng *rand.Rand, unordered bool) {
	rec := r.rec
	if unordered {
		rec = nil
	}
	lock := r.newLock(w.name, unordered)
	for time.Now().Before(r.end) {
		// Ask again at once, soon, or a while later (a hot lock's: at
		// once).
		switch n := rng.IntN(3); {
		case n == 0 || r.sc.hot > 0:
		case n == 1:
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
		default:
			time.Sleep(time.Duration(rng.IntN(8000)) * time.Millisecond)
		}
		w.mu.Lock()
		if d := time.Until(w.downUntil); d > 0 {
			w.mu.Unlock()
			time.Sleep(d)
			w.mu.Lock()
		}
		if w.killed {
			lock = r.newLock(w.name, unordered) // a new process: no memory of the old one
			w.killed = false
		}
		limit := 3 * time.Minute
		if r.sc.hosts > 0 {
			limit = 20 * time.Minute // waits until served: a stuck queue shows
		}
		if rng.IntN(5) == 0 {
			limit = time.Duration(1+rng.IntN(20)) * time.Second // gives up while queued
		}
		w.mu.Unlock()
		r.lockOnce(w, rng, lock, limit, rec)
	}
}

// pileLoop is a waiter of the pile: it asks at at, with the others, and
// waits until served (once) or killed.
func (r *fairRun) pileLoop(w *simWaiter, rng *rand.Rand, at time.Time) {
	time.Sleep(time.Until(at))
	r.lockOnce(w, rng, r.newLock(w.name, false), 20*time.Minute, r.rec)
}

// lockOnce makes one Lock call with a ctx of limit, holds the lock it got,
// and unlocks it (unless killed meanwhile); rec is nil for the unordered
// waiter.
func (r *fairRun) lockOnce(w *simWaiter, rng *rand.Rand, lock func(context.Context) (*azlease.Lock, error), limit time.Duration, rec *fairRecorder) {
	w.mu.Lock()
	if w.killed {
		w.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	deadline, _ := ctx.Deadline()
	var call *fairCall
	if rec != nil {
		call = rec.begin(w.name, deadline)
	}
	w.cancel, w.call = cancel, call
	w.mu.Unlock()

	lk, err := lock(ctx)
	if rec != nil {
		rec.end(call, err == nil)
	}
	cancel()
	w.mu.Lock()
	w.cancel, w.call = nil, nil
	if err != nil {
		w.mu.Unlock()
		r.count(func(s *mutexStats) { s.gaveUp++ })
		return
	}
	wctx, wcancel := context.WithCancel(lk.Context())
	w.cancel, w.holding = wcancel, true
	w.mu.Unlock()

	b := believed{node: w.name, epoch: lk.Epoch(), leaseID: lk.Token().LeaseID, start: time.Now()}
	r.rec.note("%s holds %s, epoch %d", w.name, lk.Name(), lk.Epoch())
	var hold time.Duration
	switch n := rng.IntN(10); {
	case r.sc.hot > 0:
		hold = time.Duration(n) * time.Millisecond / 2 // up to 4.5 ms
	case n <= 2:
	case n <= 6:
		hold = time.Duration(rng.IntN(1000)) * time.Millisecond
	case n <= 8:
		hold = time.Duration(1000+rng.IntN(9000)) * time.Millisecond
	default:
		hold = time.Duration(rng.Int64N(int64(2 * r.sc.opts.LeaseDuration)))
		if r.sc.hosts > 0 {
			hold = time.Duration(rng.Int64N(int64(10 * time.Second))) // the queue keeps moving
		}
	}
	if hold > 0 {
		hctx, hcancel := context.WithTimeout(wctx, hold)
		r.c.work.run(hctx, lk.Term, w.name)
		hcancel()
	}
	b.end = time.Now()
	if vu := lk.ValidUntil(); vu.Before(b.end) {
		b.end = vu
	}
	lost := lk.Context().Err() != nil
	b.cause = context.Cause(lk.Context())
	r.terms.record(lk.Name(), b)
	wcancel()
	w.mu.Lock()
	w.cancel, w.holding = nil, false
	dead := w.killed
	w.mu.Unlock()
	r.count(func(s *mutexStats) {
		s.locks++
		if lost {
			s.lost++
		}
	})
	if dead {
		return // no Unlock: its lease expires
	}
	r.rec.note("%s unlocks", w.name)
	uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
	uerr := lk.Unlock(uctx)
	ucancel()
	r.rec.note("%s unlocked: %v", w.name, uerr)
	if uerr != nil {
		r.count(func(s *mutexStats) { s.unlockErr++ })
	}
}

// fairSeeds is how many seeds the fair lock simulation runs: -seeds, else
// a thirtieth of simSeeds, at least 8 (make test: 8: two of each kind; the
// seeds run in parallel; a seed plays five minutes of up to fourteen
// clients polling every 100 to 500 ms).
func fairSeeds() int { return partSeeds(30, 8) }

// TestFairLockSimulation plays random scenarios of a fair Mutex (and, in a
// fourth of the seeds, a Semaphore) in fake time (see the top of this
// file) and checks exclusion, order and, where hosts die, that the queue
// never sticks. Seeds are scenarios as in the other simulations, and run
// in parallel:
//
//	go test -run TestFairLockSimulation . -seeds 1000
//
// In clean seeds nobody is served out of order, and no waiter is passed
// over that had looked since its turn came; waiters are passed over there
// only while asleep by design: far back in a queue that was quiet for a
// while, they look rarely (every 15 × position × PollInterval at most), and
// a run of short holds can reach them before they look. Those are counted.
func TestFairLockSimulation(t *testing.T) {
	n := fairSeeds()
	routeFairHooks(t)
	var total, clean, hosts fairStats
	defer func() {
		t.Logf("%d seeds: %d locks (%d lost while held, %d Lock calls gave up, %d Unlocks failed), %d held intervals outside their lease, %d overlapping pairs, %d epochs that did not grow; %d requests, applied late %v; %d operator breaks; work: %v",
			n, total.locks, total.lost, total.gaveUp, total.unlockErr, total.outside, total.overlaps, total.epochs, total.requests, total.late, total.breaks, total.work)
		t.Logf("order, all seeds: %v", total.order)
		t.Logf("order, clean seeds: %v", clean.order)
		t.Logf("hosts that die: %d locks, order %v; the longest a live waiter waited while a slot was free: %v (bound %v at the most)", hosts.locks, hosts.order, hosts.longest, hosts.bound)
	}()
	simulation[fairScenario, fairStats]{
		seeds:    n,
		scenario: newFairScenario,
		play:     runFairScenario,
		check:    checkFairScenario,
		add: func(sc fairScenario, st fairStats) {
			total.add(st)
			if sc.clean {
				clean.add(st)
			}
			if sc.hosts > 0 {
				hosts.add(st)
				hosts.longest = max(hosts.longest, st.longest)
				hosts.bound = max(hosts.bound, st.bound)
			}
		},
	}.run(t)
}

// checkFairScenario asserts what a seed of the fair lock's simulation must
// show: no lock outside its lease, no overlap, epochs that grow, no stale
// read, no waiter served before an earlier one still waiting, in clean
// seeds nobody passed over who looked, and in hosts-that-die seeds no live
// waiter left waiting with a slot free beyond the scenario's bound.
func checkFairScenario(t *testing.T, sc fairScenario, st fairStats) {
	if st.outside+st.overlaps+st.epochs+st.work.stale > 0 {
		t.Errorf("%v: %d locks outside their lease, %d overlapping pairs, %d epochs that did not grow, %d stale reads", sc, st.outside, st.overlaps, st.epochs, st.work.stale)
	}
	if st.order.violated > 0 {
		t.Errorf("%v: %d waiters served before an earlier one still waiting:\n  %s", sc, st.order.violated, strings.Join(st.order.report, "\n  "))
	}
	if sc.clean && st.order.unjoined+st.order.looking > 0 {
		t.Errorf("%v: no faults and no pauses, yet %d served before an earlier waiter's entry existed, %d waiters passed over although they had looked since their turn came:\n  %s",
			sc, st.order.unjoined, st.order.looking, strings.Join(st.order.report, "\n  "))
	}
	if len(st.stuck) > 0 {
		t.Errorf("%v: the queue stuck: a live waiter waited while a slot was free for longer than %v:\n  %s", sc, st.bound, strings.Join(st.stuck, "\n  "))
	}
}

// TestFairHotLockSimulation plays hot locks' scenarios (newHotFairScenario)
// and checks them as TestFairLockSimulation does: 24 to 35 waiters that ask
// again at once, so that most joins are placed from their own hand-off
// without a listing (fairjoin.go), under faults, pauses and crashes in two
// thirds of the seeds. make test plays seed 0 (clean) for 12 s of its 45
// (under -race a seed's 45 s take two minutes; without -seeds, every seed
// plays 12 s); a sweep, with the seeds in parallel:
//
//	go test -run TestFairHotLockSimulation . -seeds 60
func TestFairHotLockSimulation(t *testing.T) {
	azlease.HeavyTest(t)
	n := partSeeds(400, 1)
	scenario := newHotFairScenario
	if *seedsFlag == 0 {
		scenario = func(seed uint64) fairScenario {
			sc := newHotFairScenario(seed)
			sc.length = 12 * time.Second
			return sc
		}
	}
	routeFairHooks(t)
	var total, clean fairStats
	defer func() {
		t.Logf("%d seeds: %d locks (%d Lock calls gave up), %d joins placed without a listing, %d overlapping pairs; order, all seeds: %v; clean seeds: %v",
			n, total.locks, total.gaveUp, total.placed, total.overlaps, total.order, clean.order)
		if !t.Failed() {
			assert.Positive(t, total.placed, "joins placed from the hand-off")
		}
	}()
	simulation[fairScenario, fairStats]{
		seeds:    n,
		scenario: scenario,
		play:     runFairScenario,
		check:    checkFairScenario,
		add: func(sc fairScenario, st fairStats) {
			total.add(st)
			if sc.clean {
				clean.add(st)
			}
		},
	}.run(t)
}

// TestFairLockEightDeadInARow plays one scenario of the simulation, pinned
// by its seed (542: hosts that die; eight dead entries in a row ahead of
// the live waiters, after a stand-still of minutes; a change to
// newFairScenario changes what it plays). A watcher extending its promise
// to the bound othersDue computes, uncapped, waited out the sleep of a
// dead waiter far back and left the lock free for 1 to 5 minutes (19 runs
// in 30; 17 to 20 s before othersWatch and since its cap, othersCap).
func TestFairLockEightDeadInARow(t *testing.T) {
	routeFairHooks(t)
	sc := newFairScenario(542)
	require.Positive(t, sc.hosts, "seed 542 plays hosts that die")
	var longest time.Duration
	simulation[fairScenario, fairStats]{
		seeds:    1,
		scenario: func(uint64) fairScenario { return sc },
		play:     runFairScenario,
		check:    checkFairScenario,
		add:      func(_ fairScenario, st fairStats) { longest = st.longest },
		rerun:    func(uint64) uint64 { return 1 },
	}.run(t)
	t.Logf("%v: the longest a live waiter waited while a slot was free: %v", sc, longest)
	require.Less(t, longest, time.Minute, "a live waiter behind eight dead ones, with the lock free")
}
