package gocronlock

// The Locker: gocron's distributed Locker, one run per tick across the
// replicas, each tick an azlease.DoOnce key.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/go-co-op/gocron/v2"

	"github.com/azlease/azlease"
)

// tickFormat names a tick in its key: UTC, to the second, fixed width, so
// that a job's ticks sort oldest first (as the Retention sweep needs).
const tickFormat = "20060102T150405Z"

// ErrTickDone is wrapped by the error [Locker.Lock] returns when another
// replica ran the tick: gocron skips the job (and tells its AfterLockError
// listeners).
var ErrTickDone = errors.New("gocronlock: this tick ran on another replica")

// Locker is a gocron.Locker that runs each job once per tick across the
// replicas (see the package documentation): pass it to
// gocron.WithDistributedLocker, or to gocron.WithDistributedJobLocker for
// one job, with the job's Period. Start a DurationJob with [Locker.StartAt]
// so that it fires on the ticks. A Locker is safe for concurrent use, by
// any number of jobs with the same Period (each job's ticks are keyed by
// its name: give jobs unique names with gocron.WithName). The zero Locker
// and a nil one refuse every Lock.
type Locker struct {
	cc  *container.Client
	cfg config
	log *slog.Logger
	// now is this host's clock: time.Now, or a skewed one in tests that
	// play several hosts.
	now    func() time.Time
	warned sync.Map // job name → true: its off-tick fire was logged
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker whose ticks' records are blobs in the
// container cc points at. It makes no request. opts is required (Period).
func NewLocker(cc *container.Client, opts *Options) (*Locker, error) {
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	if cc == nil {
		return nil, optionError("container", "nil *container.Client")
	}
	log := cfg.once.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Locker{cc: cc, cfg: cfg, log: log, now: time.Now}, nil
}

// Tick returns the tick a run that fires at now belongs to: the instant
// Offset + k × Period (k whole, since 1970-01-01 UTC) nearest to now; a
// fire exactly halfway belongs to the later one. It makes no request.
func (l *Locker) Tick(now time.Time) time.Time {
	if l == nil || l.cfg.period <= 0 {
		return time.Time{}
	}
	p, off := int64(l.cfg.period), int64(l.cfg.offset)
	d := now.UnixNano() - off + p/2
	k := d / p
	if d%p < 0 {
		k-- // floor, before 1970 too
	}
	return time.Unix(0, off+k*p).UTC()
}

// StartAt is the gocron job option that makes a DurationJob of Period fire
// on the ticks: its start is the latest tick at or before now, so its runs
// fall on Offset + k × Period by this host's clock.
func (l *Locker) StartAt() gocron.JobOption {
	now := time.Now()
	if l != nil && l.now != nil {
		now = l.now()
	}
	start := l.Tick(now)
	if start.After(now) {
		start = start.Add(-l.cfg.period)
	}
	return gocron.WithStartAt(gocron.WithStartDateTimePast(start))
}

// Key returns the DoOnce key of job's tick (without Options.Once.Prefix):
// what [azlease.InspectOnce] and [azlease.ResetOnce] take, and what azlease
// status shows under the prefix.
func Key(job string, tick time.Time) string {
	return job + "/" + tick.UTC().Format(tickFormat)
}

// ErrTickBusy is wrapped by the error [Locker.Lock] returns when another
// replica held the tick for all of the time this one waits (until half a
// period after the tick): it is running it, or died doing so and its lease
// has not expired yet. gocron skips the job.
var ErrTickBusy = errors.New("gocronlock: this tick was still held by another replica half a period after it")

// Lock takes the tick that job (gocron's job name) fires for now. It
// returns a Lock, which gocron unlocks when the job returns, if this replica
// is to run the tick: nobody has run it, or its runner died. It returns an
// error, and gocron skips the job, if the tick was run elsewhere (wrapping
// [ErrTickDone]), if ctx ends, or if DoOnce cannot go on (storage refused
// or unreachable, the tick's attempts used up: [*azlease.OnceFailedError],
// too late: [azlease.ErrOnceTooLate]).
//
// A replica that fires while another runs the tick waits, polling, until
// that run is done (then skips it), takes the tick over if its runner died
// and its lease expired, or gives up half a period after the tick (wrapping
// [ErrTickBusy]): gocron schedules the job's next run only once Lock has
// returned, so a longer wait would make this replica miss the next tick. So
// a tick whose runner died is run again only if the runner's lease expires
// within that half period (Options.Once.LeaseDuration, 15 s, plus a poll:
// periods of about 40 s and more); otherwise the next tick runs as usual.
// Once a Lock is returned, the tick's lease is held, and renewed, until
// gocron calls Unlock (the job returned), whatever ctx does.
func (l *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	if l == nil || l.cc == nil {
		return nil, errors.New("gocronlock: Lock on a Locker not made by NewLocker")
	}
	now := l.now()
	tick := l.Tick(now)
	if d := now.Sub(tick).Abs(); d > 3*l.cfg.period/8 {
		if _, seen := l.warned.LoadOrStore(job, true); !seen {
			l.log.Warn("gocronlock: the job fires near the midpoint between two ticks, where replicas can tell different ticks and run it twice: start a DurationJob with Locker.StartAt, or set Options.Offset to its scheduled time",
				slog.String("job", job), slog.Duration("from_tick", now.Sub(tick)), slog.Duration("period", l.cfg.period))
		}
	}
	key := Key(job, tick)
	r := &run{started: make(chan struct{}), unlock: make(chan struct{}), done: make(chan struct{})}
	// DoOnce's context ends when ctx does, or half a period after the
	// tick, but only while this replica waits: once the job runs, the
	// lease is held until Unlock.
	dctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	giveUp := func(cause error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.running {
			r.gaveUp = true
			cancel(cause)
		}
	}
	stopCtx := context.AfterFunc(ctx, func() { giveUp(context.Cause(ctx)) })
	defer stopCtx()
	busy := time.AfterFunc(tick.Add(l.cfg.period/2).Sub(now), func() {
		giveUp(fmt.Errorf("%w: %s, tick %s", ErrTickBusy, job, tick.Format(time.RFC3339)))
	})
	defer busy.Stop()
	opts := l.cfg.once
	go func() { // joined by Lock, or by Unlock once the job has returned
		defer close(r.done)
		defer cancel(nil)
		res, err := azlease.DoOnce(dctx, l.cc, key, &opts, func(context.Context, azlease.Token) error {
			r.mu.Lock()
			if r.gaveUp {
				r.mu.Unlock()
				return context.Cause(dctx) // not an attempt: DoOnce puts the record back
			}
			r.running = true
			r.mu.Unlock()
			close(r.started)
			// The job runs in gocron, beyond this function's reach: wait
			// for it to return whatever happens to the lease, so that the
			// lease is held (and renewed) for as long as the job runs.
			<-r.unlock
			return nil
		})
		r.res, r.err = res, err
	}()
	select {
	case <-r.started:
		return r, nil
	case <-r.done:
	}
	switch cause := context.Cause(dctx); {
	case r.err == nil: // done, by another replica
		st := r.res.Status
		return nil, fmt.Errorf("%w: %s, tick %s, by %s at %s", ErrTickDone, job, tick.Format(time.RFC3339), st.Holder, st.Time.Format(time.RFC3339Nano))
	case errors.Is(cause, ErrTickBusy):
		return nil, cause
	}
	return nil, fmt.Errorf("gocronlock: %s, tick %s: %w", job, tick.Format(time.RFC3339), r.err)
}

// run is one tick's DoOnce, taken by this replica.
type run struct {
	started, unlock, done chan struct{}
	mu                    sync.Mutex
	running, gaveUp       bool // fn began the job; Lock gave up waiting first
	once                  sync.Once
	res                   azlease.OnceResult
	err                   error
}

// Unlock records the tick done and releases it, waiting for that, and
// returns nil, or why the run may not be recorded (an error wrapping
// [azlease.ErrOnceUnrecorded]: the lease was lost while the job ran, and
// another replica may have run the tick too, or may yet). gocron ignores
// what it returns. Calling it again returns the same.
func (r *run) Unlock(context.Context) error {
	r.once.Do(func() { close(r.unlock) })
	<-r.done
	return r.err
}
