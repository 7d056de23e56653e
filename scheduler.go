package azlease

import (
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// The renewal scheduler. Every held lease is renewed by its keeper (term.go),
// which owns two timers and no goroutine: one ends the term at its validity
// deadline, the other fires when the next renewal is due. A due renewal is
// handed to the renewLimiter of the lease's container client, which runs it
// on the goroutine of the timer that fired (which becomes a worker, so a
// renewal starts no goroutine of its own). So a process holding many leases
// has goroutines in proportion to the renewals in flight, none while idle,
// and its renewals share a bounded number of connections.

// renewConcurrency is how many renewals of one container client run at
// once before more wait in a queue: below the idle-connection limit of the
// transport azlease installs (maxIdleConnsPerHost), so that renewals reuse
// connections instead of opening one per burst. It is a soft cap: see
// renewOverflowAfter.
const renewConcurrency = 32

// renewOverflowAfter is how long a due renewal waits in the queue before it
// starts anyway, beyond renewConcurrency (up to renewMaxInFlight). Renewals
// that hang (requests lost on the way, say) thereby delay the others by
// about this long, far less than the time between a renewal and its validity
// deadline (two attempt timeouts at least). The queue only ever holds
// renewals; each term's deadline timer fires regardless of it.
const renewOverflowAfter = time.Second

// renewMaxInFlight is the hard cap on one container client's renewals in
// flight, overflow included: the idle connections azlease's transport keeps
// (maxIdleConnsPerHost), so that even renewals that overflow reuse
// connections. Without it, a process that falls behind (a storage account
// answering slowly, a machine out of CPU) would start every waiting renewal
// after a second, each on a new connection (a TLS handshake each), and fall
// further behind: at 50,000 held leases on 2 cores, that turned a machine
// that kept up into one that lost nearly every lease. At the cap, a waiting
// renewal starts when one in flight ends; only more than renewMaxInFlight
// renewals hanging at once delay the others longer, each by up to one
// attempt timeout.
const renewMaxInFlight = maxIdleConnsPerHost

// renewLimiter runs the renewals of the leases on one container client, at
// most renewConcurrency at once (softly, see renewOverflowAfter). It owns no
// goroutine while idle: the goroutine of a keeper's renewal timer becomes a
// worker when fewer than renewConcurrency run, takes queued renewals after
// its own, and returns when the queue is empty. A waiting renewal is a
// queue entry (its keeper), not a goroutine. Each keeper waits for its own renewal in stop,
// and a worker calls nothing after the last renewal it ran is reported
// finished, so every worker is joined by the keeper whose renewal it ran
// last.
//
// Limiters hold no timer and no channel, so one can serve any goroutine;
// its workers are the goroutines of keepers' timers, so under
// testing/synctest they belong to the bubble of the leases they renew.
// A container client used in two synctest bubbles at once would mix them:
// each bubble needs its own client (as it needs its own transport).
type renewLimiter struct {
	mu         sync.Mutex
	head, tail *keeper // the queue, oldest first, linked through keeper.qprev/qnext
	running    int     // workers, each running one renewal
	// Counters for tests: renewals started at once, from the queue, and by
	// overflow; the most workers that ran at once.
	started, dequeued, overflowed, peak int
}

// submit takes a worker's place for k's renewal if fewer than
// renewConcurrency run and none wait, or queues it (as of now); it reports
// whether it took a place, and then the caller must become that worker:
// call lim.work(k), after releasing k.mu. The caller holds k.mu; submit
// never waits for a renewal.
func (lim *renewLimiter) submit(k *keeper, now time.Time) bool {
	lim.mu.Lock()
	if lim.running < renewConcurrency && lim.head == nil {
		lim.running++
		lim.peak = max(lim.peak, lim.running)
		lim.started++
		lim.mu.Unlock()
		return true
	}
	k.inQueue, k.enqueued = true, now
	k.qprev, k.qnext = lim.tail, nil
	if lim.tail != nil {
		lim.tail.qnext = k
	} else {
		lim.head = k
	}
	lim.tail = k
	lim.mu.Unlock()
	return false
}

// overflow takes a worker's place for k's renewal at once, beyond
// renewConcurrency but below renewMaxInFlight, if it is still queued and has
// waited renewOverflowAfter by now. started reports whether it did (the
// caller then becomes that worker, as after submit). Otherwise wait, when
// not zero, is how long until the caller should ask again: the rest of the
// wait, or another renewOverflowAfter at the cap. A renewal no longer queued
// (a worker took it) gives zero.
func (lim *renewLimiter) overflow(k *keeper, now time.Time) (started bool, wait time.Duration) {
	lim.mu.Lock()
	defer lim.mu.Unlock()
	switch {
	case !k.inQueue:
		return false, 0
	case now.Sub(k.enqueued) < renewOverflowAfter:
		return false, renewOverflowAfter - now.Sub(k.enqueued)
	case lim.running >= renewMaxInFlight:
		return false, renewOverflowAfter
	}
	lim.unlink(k)
	lim.running++
	lim.peak = max(lim.peak, lim.running)
	lim.overflowed++
	return true, 0
}

// remove takes k out of the queue; it reports false if k was not queued (a
// worker already took it, or will not run it).
func (lim *renewLimiter) remove(k *keeper) bool {
	lim.mu.Lock()
	defer lim.mu.Unlock()
	if !k.inQueue {
		return false
	}
	lim.unlink(k)
	return true
}

// unlink removes k from the queue; lim.mu is held.
func (lim *renewLimiter) unlink(k *keeper) {
	if k.qprev != nil {
		k.qprev.qnext = k.qnext
	} else {
		lim.head = k.qnext
	}
	if k.qnext != nil {
		k.qnext.qprev = k.qprev
	} else {
		lim.tail = k.qprev
	}
	k.qprev, k.qnext, k.inQueue = nil, nil, false
}

// work runs k's renewal, then queued ones while the queue is not empty and
// no more than renewConcurrency workers run (or the oldest has waited
// renewOverflowAfter), then exits. The renewal's end
// is reported to its keeper (pending.Done) only once the worker has decided
// what to do next, so the last report is the worker's last action.
func (lim *renewLimiter) work(k *keeper) {
	for {
		k.run()
		lim.mu.Lock()
		// A worker beyond renewConcurrency (started by overflow) goes on
		// only with a renewal that has waited renewOverflowAfter itself.
		next := lim.head
		if next != nil && (lim.running <= renewConcurrency || time.Since(next.enqueued) >= renewOverflowAfter) {
			lim.unlink(next)
			lim.dequeued++
		} else {
			next = nil
			lim.running--
		}
		lim.mu.Unlock()
		k.pending.Done()
		if next == nil {
			return
		}
		k = next
	}
}

// renewLimiters holds one renewLimiter per container client. The keys are
// weak pointers, and a cleanup deletes an entry once its client is garbage,
// so a process that makes many clients (or a test suite) does not keep them
// alive.
var renewLimiters struct {
	mu sync.Mutex
	m  map[weak.Pointer[container.Client]]*renewLimiter
}

// limiterFor returns cc's renewal limiter, making it on first use.
func limiterFor(cc *container.Client) *renewLimiter {
	key := weak.Make(cc)
	renewLimiters.mu.Lock()
	defer renewLimiters.mu.Unlock()
	if lim, ok := renewLimiters.m[key]; ok {
		return lim
	}
	if renewLimiters.m == nil {
		renewLimiters.m = make(map[weak.Pointer[container.Client]]*renewLimiter)
	}
	lim := new(renewLimiter)
	renewLimiters.m[key] = lim
	runtime.AddCleanup(cc, forgetLimiter, key)
	return lim
}

// forgetLimiter drops the limiter of a client that is garbage. Its keepers
// are gone too: each held its client through its Lease.
func forgetLimiter(key weak.Pointer[container.Client]) {
	renewLimiters.mu.Lock()
	delete(renewLimiters.m, key)
	renewLimiters.mu.Unlock()
}
