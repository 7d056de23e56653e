package ehbalance

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/azlease/azlease/azleasetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// beliefs records what each processor believes it owns.
type beliefs struct {
	mu  sync.Mutex
	now map[string]map[string]bool // processor → partitions
	log []string                   // "+p0 3" / "-p0 3", in order
}

func newBeliefs() *beliefs { return &beliefs{now: map[string]map[string]bool{}} }

func (b *beliefs) options(owner string, strategy Strategy, seed uint64) *Options {
	return &Options{
		OwnerID: owner, Strategy: strategy, Seed: seed,
		OnOwn: func(p string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.now[owner] == nil {
				b.now[owner] = map[string]bool{}
			}
			b.now[owner][p] = true
			b.log = append(b.log, "+"+owner+" "+p)
		},
		OnDisown: func(p string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			delete(b.now[owner], p)
			b.log = append(b.log, "-"+owner+" "+p)
		},
	}
}

func (b *beliefs) count(owner string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.now[owner])
}

func start(t *testing.T, srv *azleasetest.Server, k int, opts *Options) *Processor {
	t.Helper()
	p, err := New(srv.Client(opts.OwnerID), "eh/ownership/", parts(k), opts)
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	return p
}

// TestOneProcessorBalanced: alone, the balanced strategy claims one
// partition per cycle (the first at once), renewing the others.
func TestOneProcessorBalanced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		b := newBeliefs()
		p := start(t, srv, 4, b.options("a", Balanced, 1))
		synctest.Wait()
		assert.Equal(t, 1, b.count("a"), "the first cycle claims one")
		time.Sleep(8*time.Second - time.Millisecond) // before the earliest second cycle
		assert.Equal(t, 1, b.count("a"))
		time.Sleep(3 * 13 * time.Second) // three more cycles at most
		assert.Equal(t, 4, b.count("a"))
		assert.Equal(t, []string{"0", "1", "2", "3"}, p.Owned())
		p.Stop()
		assert.Zero(t, b.count("a"))
		assert.Empty(t, p.Owned())
	})
}

// TestGreedyTwoAndRelinquish: two greedy processors share 8 partitions 4/4;
// one stops cleanly and relinquishes, and the other takes the 4 at its
// next cycle rather than after the expiration.
func TestGreedyTwoAndRelinquish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		b := newBeliefs()
		pa := start(t, srv, 8, b.options("a", Greedy, 1))
		synctest.Wait()
		assert.Equal(t, 8, b.count("a"), "alone, greedy claims everything in one cycle")
		pb := start(t, srv, 8, b.options("b", Greedy, 2))
		time.Sleep(30 * time.Second)
		assert.Equal(t, 4, b.count("a"))
		assert.Equal(t, 4, b.count("b"))

		pa.Stop()
		time.Sleep(13 * time.Second) // one cycle of b at most
		assert.Equal(t, 8, b.count("b"), "relinquished records are free at once")
		pb.Stop()
	})
}

// TestKilledRecordsExpire: a killed processor's records stay its own until
// the expiration has passed by the others' clocks.
func TestKilledRecordsExpire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		b := newBeliefs()
		pa := start(t, srv, 4, b.options("a", Greedy, 1))
		synctest.Wait()
		pb := start(t, srv, 4, b.options("b", Greedy, 2))
		time.Sleep(30 * time.Second)
		require.Equal(t, 2, b.count("b"))
		pa.Kill()
		assert.Zero(t, b.count("a"))
		// a wrote its records at most 13 s before the kill: they expire
		// 47 to 60 s after it, and b sees that at its next cycle.
		time.Sleep(46 * time.Second)
		assert.Equal(t, 2, b.count("b"), "a's records have not expired yet")
		time.Sleep(14*time.Second + 13*time.Second)
		assert.Equal(t, 4, b.count("b"))
		pb.Stop()
	})
}

// TestStolenUntilNextCycle: a partition stolen from a processor stays
// believed by it until its next cycle.
func TestStolenUntilNextCycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		b := newBeliefs()
		// a takes both partitions alone.
		pa := start(t, srv, 2, b.options("a", Greedy, 1))
		synctest.Wait()
		require.Equal(t, 2, b.count("a"))
		// b joins: 2 owners, max 1; a holds 2 > 1: b steals one at once.
		pb := start(t, srv, 2, b.options("b", Greedy, 2))
		synctest.Wait()
		assert.Equal(t, 1, b.count("b"))
		assert.Equal(t, 2, b.count("a"), "a still believes it owns both until its next cycle")
		time.Sleep(13 * time.Second)
		assert.Equal(t, 1, b.count("a"))
		assert.Equal(t, 1, b.count("b"))
		pa.Stop()
		pb.Stop()
	})
}

// TestRaceForNeverOwned: processors that start at the same instant all
// claim the same never-owned partitions; the uploads that lose are refused
// (409 BlobAlreadyExists, or 412 for a record written in between), and a
// processor believes it owns only what it wrote: every partition is
// believed by the owner its record names. (A partition can still be
// believed by two at once: a processor that lists after another's upload
// may steal from it at once; that is the algorithm.)
func TestRaceForNeverOwned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		// Every claim waits a moment, so that all three have listed the
		// (empty) ownership before any claim lands, whatever order the
		// bubble runs their goroutines in: they race for the same records.
		srv.SetFaults(func(r azleasetest.Request) azleasetest.Fault {
			if r.Op == azleasetest.OpPutBlob || r.Op == azleasetest.OpSetMetadata {
				return azleasetest.Fault{Delay: 100 * time.Millisecond}
			}
			return azleasetest.Fault{}
		})
		b := newBeliefs()
		conflicts := &statusCounter{}
		var ps []*Processor
		for i, id := range []string{"a", "b", "c"} {
			o := b.options(id, Greedy, uint64(i))
			p, err := New(conflicts.client(t, srv, id), "eh/ownership/", parts(6), o)
			require.NoError(t, err)
			require.NoError(t, p.Start(context.Background()))
			ps = append(ps, p)
		}
		time.Sleep(time.Second) // the claims land (fake time)
		synctest.Wait()
		st, err := listOwners(srv)
		require.NoError(t, err)
		b.mu.Lock()
		for part, owner := range st {
			assert.True(t, b.now[owner][part], "partition %s: its record names %s, which does not believe it owns it", part, owner)
		}
		b.mu.Unlock()
		assert.Len(t, st, 6)
		assert.Positive(t, conflicts.n.Load(), "some claims lost the race")
		for _, p := range ps {
			p.Stop()
		}
	})
}

// statusCounter counts 409 and 412 answers.
type statusCounter struct{ n atomic.Int64 }

func (c *statusCounter) client(t *testing.T, srv *azleasetest.Server, name string) *container.Client {
	cred, err := container.NewSharedKeyCredential(azleasetest.Account, azleasetest.AccountKey)
	require.NoError(t, err)
	cc, err := container.NewClientWithSharedKeyCredential(srv.Client(name).URL(), cred, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: countingTransport{srv.Transport(name), c}},
	})
	require.NoError(t, err)
	return cc
}

type countingTransport struct {
	next policy.Transporter
	c    *statusCounter
}

func (t countingTransport) Do(req *http.Request) (*http.Response, error) {
	res, err := t.next.Do(req)
	if err == nil && (res.StatusCode == http.StatusConflict || res.StatusCode == http.StatusPreconditionFailed) {
		t.c.n.Add(1)
	}
	return res, err
}

// listOwners reads every record's owner through a processor's own store.
func listOwners(srv *azleasetest.Server) (map[string]string, error) {
	known := map[string]bool{}
	for _, p := range parts(6) {
		known[p] = true
	}
	rs, err := store{cc: srv.Client("reader"), prefix: "eh/ownership/"}.list(context.Background(), known)
	out := map[string]string{}
	for _, r := range rs {
		out[r.partition] = r.owner
	}
	return out, err
}

// TestOptions: OwnerID is required, and the bounds are enforced.
func TestOptions(t *testing.T) {
	srv := azleasetest.New(nil)
	defer srv.Close()
	cc, err := srv.ContainerClient("c", "x")
	require.NoError(t, err)
	for _, o := range []*Options{nil, {}, {OwnerID: "a", Strategy: 2}, {OwnerID: "a", UpdateInterval: time.Millisecond}, {OwnerID: "a", Expiration: -time.Second}} {
		_, err := New(cc, "p/", parts(2), o)
		assert.Error(t, err, "%+v", o)
	}
	_, err = New(cc, "p/", []string{"1", "1"}, &Options{OwnerID: "a"})
	assert.Error(t, err)
	p, err := New(cc, "p/", parts(2), &Options{OwnerID: "a"})
	require.NoError(t, err)
	assert.Equal(t, DefaultUpdateInterval, p.cfg.interval)
	assert.Equal(t, DefaultExpiration, p.cfg.expiration)
}
