package gocronlock

// The Locker's options and their validation.

import (
	"fmt"
	"time"

	"github.com/azlease/azlease"
)

// Bounds of Options.
const (
	// MaxPeriod is the longest Options.Period: a year.
	MaxPeriod = 8760 * time.Hour
	// MaxRetention is the longest Options.Retention: ten years.
	MaxRetention = 87600 * time.Hour
	// minRetention is the shortest Options.Retention: past the longest
	// lease, a takeover after a crash, and a few polls (Retention/2 is the
	// longest a replica tries to run a tick).
	minRetention = 5 * time.Minute
)

// Options configure a [Locker]. A nil *Options is invalid: Period has no
// default.
type Options struct {
	// Period is the job's period: its ticks are Offset plus whole multiples
	// of Period since 1970-01-01 00:00:00 UTC. Required: whole seconds,
	// from 1 s to 8760 h ([MaxPeriod]); zero or negative is an error. For a
	// DurationJob, its duration; for a CronJob, the time between its
	// runs (24 h for "0 2 * * *"), or their greatest common divisor for an
	// irregular schedule (some ticks then have no run, which is fine).
	Period time.Duration

	// Offset is where in each period the job is scheduled: zero means on
	// the multiples of Period (a DurationJob started with [Locker.StartAt];
	// a cron job on the minute, on the hour, at midnight UTC); 2 h for a
	// daily job at 02:00 UTC. Whole seconds, from 0 to Period − 1 s. A
	// run belongs to the tick nearest to when it fires, so Offset only has
	// to keep the job's times away from the midpoints between ticks
	// (Offset + Period/2): with zero, a daily job may run at any time of
	// day but around 12:00 UTC.
	Offset time.Duration

	// Retention is how long a tick's record is kept after its run: a replica
	// that runs a tick deletes up to 4 of the job's records older than this
	// ([azlease.DoOnceOptions.Retention]), so about Retention/Period remain.
	// Zero means 10 × Period, at least an hour; otherwise from 4 × Period (and
	// 5 minutes) to 87,600 h ([MaxRetention]); negative means forever (no
	// deletes). A replica does not run a tick more than Retention/2 after it
	// fired (it waited, or was paused): Lock then returns an error wrapping
	// [azlease.ErrOnceTooLate] and gocron skips the job.
	Retention time.Duration

	// Once configures each tick's DoOnce: Identity (who ran it), Prefix
	// ("once/"; a tick's key is Prefix + job + "/" + tick, as
	// 20261121T020000Z), MaxAttempts (3: attempts at a tick whose runners
	// died), LeaseDuration (15 s: how soon a waiting replica takes over a
	// tick whose runner died), PollInterval (zero means Period/10, from 100 ms
	// to 2 s, whether Once is nil or not: a replica that fired while the tick
	// runs looks a few times in the half period it waits), Logger and metrics.
	// Its Retention must be zero (set Options.Retention). Nil: the defaults.
	Once *azlease.DoOnceOptions
}

// config is a validated Options.
type config struct {
	period, offset time.Duration
	once           azlease.DoOnceOptions
}

func (o *Options) config() (config, error) {
	if o == nil {
		return config{}, optionError("Options", "nil: Period is required")
	}
	c := config{period: o.Period, offset: o.Offset}
	switch p := o.Period; {
	case p < time.Second || p > MaxPeriod || p%time.Second != 0:
		return c, optionError("Options.Period", "%v: must be whole seconds from 1s to %v", p, MaxPeriod)
	}
	switch f := o.Offset; {
	case f < 0 || f >= o.Period || f%time.Second != 0:
		return c, optionError("Options.Offset", "%v: must be whole seconds from 0 to Period − 1s (%v)", f, o.Period-time.Second)
	}
	if o.Once != nil {
		c.once = *o.Once
	}
	if c.once.PollInterval == 0 {
		c.once.PollInterval = min(max(o.Period/10, 100*time.Millisecond), 2*time.Second)
	}
	if c.once.Retention != 0 {
		return c, optionError("Options.Once.Retention", "%v: must be zero; set Options.Retention", c.once.Retention)
	}
	lower := max(4*o.Period, minRetention)
	switch r := o.Retention; {
	case r == 0:
		c.once.Retention = max(10*o.Period, time.Hour)
	case r < 0:
		c.once.Retention = 0 // DoOnce's "forever"
	case r < lower || r > MaxRetention:
		return c, optionError("Options.Retention", "%v: must be from %v (4 × Period, and 5m) to %v, zero for the default or negative for forever", r, lower, MaxRetention)
	default:
		c.once.Retention = r
	}
	return c, nil
}

// OptionError is an invalid [Options] field. It wraps
// [azlease.ErrInvalidOptions].
type OptionError struct {
	Field  string // as "Options.Period"
	Reason string
}

func (e *OptionError) Error() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("gocronlock: invalid %s: %s", e.Field, e.Reason)
}

// Unwrap returns azlease.ErrInvalidOptions.
func (e *OptionError) Unwrap() error { return azlease.ErrInvalidOptions }

func optionError(field, format string, args ...any) error {
	return &OptionError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
