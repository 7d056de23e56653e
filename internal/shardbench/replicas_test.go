package shardbench

// The replicas under test: azlease's shards.Group and the Event Hubs
// balancer (internal/ehbalance), each on a client of its own whose
// transport counts its requests and its 4xx answers, and each reporting to
// the observer what it believes it owns.

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/ehbalance"
	"github.com/azlease/azlease/shards"
)

// counter counts a replica's requests and the ones answered 4xx, those by
// operation and error code.
type counter struct {
	requests, failed atomic.Int64

	mu    sync.Mutex
	codes map[string]int // "SetBlobMetadata 412 ConditionNotMet" → count
}

type countingTransport struct {
	next policy.Transporter
	c    *counter
}

func (t countingTransport) Do(req *http.Request) (*http.Response, error) {
	t.c.requests.Add(1)
	res, err := t.next.Do(req)
	if err == nil && res.StatusCode >= 400 && res.StatusCode < 500 {
		t.c.failed.Add(1)
		key := fmt.Sprintf("%s %d %s", operation(req), res.StatusCode, res.Header.Get("x-ms-error-code"))
		t.c.mu.Lock()
		if t.c.codes == nil {
			t.c.codes = map[string]int{}
		}
		t.c.codes[key]++
		t.c.mu.Unlock()
	}
	return res, err
}

// headerValue reads a header whatever the case of its name: azblob sets
// some directly in the map, not canonicalised.
func headerValue(h http.Header, name string) string {
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// operation names a Blob request for the failure breakdown.
func operation(req *http.Request) string {
	q := req.URL.Query()
	switch {
	case q.Get("comp") == "lease":
		return headerValue(req.Header, "x-ms-lease-action") + " lease"
	case q.Get("comp") == "list":
		return "list"
	case q.Get("comp") == "metadata":
		return "set metadata"
	case req.Method == http.MethodPut:
		return "put blob"
	case req.Method == http.MethodHead:
		return "get properties"
	}
	return req.Method
}

// client returns a container client for replica id, attributed to id on
// the server (so Partition(id) cuts it off), counting through c.
func client(t *testing.T, srv *azleasetest.Server, id string, c *counter) *container.Client {
	cred, err := container.NewSharedKeyCredential(azleasetest.Account, azleasetest.AccountKey)
	require.NoError(t, err)
	cc, err := container.NewClientWithSharedKeyCredential(srv.Client(id).URL(), cred, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: countingTransport{srv.Transport(id), c}},
	})
	require.NoError(t, err)
	return cc
}

// replica is one running member of a group.
type replica interface {
	stop()  // a clean stop, waited for
	crash() // as far as storage and the work can tell, the replica is gone
	end()   // after the scenario: stop whatever is left
}

// variant is one balancer at one timing.
type variant struct {
	name   string // as the table shows it
	timing string
	// interval is the poll or update interval (the event's phase is drawn
	// over it); hold how long the group must stay balanced to end a run,
	// the second half of which measures the idle request rate; limit how
	// long a run waits for balance after its event.
	interval, hold, limit time.Duration
	azlease               bool
	start                 func(t *testing.T, e *env, id string, seed uint64) replica
}

// azleaseGroup is a shards.Group whose work records believed intervals.
type azleaseGroup struct {
	g   *shards.Group
	srv *azleasetest.Server
	id  string
}

func startAzlease(t *testing.T, e *env, id string, _ uint64) replica {
	// 15 s leases and a listing every poll: the timing the Event Hubs
	// balancer runs at beside it (the package's defaults, 60 s and 15 s,
	// are for cost: see the load benchmark's cost table).
	g, err := shards.New(client(t, e.srv, id, e.counter(id)), "bench", e.names, &shards.Options{Identity: id,
		LeaseDuration: 15 * time.Second, ListInterval: shards.DefaultPollInterval})
	require.NoError(t, err)
	require.NoError(t, g.Start(context.Background(), func(ctx context.Context, s *shards.Shard) error {
		tok := s.Term.Token()
		e.obs.begin(id, s.Name, azleasetest.Interval{LeaseID: tok.LeaseID, Epoch: s.Term.Epoch(), Start: time.Now()})
		<-ctx.Done()
		end := time.Now()
		if vu := s.Term.ValidUntil(); vu.Before(end) {
			end = vu
		}
		e.obs.end(id, s.Name, end)
		return nil
	}))
	return &azleaseGroup{g: g, srv: e.srv, id: id}
}

func (a *azleaseGroup) stop() { _ = a.g.Stop(context.Background()) }

// crash cuts the replica off: its requests hang until their deadlines, its
// leases expire, and its work ends at each term's validity deadline.
func (a *azleaseGroup) crash() { a.srv.Partition(a.id, azleasetest.Blackhole) }

func (a *azleaseGroup) end() {
	a.srv.Heal(a.id)
	_ = a.g.Stop(context.Background())
}

// ehProcessor is an ehbalance.Processor reporting its beliefs.
type ehProcessor struct{ p *ehbalance.Processor }

func ehStarter(strategy ehbalance.Strategy, interval, expiration time.Duration, nameOrder bool) func(*testing.T, *env, string, uint64) replica {
	return func(t *testing.T, e *env, id string, seed uint64) replica {
		p, err := ehbalance.New(client(t, e.srv, id, e.counter(id)), "bench/ownership/", e.names, &ehbalance.Options{
			OwnerID: id, Strategy: strategy, UpdateInterval: interval, Expiration: expiration, Seed: seed, NameOrder: nameOrder,
			OnOwn:    func(s string) { e.obs.begin(id, s, azleasetest.Interval{Start: time.Now()}) },
			OnDisown: func(s string) { e.obs.end(id, s, time.Now()) },
		})
		require.NoError(t, err)
		require.NoError(t, p.Start(context.Background()))
		return &ehProcessor{p: p}
	}
}

func (p *ehProcessor) stop()  { p.p.Stop() }
func (p *ehProcessor) crash() { p.p.Kill() }
func (p *ehProcessor) end()   { p.p.Stop() }

// variants are the balancers compared, in the table's order.
func variants() []variant {
	const ehInterval, ehExpiry = ehbalance.DefaultUpdateInterval, ehbalance.DefaultExpiration
	const azInterval, azExpiry = shards.DefaultPollInterval, 15 * time.Second
	ehDefaults := "EH defaults (10 s, 60 s)"
	azTiming := "azlease timing (2 s, 15 s)"
	return []variant{
		{name: "azlease shards", timing: azTiming, interval: azInterval, hold: time.Minute, limit: 5 * time.Minute, azlease: true, start: startAzlease},
		{name: "EH balanced", timing: ehDefaults, interval: ehInterval, hold: 4 * time.Minute, limit: 15 * time.Minute,
			start: ehStarter(ehbalance.Balanced, ehInterval, ehExpiry, false)},
		{name: "EH greedy", timing: ehDefaults, interval: ehInterval, hold: 4 * time.Minute, limit: 15 * time.Minute,
			start: ehStarter(ehbalance.Greedy, ehInterval, ehExpiry, false)},
		{name: "EH balanced", timing: azTiming, interval: azInterval, hold: time.Minute, limit: 5 * time.Minute,
			start: ehStarter(ehbalance.Balanced, azInterval, azExpiry, false)},
		{name: "EH greedy", timing: azTiming, interval: azInterval, hold: time.Minute, limit: 5 * time.Minute,
			start: ehStarter(ehbalance.Greedy, azInterval, azExpiry, false)},
	}
}
