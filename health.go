package azlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Whether requests reach storage: storageHealth follows the streak of failed
// requests of a Lease (or of a Mutex's Locks, or a Semaphore's slots) for the
// logs, the metrics, Elector.Check, and the bound on how long a caller waits
// while storage is unreachable (unreachable).

// failuresBeforeWarning is how many requests in a row must fail before the
// failures are logged at Warn: one or two failures are retried quietly.
const failuresBeforeWarning = 3

// storageHealth follows whether requests reach storage, for the logs, for
// metrics and for [Elector.Check]. A run of failed requests is an episode:
// it is logged once, at Warn after failuresBeforeWarning failures (at Error
// at once when the failure is permanent: a wrong key, a missing role), and
// its end is logged at Info. Any answer from storage ends an episode, even a
// refusal such as "held by another holder": storage was reached.
type storageHealth struct {
	mu       sync.Mutex
	reached  bool      // some request got an answer
	streak   int       // requests failed in a row
	since    time.Time // when the streak began
	last     error     // the latest failure
	reported bool      // the episode was logged
	// refused holds the operations storage refused for good (a missing
	// role, a wrong key) and that have not succeeded since: each is
	// logged at Error once, however other operations fare meanwhile (a
	// read-only role reads fine between refused acquisitions).
	refused map[string]bool
	// succeeded holds the operations that have succeeded at least once.
	succeeded map[string]bool
}

// everSucceeded reports whether op has succeeded at least once.
func (h *storageHealth) everSucceeded(op string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.succeeded[op]
}

// succeededOp records that op succeeded, and ends its refusal, if any.
func (h *storageHealth) succeededOp(log *slog.Logger, op string) {
	h.mu.Lock()
	if h.succeeded == nil {
		h.succeeded = map[string]bool{}
	}
	h.succeeded[op] = true
	wasRefused := h.refused[op]
	delete(h.refused, op)
	h.mu.Unlock()
	if wasRefused {
		log.Info("azlease: storage accepts the operation again", slog.String("op", op))
	}
}

// healthSnapshot is what storageHealth knows at one instant.
type healthSnapshot struct {
	reached bool
	streak  int
	since   time.Time
	last    error
}

func (h *storageHealth) snapshot() healthSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return healthSnapshot{reached: h.reached, streak: h.streak, since: h.since, last: h.last}
}

// answered records that a request got an answer from storage.
func (h *storageHealth) answered(log *slog.Logger) {
	h.mu.Lock()
	streak, since, reported := h.streak, h.since, h.reported
	h.reached, h.streak, h.last, h.reported = true, 0, nil, false
	h.mu.Unlock()
	if reported {
		log.Info("azlease: storage requests succeed again",
			slog.Int("failed_in_a_row", streak), slog.Duration("after", time.Since(since).Round(time.Millisecond)))
	}
}

// failed records a request that got no usable answer. A permanent refusal
// is logged at Error once per operation, until that operation succeeds
// (however other operations fare meanwhile: a read-only role reads fine
// between refused acquisitions); other failures at Warn once per episode.
func (h *storageHealth) failed(log *slog.Logger, op string, err error) {
	permanent := errors.Is(err, ErrPermanent)
	h.mu.Lock()
	h.streak++
	if h.streak == 1 {
		h.since = time.Now()
	}
	h.last = err
	var report bool
	if permanent {
		report = !h.refused[op]
		if h.refused == nil {
			h.refused = map[string]bool{}
		}
		h.refused[op] = true
	} else {
		report = !h.reported && h.streak >= failuresBeforeWarning
		h.reported = h.reported || report
	}
	streak := h.streak
	h.mu.Unlock()
	if !report {
		return
	}
	switch {
	case errors.Is(err, ErrEndpointNotFound):
		log.Error("azlease: the storage endpoint's host name does not resolve; check the account name or URL, and DNS",
			slog.String("op", op), slog.Any("error", err))
		return
	case permanent:
		log.Error("azlease: storage refuses requests; check the account, key or role, and the container",
			slog.String("op", op), slog.Any("error", err))
		return
	}
	log.Warn("azlease: storage requests are failing; retrying",
		slog.String("op", op), slog.Int("failed_in_a_row", streak), slog.Any("error", err))
}

// consecutive returns how many requests have failed in a row.
func (h *storageHealth) consecutive() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return int64(h.streak)
}

// record classifies the outcome of one attempt for h: an answer (even a
// refusal about the lease), a failure, or nothing learned (the caller's
// context ended).
func (h *storageHealth) record(ctx context.Context, log *slog.Logger, op string, err error) {
	if err == nil {
		h.answered(log)
		h.succeededOp(log, op)
		return
	}
	switch classify(ctx, err) {
	case classCanceled:
	case classHeld, classLost, classBroken, classNotFound, classExists, classConflict:
		h.answered(log)
	default:
		h.failed(log, op, err)
	}
}

// defaultUnreachable is what a zero UnreachableTimeout means
// (MutexOptions, DoOnceOptions).
const defaultUnreachable = time.Minute

// unreachable decides whether a caller that waits on storage (Mutex.Lock,
// Semaphore.Acquire, DoOnce) should stop waiting: every request has failed
// (record's "failed": no answer, a transport error, a 408, 429 or 5xx
// answer) for at least bound, counted from the first failure of the
// current streak, at now. It returns nil otherwise, and always when bound
// is negative (no bound). The error wraps ErrUnreachable and the last
// failure, and names endpoint (the container URL, SAS redacted).
func (h *storageHealth) unreachable(now time.Time, bound time.Duration, endpoint string) error {
	if h == nil || bound < 0 {
		return nil
	}
	s := h.snapshot()
	if s.streak == 0 || now.Sub(s.since) < bound {
		return nil
	}
	return fmt.Errorf("%w: %s: every request failed for %v (%d in a row, bound %v); last failure: %w",
		ErrUnreachable, endpoint, now.Sub(s.since).Round(time.Millisecond), s.streak, bound, s.last)
}
