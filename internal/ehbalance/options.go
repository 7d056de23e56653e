package ehbalance

// Options of a processor, and their validation.

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/azlease/azlease"
)

// Strategy is how a processor under its share claims more partitions.
type Strategy int

const (
	// Balanced claims one partition per cycle: the Go and JavaScript
	// processors' default.
	Balanced Strategy = iota
	// Greedy claims every partition it lacks in one cycle.
	Greedy
)

// String returns the strategy's name.
func (s Strategy) String() string {
	switch s {
	case Balanced:
		return "balanced"
	case Greedy:
		return "greedy"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Defaults of the Go processor (azeventhubs ProcessorOptions).
const (
	DefaultUpdateInterval = 10 * time.Second
	DefaultExpiration     = 60 * time.Second
)

// Options configures a processor. A nil *Options is an error: OwnerID is
// required.
type Options struct {
	// OwnerID names this processor in the ownership records. Required: at
	// most 256 bytes, not empty (the empty owner means relinquished).
	OwnerID string

	// Strategy is Balanced (the zero value) or Greedy.
	Strategy Strategy

	// UpdateInterval is the time between cycles; each wait is drawn from
	// 0.8 to 1.3 times it. Zero means 10 s; otherwise from 10 ms to 1 h.
	UpdateInterval time.Duration

	// Expiration is how long after its Last-Modified (the server's clock)
	// a record counts as free by this processor's clock. Zero means 60 s;
	// otherwise from 10 ms to 24 h.
	Expiration time.Duration

	// Seed seeds the processor's random source: the jitter of its cycles,
	// its picks, and the order in which it meets listed records. Any value,
	// zero included.
	Seed uint64

	// NameOrder, when true, meets listed records in the listing's name
	// order instead of a new random order each cycle (see the package
	// documentation).
	NameOrder bool

	// OnOwn and OnDisown, when set, are called on the processor's
	// goroutine when it starts believing it owns a partition (a claim
	// succeeded) and when it stops (a cycle no longer holds it, or the
	// processor stops). They must return quickly.
	OnOwn, OnDisown func(partition string)

	// Logger receives claims and losses at Debug. Nil means silent.
	Logger *slog.Logger
}

// config is validated Options with defaults filled in.
type config struct {
	owner      string
	strategy   Strategy
	interval   time.Duration
	expiration time.Duration
	seed       uint64
	nameOrder  bool
	onOwn      func(string)
	onDisown   func(string)
	log        *slog.Logger
}

func optionErr(field, format string, args ...any) error {
	return &azlease.OptionError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func (o *Options) config() (config, error) {
	if o == nil {
		return config{}, optionErr("Options", "nil: OwnerID is required")
	}
	c := config{
		owner: o.OwnerID, strategy: o.Strategy, interval: o.UpdateInterval, expiration: o.Expiration,
		seed: o.Seed, nameOrder: o.NameOrder, onOwn: o.OnOwn, onDisown: o.OnDisown, log: o.Logger,
	}
	if c.owner == "" || len(c.owner) > 256 {
		return c, optionErr("Options.OwnerID", "%q: must be 1 to 256 bytes", o.OwnerID)
	}
	if c.strategy != Balanced && c.strategy != Greedy {
		return c, optionErr("Options.Strategy", "%v: must be Balanced or Greedy", o.Strategy)
	}
	switch {
	case c.interval == 0:
		c.interval = DefaultUpdateInterval
	case c.interval < 10*time.Millisecond || c.interval > time.Hour:
		return c, optionErr("Options.UpdateInterval", "%v: must be from 10ms to 1h", o.UpdateInterval)
	}
	switch {
	case c.expiration == 0:
		c.expiration = DefaultExpiration
	case c.expiration < 10*time.Millisecond || c.expiration > 24*time.Hour:
		return c, optionErr("Options.Expiration", "%v: must be from 10ms to 24h", o.Expiration)
	}
	if c.onOwn == nil {
		c.onOwn = func(string) {}
	}
	if c.onDisown == nil {
		c.onDisown = func(string) {}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}
