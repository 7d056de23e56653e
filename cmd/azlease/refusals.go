package main

// The command's log handler for refusals: the library logs a permanent
// refusal (a missing role, a wrong key) at Error once, and when the
// refusal ends the command at once, the command prints it too, as its one
// line with exit status 77. refusalHold holds those Error records for a
// moment, so that such a command prints one line, not the library's record
// and its own; a command that goes on (an Elector retrying a refusal it met
// after it led) prints the record after the moment.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/azlease/azlease"
)

// refusalGrace is how long a refusal's record is held before it is printed.
const refusalGrace = 2 * time.Second

// refusalHold is the shared state of a refusalHandler and the handlers
// derived from it (WithAttrs, WithGroup).
type refusalHold struct {
	mu      sync.Mutex
	held    []heldRecord
	timer   *time.Timer
	closed  bool
	pending sync.WaitGroup // the timer's function, while it may run
}

type heldRecord struct {
	h slog.Handler
	r slog.Record
}

// refusalHandler passes records to next, holding Error records that carry
// an "error" attribute wrapping azlease.ErrPermanent (see refusalHold).
type refusalHandler struct {
	next slog.Handler
	hold *refusalHold
}

func newRefusalHandler(next slog.Handler) *refusalHandler {
	return &refusalHandler{next: next, hold: &refusalHold{}}
}

func (h *refusalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, l)
}

func (h *refusalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelError || !refusal(r) {
		return h.next.Handle(ctx, r)
	}
	hd := h.hold
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.closed {
		return h.next.Handle(ctx, r)
	}
	hd.held = append(hd.held, heldRecord{h.next, r.Clone()})
	if hd.timer == nil {
		hd.pending.Add(1)
		hd.timer = time.AfterFunc(refusalGrace, func() {
			defer hd.pending.Done()
			hd.mu.Lock()
			hd.timer = nil // a later refusal is held anew
			hd.mu.Unlock()
			hd.release(true)
		})
	}
	return nil
}

func (h *refusalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &refusalHandler{next: h.next.WithAttrs(as), hold: h.hold}
}

func (h *refusalHandler) WithGroup(name string) slog.Handler {
	return &refusalHandler{next: h.next.WithGroup(name), hold: h.hold}
}

// refusal reports whether r carries an error wrapping ErrPermanent.
func refusal(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, azlease.ErrPermanent) {
			found = true
			return false
		}
		return true
	})
	return found
}

// release prints the held records (print true) or drops them, and lets
// later records through at once.
func (hd *refusalHold) release(print bool) {
	hd.mu.Lock()
	held := hd.held
	hd.held = nil
	hd.mu.Unlock()
	if !print {
		return
	}
	for _, x := range held {
		_ = x.h.Handle(context.Background(), x.r)
	}
}

// finish ends the hold as the command exits: the held records are dropped
// when the command reports the refusal itself (dropRefusals), printed
// otherwise. It waits for the timer's function if it already runs.
func (hd *refusalHold) finish(dropRefusals bool) {
	hd.mu.Lock()
	hd.closed = true
	stopped := hd.timer != nil && hd.timer.Stop()
	hd.mu.Unlock()
	if stopped {
		hd.pending.Done()
	}
	hd.pending.Wait()
	hd.release(!dropRefusals)
}
