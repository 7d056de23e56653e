package main

// --health-addr: liveness, readiness and the leader as JSON, for Kubernetes
// probes and for operators; and the reachability of storage they report,
// as the storage client's requests meet it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/spf13/cobra"

	"github.com/azlease/azlease"
)

// healthFlags are --health-addr and the readiness flag of lead, lock and
// once.
type healthFlags struct {
	addr      string
	readyFlag string // --ready-when-leading (lead) or --ready-when-holding
	readyHeld bool   // readiness only while this instance holds the lease and CMD runs
}

// register adds the flags to c; verb is "leads" or "holds".
func (hf *healthFlags) register(c *cobra.Command, verb string) {
	hf.readyFlag = "ready-when-holding"
	if verb == "leads" {
		hf.readyFlag = "ready-when-leading"
	}
	c.Flags().StringVar(&hf.addr, "health-addr", "", "serve /healthz, /readyz and /leader (JSON) on this `address` (:8080)")
	c.Flags().BoolVar(&hf.readyHeld, hf.readyFlag, false, "/readyz succeeds only while CMD runs under this instance's lease")
}

// healthServer serves the endpoints. A nil *healthServer (no --health-addr)
// does nothing.
type healthServer struct {
	g         *globals
	cc        *container.Client // set once the client exists
	name      string
	readyHeld bool
	srv       *http.Server
	done      chan struct{}

	mu      sync.Mutex
	elector *azlease.Elector
	term    *azlease.Term // while CMD runs under it
	failed  error         // the guardian died: liveness fails for good
	cached  leaderJSON
	cacheAt time.Time
	// The election's candidates, read at most once a second (candidates.go).
	cands candidatesCache
}

// leaderJSON is what /leader answers.
type leaderJSON struct {
	Name   string     `json:"name"`
	Leased bool       `json:"leased"`
	Holder string     `json:"holder,omitempty"`
	Epoch  uint64     `json:"epoch,omitempty"`
	Since  *time.Time `json:"since,omitempty"`
	Self   bool       `json:"self"`
	Error  string     `json:"error,omitempty"`
	// The election's candidates and latest yield request (candidates.go).
	Candidates []candidateJSON `json:"candidates"`
	Yield      *yieldJSON      `json:"yield,omitempty"`
}

// startHealth starts serving when --health-addr was given.
func (g *globals) startHealth(hf healthFlags, cc *container.Client, name string) (*healthServer, error) {
	if hf.addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", hf.addr)
	if err != nil {
		return nil, exitf(exitUsage, "invalid --health-addr %q: %v", hf.addr, err)
	}
	hs := &healthServer{g: g, cc: cc, name: name, readyHeld: hf.readyHeld, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", hs.liveness)
	mux.HandleFunc("/readyz", hs.readiness)
	mux.HandleFunc("/leader", hs.leader)
	hs.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(hs.done)
		_ = hs.srv.Serve(ln)
	}()
	g.health = hs
	return hs, nil
}

func (hs *healthServer) close() {
	if hs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = hs.srv.Shutdown(ctx)
	_ = hs.srv.Close()
	<-hs.done
}

func (hs *healthServer) setElector(e *azlease.Elector) {
	if hs == nil {
		return
	}
	hs.mu.Lock()
	hs.elector = e
	hs.mu.Unlock()
}

// running records the term CMD runs under (nil when it stops).
func (hs *healthServer) running(t *azlease.Term) {
	if hs == nil {
		return
	}
	hs.mu.Lock()
	hs.term = t
	hs.mu.Unlock()
}

// fail makes liveness fail for good (the guardian died).
func (hs *healthServer) fail(err error) {
	if hs == nil {
		return
	}
	hs.mu.Lock()
	if hs.failed == nil {
		hs.failed = err
	}
	hs.mu.Unlock()
}

// check is liveness: nil, or why not.
func (hs *healthServer) check() error {
	hs.mu.Lock()
	e, failed := hs.elector, hs.failed
	hs.mu.Unlock()
	if failed != nil {
		return failed
	}
	if err := hs.g.reach.check(time.Now()); err != nil {
		return err
	}
	if e != nil {
		if err := e.Check(); err != nil && !errors.Is(err, azlease.ErrNotStarted) {
			return err
		}
	}
	return nil
}

// holding reports whether CMD runs under a term that is still valid.
func (hs *healthServer) holding() (*azlease.Term, bool) {
	hs.mu.Lock()
	t := hs.term
	hs.mu.Unlock()
	return t, t != nil && t.Valid()
}

func (hs *healthServer) liveness(w http.ResponseWriter, _ *http.Request) {
	if err := hs.check(); err != nil {
		http.Error(w, "unhealthy: "+line(err), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if t, ok := hs.holding(); ok {
		fmt.Fprintf(w, "ok: holding %s, epoch %d\n", hs.name, t.Epoch())
		return
	}
	fmt.Fprintf(w, "ok: waiting for %s\n", hs.name)
}

func (hs *healthServer) readiness(w http.ResponseWriter, _ *http.Request) {
	if err := hs.check(); err != nil {
		http.Error(w, "not ready: "+line(err), http.StatusServiceUnavailable)
		return
	}
	_, held := hs.holding()
	if hs.readyHeld && !held {
		http.Error(w, "not ready: this instance does not hold "+hs.name, http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ready")
}

// leaderCacheFor bounds how often /leader reads the lock blob: at most one
// request a second, however often it is asked.
const leaderCacheFor = time.Second

func (hs *healthServer) leader(w http.ResponseWriter, r *http.Request) {
	var out leaderJSON
	if t, ok := hs.holding(); ok {
		since := t.StartedAt().UTC().Round(0)
		out = leaderJSON{Name: hs.name, Leased: true, Holder: hs.g.identity, Epoch: t.Epoch(), Since: &since, Self: true}
	} else {
		out = hs.lookUp(r.Context())
	}
	out.Candidates, out.Yield = hs.candidates(r.Context())
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// lookUp reads who holds the lease, at most once a second.
func (hs *healthServer) lookUp(ctx context.Context) leaderJSON {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if time.Since(hs.cacheAt) < leaderCacheFor {
		return hs.cached
	}
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	out := leaderJSON{Name: hs.name}
	st, err := azlease.Inspect(ctx, hs.cc, hs.name)
	switch {
	case err != nil:
		out.Error = line(err)
	case st.Epoch > 0:
		out.Leased, out.Holder, out.Epoch = st.Leased, st.Holder, st.Epoch
		out.Since = timePtr(st.Acquired)
	}
	hs.cached, hs.cacheAt = out, time.Now()
	return out
}

// reachability is a pipeline policy of the storage client: it records
// whether requests reach storage. Any answer below 500 is storage
// answering; a transport failure, a timeout or a 5xx is not.
type reachability struct {
	within time.Duration // how long requests may fail before liveness does

	mu      sync.Mutex
	started time.Time
	reached bool
	since   time.Time // the start of the current run of failures; zero when the last request succeeded
	failed  int
	last    error
}

func newReachability(within time.Duration) *reachability {
	return &reachability{within: within, started: time.Now()}
}

// Do implements policy.Policy.
func (p *reachability) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	canceled := errors.Is(req.Raw().Context().Err(), context.Canceled)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err == nil && resp.StatusCode < 500:
		p.reached, p.since, p.failed, p.last = true, time.Time{}, 0, nil
	case canceled:
		// azlease gave up on it: says nothing about storage.
	default:
		if p.since.IsZero() {
			p.since = time.Now()
		}
		p.failed++
		p.last = err
		if err == nil {
			p.last = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
	}
	return resp, err
}

// check is nil while storage answers, or has failed for no longer than
// within (and, before any answer, while the process is younger than that).
func (p *reachability) check(now time.Time) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.reached && now.Sub(p.started) > p.within:
		if p.last != nil {
			return fmt.Errorf("storage not reached in %v (%d requests failed; last: %s)", now.Sub(p.started).Round(time.Second), p.failed, line(p.last))
		}
		return fmt.Errorf("storage not reached in %v", now.Sub(p.started).Round(time.Second))
	case !p.since.IsZero() && now.Sub(p.since) > p.within:
		return fmt.Errorf("storage unreachable for %v (%d requests failed; last: %s)", now.Sub(p.since).Round(time.Second), p.failed, line(p.last))
	}
	return nil
}
