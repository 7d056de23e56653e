package shards

// Options of a shard group, and their validation.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/azlease/azlease"
)

// Limits of a group.
const (
	// MaxShards is the most shards a group may have. A replica lists the
	// whole group once per poll: one request per 5,000 blobs.
	MaxShards = 4096
	// MaxWeight is the largest Options.Weight.
	MaxWeight = 1000
	// DefaultPollInterval is how often a replica looks at the group when
	// Options.PollInterval is zero.
	DefaultPollInterval = 2 * time.Second
	// DefaultListInterval is how often at least a replica lists the group
	// when Options.ListInterval is zero (PollInterval if that is longer).
	DefaultListInterval = 15 * time.Second
	// DefaultLeaseDuration is the shard and membership leases' duration
	// when Options.LeaseDuration is zero: 60 s, for cost (see the package
	// documentation).
	DefaultLeaseDuration = 60 * time.Second
	// MaxZone is the longest Options.Zone.
	MaxZone = 64
)

// Options configures a replica of a [Group]. A nil *Options means the
// defaults; so does the zero value of each field. New validates every
// field and names the one it refuses in an [azlease.OptionError]; nothing
// invalid is corrected.
//
// The defaults suit most groups: a look every 2 s, a listing at least
// every 15 s, 60 s leases (a crashed replica's shards wait up to about 80 s;
// 15 s leases bring that to about 35 s for four times the renewals), capacity 1,
// no zone, the work given its lease duration to drain. Replicas of one
// group may differ in Identity, Weight, Zone, WarmUp and the logging;
// they should agree on the timing (PollInterval, ListInterval,
// LeaseDuration), which sets how fast the others notice a change.
type Options struct {
	// Identity names this replica in the group: its membership blob, and
	// the holder of the shards it owns. It must be unique among the live
	// replicas of the group. Zero means "<hostname>-<pid>". At most 64
	// bytes of printable UTF-8, without "/".
	Identity string

	// Weight is this replica's capacity relative to the others': a
	// replica of weight 2 owns twice the shards of one of weight 1 while
	// the group balances by count, twice the load once it balances by load
	// (load per capacity is what the balancer evens out). Zero means 1;
	// otherwise from 1 to 1000 (MaxWeight); negative is an error.
	Weight int

	// LeaseDuration is the duration of the shard and membership leases, in
	// whole seconds from 15 s to 60 s. Zero means 60 s. A crashed replica's
	// shards are taken over after about LeaseDuration plus ListInterval;
	// each lease is renewed every third of it, so 15 s costs four times the
	// renewals of 60 s.
	LeaseDuration time.Duration

	// PollInterval is how often a replica looks at the group and acts on
	// what it sees: it reads the properties of the group's registry blob
	// (one request billed as "other"), and lists the group (one List Blobs
	// request per 5,000 blobs, billed as a write) when the registry says
	// the group changed, while anything is moving, and every ListInterval.
	// Zero means 2 s. Otherwise from 100 ms to 1 h; negative is an error.
	// A joining replica is balanced in within about two poll intervals
	// plus the drain time.
	PollInterval time.Duration

	// ListInterval is how often at least a replica lists the group while
	// nothing seems to change: what a listing alone shows (a replica that
	// crashed, loads that drifted) is seen within it. Zero means 15 s
	// (PollInterval if longer); otherwise from PollInterval to 1 h
	// (PollInterval: a listing every poll, as the cost of promptness).
	ListInterval time.Duration

	// Zone is the failure domain of this replica (an availability zone,
	// a rack): each zone's load stays within 10 % of its capacity share,
	// and once replicas declare two zones or more a lost zone is seen
	// within about D + 2P (one probe per zone per poll for the whole
	// group: about $1.5 a month for 3 zones; nothing without zones). Zero
	// means none (replicas without a zone count as one zone). At most 64
	// bytes of letters, digits, '.', '-' and '_'.
	Zone string

	// Jitter spreads each poll over PollInterval × (1 ± Jitter), a fraction.
	// Zero means 0.2; negative means none; at most 0.5.
	Jitter float64

	// Settle is how long a replica that starts waits before it takes free
	// shards, so that replicas started together see each other first and
	// each takes only its share (rather than the first taking everything
	// and handing most of it away a moment later). It takes shards handed
	// to it at once. Zero means the longest jittered poll interval
	// (PollInterval × (1 + Jitter)); negative means none; at most 1 h.
	Settle time.Duration

	// DrainTimeout bounds how long a replica waits for the work of a shard
	// to return after ending the shard's context (to move it, or because
	// the replica stops) before it gives up on the work: the shard's lease
	// is then no longer renewed and frees itself when it expires, instead
	// of being handed over while the work may still act. Zero means
	// LeaseDuration. Otherwise from 1 ms to 24 h; negative is an error.
	DrainTimeout time.Duration

	// MaxMovesPerPoll bounds how many shards this replica starts handing to
	// others per poll (a count). Zero means no limit of its own: the
	// group's budget still holds, at most max(1, 2 % of the shards) being
	// handed on at once across all replicas. Negative is an error.
	MaxMovesPerPoll int

	// WarmUp, when not nil, is called with a shard's name before the shard
	// is handed to this replica, while its owner still serves it: it may
	// load the shard's state, so that this replica serves at once. The
	// owner hands the shard on only once WarmUp has returned (an error is
	// logged, and the shard taken anyway) or WarmUpTimeout has passed;
	// ctx ends then. Not called for shards this replica takes free.
	WarmUp func(ctx context.Context, shard string) error

	// WarmUpTimeout bounds WarmUp. Zero means 30 s; otherwise from 1 ms to
	// 1 h; negative is an error.
	WarmUpTimeout time.Duration

	// Logger receives joins, acquisitions, moves and losses at Info, and
	// storage failures at Warn. Every line carries the attributes "group"
	// (the group's name) and "replica" (Identity). Nil means silent.
	Logger *slog.Logger

	// MeterProvider receives the group's OpenTelemetry metrics (see the
	// package documentation). Nil means the global provider.
	MeterProvider metric.MeterProvider
}

// config is a validated Options with defaults filled in.
type config struct {
	identity      string
	weight        int
	duration      time.Duration
	poll          time.Duration
	jitter        float64
	settle        time.Duration
	drain         time.Duration
	maxMoves      int
	cooldown      time.Duration
	list          time.Duration
	zone          string
	warmUp        func(context.Context, string) error
	warmUpTimeout time.Duration
	log           *slog.Logger
	meters        metric.MeterProvider
}

// leaseNames are the blob names of a group.
type leaseNames struct{ group string }

func (n leaseNames) prefix() string           { return n.group + "/" }
func (n leaseNames) member(id string) string  { return n.group + "/members/" + id }
func (n leaseNames) shard(name string) string { return n.group + "/shards/" + name }
func (n leaseNames) membersPrefix() string    { return n.group + "/members/" }
func (n leaseNames) shardsPrefix() string     { return n.group + "/shards/" }
func (n leaseNames) registry() string         { return n.group + "/shardset" }
func (n leaseNames) listsPrefix() string      { return n.group + "/lists/" }
func (n leaseNames) list(sum string) string   { return n.group + "/lists/" + sum }

func optionErr(field, format string, args ...any) error {
	return &azlease.OptionError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func (o *Options) config() (config, error) {
	var z Options
	if o == nil {
		o = &z
	}
	c := config{
		identity: o.Identity, weight: o.Weight, duration: o.LeaseDuration, poll: o.PollInterval,
		drain: o.DrainTimeout, maxMoves: o.MaxMovesPerPoll, log: o.Logger, meters: o.MeterProvider,
	}
	if c.identity == "" {
		c.identity = defaultIdentity()
	}
	if r := identityProblem(c.identity); r != "" {
		return c, optionErr("Options.Identity", "%q: %s", o.Identity, r)
	}
	switch {
	case c.weight == 0:
		c.weight = 1
	case c.weight < 1 || c.weight > MaxWeight:
		return c, optionErr("Options.Weight", "%d: must be from 1 to %d", o.Weight, MaxWeight)
	}
	if c.duration == 0 {
		c.duration = DefaultLeaseDuration
	}
	if c.duration < azlease.MinDuration || c.duration > azlease.MaxDuration || c.duration%time.Second != 0 {
		return c, optionErr("Options.LeaseDuration", "%v: must be whole seconds from 15s to 60s", o.LeaseDuration)
	}
	switch {
	case c.poll == 0:
		c.poll = DefaultPollInterval
	case c.poll < 100*time.Millisecond || c.poll > time.Hour:
		return c, optionErr("Options.PollInterval", "%v: must be from 100ms to 1h", o.PollInterval)
	}
	switch {
	case o.ListInterval == 0:
		c.list = max(DefaultListInterval, c.poll)
	case o.ListInterval < c.poll || o.ListInterval > time.Hour:
		return c, optionErr("Options.ListInterval", "%v: must be from PollInterval (%v) to 1h", o.ListInterval, c.poll)
	default:
		c.list = o.ListInterval
	}
	if r := zoneProblem(o.Zone); r != "" {
		return c, optionErr("Options.Zone", "%q: %s", o.Zone, r)
	}
	c.zone = o.Zone
	c.warmUp = o.WarmUp
	switch {
	case o.WarmUpTimeout == 0:
		c.warmUpTimeout = 30 * time.Second
	case o.WarmUpTimeout < time.Millisecond || o.WarmUpTimeout > time.Hour:
		return c, optionErr("Options.WarmUpTimeout", "%v: must be from 1ms to 1h", o.WarmUpTimeout)
	default:
		c.warmUpTimeout = o.WarmUpTimeout
	}
	switch {
	case o.Jitter == 0:
		c.jitter = 0.2
	case o.Jitter < 0:
		c.jitter = 0
	case o.Jitter > 0.5 || math.IsNaN(o.Jitter):
		return c, optionErr("Options.Jitter", "%v: at most 0.5", o.Jitter)
	default:
		c.jitter = o.Jitter
	}
	switch {
	case o.Settle == 0:
		c.settle = maxPoll(c.poll, c.jitter)
	case o.Settle < 0:
		c.settle = 0
	case o.Settle > time.Hour:
		return c, optionErr("Options.Settle", "%v: at most 1h", o.Settle)
	default:
		c.settle = o.Settle
	}
	switch {
	case c.drain == 0:
		c.drain = c.duration
	case c.drain < time.Millisecond || c.drain > azlease.MaxWait:
		return c, optionErr("Options.DrainTimeout", "%v: must be from 1ms to 24h", o.DrainTimeout)
	}
	c.cooldown = DefaultCooldown
	if c.maxMoves < 0 {
		return c, optionErr("Options.MaxMovesPerPoll", "%d: must not be negative", o.MaxMovesPerPoll)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// zoneProblem says what is wrong with a zone's name, or "".
func zoneProblem(z string) string {
	if len(z) > MaxZone {
		return fmt.Sprintf("longer than %d bytes", MaxZone)
	}
	for _, r := range z {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return "may hold only letters, digits, '.', '-' and '_'"
		}
	}
	return ""
}

// maxPoll is the longest jittered poll interval.
func maxPoll(poll time.Duration, jitter float64) time.Duration {
	return time.Duration(float64(poll) * (1 + jitter))
}

// identityProblem says what is wrong with a replica's identity, or "".
func identityProblem(id string) string {
	switch {
	case len(id) > azlease.MaxIdentity:
		return fmt.Sprintf("longer than %d bytes", azlease.MaxIdentity)
	case !utf8.ValidString(id):
		return "not valid UTF-8"
	case strings.ContainsAny(id, "/\\"):
		return "contains a slash or backslash (it names a blob)"
	case strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "contains a non-printable character"
	case strings.TrimSpace(id) != id || strings.HasSuffix(id, "."):
		return "starts or ends with a space, or ends with a dot (it names a blob)"
	}
	return ""
}

// defaultIdentity is "<hostname>-<pid>", shortened to fit.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > azlease.MaxIdentity {
		host = host[:azlease.MaxIdentity-len(pid)]
	}
	return strings.ToValidUTF8(strings.ReplaceAll(host, "/", "_"), "?") + pid
}

// checkGroup validates a group's name.
func checkGroup(group string) error {
	if group == "" || strings.HasSuffix(group, "/") {
		return optionErr("group", "%q: must be a non-empty blob name prefix not ending with a slash", group)
	}
	return nil
}

// checkNames validates a group's name and shard names.
func checkNames(group string, shards []string) error {
	if err := checkGroup(group); err != nil {
		return err
	}
	if len(shards) == 0 || len(shards) > MaxShards {
		return optionErr("shards", "%d shards: must be from 1 to %d", len(shards), MaxShards)
	}
	seen := make(map[string]bool, len(shards))
	for _, s := range shards {
		switch {
		case s == "" || strings.ContainsAny(s, "/\\") || !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 || strings.HasSuffix(s, "."):
			return optionErr("shards", "shard name %q: must be non-empty printable UTF-8 without a slash, not ending with a dot", s)
		case seen[s]:
			return optionErr("shards", "shard name %q appears twice", s)
		}
		seen[s] = true
	}
	return nil
}

// errWarmUpPanicked is what a warm-up that panicked returns.
var errWarmUpPanicked = errors.New("azlease/shards: the warm-up panicked")

// errStopped is the cause with which a shard's context ends when its
// replica stops; errMoving when the shard moves to another replica.
var (
	errStopped = fmt.Errorf("%w: the shard group is stopping", azlease.ErrStopped)
	errMoving  = fmt.Errorf("%w: the shard moves to another replica", azlease.ErrStopped)
)
