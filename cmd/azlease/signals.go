package main

// Signals to azlease: what a SIGINT, SIGTERM or SIGHUP means depends on
// whether a command is running under the lease.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// forwarded are the signals azlease passes on to a running command. While no
// command runs, they stop azlease promptly.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// hookEnv names a test hook: azlease (or its guardian) announces the point
// on stderr and waits there, at most 10 s, until it has received a signal,
// so that tests can deliver a signal at exactly that point. Unset, nothing
// waits.
const hookEnv = "AZLEASE_TEST_HOOK"

// signalError is the cause of a session's context when a signal stopped it.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "interrupted by " + signalName(e.sig) }

// signalName is "SIGTERM" for syscall.SIGTERM.
func signalName(s os.Signal) string {
	switch s {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	}
	return s.String()
}

// signalStatus is 128+N for signal N, the shell's convention.
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return exitSignalBase + int(n)
	}
	return exitSignalBase + 15
}

// router decides what a signal to azlease means. Until a command run
// begins, a signal cancels the session, so that waiting for a lease ends at
// once and no command starts. From the moment a run begins (begin, which a
// signal that came first makes fail) until it ends, signals go to the
// command: those that come before its guardian is attached wait for it, and
// the guardian delivers them to CMD or, if CMD has not started yet, does
// not start it. A signal is never lost, and never replayed to a later run.
// With several runs at once (azlease shards), a signal goes to each, and
// (with cancelAlways) also cancels the session, so that no new run begins.
type router struct {
	ch           chan os.Signal
	cancel       context.CancelCauseFunc
	cancelAlways bool // a signal cancels the session even while runs go on
	quit         chan struct{}
	wg           sync.WaitGroup
	seen         chan struct{} // closed at the first signal

	mu    sync.Mutex
	runs  map[*cmdRun]bool
	first os.Signal // the first signal received, if any
	sent  bool      // a signal went to a command run

	// prepare, while set (lead's runs, setPrepare), runs before a SIGTERM
	// or SIGINT goes to the command runs, when a command has started: the
	// leader gets its successor ready while its command still runs. A
	// second signal meanwhile cuts it short; held are the signals waiting
	// for it.
	prepare   func(ctx context.Context)
	preparing context.CancelFunc
	held      []os.Signal
}

// cmdRun is one command run, from begin to end.
type cmdRun struct {
	child  *child      // its guardian, once attached
	queued []os.Signal // received before the guardian was attached
}

// newRouter starts routing signals; ctx is the session's context, which a
// signal cancels while no command runs. Close stops it.
func newRouter(ctx context.Context) (context.Context, *router) {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &router{ch: make(chan os.Signal, 8), cancel: cancel, quit: make(chan struct{}), seen: make(chan struct{}), runs: map[*cmdRun]bool{}}
	signal.Notify(r.ch, forwarded...)
	r.wg.Go(r.loop)
	return ctx, r
}

func (r *router) loop() {
	for {
		select {
		case <-r.quit:
			return
		case s := <-r.ch:
			r.route(s)
		}
	}
}

func (r *router) route(s os.Signal) {
	r.mu.Lock()
	if r.first == nil {
		r.first = s
		close(r.seen)
	}
	if r.preparing != nil {
		// Another signal while the successor gets ready: stop waiting.
		r.held = append(r.held, s)
		cancel := r.preparing
		r.mu.Unlock()
		cancel()
		return
	}
	if r.prepare != nil && r.commandRunning() && (s == syscall.SIGTERM || s == syscall.SIGINT) {
		ctx, cancel := context.WithCancel(context.Background())
		r.preparing, r.held, r.sent = cancel, []os.Signal{s}, true
		prep := r.prepare
		r.mu.Unlock()
		r.wg.Go(func() {
			defer cancel()
			prep(ctx)
			r.mu.Lock()
			held := r.held
			r.preparing, r.held = nil, nil
			r.mu.Unlock()
			for _, h := range held {
				r.mu.Lock()
				r.deliver(h)
			}
		})
		return
	}
	r.deliver(s)
}

// commandRunning reports whether a run's command has started. r.mu is held.
// Only then is a successor got ready first: a signal that comes while a run
// has begun but its command has not started goes to the run at once, so
// that the command is not started (the guardian's "nostart"), rather than
// waiting for the successor while the command starts after all.
func (r *router) commandRunning() bool {
	for rn := range r.runs {
		if rn.child != nil && rn.child.started() {
			return true
		}
	}
	return false
}

// setPrepare sets (or, with nil, clears) what runs before a SIGTERM or
// SIGINT goes to the command runs.
func (r *router) setPrepare(f func(ctx context.Context)) {
	r.mu.Lock()
	r.prepare = f
	r.mu.Unlock()
}

// deliver sends s to every command run, or cancels the session when none
// runs (or always, with cancelAlways). r.mu is held; deliver unlocks it.
func (r *router) deliver(s os.Signal) {
	var to []*child
	for rn := range r.runs {
		r.sent = true
		if rn.child != nil {
			to = append(to, rn.child)
		} else {
			rn.queued = append(rn.queued, s)
		}
	}
	cancel := len(r.runs) == 0 || r.cancelAlways
	r.mu.Unlock()
	for _, c := range to {
		c.signal(s)
	}
	if cancel {
		r.cancel(signalError{s})
	}
}

// begin starts a command run: from now on signals go to its command. It
// returns nil, and the run must not start, if a signal came before.
func (r *router) begin() *cmdRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first != nil {
		return nil
	}
	rn := &cmdRun{}
	r.runs[rn] = true
	return rn
}

// attach makes c the run's command; signals queued since begin go to it,
// and then its guardian may start it: a signal that came before attach
// keeps the command from starting.
func (r *router) attach(rn *cmdRun, c *child) {
	r.mu.Lock()
	rn.child = c
	q := rn.queued
	rn.queued = nil
	r.mu.Unlock()
	for _, s := range q {
		c.signal(s)
	}
	c.mayStart()
}

// end ends the run.
func (r *router) end(rn *cmdRun) {
	r.mu.Lock()
	delete(r.runs, rn)
	r.mu.Unlock()
}

// stopped returns the first signal received, or nil.
func (r *router) stopped() os.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// forwardedAny reports whether a signal went to a command run (rather than
// stopping azlease while no command ran).
func (r *router) forwardedAny() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// interrupted returns the exit error for a session a signal stopped before
// any command ran: 128+N and a line saying what was interrupted.
func (r *router) interrupted(what string) *exitError {
	s := r.stopped()
	if s == nil {
		return nil
	}
	return exitf(signalStatus(s), "%s: %s", what, signalError{s}.Error())
}

// testHook waits at point when the test hook names it (see hookEnv).
func (r *router) testHook(point string) {
	if os.Getenv(hookEnv) != point {
		return
	}
	fmt.Fprintln(os.Stderr, "azlease: test hook "+point)
	select {
	case <-r.seen:
	case <-time.After(10 * time.Second):
	}
}

// stopSession cancels the session's context, as a signal with no command
// running would: used when azlease decides to stop after a command exits.
func (r *router) stopSession(cause error) { r.cancel(cause) }

func (r *router) close() {
	signal.Stop(r.ch)
	close(r.quit)
	r.mu.Lock()
	if r.preparing != nil {
		r.preparing()
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.cancel(fmt.Errorf("azlease: session ended"))
}
