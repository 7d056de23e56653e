package azlease

import (
	"context"
	"time"
)

// The Term methods of a Lock. A Lock embeds its *Term, but a method
// promoted through the embedded pointer would dereference a nil *Lock (the
// Lock a TryLock that did not get the mutex returns) and panic. These
// delegate to the Term, so that a nil or zero Lock reports what a zero Term
// does: not held ([ErrNotHeld]), a context already ended, zero values.

// term is the Lock's Term, or nil.
func (lk *Lock) term() *Term {
	if lk == nil {
		return nil
	}
	return lk.Term
}

// Context returns the lock's context: see [Term.Context].
func (lk *Lock) Context() context.Context { return lk.term().Context() }

// Done is closed when the lock's term ends: see [Term.Done].
func (lk *Lock) Done() <-chan struct{} { return lk.term().Done() }

// Err returns nil while the lock is held, then why it ended: see [Term.Err].
func (lk *Lock) Err() error { return lk.term().Err() }

// Token returns the lock's fencing token: see [Term.Token].
func (lk *Lock) Token() Token { return lk.term().Token() }

// Epoch returns the lock's fencing epoch: see [Term.Epoch]. Epochs count per
// lock blob ([Lock.Name]).
func (lk *Lock) Epoch() uint64 { return lk.term().Epoch() }

// StartedAt returns when the lock was taken: see [Term.StartedAt].
func (lk *Lock) StartedAt() time.Time { return lk.term().StartedAt() }

// ValidUntil returns the lock's validity deadline: see [Term.ValidUntil].
func (lk *Lock) ValidUntil() time.Time { return lk.term().ValidUntil() }

// Valid reports whether the lock is certainly still held: see [Term.Valid].
func (lk *Lock) Valid() bool { return lk.term().Valid() }

// Heartbeat records progress: see [Term.Heartbeat].
func (lk *Lock) Heartbeat() { lk.term().Heartbeat() }

// Read returns the lock blob's content, read under the lock's lease: see
// [Term.Read].
func (lk *Lock) Read(ctx context.Context) ([]byte, error) { return lk.term().Read(ctx) }

// Write replaces the lock blob's content under the lock's lease: see
// [Term.Write].
func (lk *Lock) Write(ctx context.Context, content []byte) error {
	return lk.term().Write(ctx, content)
}

// SetMetadata replaces the lock blob's user metadata under the lock's lease:
// see [Term.SetMetadata].
func (lk *Lock) SetMetadata(ctx context.Context, md map[string]string) error {
	return lk.term().SetMetadata(ctx, md)
}
