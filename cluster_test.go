package azlease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// believed is one interval during which an elector believed it led: from the
// start of its leader task to the earlier of the term's end and its final
// validity deadline (IsLeader is false after either).
type believed struct {
	node    string
	epoch   uint64
	leaseID string
	start   time.Time
	end     time.Time
	cause   error
}

// contender is anything that contends for leadership in a cluster: an
// azlease Elector, or the naive loop the simulation compares it with.
type contender interface {
	IsLeader() bool
	Stop(ctx context.Context) error
}

// cluster is a set of electors on one emulator, with per-node network
// partitions and a record of what each believed.
type cluster struct {
	t     *testing.T
	emu   *emu
	blob  string
	opts  azlease.ElectorOptions
	mu    sync.Mutex
	cut   map[string]azleasetest.Action // partitioned nodes and how their requests die
	extra azleasetest.FaultFunc         // faults for everyone else
	nodes map[string]contender
	terms []believed
	// work, when set before the nodes start, makes each leader write, set
	// metadata and read through its term while it leads, and counts it.
	work *workCounter
}

func newCluster(t *testing.T, opts azlease.ElectorOptions) *cluster {
	c := &cluster{t: t, emu: newEmu(t), blob: "leader", opts: opts, cut: map[string]azleasetest.Action{}, nodes: map[string]contender{}}
	c.emu.SetFaults(c.faults)
	return c
}

func (c *cluster) faults(r azleasetest.Request) azleasetest.Fault {
	c.mu.Lock()
	a, cut := c.cut[r.Client]
	extra := c.extra
	c.mu.Unlock()
	if cut {
		return azleasetest.Fault{Action: a}
	}
	if extra != nil {
		return extra(r)
	}
	return azleasetest.Fault{}
}

// setFaults installs faults for every node that is not partitioned.
func (c *cluster) setFaults(f azleasetest.FaultFunc) {
	c.mu.Lock()
	c.extra = f
	c.mu.Unlock()
}

// partition cuts a node off: its requests hang (the default) or die.
func (c *cluster) partition(name string, a azleasetest.Action) {
	c.mu.Lock()
	c.cut[name] = a
	c.mu.Unlock()
}

// cutOffFor cuts name off for d, then heals it in a goroutine wg waits
// for. Its requests hang, or are dropped when d is even: the seed picks.
func (c *cluster) cutOffFor(wg *sync.WaitGroup, name string, d time.Duration) {
	how := azleasetest.Hang
	if d%2 == 0 {
		how = azleasetest.Drop
	}
	c.partition(name, how)
	wg.Go(func() {
		time.Sleep(d)
		c.heal(name)
	})
}

func (c *cluster) heal(name string) {
	c.mu.Lock()
	delete(c.cut, name)
	c.mu.Unlock()
}

// task is the leader task of node name: it records the believed interval.
func (c *cluster) task(name string) azlease.Task {
	return func(ctx context.Context, term *azlease.Term) error {
		b := believed{node: name, epoch: term.Epoch(), leaseID: term.Token().LeaseID, start: time.Now()}
		if c.work != nil {
			c.work.run(ctx, term, name)
		}
		<-ctx.Done()
		b.end = time.Now()
		if vu := term.ValidUntil(); vu.Before(b.end) {
			b.end = vu
		}
		b.cause = context.Cause(ctx)
		c.record(b)
		return nil
	}
}

func (c *cluster) record(b believed) {
	c.mu.Lock()
	c.terms = append(c.terms, b)
	c.mu.Unlock()
}

func (c *cluster) elector(name string) *azlease.Elector {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, _ := c.nodes[name].(*azlease.Elector)
	return e
}

// start creates and starts an elector called name.
func (c *cluster) start(name string, opts *azlease.ElectorOptions) *azlease.Elector {
	c.t.Helper()
	if opts == nil {
		o := c.opts
		opts = &o
	}
	if opts.Identity == "" {
		opts.Identity = name
	}
	e, err := azlease.NewElector(c.emu.client(name), c.blob, opts)
	require.NoError(c.t, err)
	require.NoError(c.t, e.Start(context.Background(), c.task(name)))
	c.mu.Lock()
	c.nodes[name] = e
	c.mu.Unlock()
	return e
}

// leaders returns the nodes that believe they lead now.
func (c *cluster) leaders() []string {
	c.mu.Lock()
	nodes := make(map[string]contender, len(c.nodes))
	for name, n := range c.nodes {
		nodes[name] = n
	}
	c.mu.Unlock() // IsLeader may take locks that are held while recording
	var out []string
	for name, n := range nodes {
		if n.IsLeader() {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// waitLeader waits (in fake time) until some node leads, and returns it.
func (c *cluster) waitLeader(limit time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if l := c.leaders(); len(l) == 1 {
			return l[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader within %v", limit)
	return ""
}

// stopAll stops every elector that is still running, healing partitions
// first so that their goroutines can finish.
func (c *cluster) stopAll() {
	c.mu.Lock()
	c.cut = map[string]azleasetest.Action{}
	c.extra = nil
	nodes := make([]contender, 0, len(c.nodes))
	for _, e := range c.nodes {
		nodes = append(nodes, e)
	}
	c.mu.Unlock()
	// Followers first, then whoever leads: a leader stopped while others
	// still run hands leadership over to one of them (planned succession),
	// which would begin one more term.
	sort.SliceStable(nodes, func(i, j int) bool { return !nodes[i].IsLeader() && nodes[j].IsLeader() })
	for _, e := range nodes {
		require.NoError(c.t, e.Stop(context.Background()))
	}
}

// sample records, every interval until stop, whether more than one node
// believes it leads; run it in a goroutine the test joins.
func (c *cluster) sample(interval time.Duration, stop <-chan struct{}) (overlaps int) {
	for {
		select {
		case <-stop:
			return overlaps
		case <-time.After(interval):
		}
		if len(c.leaders()) > 1 {
			overlaps++
		}
	}
}

// checkSafety asserts the safety properties over everything recorded, with
// azleasetest.CheckIntervals: every believed interval lies inside a lease the
// server granted to that term's lease ID, no two believed intervals overlap,
// and epochs grow from term to term.
func (c *cluster) checkSafety() []believed {
	c.t.Helper()
	grants := c.emu.Grants(testContainer, c.blob)
	c.mu.Lock()
	terms := append([]believed(nil), c.terms...)
	c.mu.Unlock()
	require.NoError(c.t, azleasetest.CheckIntervals(grants, intervalsOf(terms)))
	sort.Slice(terms, func(i, j int) bool { return terms[i].start.Before(terms[j].start) })
	for i := 1; i < len(terms); i++ {
		require.Greater(c.t, terms[i].epoch, terms[i-1].epoch, "epochs grow from term to term")
	}
	return terms
}

// violations counts, without failing, what azleasetest.CheckIntervals finds
// in everything recorded: the believed intervals outside every grant of their
// lease ID (or ending before they start), the overlapping pairs, and the
// terms whose epoch did not grow over an earlier one's. err, when not nil,
// lists them and the grants.
func (c *cluster) violations() (outside, overlaps, epochs int, err error) {
	grants := c.emu.Grants(testContainer, c.blob)
	c.mu.Lock()
	terms := append([]believed(nil), c.terms...)
	c.mu.Unlock()
	err = azleasetest.CheckIntervals(grants, intervalsOf(terms))
	if err == nil {
		return 0, 0, 0, nil
	}
	var ee *azleasetest.ExclusionError
	if !errors.As(err, &ee) {
		c.t.Errorf("the interval checker failed: %v", err)
		return 0, 0, 0, err
	}
	outside = ee.Count(azleasetest.OutsideGrant) + ee.Count(azleasetest.EndsBeforeStart)
	return outside, ee.Count(azleasetest.Overlap), ee.Count(azleasetest.EpochBackwards), err
}

// intervalsOf turns believed terms into intervals for
// azleasetest.CheckIntervals. Each interval gets a holder name of its own
// (the node's name and the term's place in the record): the checker lets one
// holder's intervals overlap, as work done concurrently under one lease, but
// here no two terms may overlap, not even two of one node's, and a later
// term's epoch must be larger. Every term has a lease ID, so each must lie
// inside a grant of that lease ID, whoever the server says held it.
func intervalsOf(terms []believed) []azleasetest.Interval {
	ivs := make([]azleasetest.Interval, len(terms))
	for i, b := range terms {
		ivs[i] = azleasetest.Interval{Holder: fmt.Sprintf("%s#%d", b.node, i), LeaseID: b.leaseID, Epoch: b.epoch, Start: b.start, End: b.end}
	}
	return ivs
}

func describeGrants(gs []azleasetest.Grant) string {
	s := ""
	for _, g := range gs {
		s += fmt.Sprintf("  %s [%v, %v]\n", g.LeaseID, g.Start, g.End)
	}
	return s
}

// workStats counts the fenced reads and writes leaders made through their
// terms (Term.Write, Term.SetMetadata, Term.Read).
type workStats struct {
	writes, metadata, reads int // that succeeded
	failed                  int // that failed: the term ended meanwhile
	// stale counts reads that returned a newer term's content, or content
	// older than this term's own last successful write.
	stale int
}

func (w workStats) String() string {
	return fmt.Sprintf("%d writes, %d metadata writes, %d reads, %d failed, %d stale reads", w.writes, w.metadata, w.reads, w.failed, w.stale)
}

func (w *workStats) add(o workStats) {
	w.writes += o.writes
	w.metadata += o.metadata
	w.reads += o.reads
	w.failed += o.failed
	w.stale += o.stale
}

// workCounter is workStats shared by a cluster's leaders.
type workCounter struct {
	mu sync.Mutex
	s  workStats
}

func (w *workCounter) snapshot() workStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.s
}

// run does a leader's work until ctx ends: every 0.5–3 s it checks ctx
// right before acting, then writes "epoch seq" as the blob's content, sets
// metadata, or reads the content back and checks that it is this term's
// latest write (or, before its first, no newer term's).
func (w *workCounter) run(ctx context.Context, term *azlease.Term, name string) {
	rng := rand.New(rand.NewPCG(term.Epoch(), 7))
	epoch := term.Epoch()
	lastSeq := -1 // this term's last successful write
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(500+rng.IntN(2500)) * time.Millisecond):
		}
		if ctx.Err() != nil {
			return
		}
		var err error
		stale := false
		switch seq % 3 {
		case 0:
			if err = term.Write(ctx, []byte(fmt.Sprintf("%d %d", epoch, seq))); err == nil {
				lastSeq = seq
			}
		case 1:
			err = term.SetMetadata(ctx, map[string]string{"writer": name, "seq": strconv.Itoa(seq)})
		case 2:
			var content []byte
			if content, err = term.Read(ctx); err == nil {
				stale = !freshContent(content, epoch, lastSeq)
			}
		}
		w.mu.Lock()
		switch {
		case err != nil:
			w.s.failed++
		case seq%3 == 0:
			w.s.writes++
		case seq%3 == 1:
			w.s.metadata++
		default:
			w.s.reads++
		}
		if stale {
			w.s.stale++
		}
		w.mu.Unlock()
	}
}

// freshContent reports whether content read by the term epoch is what it
// may see: its own write seq lastSeq or later, or, before its first
// successful write, nothing written by a newer term.
func freshContent(content []byte, epoch uint64, lastSeq int) bool {
	var e uint64
	var seq int
	if len(content) == 0 {
		return lastSeq < 0
	}
	if _, err := fmt.Sscanf(string(content), "%d %d", &e, &seq); err != nil {
		return false
	}
	if lastSeq < 0 {
		return e <= epoch // a write that failed may have landed
	}
	return e == epoch && seq >= lastSeq
}

// operatorBreak breaks the cluster's lease with the given break period, as an
// operator would, in a goroutine that pending waits for. It uses a Lease of
// its own for each break: two breaks on one Lease would queue on its lock,
// which synctest does not see as durably blocked, and fake time would stop.
// The outcome may be unknown; the checker sees what the server did.
func (c *cluster) operatorBreak(leaseDuration, period time.Duration, pending *sync.WaitGroup) {
	operator, err := azlease.NewLease(c.emu.client("operator"), c.blob, &azlease.LeaseOptions{LeaseDuration: leaseDuration})
	require.NoError(c.t, err)
	pending.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = operator.Break(ctx, period)
	})
}
