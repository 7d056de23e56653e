package azlease

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestTermEndCountedOnceWhenNoticedLate: a term whose deadline passed while
// no azlease goroutine ran (the process was paused) is ended by whichever
// check of the holder's comes first, and counted then, once, with cause
// "deadline"; later ends (the watchdog, the owner's stop) count nothing.
func TestTermEndCountedOnceWhenNoticedLate(t *testing.T) {
	for _, first := range []string{"ctx.Err", "Valid", "Term.Err", "Cause"} {
		t.Run(first, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := sdkmetric.NewManualReader()
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
				defer func() { _ = mp.Shutdown(context.Background()) }()
				ends := func() map[string]int64 {
					var rm metricdata.ResourceMetrics
					require.NoError(t, r.Collect(context.Background(), &rm))
					out := map[string]int64{}
					for _, sm := range rm.ScopeMetrics {
						for _, m := range sm.Metrics {
							if m.Name != "azlease.term.ends" && m.Name != "azlease.term.starts" {
								continue
							}
							for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
								c, _ := p.Attributes.Value(attrEndCause)
								role, _ := p.Attributes.Value(attrRole)
								assert.Equal(t, "mutex", role.AsString())
								out[m.Name+"/"+c.AsString()] += p.Value
							}
						}
					}
					return out
				}
				l := &Lease{tm: newTelemetry(mp, "c", "b", "mutex", false)}
				now := time.Now()
				term := newTerm(context.Background(), l, Token{Epoch: 7}, now, now.Add(10*time.Second))
				assert.Equal(t, map[string]int64{"azlease.term.starts/": 1}, ends())

				time.Sleep(10 * time.Second) // onto the deadline; no watchdog runs
				assert.Equal(t, map[string]int64{"azlease.term.starts/": 1}, ends(), "nothing has looked yet")
				switch first {
				case "ctx.Err":
					require.Error(t, term.Context().Err())
				case "Valid":
					require.False(t, term.Valid())
				case "Term.Err":
					require.ErrorIs(t, term.Err(), ErrDeadlinePassed)
				case "Cause":
					require.ErrorIs(t, context.Cause(term.Context()), ErrDeadlinePassed)
				}
				want := map[string]int64{"azlease.term.starts/": 1, "azlease.term.ends/deadline": 1}
				assert.Equal(t, want, ends())
				term.end(ErrStopped)
				term.end(ErrPaused)
				_ = term.Err()
				assert.Equal(t, want, ends(), "counted once")
			})
		})
	}
}

// TestEndCause: every cause a term can end with has its own name.
func TestEndCause(t *testing.T) {
	for cause, want := range map[error]string{
		nil: "stopped", ErrStopped: "stopped", ErrStalled: "stalled", ErrMaxHoldExceeded: "max_hold",
		ErrPaused: "paused", ErrDeadlinePassed: "deadline", ErrLeaseBroken: "broken", ErrLeaseLost: "lost",
		context.Canceled: "canceled", context.DeadlineExceeded: "canceled", ErrPermanent: "other",
	} {
		assert.Equal(t, want, endCause(cause), "%v", cause)
	}
}
