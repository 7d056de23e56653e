package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The client process holds n leases over one container client and measures
// itself over a steady-state window: CPU (getrusage), resident memory,
// goroutines, leases lost; and reads the server's counts of renewals, new
// connections and late renewals at both ends of the window. It prints one
// clientResult line as JSON.

// clientConfig is what the orchestrator passes to a client.
type clientConfig struct {
	variant  string
	n        int
	url      string // Blob service URL with the account
	stats    string // the server's stats URL
	lease    time.Duration
	renew    time.Duration
	settle   time.Duration // after the last lease is taken, before the window
	window   time.Duration
	parallel int           // leases taken at once during setup
	spread   time.Duration // setup takes leases evenly over this long (0: at once)
}

// clientResult is one cell's figures.
type clientResult struct {
	Variant    string  `json:"variant"`
	N          int     `json:"n"`
	Window     float64 `json:"window_s"`
	Setup      float64 `json:"setup_s"`
	CPU        float64 `json:"cpu_s"`    // user + system over the window
	Renewals   int64   `json:"renewals"` // renewals the server granted over the window
	RSS        int64   `json:"rss_bytes"`
	PeakRSS    int64   `json:"peak_rss_bytes"`
	Goroutines int     `json:"goroutines"`
	NewConns   int64   `json:"new_conns"`
	Late       int64   `json:"late"`
	Lapsed     int64   `json:"lapsed"`     // renewals after the lease had expired, over the window
	MaxGap     float64 `json:"max_gap_ms"` // over the whole run, setup included
	Lost       int     `json:"lost"`
	Load1      float64 `json:"load1"` // the machine's 1-minute load average at the end of the window
}

func runClient(cfg clientConfig) error {
	ctx := context.Background()
	cred, err := container.NewSharedKeyCredential(azleasetest.Account, azleasetest.AccountKey)
	if err != nil {
		return err
	}
	// Each variant builds its client as its users would. azlease: its own
	// constructor, as its README shows (it installs a transport that keeps
	// 64 idle connections per host). raw: azblob's defaults (azcore's
	// transport, 10 idle connections per host). raw64: azblob with a
	// transport that keeps 64, the fair baseline for azlease's. Every one
	// trusts the server's certificate through SSL_CERT_FILE.
	var cc *container.Client
	switch cfg.variant {
	case variantAzlease:
		cs := fmt.Sprintf("DefaultEndpointsProtocol=%s;AccountName=%s;AccountKey=%s;BlobEndpoint=%s",
			strings.SplitN(cfg.url, ":", 2)[0], azleasetest.Account, azleasetest.AccountKey, cfg.url)
		cc, err = azlease.ContainerClientFromConnectionString(cs, "many", nil)
	case variantRaw64:
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		cc, err = container.NewClientWithSharedKeyCredential(cfg.url+"/many", cred,
			&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}}})
	default:
		cc, err = container.NewClientWithSharedKeyCredential(cfg.url+"/many", cred, nil)
	}
	if err != nil {
		return err
	}
	if _, err := cc.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return fmt.Errorf("create container: %w", err)
	}
	h, err := newHolder(cfg.variant, cc, cfg.n, cfg.lease, cfg.renew)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := takeAll(ctx, h, cfg.n, cfg.parallel, cfg.spread); err != nil {
		return err
	}
	setup := time.Since(start)
	time.Sleep(cfg.settle)

	statsClient := &http.Client{Timeout: time.Minute} // an overloaded server answers late
	s0, err := readStats(statsClient, cfg.stats)
	if err != nil {
		return err
	}
	stopProfile, err := startProfile(cfg.variant)
	if err != nil {
		return err
	}
	c0, t0 := cpuTime(), time.Now()
	time.Sleep(cfg.window)
	c1, t1 := cpuTime(), time.Now()
	stopProfile()
	s1, err := readStats(statsClient, cfg.stats)
	if err != nil {
		return err
	}
	rss, peak := memStatus()
	res := clientResult{
		Variant: cfg.variant, N: cfg.n, Window: t1.Sub(t0).Seconds(), Setup: setup.Seconds(),
		CPU: (c1 - c0).Seconds(), Renewals: s1.Renewals - s0.Renewals, RSS: rss, PeakRSS: peak,
		Goroutines: runtime.NumGoroutine(), NewConns: s1.NewConns - s0.NewConns,
		Late: s1.Late - s0.Late, Lapsed: s1.Lapsed - s0.Lapsed, MaxGap: s1.MaxGap, Lost: h.lost(), Load1: loadAverage(),
	}
	h.stop()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// takeAll takes n leases, parallel at a time, lease i no earlier than
// i × spread / n after the start: the leases' renewals then fall evenly over
// the renew interval, as they do in a process that has held its leases for
// a while. spread 0 takes them as fast as the server allows (a process that
// starts and takes every lease at once, whose renewals then come in bursts).
func takeAll(ctx context.Context, h holder, n, parallel int, spread time.Duration) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, parallel)
	start := time.Now()
	for w := range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || errs[w] != nil {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(int64(spread) * int64(i) / int64(n)))))
				// A program taking its leases retries a failure or two (the
				// machine busy renewing the leases it took first).
				var err error
				for try := range setupTries {
					if try > 0 {
						time.Sleep(time.Second)
					}
					if err = h.take(ctx, i); err == nil {
						break
					}
				}
				if err != nil {
					errs[w] = fmt.Errorf("lease %d, %d tries: %w", i, setupTries, err)
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startProfile writes a CPU profile of the window to
// $MANYBENCH_CPUPROFILE-<variant>.pprof when that variable is set, to see
// where a variant's CPU goes (go tool pprof); it returns the function that
// stops it.
func startProfile(variant string) (stop func(), err error) {
	prefix := os.Getenv("MANYBENCH_CPUPROFILE")
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + "-" + variant + ".pprof")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// setupTries is how many times setup tries to take each lease.
const setupTries = 3

func readStats(hc *http.Client, url string) (serverStats, error) {
	var s serverStats
	res, err := hc.Get(url)
	if err != nil {
		return s, err
	}
	defer res.Body.Close()
	return s, json.NewDecoder(res.Body).Decode(&s)
}
