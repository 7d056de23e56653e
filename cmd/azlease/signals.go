package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// forwarded are the signals azlease passes on to a running command. While no
// command runs, they stop azlease promptly.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

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

// router decides what a signal to azlease means: while a command runs, it
// is forwarded to the command's process group and azlease waits for the
// command; otherwise it cancels the session, so that waiting for a lease
// ends at once.
type router struct {
	ch     chan os.Signal
	cancel context.CancelCauseFunc
	quit   chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	child *child
	first os.Signal // the first signal received, if any
	sent  bool      // a signal was forwarded to a command
}

// newRouter starts routing signals; ctx is the session's context, which a
// signal cancels while no command runs. Close stops it.
func newRouter(ctx context.Context) (context.Context, *router) {
	ctx, cancel := context.WithCancelCause(ctx)
	r := &router{ch: make(chan os.Signal, 8), cancel: cancel, quit: make(chan struct{})}
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
			r.mu.Lock()
			if r.first == nil {
				r.first = s
			}
			c := r.child
			r.sent = r.sent || c != nil
			r.mu.Unlock()
			if c != nil {
				c.signal(s)
			} else {
				r.cancel(signalError{s})
			}
		}
	}
}

// attach makes c the command that signals go to. If a signal came first,
// it is forwarded to c at once, so that c stops as azlease was asked to.
func (r *router) attach(c *child) {
	r.mu.Lock()
	r.child = c
	first := r.first
	r.sent = r.sent || first != nil
	r.mu.Unlock()
	if first != nil {
		c.signal(first)
	}
}

// detach ends forwarding to the command, which has exited.
func (r *router) detach() {
	r.mu.Lock()
	r.child = nil
	r.mu.Unlock()
}

// stopped returns the first signal received, or nil.
func (r *router) stopped() os.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.first
}

// forwardedAny reports whether a signal went to a command (rather than
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

// stopSession cancels the session's context, as a signal with no command
// running would: used when azlease decides to stop after a command exits.
func (r *router) stopSession(cause error) { r.cancel(cause) }

func (r *router) close() {
	signal.Stop(r.ch)
	close(r.quit)
	r.wg.Wait()
	r.cancel(fmt.Errorf("azlease: session ended"))
}
