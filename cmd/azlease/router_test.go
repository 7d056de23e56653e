package main

// The signal router's decisions, without processes: which signals wait for
// a successor to get ready and which go to a run at once.

import (
	"context"
	"os"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSignalBeforeTheCommandStartsDoesNotWaitForASuccessor: a SIGTERM or
// SIGINT to a leader whose run has begun but whose command has not started
// goes to the run at once (so the guardian does not start the command); it
// does not wait while a successor gets ready, during which the command
// would start after all (CI, lead/begun/SIGINT, exit 7 instead of 130).
func TestSignalBeforeTheCommandStartsDoesNotWaitForASuccessor(t *testing.T) {
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(signalName(sig), func(t *testing.T) {
			_, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			r := &router{cancel: cancel, quit: make(chan struct{}), seen: make(chan struct{}), runs: map[*cmdRun]bool{}}
			var prepared atomic.Bool
			r.setPrepare(func(context.Context) { prepared.Store(true) })
			rn := r.begin()
			if !assert.NotNil(t, rn) {
				return
			}
			r.route(sig)
			r.wg.Wait()
			assert.False(t, prepared.Load(), "no successor is got ready for a command that has not started")
			r.mu.Lock()
			defer r.mu.Unlock()
			assert.Equal(t, []os.Signal{sig}, rn.queued, "the signal waits for the guardian, which then does not start the command")
			assert.Nil(t, r.preparing)
			assert.True(t, r.sent)
		})
	}
}
