package azlease

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/azname"
)

// Limits that apply to every lease.
const (
	// MinDuration and MaxDuration bound a lease's duration, as Azure does.
	MinDuration = 15 * time.Second
	MaxDuration = 60 * time.Second

	// DefaultDuration is the lease duration when none is given.
	DefaultDuration = 15 * time.Second

	// MaxIdentity is the longest holder identity, in bytes.
	MaxIdentity = 64

	// MaxHistory is the most past terms a lock blob keeps.
	MaxHistory = 16

	// MaxPollInterval is the longest PollInterval (Elector, Mutex, DoOnce).
	MaxPollInterval = time.Hour

	// DefaultHandOffWait is what a zero ElectorOptions.HandOffWait means.
	DefaultHandOffWait = 10 * time.Second
	// MaxWait is the longest ElectorOptions.TakeoverDelay, DrainTimeout and
	// HeartbeatTimeout.
	MaxWait = 24 * time.Hour
)

// LeaseOptions configures a [Lease]. A nil *LeaseOptions means the defaults;
// so does the zero value of each field.
type LeaseOptions struct {
	// LeaseDuration is the lease duration Azure enforces, in whole seconds from
	// 15 s to 60 s (MinDuration to MaxDuration). Zero means 15 s; anything
	// else outside that range, negative included, is an error. Longer leases
	// make a crashed holder's successor wait longer; shorter ones cost more
	// renewals.
	LeaseDuration time.Duration

	// SafetyMargin: a lease granted by a request sent at s is trusted until
	// s + LeaseDuration − SafetyMargin on the local monotonic clock, which
	// stays safe while Azure's clock runs at most LeaseDuration/(LeaseDuration
	// − SafetyMargin) times as fast. Zero means LeaseDuration/20 (750 ms for
	// 15 s: a 5.2 % rate difference); otherwise from LeaseDuration/100 to
	// LeaseDuration/4 (150 ms to 3.75 s for 15 s); negative is an error.
	SafetyMargin time.Duration

	// AttemptTimeout bounds each request to Azure; a request is also never
	// given longer than the time left before the validity deadline. Zero
	// means 3 s. Otherwise it must be from 100 ms to a third of (LeaseDuration −
	// SafetyMargin) (4.75 s with the defaults), so a renewal has room for
	// retries; negative is an error.
	AttemptTimeout time.Duration

	// Identity names this holder in the lock blob's metadata, where anyone
	// can read it. Zero means "<hostname>-<pid>". At most 64 bytes of
	// printable UTF-8.
	Identity string

	// History is how many past terms the lock blob's metadata keeps (holder,
	// epoch, start). Zero means 8; negative means none; at most 16.
	History int

	// NoCreate turns off creating the container and the zero-byte lock blob
	// on first use. Zero (false) means they are created when missing, never
	// overwriting an existing blob.
	NoCreate bool

	// Logger receives transitions at Info and retries at Debug. Lease IDs,
	// keys and SAS tokens are never logged. Nil means silent.
	Logger *slog.Logger
	// MeterProvider receives the metrics (the README lists them). Nil means
	// otel.GetMeterProvider(), which records nothing until one is installed.
	MeterProvider metric.MeterProvider

	// MetricsWithoutLockName leaves the azlease.lock attribute (container and
	// blob) off every metric, for processes that hold thousands of locks.
	MetricsWithoutLockName bool
}

// leaseConfig is a validated LeaseOptions with defaults filled in.
type leaseConfig struct {
	duration       time.Duration
	margin         time.Duration
	attemptTimeout time.Duration
	identity       string
	history        int
	create         bool
	log            *slog.Logger
	meters         metric.MeterProvider
	noLockName     bool
	// markRelease writes a clean-release marker before releasing (Elector,
	// Mutex, DoOnce; not a bare Lease).
	markRelease bool
	// role names the holder kind in metrics: lease, elector, mutex, once.
	role string
}

// transitions is the level of a Lease's own lines (acquired, released,
// handed off, broke): Info for a bare Lease, Debug for the Lease of an
// Elector, Mutex or DoOnce, which log their own transitions at Info.
func (c leaseConfig) transitions() slog.Level {
	if c.role == "lease" {
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// releasedLevel is the level of a Lease's "released" line: Info for an
// Elector's Lease too, since none of the Elector's own lines says that the
// lease went back ("stepping down" comes before the release, and a
// release that fails is a Warn), where a Mutex logs "unlocked" and DoOnce
// "once: done" after theirs.
func (c leaseConfig) releasedLevel() slog.Level {
	if c.role == "elector" {
		return slog.LevelInfo
	}
	return c.transitions()
}

// config validates o. Errors name fields with prefix (LeaseOptions.,
// ElectorOptions., …).
func (o *LeaseOptions) config(prefix string) (leaseConfig, error) {
	var z LeaseOptions
	if o == nil {
		o = &z
	}
	c := leaseConfig{
		duration:       o.LeaseDuration,
		margin:         o.SafetyMargin,
		attemptTimeout: o.AttemptTimeout,
		identity:       o.Identity,
		history:        o.History,
		create:         !o.NoCreate,
		log:            o.Logger,
		meters:         o.MeterProvider,
		noLockName:     o.MetricsWithoutLockName,
		role:           "lease",
	}
	if c.duration == 0 {
		c.duration = DefaultDuration
	}
	if c.duration < MinDuration || c.duration > MaxDuration || c.duration%time.Second != 0 {
		return c, optionErr(prefix+"LeaseDuration", "%v: must be whole seconds from 15s to 60s", o.LeaseDuration)
	}
	if c.margin == 0 {
		c.margin = c.duration / 20
	}
	if c.margin < c.duration/100 || c.margin > c.duration/4 {
		return c, optionErr(prefix+"SafetyMargin", "%v: must be from %v to %v (LeaseDuration/100 to LeaseDuration/4)",
			o.SafetyMargin, c.duration/100, c.duration/4)
	}
	if c.attemptTimeout == 0 {
		c.attemptTimeout = 3 * time.Second
	}
	if maxA := (c.duration - c.margin) / 3; c.attemptTimeout < 100*time.Millisecond || c.attemptTimeout > maxA {
		return c, optionErr(prefix+"AttemptTimeout", "%v: must be from 100ms to %v ((LeaseDuration−SafetyMargin)/3)",
			o.AttemptTimeout, maxA)
	}
	if c.identity == "" {
		c.identity = defaultIdentity()
	}
	if err := validIdentity(c.identity); err != "" {
		return c, optionErr(prefix+"Identity", "%q: %s", o.Identity, err)
	}
	switch {
	case c.history == 0:
		c.history = 8
	case c.history < 0:
		c.history = 0
	case c.history > MaxHistory:
		return c, optionErr(prefix+"History", "%d: at most %d", o.History, MaxHistory)
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// defaultIdentity is "<hostname>-<pid>", shortened to fit.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	if len(host)+len(pid) > MaxIdentity {
		host = host[:MaxIdentity-len(pid)]
	}
	return strings.ToValidUTF8(host, "?") + pid
}

func validIdentity(id string) string {
	switch {
	case len(id) > MaxIdentity:
		return fmt.Sprintf("longer than %d bytes", MaxIdentity)
	case !utf8.ValidString(id):
		return "not valid UTF-8"
	case strings.IndexFunc(id, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "contains a non-printable character"
	}
	return ""
}

// bounded returns d, or def when d is zero. A d outside [lo, hi] is an
// error naming field; so is a negative one.
func bounded(field string, d, def, lo, hi time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return def, nil
	case d < 0:
		return 0, optionErr(field, "%v: must not be negative", d)
	case d < lo || d > hi:
		return 0, optionErr(field, "%v: must be from %v to %v", d, lo, hi)
	}
	return d, nil
}

// target is a validated container client and blob name.
type target struct {
	cc        *container.Client
	container string
	blob      string
}

// endpoint is the container's URL for error messages, without any SAS
// token.
func (t target) endpoint() string {
	if t.cc == nil {
		return ""
	}
	return redactURL(t.cc.URL())
}

// newTarget validates the container client and blob name every constructor
// takes. field prefixes name the arguments in errors.
func newTarget(cc *container.Client, blobName, blobField string) (target, error) {
	t, err := containerTarget(cc)
	if err != nil {
		return target{}, err
	}
	if r := blobNameProblem(blobName); r != "" {
		return target{}, optionErr(blobField, "%q: %s", blobName, r)
	}
	t.blob = blobName
	return t, nil
}

// containerTarget validates a container client: a target with no blob yet.
func containerTarget(cc *container.Client) (target, error) {
	if cc == nil {
		return target{}, optionErr("container", "nil *container.Client")
	}
	parts, err := azblob.ParseURL(cc.URL())
	if err != nil {
		// A *url.Error quotes the whole URL, SAS token included.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return target{}, optionErr("container", "URL %q: %v", redactURL(cc.URL()), err)
	}
	if (parts.Scheme != "http" && parts.Scheme != "https") || parts.Host == "" {
		return target{}, optionErr("container", "URL %q: must be an absolute http(s) URL", redactURL(cc.URL()))
	}
	if r := containerNameProblem(parts.ContainerName); r != "" {
		return target{}, optionErr("container", "container name %q: %s", parts.ContainerName, r)
	}
	return target{cc: cc, container: parts.ContainerName}, nil
}

// containerNameProblem applies Azure's container naming rules.
func containerNameProblem(n string) string {
	if n == "" {
		return "empty (the container client must point at a container)"
	}
	return azname.ContainerProblem(n)
}

// blobNameProblem applies Azure's blob naming rules: 1 to 1024 characters,
// at most 254 path segments, no path segment ending with a dot, not ending
// with a slash; azlease also refuses control characters and invalid UTF-8,
// which no lock name needs.
func blobNameProblem(n string) string {
	if p := azname.BlobProblem(n); p != "" {
		return p
	}
	switch {
	case !utf8.ValidString(n):
		return "not valid UTF-8"
	case strings.HasSuffix(n, "/"):
		return "must not end with a slash"
	case strings.IndexFunc(n, unicode.IsControl) >= 0:
		return "contains a control character"
	case strings.Contains(n, "\\"):
		return "contains a backslash (Azure tools turn it into a slash)"
	}
	return ""
}

// redactURL drops the query (a SAS token) from a URL for error messages.
func redactURL(u string) string {
	if i := strings.IndexByte(u, '?'); i >= 0 {
		return u[:i] + "?<redacted>"
	}
	return u
}

// AfterTask says what an [Elector] does when its leader task returns.
type AfterTask int

const (
	// ReleaseAndContend releases the lease, waits the longest poll interval
	// (PollInterval plus its jitter, plus a fifth of it) so that another
	// instance can take over, and contends again. The default.
	ReleaseAndContend AfterTask = iota
	// StopElecting releases the lease and stops the Elector; Run returns
	// the task's error.
	StopElecting
)

// ElectorOptions configures an [Elector]. A nil *ElectorOptions means the
// defaults; so does the zero value of each field.
type ElectorOptions struct {
	// Identity names this instance in the lock blob and its candidacy,
	// where followers and operators read it. Zero means "<hostname>-<pid>".
	// At most 64 bytes of printable UTF-8.
	Identity string

	// LeaseDuration is the lease duration Azure enforces: whole seconds from
	// 15 s to 60 s; zero means 15 s. After a crash, a follower takes over
	// within LeaseDuration + PollInterval.
	LeaseDuration time.Duration

	// SafetyMargin: see [LeaseOptions.SafetyMargin]. Zero means
	// LeaseDuration/20; otherwise from LeaseDuration/100 to LeaseDuration/4.
	SafetyMargin time.Duration

	// AttemptTimeout bounds each request: see [LeaseOptions.AttemptTimeout].
	// Zero means 3 s; otherwise from 100 ms to (LeaseDuration −
	// SafetyMargin)/3, and RenewInterval + 2 × AttemptTimeout ≤
	// LeaseDuration − SafetyMargin (4.625 s at most with the defaults).
	AttemptTimeout time.Duration

	// RenewInterval is how long after the send of its last successful
	// renewal the leader renews (up to 10 % sooner, the first after an
	// acquisition up to half sooner). Zero means LeaseDuration/3 (5 s).
	// Otherwise at least 100 ms, and RenewInterval + 2 × AttemptTimeout ≤
	// LeaseDuration − SafetyMargin (8.25 s at most with the defaults), so
	// that two attempts fit before the deadline; negative is an error.
	RenewInterval time.Duration

	// PollInterval is how often a follower reads the lock blob (one
	// request); after a stop without a successor, a follower takes over
	// within one PollInterval (plus jitter). The leader's standby polls
	// every fifth of it. Zero means 5 s; otherwise from 100 ms to 1 h
	// (MaxPollInterval); negative is an error.
	PollInterval time.Duration

	// Jitter spreads each poll over PollInterval × (1 ± Jitter), so that
	// followers do not poll in step. Zero means 0.2; negative means none;
	// at most 0.5.
	Jitter float64

	// TakeoverDelay makes a leader that took over an expired or broken lease
	// (not a clean release) hold it this long before it starts leading, so
	// that a paused former leader has time to notice it lost. Zero means no
	// delay; at most 24 h (MaxWait); negative is an error.
	TakeoverDelay time.Duration

	// DrainTimeout bounds how long Stop waits, renewing, for the leader task
	// to return after cancelling its context; a slower task's lease is left
	// to expire instead of released (it keeps its fencing token), and Stop
	// goes on waiting. Zero means LeaseDuration; at most 24 h (MaxWait);
	// negative is an error.
	DrainTimeout time.Duration

	// AfterTask says what happens when the leader task returns. Zero means
	// ReleaseAndContend.
	AfterTask AfterTask

	// HeartbeatTimeout makes [Elector.Check] fail while this instance leads
	// and its task has not called [Term.Heartbeat] for this long (a stalled
	// leader). Zero means no heartbeat check; at most 24 h (MaxWait);
	// negative is an error.
	HeartbeatTimeout time.Duration

	// StepDownOnStall makes a stalled leader (see HeartbeatTimeout, which it
	// needs) let go: the term ends (cause [ErrStalled]), the lease is released
	// once the task returns (or expires after DrainTimeout), and this
	// instance contends again only after the longest poll interval, so that
	// a healthy follower takes over. Zero (false): it only fails Check.
	StepDownOnStall bool

	// History is how many past terms the lock blob keeps; see
	// [LeaseOptions.History].
	History int

	// NoCreate turns off creating the container and lock blob.
	NoCreate bool

	// Logger receives transitions at Info (became leader, lost leadership
	// and why, stepped down) and retries at Debug. Nil means silent.
	Logger *slog.Logger
	// MeterProvider receives the metrics (the README lists them). Nil means
	// otel.GetMeterProvider(), which records nothing until one is installed.
	MeterProvider metric.MeterProvider

	// MetricsWithoutLockName leaves the azlease.lock attribute (container and
	// blob) off every metric, for processes that hold thousands of locks.
	MetricsWithoutLockName bool

	// Planned succession (docs/design/succession.md): every Elector
	// publishes its candidacy next to the lock blob, and a leader that
	// stops or yields hands leadership straight to the best ready standby.

	// Priority ranks this instance as a leader: a free lease goes to the
	// live ready candidate of highest priority, a stopping leader hands over
	// to it, and a leader yields to a higher one after StabilityWindow (and
	// its own Cooldown). Equal priorities never move leadership. Zero (every
	// instance's default): none preferred. Negative: "never lead from here
	// while another can" (it yields without waiting for Cooldown). Any int.
	Priority int

	// Labels are published with this instance's candidacy, for operators
	// (azlease status, watch, ui): its zone, version, node. They decide
	// nothing. Nil means none. At most 16 (MaxLabels); names of 1 to 63
	// letters, digits, '.', '_', '-' or '/'; values of at most 255 bytes of
	// printable UTF-8; at most 2,048 bytes in all, URL-encoded.
	Labels map[string]string

	// StabilityWindow is how long a candidate of higher priority must have
	// been ready, unchanged, before the leader yields to it (measured on
	// storage's clock, to about a second). Zero means 30 s; otherwise from
	// 1 s to 24 h (MaxWait); negative is an error.
	StabilityWindow time.Duration

	// Cooldown stops flapping: a leader does not yield for priority before
	// its term has lasted Cooldown (unless its Priority is negative), and an
	// instance that yielded is not preferred back for its priority for
	// Cooldown. Zero means 1 minute; otherwise from 1 s to 24 h (MaxWait);
	// negative is an error.
	Cooldown time.Duration

	// SuccessorPollInterval is how often a designated successor looks at the
	// lock blob around a hand-off: it takes leadership within about this
	// long once handed it. Zero means 200 ms (PollInterval if shorter);
	// otherwise from 20 ms to PollInterval; negative is an error.
	SuccessorPollInterval time.Duration

	// HandOffWait bounds how long a leader that stops or yields spends,
	// still leading, getting a successor ready (it then releases instead),
	// and how long others leave a free lease to a candidate of higher
	// priority. It adds to what Stop takes. Zero means 10 s; otherwise from
	// 100 ms to 1 h (MaxPollInterval); negative is an error.
	HandOffWait time.Duration

	// NoSuccession turns planned succession off: no candidacy, no listing
	// while leading, and a stopping leader releases the lease for a follower
	// to find at its next poll. Yield and YieldTo then fail. Zero (false):
	// succession is on.
	NoSuccession bool
}

type electorConfig struct {
	holdConfig
	takeoverDelay    time.Duration
	drainTimeout     time.Duration
	afterTask        AfterTask
	heartbeatTimeout time.Duration
	stepDownOnStall  bool
	succession       successionConfig
}

// successionConfig is the validated succession part of ElectorOptions.
type successionConfig struct {
	off         bool
	priority    int
	labels      map[string]string
	window      time.Duration
	cooldown    time.Duration
	successPoll time.Duration
	handOffWait time.Duration
}

func (o *ElectorOptions) config() (electorConfig, error) {
	var z ElectorOptions
	if o == nil {
		o = &z
	}
	hc, err := holdOptions("ElectorOptions.", LeaseOptions{
		LeaseDuration: o.LeaseDuration, SafetyMargin: o.SafetyMargin, AttemptTimeout: o.AttemptTimeout,
		Identity: o.Identity, History: o.History, NoCreate: o.NoCreate, Logger: o.Logger,
		MeterProvider: o.MeterProvider, MetricsWithoutLockName: o.MetricsWithoutLockName,
	}, o.RenewInterval, o.PollInterval, 5*time.Second, o.Jitter)
	if err != nil {
		return electorConfig{}, err
	}
	hc.lease.markRelease = true
	hc.lease.role = "elector"
	c := electorConfig{holdConfig: hc, afterTask: o.AfterTask}
	if c.takeoverDelay, err = bounded("ElectorOptions.TakeoverDelay", o.TakeoverDelay, 0, 0, MaxWait); err != nil {
		return c, err
	}
	if c.drainTimeout, err = bounded("ElectorOptions.DrainTimeout", o.DrainTimeout, hc.lease.duration, 0, MaxWait); err != nil {
		return c, err
	}
	if c.heartbeatTimeout, err = bounded("ElectorOptions.HeartbeatTimeout", o.HeartbeatTimeout, 0, 0, MaxWait); err != nil {
		return c, err
	}
	if o.AfterTask != ReleaseAndContend && o.AfterTask != StopElecting {
		return c, optionErr("ElectorOptions.AfterTask", "%d: must be ReleaseAndContend or StopElecting", o.AfterTask)
	}
	if o.StepDownOnStall && c.heartbeatTimeout == 0 {
		return c, optionErr("ElectorOptions.StepDownOnStall", "needs a HeartbeatTimeout")
	}
	c.stepDownOnStall = o.StepDownOnStall
	sc := successionConfig{off: o.NoSuccession, priority: o.Priority}
	if r := labelsProblem(o.Labels); r != "" {
		return c, optionErr("ElectorOptions.Labels", "%s", r)
	}
	if len(o.Labels) > 0 {
		sc.labels = make(map[string]string, len(o.Labels))
		for k, v := range o.Labels {
			sc.labels[k] = v
		}
	}
	if sc.window, err = bounded("ElectorOptions.StabilityWindow", o.StabilityWindow, 30*time.Second, time.Second, MaxWait); err != nil {
		return c, err
	}
	if sc.cooldown, err = bounded("ElectorOptions.Cooldown", o.Cooldown, time.Minute, time.Second, MaxWait); err != nil {
		return c, err
	}
	if sc.successPoll, err = bounded("ElectorOptions.SuccessorPollInterval", o.SuccessorPollInterval, min(defaultHeadPoll, hc.poll), 20*time.Millisecond, hc.poll); err != nil {
		return c, err
	}
	if sc.handOffWait, err = bounded("ElectorOptions.HandOffWait", o.HandOffWait, DefaultHandOffWait, 100*time.Millisecond, MaxPollInterval); err != nil {
		return c, err
	}
	c.succession = sc
	return c, nil
}

// MutexOptions configures a [Mutex] (and [Claim]). A nil *MutexOptions
// means the defaults; so does the zero value of each field.
type MutexOptions struct {
	// Identity names the holder in the lock blob. Zero means
	// "<hostname>-<pid>". At most 64 bytes of printable UTF-8.
	Identity string

	// LeaseDuration: whole seconds from 15 s to 60 s; zero means 15 s. A
	// holder that crashes keeps the mutex locked this long.
	LeaseDuration time.Duration

	// SafetyMargin: see [LeaseOptions.SafetyMargin]. Zero means
	// LeaseDuration/20; otherwise from LeaseDuration/100 to LeaseDuration/4.
	SafetyMargin time.Duration

	// AttemptTimeout bounds each request: see [LeaseOptions.AttemptTimeout].
	// Zero means 3 s; otherwise from 100 ms to (LeaseDuration −
	// SafetyMargin)/3, and RenewInterval + 2 × AttemptTimeout ≤
	// LeaseDuration − SafetyMargin (4.625 s at most with the defaults).
	AttemptTimeout time.Duration

	// RenewInterval is how often a held lock is renewed, with the jitter of
	// [ElectorOptions.RenewInterval]. Zero means LeaseDuration/3. Same
	// bounds as [ElectorOptions.RenewInterval].
	RenewInterval time.Duration

	// PollInterval paces the waiters. The first in line waits 4 % of the
	// hold's age between two looks at the lock, at most 2 × PollInterval
	// (from a hold of 50 s on); the one right behind it at most 2 ×
	// PollInterval; those further back longer the longer the queue stands
	// still, at most 60 × PollInterval up to the tenth in line and 240 ×
	// further back. With Unordered, how long Lock waits between tries.
	// Zero means 1 s; otherwise from 100 ms to 1 h (MaxPollInterval);
	// negative is an error.
	PollInterval time.Duration

	// HeadPollInterval is the first waiter's wait between two looks at the
	// lock (one request each) while the hold it waits behind is under 5 s
	// old, after a ramp from 5 ms as the hold begins; then 4 % of the hold's
	// age, up to 2 × PollInterval. A holder waits that long for a first in line
	// before passing it over. Zero means 200 ms (PollInterval if shorter);
	// otherwise from 20 ms to PollInterval; negative is an error. Unused
	// with Unordered.
	HeadPollInterval time.Duration

	// Unordered turns the waiting queue off: each waiter polls every
	// PollInterval and the first to try after a release gets the lock (one
	// may wait indefinitely). Zero (false) means waiters are served in
	// the order they asked (see [Mutex]). Unordered and
	// ordered waiters on one lock exclude each other as ever; an unordered
	// waiter can take the lock only when it is free, which a contended
	// ordered Unlock never lets it be.
	Unordered bool

	// Jitter spreads each wait over PollInterval × (1 ± Jitter). Zero means
	// 0.2; negative means none; at most 0.5.
	Jitter float64

	// UnreachableTimeout bounds how long Lock (and Acquire) waits while every
	// request fails (no answer, a transport error, 408, 429, 5xx): that long
	// in a row, it returns an error wrapping [ErrUnreachable] naming the
	// container and the last failure, at most a try later; any answer, even
	// "held elsewhere", restarts the count. Zero means 1 minute; negative,
	// no bound; otherwise from 1 s to 24 h ([MaxWait]). TryLock and
	// TryAcquire are bounded on their own (2 × AttemptTimeout a slot).
	UnreachableTimeout time.Duration

	// MaxHold, when positive, bounds how long a Lock is held: once it has
	// been held this long, its term ends (cause [ErrMaxHoldExceeded]) and
	// its lease is no longer renewed, so the mutex frees itself within the
	// lease duration even if the holder is stuck and never unlocks. Zero
	// means no limit; at most 24 h ([MaxWait]); negative is an error.
	MaxHold time.Duration

	// History is how many past holders the lock blob keeps; see
	// [LeaseOptions.History].
	History int

	// NoCreate turns off creating the container and lock blob.
	NoCreate bool

	// Logger receives lock and loss events at Info and retries at Debug.
	// Nil means silent. "Held elsewhere" is never logged: it is a normal
	// outcome.
	Logger *slog.Logger
	// MeterProvider receives the lock's OpenTelemetry metrics: each
	// request's duration by operation and outcome (so failed requests are
	// counted), terms started and ended by cause, renewal slack, how long
	// Lock waited (azlease.mutex.wait.duration) and consecutive failures.
	// Nil means the global provider (otel.GetMeterProvider), which records
	// nothing until the application installs one.
	MeterProvider metric.MeterProvider

	// MetricsWithoutLockName leaves the azlease.lock attribute (the lock
	// blob's container and name) off every metric, for processes that hold
	// thousands of locks. Zero (false) means it is included.
	MetricsWithoutLockName bool
}

// holdConfig is the part of a validated configuration that holding a lease
// needs: the lease itself, how often to renew, and how to wait between tries.
type holdConfig struct {
	lease      leaseConfig
	renewEvery time.Duration
	poll       time.Duration
	jitter     float64
	maxHold    time.Duration // Mutex only: 0 is no limit
	headPoll   time.Duration // Mutex only: the first waiter's shortest poll (fair locks: timing.HeadLook's floor)
	unordered  bool          // Mutex only: no waiting queue
	// unreachable bounds waiting while storage is unreachable (Mutex,
	// DoOnce): negative is no bound.
	unreachable time.Duration
}

// unreachableBound validates an UnreachableTimeout: zero is the default,
// negative is no bound (-1), otherwise from 1 s to MaxWait.
func unreachableBound(field string, d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return defaultUnreachable, nil
	case d < 0:
		return -1, nil
	case d < time.Second || d > MaxWait:
		return 0, optionErr(field, "%v: must be from 1s to %v, or negative for no bound", d, MaxWait)
	}
	return d, nil
}

// holdOptions validates the fields Mutex and DoOnce options share with
// ElectorOptions. prefix names the struct in errors.
func holdOptions(prefix string, lo LeaseOptions, renew, poll, defaultPoll time.Duration, jitter float64) (holdConfig, error) {
	lc, err := lo.config(prefix)
	if err != nil {
		return holdConfig{}, err
	}
	c := holdConfig{lease: lc}
	if c.renewEvery, err = bounded(prefix+"RenewInterval", renew, lc.duration/3, 0, math.MaxInt64); err != nil {
		return c, err
	}
	if limit := lc.duration - lc.margin - 2*lc.attemptTimeout; renew == 0 && c.renewEvery > limit {
		// RenewInterval was left at its default: the field the caller set,
		// and must change, is AttemptTimeout.
		return c, optionErr(prefix+"AttemptTimeout", "%v: with RenewInterval's default (LeaseDuration/3 = %v), at most %v ((LeaseDuration − SafetyMargin − RenewInterval)/2), leaving room for two attempts before the validity deadline",
			lc.attemptTimeout, c.renewEvery, (lc.duration-lc.margin-c.renewEvery)/2)
	} else if c.renewEvery < 100*time.Millisecond || c.renewEvery > limit {
		return c, optionErr(prefix+"RenewInterval", "%v: must be from 100ms to %v, leaving room for two attempts before the validity deadline (LeaseDuration − SafetyMargin − 2×AttemptTimeout)", c.renewEvery, limit)
	}
	if c.poll, err = bounded(prefix+"PollInterval", poll, defaultPoll, 100*time.Millisecond, MaxPollInterval); err != nil {
		return c, err
	}
	switch {
	case jitter == 0:
		c.jitter = 0.2
	case jitter < 0:
		c.jitter = 0
	case jitter > 0.5 || math.IsNaN(jitter):
		return c, optionErr(prefix+"Jitter", "%v: at most 0.5", jitter)
	default:
		c.jitter = jitter
	}
	return c, nil
}

func (o *MutexOptions) config() (holdConfig, error) {
	var z MutexOptions
	if o == nil {
		o = &z
	}
	hc, err := holdOptions("MutexOptions.", LeaseOptions{
		LeaseDuration: o.LeaseDuration, SafetyMargin: o.SafetyMargin, AttemptTimeout: o.AttemptTimeout,
		Identity: o.Identity, History: o.History, NoCreate: o.NoCreate, Logger: o.Logger,
		MeterProvider: o.MeterProvider, MetricsWithoutLockName: o.MetricsWithoutLockName,
	}, o.RenewInterval, o.PollInterval, time.Second, o.Jitter)
	if err != nil {
		return hc, err
	}
	hc.lease.role = "mutex"
	hc.lease.markRelease = true
	if hc.maxHold, err = bounded("MutexOptions.MaxHold", o.MaxHold, 0, 0, MaxWait); err != nil {
		return hc, err
	}
	hc.unordered = o.Unordered
	if hc.headPoll, err = bounded("MutexOptions.HeadPollInterval", o.HeadPollInterval, min(defaultHeadPoll, hc.poll), 20*time.Millisecond, hc.poll); err != nil {
		return hc, err
	}
	hc.unreachable, err = unreachableBound("MutexOptions.UnreachableTimeout", o.UnreachableTimeout)
	return hc, err
}

// defaultHeadPoll is what a zero MutexOptions.HeadPollInterval means (or
// PollInterval, when that is shorter).
const defaultHeadPoll = 200 * time.Millisecond

// DoOnceOptions configures [DoOnce], [InspectOnce] and [ResetOnce]. A nil
// *DoOnceOptions means the defaults; so does the zero value of each field.
type DoOnceOptions struct {
	// Identity names this process in the marker (who ran it). Zero means
	// "<hostname>-<pid>".
	Identity string

	// Prefix is put before the key to name the marker blob. Zero means
	// "once/". The key and prefix together must be a valid blob name.
	Prefix string

	// MaxAttempts is how many attempts may be made, counting failed ones and
	// ones whose runner died, before every caller gets a [*OnceFailedError]
	// (the key's first caller's value is recorded and wins). Zero means 3;
	// otherwise from 1 to 1000 (1: nobody retries); negative is an error.
	MaxAttempts int

	// LeaseDuration: whole seconds from 15 s to 60 s; zero means 15 s. If a
	// runner dies, a waiter takes over within this long and a PollInterval
	// (with its jitter): 17.4 s with the defaults.
	LeaseDuration time.Duration

	// SafetyMargin: see [LeaseOptions.SafetyMargin]. Zero means
	// LeaseDuration/20; otherwise from LeaseDuration/100 to LeaseDuration/4.
	SafetyMargin time.Duration

	// AttemptTimeout bounds each request: see [LeaseOptions.AttemptTimeout].
	// Zero means 3 s; otherwise from 100 ms to (LeaseDuration −
	// SafetyMargin)/3, and RenewInterval + 2 × AttemptTimeout ≤
	// LeaseDuration − SafetyMargin (4.625 s at most with the defaults).
	AttemptTimeout time.Duration

	// RenewInterval is how often the runner's lease is renewed while fn
	// runs. Zero means LeaseDuration/3. Same bounds as
	// [ElectorOptions.RenewInterval].
	RenewInterval time.Duration

	// PollInterval is how often a waiting caller checks the marker. Zero
	// means 2 s. Otherwise from 100 ms to 1 h (MaxPollInterval); negative is
	// an error.
	PollInterval time.Duration

	// Jitter spreads each wait over PollInterval × (1 ± Jitter). Zero means
	// 0.2; negative means none; at most 0.5.
	Jitter float64

	// UnreachableTimeout: once every request to storage has failed for this
	// long while DoOnce waits for the key or settles its completion (not
	// while fn runs), it returns an error wrapping [ErrUnreachable], within
	// a poll of the bound. Any answer, even "held elsewhere", restarts the
	// count. Zero means 1 minute; negative means no bound (until ctx ends);
	// otherwise from 1 s to 24 h ([MaxWait]). docs/design/run-once.md.
	UnreachableTimeout time.Duration

	// NoCreate turns off creating the container and marker blob.
	NoCreate bool

	// Retention is how long a key's record is kept after its last write, for
	// keys per period or tick ("nightly/2026-11-21", oldest first in name
	// order): a run deletes up to 4 expired siblings. Calls of a key must
	// start within Retention/2 of each other, or get [ErrOnceTooLate]. Zero
	// means forever; otherwise from 1 minute to 87,600 h, with a "/" in the
	// key; negative is an error. docs/design/once-per-tick.md.
	Retention time.Duration

	// Logger receives runs, completions and failures at Info and retries at
	// Debug. Nil means silent.
	Logger *slog.Logger
	// MeterProvider receives the metrics (the README lists them). Nil means
	// otel.GetMeterProvider(), which records nothing until one is installed.
	MeterProvider metric.MeterProvider

	// MetricsWithoutLockName leaves the azlease.lock attribute (container and
	// blob) off every metric, for processes that hold thousands of locks.
	MetricsWithoutLockName bool
}

type onceConfig struct {
	holdConfig
	prefix      string
	maxAttempts int
	retention   time.Duration // 0: keep forever
}

func (o *DoOnceOptions) config() (onceConfig, error) {
	var z DoOnceOptions
	if o == nil {
		o = &z
	}
	hc, err := holdOptions("DoOnceOptions.", LeaseOptions{
		LeaseDuration: o.LeaseDuration, SafetyMargin: o.SafetyMargin, AttemptTimeout: o.AttemptTimeout,
		Identity: o.Identity, NoCreate: o.NoCreate, Logger: o.Logger,
		MeterProvider: o.MeterProvider, MetricsWithoutLockName: o.MetricsWithoutLockName,
	}, o.RenewInterval, o.PollInterval, 2*time.Second, o.Jitter)
	if err != nil {
		return onceConfig{}, err
	}
	hc.lease.role = "once"
	hc.lease.markRelease = true
	if hc.unreachable, err = unreachableBound("DoOnceOptions.UnreachableTimeout", o.UnreachableTimeout); err != nil {
		return onceConfig{}, err
	}
	c := onceConfig{holdConfig: hc, prefix: o.Prefix, maxAttempts: o.MaxAttempts, retention: o.Retention}
	if c.retention != 0 && (c.retention < minRetention || c.retention > maxRetention) {
		return c, optionErr("DoOnceOptions.Retention", "%v: must be from %v to %v, or zero to keep records forever", o.Retention, minRetention, maxRetention)
	}
	if c.prefix == "" {
		c.prefix = "once/"
	}
	switch {
	case c.maxAttempts == 0:
		c.maxAttempts = 3
	case c.maxAttempts < 0 || c.maxAttempts > 1000:
		return c, optionErr("DoOnceOptions.MaxAttempts", "%d: must be from 1 to 1000", o.MaxAttempts)
	}
	return c, nil
}
