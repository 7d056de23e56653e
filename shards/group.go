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

// Shard is a shard owned by this replica, for one term of its lease: Work
// receives one per term, valid while its context is.
//
// Guaranteed: Term's epoch is larger than that of every earlier owner of
// the same shard, and Term.Write fails once a newer term exists, so state
// written through it is never overwritten by a former owner. The load
// reported with SetLoad goes with the shard when it moves.
//
// Cost: SetLoad and Load are local (no request); the smoothed loads reach
// storage with the replica's membership, at most every 10 s, or at once
// when this replica's total moves by 3 % or takes a settled group out of
// the band.
//
// Watch for: a Shard kept after its Work returned speaks for an ended term
// (Term.Valid is false). The zero value and nil are safe: SetLoad does
// nothing and Load reports none.
type Shard struct {
	// Name is the shard's name, as given to New.
	Name string
	// Term is the term of the shard's lease: its fencing token (Epoch),
	// and the state fenced by Azure on the shard's blob (Term.Read,
	// Term.Write): a checkpoint written through the term can never be
	// overwritten by a former owner. Epochs count per shard.
	Term *azlease.Term

	meter *loadMeter
}

// SetLoad reports the shard's load now: a rate in the unit the work
// chooses (requests/s, messages/s, CPU ms/s), the same for every shard of
// the group. The replica smooths what is reported (a moving average with a
// half-life of LoadHalfLife, the value held between reports, the first
// value taken as it is), publishes it for the others, and balances load
// per capacity (Options.Weight) rather than shard counts once any shard of
// the group reports one; a shard that never reports counts as the mean of
// those that do. Zero is an idle shard's load; a negative, NaN or infinite
// value is ignored. When the shard moves, its smoothed load goes with it:
// the receiver starts from it. Safe for concurrent use; a no-op on a Shard
// the group did not give.
func (s *Shard) SetLoad(load float64) {
	if s == nil {
		return
	}
	s.meter.set(load, time.Now())
}

// Load returns the shard's smoothed load now, and false when none is known
// yet (nothing reported in this term, and nothing carried from the
// previous owner).
func (s *Shard) Load() (float64, bool) {
	if s == nil {
		return 0, false
	}
	return s.meter.value(time.Now())
}

// Group is one replica of a shard group: the shards of a named group are
// spread over every replica running a Group with the same name, by count or
// by load per capacity, and Work runs once per shard this replica owns.
//
// Guaranteed: a shard is owned by at most one replica at a time (Azure
// enforces its lease); its Work's context ends by the lease's validity
// deadline; it moves only by its owner's Change Lease after Work returned,
// never free in between; its epoch grows from owner to owner.
//
// Cost: per replica, a request every poll, a listing when the group changed
// and every ListInterval, and a renewal of its membership and each owned
// shard every third of LeaseDuration (about $28 a month for 256 shards on
// 8 replicas with the defaults; the package documentation has the terms).
//
// Watch for: Work that ignores its context (the shard is then left to
// expire after DrainTimeout, not handed on), identities reused by two live
// replicas, and static lists given in different orders. The zero value and
// a nil *Group return an error wrapping [azlease.ErrNotInitialized].
type Group struct {
	cc     *container.Client
	names  leaseNames
	shards []string
	sum    string // the shard list's digest, which the membership publishes
	cfg    config
	tm     *telemetry

	mu        sync.Mutex
	started   bool
	startedAt time.Time
	stop      context.CancelFunc
	done      chan struct{}
	err       error
	owned     map[string]*owned // shards this replica holds
	acquiring map[string]bool   // shards whose acquisition is under way
	leases    map[string]*azlease.Lease
	listedAt  time.Time // the last successful listing; zero before the first
	listErr   error     // why the listings fail, while they do
	listing   episode   // the listings' failures, for the logs
	refusals  episode   // shard acquisitions storage refuses for good, for the logs
	member    *azlease.Lock
	memberOp  bool            // a join or a write of the membership is under way
	published *announcement   // what the membership's metadata says (nil: not known)
	idBudget  int             // bytes the announced lease IDs may take in the membership's metadata
	hotLogged map[string]bool // hot shards this replica logged
	warm      map[string]bool // shards handed here: warmed up (true) or warming
	watching  map[string]bool // shards handed here that a watch looks at

	// What the poll loop knows of the shard set (the loop's own: no lock).
	reg          registry            // the registry as last read
	regVersion   uint64              // the version the listing said when it was read
	regRead      bool                // reg was read at least once
	known        map[string][]string // static lists by digest: this replica's, and those read
	cappedLogged bool
	set          shardSet  // the set at the last poll (under mu: Owned reads it)
	unsettled    bool      // the last poll saw the group unsettled: list at the next one
	listedBeacon string    // the registry's version and touch as the last listing said
	lastList     time.Time // when the last listing succeeded
	probe        prober    // the zones this replica probes (probe.go)
	// The last successful listing's view and set, and whether its
	// decision was calm (no shard misplaced, no hand-on this round): what
	// loadsCross decides on at the polls that do not list. crossing is
	// true from a poll that lists because loadsCross said so until that
	// listing's act, whose keepMembership then writes the loads at once.
	// Only the run loop touches these four: no lock.
	lastView view
	lastSet  shardSet
	lastCalm bool
	crossing bool

	wg     sync.WaitGroup // the shards' work
	movers sync.WaitGroup // hand-offs under way
	// bg holds what the poll loop starts and does not wait for, so that
	// storage that answers slowly or not at all never holds up its
	// listings: acquisitions, the membership's join and writes, and the
	// release of lost shards. leave waits for them first.
	bg    sync.WaitGroup
	slots chan struct{} // bounds bg's releases and clean-ups
	// The acquisitions' queue (see startTake).
	queue  []shardInfo
	queued map[string]bool
	takers int
	pace   pacer
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
// the group keeps its blobs under "group/") with the given static list of
// shards, in the container cc points at. It makes no request until
// started.
//
// The group runs the shards of its replicas' static lists, plus those
// AddShards adds, minus those RemoveShards removes; a replica owns only
// shards of its own list or added ones, so replicas started with different
// lists (a rolling deploy that changes the list) run the union, each shard
// owned by a replica whose list has it: a shard only the old replicas
// list stops when the last of them leaves, one only the new list has
// starts with the first new replica, and no shard flaps or is owned twice.
// Replicas of one list must give it in the same order. shards may be empty
// (nil): the replica then runs only shards added at run time, or any shard
// of the others' lists.
func New(cc *container.Client, group string, shards []string, opts *Options) (*Group, error) {
	if cc == nil {
		return nil, optionErr("container", "nil *container.Client")
	}
	if err := checkGroup(group); err != nil {
		return nil, err
	}
	if len(shards) > 0 {
		if err := checkNames(group, shards); err != nil {
			return nil, err
		}
	}
	cfg, err := opts.config()
	if err != nil {
		return nil, err
	}
	// Every line the replica logs says which group and which replica.
	cfg.log = cfg.log.With(slog.String("group", group), slog.String("replica", cfg.identity))
	g := &Group{
		cc: cc, names: leaseNames{group: group}, shards: slices.Clone(shards), sum: listSum(shards), cfg: cfg,
		done: make(chan struct{}), owned: map[string]*owned{}, acquiring: map[string]bool{},
		leases: map[string]*azlease.Lease{}, hotLogged: map[string]bool{}, idBudget: initialIDBudget,
		known: map[string][]string{}, warm: map[string]bool{}, watching: map[string]bool{},
		slots: make(chan struct{}, acquireConcurrency), queued: map[string]bool{},
	}
	if len(shards) > 0 {
		g.known[g.sum] = g.shards
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
	g.started, g.startedAt = true, time.Now()
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
// stopped (see Stop). It returns an error wrapping [azlease.ErrPermanent]
// at once (after leaving the group as Stop does) if storage refuses the
// replica for good: its listing before any succeeded (a wrong key, a
// firewall), or its membership's lease or metadata at any time (a role
// that may list and read blobs but not lease or write them, such as
// Storage Blob Data Reader, or a SAS without write permission): a replica
// that cannot hold its membership can take no part in the group.
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

// Err returns why the group stopped on its own (storage refused the
// replica: see Run), or nil.
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
	for _, s := range g.set.names {
		if o := g.owned[s]; o != nil && o.lock.Valid() {
			out = append(out, s)
		}
	}
	for s, o := range g.owned { // being removed
		if !g.set.has(s) && o.lock.Valid() {
			out = append(out, s)
		}
	}
	return out
}

// Shards returns the group's shards as this replica's last listing showed
// them: its static list, plus those added at run time and those of other
// replicas' lists, minus those removed (see New), in the group's order.
func (g *Group) Shards() []string {
	if g.initErr() != nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.set.names)
}

func (g *Group) ownedCount() int64 { return int64(len(g.Owned())) }

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
// then leave. Nothing it does waits for storage but the listing (bounded
// by the listing's own retry budget): what takes longer runs in bg.
func (g *Group) run(ctx context.Context, work Work) {
	start := time.Now()
	mlease, _ := azlease.NewLease(g.cc, g.names.member(g.cfg.identity), g.leaseOptions())
	defer func() {
		g.bg.Wait() // their context has ended: they return soon
		g.leave()
	}()
	for ctx.Err() == nil {
		// A listing when one is due (see listDue) or this replica's loads
		// moved enough to publish at once (see loadsJumped); otherwise a
		// look at the registry, the group's beacon, and a listing only if
		// it changed.
		// In a group of zones, a poll that does not list probes the
		// zones this replica watches (see probe.go): a member found gone
		// is told to the group, and this replica lists at once.
		// A poll that would not list also lists when this replica's
		// loads, changed too little to be written at once, take its
		// last listing's calm decision out of the band (see loadsCross).
		if g.listDue(start) || g.loadsJumped() || g.loadsCross() || g.headBeacon(ctx, g.listedBeacon) {
			if !g.listAndAct(ctx, work, mlease, start) {
				return
			}
		} else if gone := g.probeZones(ctx); len(gone) > 0 {
			g.tellGone(ctx, gone, "probe")
			if !g.listAndAct(ctx, work, mlease, start) {
				return
			}
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

// listAndAct lists the group and acts on the listing; false when the
// replica must stop (ctx ended, or storage refuses it for good).
func (g *Group) listAndAct(ctx context.Context, work Work, mlease *azlease.Lease, start time.Time) bool {
	v, err := g.list(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return false
	case err != nil:
		if g.refused(err) {
			return false
		}
		g.listFailed(err)
		g.unsettled = true
	default:
		g.lastList, g.listedBeacon = time.Now(), v.beacon
		if gone := g.watchZones(v.members); len(gone) > 0 {
			g.tellGone(ctx, gone, "listing")
		}
		set := g.refreshSet(ctx, v)
		g.mu.Lock()
		g.set = set
		g.mu.Unlock()
		g.act(ctx, work, v, set, mlease, time.Since(start) >= g.cfg.settle)
		g.crossing = false
	}
	return true
}

// listDue reports whether the replica lists the group at this poll rather
// than look at the beacon: at its first polls (until settled), while the
// last poll saw the group unsettled (shards free or misplaced, hand-offs
// or acquisitions under way), and at least every ListInterval.
func (g *Group) listDue(start time.Time) bool {
	return g.lastList.IsZero() || g.unsettled || time.Since(start) < g.cfg.settle+g.cfg.poll ||
		time.Since(g.lastList) >= g.cfg.list-g.cfg.poll/2
}

// list lists the group's blobs.
func (g *Group) list(ctx context.Context) (view, error) {
	listed, err := azlease.InspectPrefix(ctx, g.cc, g.names.prefix())
	if err != nil {
		if ctx.Err() == nil {
			g.tm.failure()
			g.mu.Lock()
			g.listErr = err
			g.mu.Unlock()
			g.cfg.log.Debug("azlease/shards: listing failed", slog.Any("error", err))
		}
		return view{}, err
	}
	g.mu.Lock()
	g.listedAt, g.listErr = time.Now(), nil
	ended := g.listing.succeeded()
	g.mu.Unlock()
	ended.logEnd(g.cfg.log, "listing the group")
	return parseView(g.names, listed), nil
}

// listFailed logs a failed listing once per episode.
func (g *Group) listFailed(err error) {
	g.mu.Lock()
	report := g.listing.failed(err)
	g.mu.Unlock()
	report.log(g.cfg.log, "listing the group", err)
}

// refused reports whether err is storage refusing the replica's listing
// before any listing succeeded: a misconfiguration to report at once. It
// stops the group with it.
func (g *Group) refused(err error) bool {
	g.mu.Lock()
	first := g.listedAt.IsZero()
	g.mu.Unlock()
	if !first || !errors.Is(err, azlease.ErrPermanent) {
		return false
	}
	g.fail(fmt.Errorf("azlease/shards: storage refused to list the group %q: %w", g.names.prefix(), err))
	return true
}

// fail stops the group on its own with err, which it logs at Error: Run
// and Err return it, Check reports it.
func (g *Group) fail(err error) {
	g.mu.Lock()
	first := g.err == nil
	if first {
		g.err = err
	}
	stop := g.stop
	g.mu.Unlock()
	if first {
		g.cfg.log.Error("azlease/shards: storage refuses this replica; leaving the group", slog.Any("error", err))
	}
	stop()
}

// act is one poll's decisions on a view. It waits for no request: the
// membership's writes and the acquisitions run in bg, and the moves in
// movers.
func (g *Group) act(ctx context.Context, work Work, v view, set shardSet, mlease *azlease.Lease, settled bool) {
	self := g.cfg.identity
	g.reap()
	now := time.Now()
	d := v.decide(set, self, g.cfg.weight, g.cfg.zone, now, g.cfg.cooldown)
	p := d.owner
	g.observe(v, d)

	// Incoming: shards this round hands here. Their lease IDs go into the
	// membership, for their owners to hand them to. Not for a shard this
	// replica still holds (a hand-off of it under way, or a lost term
	// whose work has not returned) or is acquiring: it cannot be handed
	// here, and its Lease may be busy with that term or that acquisition
	// (NextLeaseID would wait for it).
	var incoming []string
	for _, s := range set.names {
		if mv, ok := d.round[s]; ok && mv.to == self && !g.busy(s) && g.warmed(ctx, s) {
			incoming = append(incoming, s)
			g.watchIncoming(ctx, work, s)
		}
	}
	// Loads this replica is about to publish that unsettle a settled
	// group touch the registry, so that every replica lists them at its
	// next poll (see keepMembership).
	calm := d.misplaced == 0 && len(d.round) == 0
	g.keepMembership(ctx, mlease, incoming, func(next *announcement) bool {
		if !calm {
			return false // the group lists at every poll already
		}
		w, ok := v.withLoads(self, next)
		if !ok {
			return false
		}
		d := w.decide(set, self, g.cfg.weight, g.cfg.zone, now, g.cfg.cooldown)
		return d.misplaced > 0 || len(d.round) > 0
	})

	// Take what is planned here: free shards once settled, and shards
	// handed here at once (those first).
	want := map[string]bool{}
	for _, handed := range []bool{true, false} {
		for _, s := range set.names {
			info := v.shards[s]
			info.name = s // also for a shard whose blob does not exist yet
			switch {
			case g.busy(s):
				continue
			case handed && info.pendingTo == self:
			case !handed && info.pendingTo != self && p[s] == self && info.free() && settled:
			default:
				continue
			}
			want[s] = true
			g.startTake(ctx, work, info)
		}
	}
	g.keepQueued(want)

	// Hand on what this round moves elsewhere, to live members only; stop
	// the shards the set no longer has.
	moves := 0
	for _, o := range g.ownedShards() {
		s := o.name
		if o.moving() {
			continue
		}
		if !set.has(s) {
			g.startRetire(ctx, o, set.removed[s])
			continue
		}
		if v.shards[s].pendingTo != "" && v.shards[s].epoch == o.lock.Epoch() {
			// A hand-off marker of this term, although no hand-off is
			// under way: the write of a move that failed (its answer lost,
			// or applied late). Every replica counts the shard as the
			// marker's receiver's, which cannot take it: clear it first.
			g.startClear(ctx, o, nil)
			continue
		}
		if v.shards[s].gone && o.lock.Valid() {
			// Added again after it was removed: the term says so.
			g.startClear(ctx, o, map[string]string{metaWhy: whyAdded, metaEpoch: strconv.FormatUint(o.lock.Epoch(), 10)})
			continue
		}
		mv, ok := d.round[s]
		if !ok || mv.from != self || mv.to == self {
			continue
		}
		if _, live := v.members[mv.to]; !live {
			continue
		}
		if g.cfg.maxMoves > 0 && moves >= g.cfg.maxMoves {
			continue
		}
		moves++
		g.startMove(ctx, work, s, o, mv)
	}

	// Removed shards whose blob was left uncleared (their owner stopped
	// or crashed first): the first live member by name clears them.
	if first := firstMember(v, self); first == self {
		for s := range set.removed {
			if info, ok := v.shards[s]; ok && !info.leased && !info.gone && !g.busy(s) {
				if !g.startCleanup(ctx, s) {
					break
				}
			}
		}
	}
	handedHere := false
	for _, info := range v.shards {
		handedHere = handedHere || info.pendingTo == self
	}
	g.unsettled = d.misplaced > 0 || len(d.round) > 0 || len(incoming) > 0 || handedHere || g.inFlight()
	g.lastView, g.lastSet, g.lastCalm = v, set, calm
}

// firstMember is the first live member by name, self included.
func firstMember(v view, self string) string {
	first := self
	for m := range v.members {
		if first == "" || m < first {
			first = m
		}
	}
	return first
}

// ownedShards returns the shards this replica holds, by name.
func (g *Group) ownedShards() []*owned {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]*owned, 0, len(g.owned))
	for _, o := range g.owned {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b *owned) int { return naturalCompare(a.name, b.name) })
	return out
}

// inFlight reports whether acquisitions or hand-offs of this replica's
// are under way.
func (g *Group) inFlight() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.acquiring) > 0 || len(g.queue) > 0 {
		return true
	}
	for _, o := range g.owned {
		if o.moving() {
			return true
		}
	}
	return false
}

// observe records a poll's decision in the metrics, and logs at Info once
// each hot shard this replica owns: a shard whose load alone exceeds a
// replica's share, which no placement can balance.
func (g *Group) observe(v view, d decision) {
	weights := map[string]int{g.cfg.identity: g.cfg.weight}
	for _, m := range v.members {
		weights[m.name] = m.weight
	}
	hosts := map[string]bool{}
	for _, h := range d.hot {
		hosts[d.owner[h]] = true
	}
	g.tm.observe(d.misplaced, d.members[g.cfg.identity], g.cfg.weight, d.imbalance(weights, hosts), len(d.hot))
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, h := range d.hot {
		if o := g.owned[h]; o != nil && !g.hotLogged[h] {
			g.hotLogged[h] = true
			g.cfg.log.Info("azlease/shards: shard "+h+" alone exceeds a replica's share: split it",
				slog.String("shard", h), slog.Float64("load", d.load[h]), slog.Float64("share", d.level*float64(g.cfg.weight)))
		}
	}
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
