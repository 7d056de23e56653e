package shards

// A replica of a shard group: its life cycle (Start, Stop, Run), its poll
// loop (list the group, plan, act), and its membership.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
)

// Work is what a replica runs for each shard it owns. ctx ends when the
// replica's ownership of the shard ends: the shard moves to another replica
// (cause wrapping [azlease.ErrStopped]), the replica stops (the same), or
// the shard's lease is lost or its validity deadline passes (cause wrapping
// [azlease.ErrLeaseLost]); its Err reports the deadline as soon as it
// passes, even after a pause of the whole process. Work must return when
// ctx ends: the shard is handed over only after it has returned (or after
// Options.DrainTimeout, when its lease is left to expire instead).
//
// If Work returns while the shard is still owned, the replica calls it
// again after a pause (1 s, doubling up to a minute while it keeps
// returning at once). A panic in Work is recovered and treated as a return
// with an error.
type Work func(ctx context.Context, s *Shard) error

// Shard is a shard owned by this replica, for one term of its lease.
type Shard struct {
	// Name is the shard's name, as given to New.
	Name string
	// Term is the term of the shard's lease: its fencing token (Epoch),
	// and the state fenced by Azure on the shard's blob (Term.Read,
	// Term.Write): a checkpoint written through the term can never be
	// overwritten by a former owner. Epochs count per shard.
	Term *azlease.Term
}

// Group is one replica of a shard group: the shards of a named group are
// spread over every replica running a Group with the same name and shard
// list, each shard owned by at most one replica at a time. See the package
// documentation.
type Group struct {
	cc     *container.Client
	names  leaseNames
	shards []string
	cfg    config
	tm     *telemetry

	mu       sync.Mutex
	started  bool
	stop     context.CancelFunc
	done     chan struct{}
	err      error
	owned    map[string]*owned // shards this replica holds
	leases   map[string]*azlease.Lease
	reached  bool // a listing succeeded
	lastPoll time.Time
	member   *azlease.Lock  // the membership, while held
	wg       sync.WaitGroup // the shards' work
	movers   sync.WaitGroup // hand-offs under way
}

// Numbered returns the shard names "0" to "k-1", for a group of k shards.
func Numbered(k int) []string {
	out := make([]string, max(k, 0))
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// New returns a replica of the group named group (a prefix of blob names:
// the group keeps its blobs under "group/") with the given shards, in the
// container cc points at. Every replica must use the same shard names in
// the same order. It makes no request until started.
func New(cc *container.Client, group string, shards []string, opts *Options) (*Group, error) {
	if cc == nil {
		return nil, optionErr("container", "nil *container.Client")
	}
	if err := checkNames(group, shards); err != nil {
		return nil, err
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	// Every line the replica logs says which group and which replica.
	cfg.log = cfg.log.With(slog.String("group", group), slog.String("replica", cfg.identity))
	g := &Group{
		cc: cc, names: leaseNames{group: group}, shards: slices.Clone(shards), cfg: cfg,
		done: make(chan struct{}), owned: map[string]*owned{}, leases: map[string]*azlease.Lease{},
	}
	// Every blob name must be valid: check them once with the library's
	// own rules, through a Lease that makes no request.
	if _, err := azlease.NewLease(cc, g.names.member(cfg.identity), nil); err != nil {
		return nil, err
	}
	for _, s := range shards {
		if _, err := azlease.NewLease(cc, g.names.shard(s), nil); err != nil {
			return nil, optionErr("shards", "shard %q: %v", s, err)
		}
	}
	g.tm = newTelemetry(cfg.meters, group, g.ownedCount)
	return g, nil
}

func (g *Group) initErr() error {
	if g == nil || g.cc == nil {
		return fmt.Errorf("%w: a zero or nil shards.Group cannot be used; use shards.New", azlease.ErrNotInitialized)
	}
	return nil
}

// Identity returns this replica's name in the group.
func (g *Group) Identity() string {
	if g.initErr() != nil {
		return ""
	}
	return g.cfg.identity
}

// Start joins the group and runs work for each shard this replica comes to
// own, in goroutines the Group owns, until Stop or ctx ends. It returns at
// once.
func (g *Group) Start(ctx context.Context, work Work) error {
	if err := g.initErr(); err != nil {
		return err
	}
	if work == nil {
		return optionErr("work", "nil function")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return errors.New("azlease/shards: group already started")
	}
	g.started = true
	runCtx, stop := context.WithCancel(ctx)
	g.stop = stop
	go func() {
		defer close(g.done)
		defer g.tm.close()
		g.run(runCtx, work)
	}()
	return nil
}

// Stop leaves the group gracefully and waits for it: the membership is
// released (the others stop counting this replica), every shard's context
// ends, and each shard is released once its work has returned (or left to
// expire after DrainTimeout), so that the others take the shards at their
// next poll. It returns ctx's error if ctx ends first; the Group goes on
// stopping.
func (g *Group) Stop(ctx context.Context) error {
	if err := g.initErr(); err != nil {
		return err
	}
	g.mu.Lock()
	started := g.started
	if started {
		g.stop()
	}
	g.mu.Unlock()
	if !started {
		return errors.New("azlease/shards: group not started")
	}
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Run starts the group, and returns once ctx is done and the group has
// stopped (see Stop). It returns an error at once if storage refuses the
// replica's first requests (a wrong key, a missing role).
func (g *Group) Run(ctx context.Context, work Work) error {
	if err := g.Start(ctx, work); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-g.done:
	}
	_ = g.Stop(context.WithoutCancel(ctx))
	return g.Err()
}

// Done is closed when the group has stopped.
func (g *Group) Done() <-chan struct{} {
	if g.initErr() != nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return g.done
}

// Err returns why the group stopped on its own (storage refused its first
// requests), or nil.
func (g *Group) Err() error {
	if err := g.initErr(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Owned returns the names of the shards this replica owns now, in the
// group's order.
func (g *Group) Owned() []string {
	if g.initErr() != nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, s := range g.shards {
		if o := g.owned[s]; o != nil && o.lock.Valid() {
			out = append(out, s)
		}
	}
	return out
}

func (g *Group) ownedCount() int64 { return int64(len(g.Owned())) }

// Check reports the replica's health, for liveness probes: it fails when
// the group is not running, when no listing has succeeded for longer than
// the lease duration, or when its loop has made no progress for two lease
// durations.
func (g *Group) Check() error {
	if err := g.initErr(); err != nil {
		return err
	}
	select {
	case <-g.done:
		if err := g.Err(); err != nil {
			return fmt.Errorf("azlease/shards: stopped: %w", err)
		}
		return errors.New("azlease/shards: stopped")
	default:
	}
	g.mu.Lock()
	last, started := g.lastPoll, g.started
	g.mu.Unlock()
	if !started {
		return errors.New("azlease/shards: not started")
	}
	if since := time.Since(last); since > 2*g.cfg.duration {
		return fmt.Errorf("azlease/shards: no successful listing for %v", since.Round(time.Millisecond))
	}
	return nil
}

// leaseOptions configures the replica's leases. They are silent: the group
// logs what matters.
func (g *Group) leaseOptions() *azlease.LeaseOptions {
	return &azlease.LeaseOptions{Identity: g.cfg.identity, LeaseDuration: g.cfg.duration, MeterProvider: g.cfg.meters}
}

// lease returns the Lease of a shard, one per shard for the replica's
// life, so that a lease ID it proposed is never proposed again.
func (g *Group) lease(shard string) *azlease.Lease {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.leases[shard]
	if l == nil {
		l, _ = azlease.NewLease(g.cc, g.names.shard(shard), g.leaseOptions()) // names checked by New
		g.leases[shard] = l
	}
	return l
}

// run is the replica's loop: join, then poll, plan and act, until ctx ends;
// then leave.
func (g *Group) run(ctx context.Context, work Work) {
	start := time.Now()
	mlease, _ := azlease.NewLease(g.cc, g.names.member(g.cfg.identity), g.leaseOptions())
	published := "\x00" // what the membership's metadata says; nothing yet
	defer func() { g.leave(mlease) }()
	for ctx.Err() == nil {
		v, err := g.list(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if g.refused(err) {
				return
			}
		default:
			published = g.act(ctx, work, v, mlease, published, time.Since(start) >= g.cfg.settle)
		}
		wait := g.pollWait()
		if left := g.cfg.settle - time.Since(start); left > 0 && left < wait {
			wait = left // take free shards as soon as the settling time is over
		}
		if !sleepCtx(ctx, wait) {
			return
		}
	}
}

// list lists the group's blobs.
func (g *Group) list(ctx context.Context) (view, error) {
	listed, err := azlease.InspectPrefix(ctx, g.cc, g.names.prefix())
	if err != nil {
		g.cfg.log.Debug("azlease/shards: listing failed", slog.Any("error", err))
		g.tm.failure()
		return view{}, err
	}
	g.mu.Lock()
	g.reached, g.lastPoll = true, time.Now()
	g.mu.Unlock()
	return parseView(g.names, listed), nil
}

// refused reports whether err is storage refusing the replica before it
// ever reached it: a misconfiguration to report at once. It records it.
func (g *Group) refused(err error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.reached || !errors.Is(err, azlease.ErrPermanent) {
		return false
	}
	g.err = err
	g.cfg.log.Error("azlease/shards: storage refused the replica's first request; stopping", slog.Any("error", err))
	return true
}

// act is one poll's decisions on a view. It returns what the membership's
// metadata now says.
func (g *Group) act(ctx context.Context, work Work, v view, mlease *azlease.Lease, published string, settled bool) string {
	self := g.cfg.identity
	g.reap()
	in := v.input(g.shards, self, g.cfg.weight)
	p := plan(in)
	a := assess(in, p)
	g.tm.observe(a.misplaced)

	// Incoming: shards planned here that another member owns. Their lease
	// IDs go into the membership, for their owners to hand them to. Not
	// for a shard this replica still holds (a hand-off of it under way,
	// or a lost term whose work has not returned): it cannot be handed
	// here, and its Lease may be busy with that term (NextLeaseID would
	// wait for the hand-off or the renewal in progress).
	accept := map[string]string{}
	for _, s := range g.shards {
		if p[s] == self && in.owner[s] != "" && in.owner[s] != self && !g.isOwned(s) && len(accept) < maxAccept {
			accept[s] = g.lease(s).NextLeaseID()
		}
	}
	published = g.keepMembership(ctx, mlease, formatAccept(g.shards, accept), published)

	// Take what is planned here: free shards once settled, and shards
	// handed here at once.
	var take []string
	for _, s := range g.shards {
		info := v.shards[s]
		switch {
		case g.isOwned(s):
		case info.pendingTo == self:
			take = append(take, s)
		case p[s] == self && info.free() && settled:
			take = append(take, s)
		}
	}
	g.acquire(ctx, work, v, take)

	// Hand on what is planned elsewhere, to live members only.
	moves := 0
	for _, s := range g.shards {
		to := p[s]
		o := g.ownedState(s)
		if o == nil || o.moving() {
			continue
		}
		if v.shards[s].pendingTo != "" && v.shards[s].epoch == o.lock.Epoch() {
			// A hand-off marker of this term, although no hand-off is
			// under way: the write of a move that failed (its answer lost,
			// or applied late). Every replica counts the shard as the
			// marker's receiver's, which cannot take it: clear it first.
			g.startClear(ctx, o)
			continue
		}
		if to == "" || to == self {
			continue
		}
		if _, live := v.members[to]; !live {
			continue
		}
		if g.cfg.maxMoves > 0 && moves >= g.cfg.maxMoves {
			break
		}
		moves++
		g.startMove(ctx, work, s, o, to)
	}
	return published
}

// maxAccept bounds how many incoming shards a member announces at once: a
// blob's metadata holds 8 KiB. The rest follow in later polls.
const maxAccept = 100

// keepMembership holds the membership lease, and writes its metadata when
// what it says changed. It returns what the metadata says.
func (g *Group) keepMembership(ctx context.Context, mlease *azlease.Lease, accept, published string) string {
	g.mu.Lock()
	m := g.member
	g.mu.Unlock()
	if m == nil || !m.Valid() {
		if m != nil {
			_ = m.Unlock(ctx) // lost: say so, give back what may be held
			g.cfg.log.Warn("azlease/shards: lost the membership; joining again")
		}
		lock, err := mlease.Hold(ctx)
		if err != nil {
			if errors.Is(err, azlease.ErrLeaseHeld) {
				g.cfg.log.Warn("azlease/shards: the membership of this identity is held (a previous run that has not expired, or another replica with the same identity); waiting")
			}
			return "\x00"
		}
		g.mu.Lock()
		g.member = lock
		g.mu.Unlock()
		m, published = lock, "\x00"
		g.cfg.log.Info("azlease/shards: joined the group", slog.Int("weight", g.cfg.weight))
	}
	if accept == published {
		return published
	}
	if err := m.SetMetadata(ctx, g.membershipMetadata(m, accept)); err != nil {
		g.cfg.log.Debug("azlease/shards: could not write the membership", slog.Any("error", err))
		return "\x00"
	}
	return accept
}

// membershipMetadata is what a membership says: weight, when it joined,
// and the lease IDs it accepts shards under.
func (g *Group) membershipMetadata(m *azlease.Lock, accept string) map[string]string {
	return map[string]string{
		metaWeight: strconv.Itoa(g.cfg.weight),
		metaJoined: strconv.FormatInt(m.StartedAt().UnixMilli(), 10),
		metaIn:     accept,
	}
}

// withdrawTimeout bounds the withdrawal of a leaving replica's IDs.
const withdrawTimeout = 3 * time.Second

// leave withdraws the lease IDs the membership announced and releases it,
// then stops every shard. Withdrawing them first means that nothing is
// handed to this replica as it leaves, nor to a membership that an acquire
// of this replica's, applied late, leases again for a lease duration (it
// would count as a member, with no ID to hand it anything under).
func (g *Group) leave(mlease *azlease.Lease) {
	ctx := context.Background()
	g.mu.Lock()
	m := g.member
	g.member = nil
	g.mu.Unlock()
	if m != nil {
		if m.Valid() {
			// One attempt's time at most: storage that does not answer
			// must not hold up the stop, and the withdrawal only saves a
			// lease duration in the rare case above.
			wctx, cancel := context.WithTimeout(ctx, withdrawTimeout)
			_ = m.SetMetadata(wctx, g.membershipMetadata(m, ""))
			cancel()
		}
		_ = m.Unlock(ctx)
	}
	// Hand-offs under way complete (or keep their shard, which is then
	// stopped below with the others).
	g.mu.Lock()
	var all []*owned
	for _, o := range g.owned {
		if !o.moving() {
			all = append(all, o)
		}
	}
	g.mu.Unlock()
	for _, o := range all {
		o.end(errStopped)
	}
	g.movers.Wait()
	g.mu.Lock()
	all = all[:0]
	for _, o := range g.owned {
		all = append(all, o)
	}
	g.mu.Unlock()
	for _, o := range all {
		o.end(errStopped)
	}
	var wg sync.WaitGroup
	for _, o := range all {
		wg.Go(func() { g.finish(ctx, o) })
	}
	wg.Wait()
	g.wg.Wait()
	g.cfg.log.Info("azlease/shards: left the group")
}

func (g *Group) pollWait() time.Duration {
	return time.Duration(float64(g.cfg.poll) * (1 + g.cfg.jitter*(2*mrand.Float64()-1)))
}

// sleepCtx waits d or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
