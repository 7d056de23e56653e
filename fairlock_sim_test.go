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
// seeds there is no pass-over at all.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
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
}

func newFairScenario(seed uint64) fairScenario {
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
	for at := 20 * time.Second; at < sc.length-30*time.Second; at += time.Duration(15+rng.IntN(30)) * time.Second {
		kind := []string{"cut", "cut", "pause", "crash", "crash", "outage"}[rng.IntN(6)]
		d := time.Duration(1+rng.IntN(40)) * time.Second
		if kind == "pause" {
			d = time.Duration(1+rng.IntN(20)) * time.Second
		}
		sc.events = append(sc.events, event{at: at, kind: kind, node: rng.IntN(nodes), dur: d})
	}
	sc.events, sc.badStart, sc.badLen = addOperatorTrouble(rng, sc.events, sc.length, sc.opts.LeaseDuration)
	return sc
}

func (sc fairScenario) String() string {
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
			tk.gone = now
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
func (r *fairRecorder) check(t0 time.Time) fairOrder {
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
				if !tk.taken.Before(b.start) || (!tk.gone.IsZero() && !tk.gone.After(b.end)) {
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
				// not know.
				ref := b.start
				if n := len(b.tickets); n > 0 && !b.tickets[n-1].joined.IsZero() {
					ref = b.tickets[n-1].joined
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
	handed    map[string][]time.Time
	markers   map[uint64]bool
}

func newFairRequests(lock string) *fairRequests {
	return &fairRequests{lock: lock, byClient: map[string][]fairReq{}, announced: map[uint64]string{}, handed: map[string][]time.Time{}, markers: map[uint64]bool{}}
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
}

// simWaiter is a fair (or the unordered) waiter's state that events act on.
type simWaiter struct {
	name string
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

// runFairScenario plays sc. It must run inside a synctest bubble.
func runFairScenario(t *testing.T, sc fairScenario) fairStats {
	c := newCluster(t, azlease.ElectorOptions{})
	c.work = &workCounter{}
	c.emu.SetClockRate(sc.clockRate)
	rec := newFairRecorder(c.blob)
	restore := azlease.SetFairHook(rec.hook)
	defer restore()
	mix := newFaultMix(sc.seed, sc.faultRate, sc.opts.LeaseDuration, false)
	t0 := time.Now()
	if sc.badLen > 0 {
		mix.bad = badPeriod(mix, t0.Add(sc.badStart), t0.Add(sc.badStart+sc.badLen))
	}
	var outage atomic.Bool
	reqs := newFairRequests(c.blob)
	c.setFaults(func(r azleasetest.Request) azleasetest.Fault {
		reqs.see(r)
		switch {
		case sc.clean:
			return azleasetest.Fault{}
		case outage.Load():
			return azleasetest.Fault{Action: azleasetest.Fail}
		}
		return mix.draw(r)
	})
	end := t0.Add(sc.length)

	var st fairStats
	st.clean = sc.clean
	var smu sync.Mutex
	count := func(f func(*mutexStats)) {
		smu.Lock()
		f(&st.mutexStats)
		smu.Unlock()
	}
	newMutex := func(name string, unordered bool) *azlease.Mutex {
		o := sc.opts
		o.Identity, o.Unordered = name, unordered
		m, err := azlease.NewMutex(c.emu.client(name), c.blob, &o)
		require.NoError(t, err)
		return m
	}
	nodes := make([]*simWaiter, sc.waiters)
	var clients sync.WaitGroup
	for i := range nodes {
		w := &simWaiter{name: fmt.Sprintf("w%d", i)}
		nodes[i] = w
		rng := rand.New(rand.NewPCG(sc.seed, uint64(i)))
		clients.Go(func() { fairWaiterLoop(t, c, sc, rec, w, rng, newMutex, count, end) })
	}
	if sc.unordered {
		w := &simWaiter{name: "u0"}
		nodes = append(nodes, w)
		rng := rand.New(rand.NewPCG(sc.seed, 0x75))
		clients.Go(func() { fairWaiterLoop(t, c, sc, nil, w, rng, newMutex, count, end) })
	}

	var pending sync.WaitGroup
	for _, ev := range sc.events {
		time.Sleep(time.Until(t0.Add(ev.at)))
		if ev.kind == "outage" || ev.kind == "break" {
			rec.note("event: %s for %v", ev.kind, ev.dur)
		} else {
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
			w := nodes[ev.node]
			w.mu.Lock()
			down := ev.dur
			if w.downUntil.After(time.Now()) {
				w.mu.Unlock()
				continue // down already
			}
			if w.holding {
				// Dead while holding: cut off until its lease has surely
				// expired, so that no renewal of the abandoned lock
				// gets through.
				down = max(down, sc.opts.LeaseDuration*2)
			}
			w.downUntil, w.killed = time.Now().Add(down), true
			if w.call != nil {
				rec.crash(w.call)
			}
			c.partition(w.name, azleasetest.Hang) // first: nothing it does on the way out reaches storage
			if w.cancel != nil {
				w.cancel()
			}
			w.mu.Unlock()
			pending.Go(func() {
				time.Sleep(down)
				c.heal(w.name)
			})
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

	mix.mu.Lock()
	st.requests = mix.requests
	st.late = mix.late
	faultLog := mix.log
	mix.mu.Unlock()
	st.work = c.work.snapshot()
	var checkErr error
	st.outside, st.overlaps, st.epochs, checkErr = c.violations()
	st.order = rec.check(t0)
	headPoll := sc.opts.HeadPollInterval
	if headPoll == 0 {
		headPoll = 200 * time.Millisecond
	}
	var missedReport []string
	st.order.asleep, st.order.looking, missedReport = rec.classifyMissed(reqs, headPoll)
	if sc.clean {
		st.order.report = append(st.order.report, missedReport...)
	}
	if sc.clean {
		q, err := azlease.InspectQueue(context.Background(), c.emu.client("observer"), c.blob)
		require.NoError(t, err)
		require.Empty(t, q, "%v: every waiter left the queue", sc)
	}
	if debugSim && (checkErr != nil || st.work.stale > 0 || st.order.violated > 0 || (sc.clean && st.order.missed > 0)) {
		t.Logf("%v: faults injected:\n%s", sc, strings.Join(faultLog, "\n"))
		t.Logf("%v: %v", sc, checkErr)
		t.Logf("%v: the waiters' events:\n%s", sc, strings.Join(rec.log, "\n"))
	}
	return st
}

// fairWaiterLoop is one waiter: it asks at random times, gives up when its
// ctx ends (sometimes soon), holds the lock for a random length (zero
// included) while working through its term, and unlocks; killed, it stays
// down and starts again as a new process. rec is nil for the unordered one.
func fairWaiterLoop(t *testing.T, c *cluster, sc fairScenario, rec *fairRecorder, w *simWaiter, rng *rand.Rand,
	newMutex func(string, bool) *azlease.Mutex, count func(func(*mutexStats)), end time.Time) {
	m := newMutex(w.name, rec == nil)
	for time.Now().Before(end) {
		// Ask again at once, soon, or a while later.
		switch rng.IntN(3) {
		case 0:
		case 1:
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
			m = newMutex(w.name, rec == nil) // a new process: no memory of the old one
			w.killed = false
		}
		limit := 3 * time.Minute
		if rng.IntN(5) == 0 {
			limit = time.Duration(1+rng.IntN(20)) * time.Second // gives up while queued
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		deadline, _ := ctx.Deadline()
		var call *fairCall
		if rec != nil {
			call = rec.begin(w.name, deadline)
		}
		w.cancel, w.call = cancel, call
		w.mu.Unlock()

		lk, err := m.Lock(ctx)
		if rec != nil {
			rec.end(call, err == nil)
		}
		cancel()
		w.mu.Lock()
		w.cancel, w.call = nil, nil
		if err != nil {
			w.mu.Unlock()
			count(func(s *mutexStats) { s.gaveUp++ })
			continue
		}
		wctx, wcancel := context.WithCancel(lk.Context())
		w.cancel, w.holding = wcancel, true
		w.mu.Unlock()

		b := believed{node: w.name, epoch: lk.Epoch(), leaseID: lk.Token().LeaseID, start: time.Now()}
		rec.note("%s holds, epoch %d", w.name, lk.Epoch())
		var hold time.Duration
		switch rng.IntN(10) {
		case 0, 1, 2:
		case 3, 4, 5, 6:
			hold = time.Duration(rng.IntN(1000)) * time.Millisecond
		case 7, 8:
			hold = time.Duration(1000+rng.IntN(9000)) * time.Millisecond
		default:
			hold = time.Duration(rng.Int64N(int64(2 * sc.opts.LeaseDuration)))
		}
		if hold > 0 {
			hctx, hcancel := context.WithTimeout(wctx, hold)
			c.work.run(hctx, lk.Term, w.name)
			hcancel()
		}
		b.end = time.Now()
		if vu := lk.ValidUntil(); vu.Before(b.end) {
			b.end = vu
		}
		lost := lk.Context().Err() != nil
		b.cause = context.Cause(lk.Context())
		c.record(b)
		wcancel()
		w.mu.Lock()
		w.cancel, w.holding = nil, false
		dead := w.killed
		w.mu.Unlock()
		count(func(s *mutexStats) {
			s.locks++
			if lost {
				s.lost++
			}
		})
		if dead {
			continue // no Unlock: its lease expires
		}
		rec.note("%s unlocks", w.name)
		uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
		uerr := lk.Unlock(uctx)
		ucancel()
		rec.note("%s unlocked: %v", w.name, uerr)
		if uerr != nil {
			count(func(s *mutexStats) { s.unlockErr++ })
		}
	}
}

// fairSeeds is how many seeds the fair lock simulation runs: -seeds, else
// a fortieth of simSeeds, at least 6 (make test: 6, about 25 s with -race;
// a seed plays five minutes of up to nine clients polling every 100 to
// 500 ms).
func fairSeeds() int {
	if *seedsFlag > 0 {
		return *seedsFlag
	}
	return max(simSeeds()/40, 6)
}

// TestFairLockSimulation plays random scenarios of a fair Mutex in fake
// time (see the top of this file) and checks exclusion and order. Seeds are
// scenarios as in the other simulations:
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
	var total, clean fairStats
	simulation[fairScenario, fairStats]{
		seeds:    n,
		serial:   true, // the order checker hears waiters through SetFairHook, one package-level hook
		scenario: newFairScenario,
		play:     runFairScenario,
		check: func(t *testing.T, sc fairScenario, st fairStats) {
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
		},
		add: func(sc fairScenario, st fairStats) {
			total.mutexStats.add(st.mutexStats)
			total.order.add(st.order)
			if sc.clean {
				clean.mutexStats.add(st.mutexStats)
				clean.order.add(st.order)
			}
		},
	}.run(t)
	t.Logf("%d seeds: %d locks (%d lost while held, %d Lock calls gave up, %d Unlocks failed), %d held intervals outside their lease, %d overlapping pairs, %d epochs that did not grow; %d requests, applied late %v; %d operator breaks; work: %v",
		n, total.locks, total.lost, total.gaveUp, total.unlockErr, total.outside, total.overlaps, total.epochs, total.requests, total.late, total.breaks, total.work)
	t.Logf("order, all seeds: %v", total.order)
	t.Logf("order, clean seeds: %v", clean.order)
}
