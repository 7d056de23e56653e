package azlease

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTermContextChecksTheDeadlineItself: with no watchdog (no azlease
// goroutine has run since the deadline passed, as after a pause of the whole
// process), the term's context still reports the term as ended, with its
// cause, and keeps the context contract (Done closed when Err is not nil).
func TestTermContextChecksTheDeadlineItself(t *testing.T) {
	for _, first := range []string{"Err", "Cause", "Valid", "Term.Err"} {
		t.Run(first, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				now := time.Now()
				term := newTerm(context.Background(), nil, Token{Epoch: 7}, now, now.Add(10*time.Second))
				ctx := term.Context()
				child, cancel := context.WithCancel(ctx)
				defer cancel()

				time.Sleep(10*time.Second - time.Nanosecond)
				require.NoError(t, ctx.Err())
				require.True(t, term.Valid())
				time.Sleep(time.Nanosecond) // onto the deadline; nothing cancels the context

				switch first { // whichever the holder asks first sees the end
				case "Err":
					require.ErrorIs(t, ctx.Err(), context.Canceled)
				case "Cause":
					require.ErrorIs(t, context.Cause(ctx), ErrDeadlinePassed)
				case "Valid":
					require.False(t, term.Valid())
				case "Term.Err":
					require.ErrorIs(t, term.Err(), ErrDeadlinePassed)
				}
				require.Error(t, ctx.Err())
				require.ErrorIs(t, context.Cause(ctx), ErrDeadlinePassed)
				require.ErrorIs(t, context.Cause(ctx), ErrLeaseLost)
				select {
				case <-ctx.Done():
				default:
					t.Fatal("Err is not nil but Done is open")
				}
				require.ErrorIs(t, context.Cause(child), ErrDeadlinePassed, "derived contexts are cancelled with it")
				require.False(t, term.Valid())
			})
		})
	}
}

// TestTermExtendAfterTheDeadlineDoesNotRevive: a renewal whose answer arrives
// after the validity deadline passed ends the term rather than extending it,
// even if no watchdog ran in between.
func TestTermExtendAfterTheDeadlineDoesNotRevive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		term := newTerm(context.Background(), nil, Token{}, now, now.Add(10*time.Second))
		time.Sleep(9 * time.Second)
		sent := time.Now()
		term.extend(sent, sent.Add(14*time.Second))
		time.Sleep(5 * time.Second)
		require.True(t, term.Valid(), "a renewal answered in time moves the deadline")

		sent = time.Now()
		time.Sleep(11 * time.Second) // the answer comes 1 s after the deadline
		term.extend(sent, sent.Add(14*time.Second))
		require.False(t, term.Valid())
		require.True(t, errors.Is(term.Err(), ErrDeadlinePassed))
	})
}

// TestZeroTerm: a zero Term is not held and never panics.
func TestZeroTerm(t *testing.T) {
	var term Term
	assert.False(t, term.Valid())
	assert.ErrorIs(t, term.Err(), ErrNotHeld)
	assert.ErrorIs(t, context.Cause(term.Context()), ErrNotHeld)
	<-term.Done()
	assert.Zero(t, term.Epoch())
	term.Heartbeat()
	_, err := term.Read(context.Background())
	assert.ErrorIs(t, err, ErrNotHeld)
	assert.ErrorIs(t, term.Write(context.Background(), nil), ErrNotHeld)
	assert.ErrorIs(t, term.SetMetadata(context.Background(), nil), ErrNotHeld)
}
