package azlease

// The hand-offs a fair Mutex's or Semaphore's Unlocks leave running: an
// Unlock returns once the lease is under its successor's hand-off ID and the
// marker names it. When nobody in the queue surely looks at the lock while
// the lease lasts (a successor asleep far back after a long stand-still),
// the hand-off keeps the lease alive, renewing it under the hand-off's ID,
// until the successor or the waiter behind it takes it, the successor
// leaves the queue (the lease goes to the next), or the lease lasts until
// the queue surely looks (succession.go, handOnEach). That wait runs on a
// goroutine the Mutex or Semaphore value owns; Close waits for them.

import (
	"context"
	"sync"
)

// background is the set of a fair lock's hand-offs still running after
// their Unlock returned.
type background struct {
	mu      sync.Mutex
	next    uint64
	cancels map[uint64]context.CancelFunc
	// changed is closed (and replaced) whenever one ends.
	changed chan struct{}
}

// start runs fn on a goroutine the set owns, with a context that outlives
// ctx's cancellation (ctx's values, not its deadline) and that close
// cancels; it returns the cancel function, for the caller to end fn early.
func (b *background) start(ctx context.Context, fn func(ctx context.Context)) context.CancelFunc {
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.mu.Lock()
	if b.cancels == nil {
		b.cancels = map[uint64]context.CancelFunc{}
		b.changed = make(chan struct{})
	}
	id := b.next
	b.next++
	b.cancels[id] = cancel
	b.mu.Unlock()
	go func() {
		defer func() {
			cancel()
			b.mu.Lock()
			delete(b.cancels, id)
			close(b.changed)
			b.changed = make(chan struct{})
			b.mu.Unlock()
		}()
		fn(gctx)
	}()
	return cancel
}

// wait returns once no hand-off of the set runs; when ctx ends first, it
// cancels them (each leaves the lease under its hand-off ID, which expires
// on its own as a dead holder's would), waits for them to stop (a request in
// flight, at most an attempt) and returns ctx's error.
func (b *background) wait(ctx context.Context) error {
	var err error
	for {
		b.mu.Lock()
		if len(b.cancels) == 0 {
			b.mu.Unlock()
			return err
		}
		ch := b.changed
		if err != nil {
			for _, c := range b.cancels {
				c()
			}
		}
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			if err == nil {
				err = context.Cause(ctx)
			}
			ctx = context.Background() // now wait for them to stop
		}
	}
}

// running reports how many hand-offs of the set still run (tests).
func (b *background) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.cancels)
}
