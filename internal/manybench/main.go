// Command manybench measures the cost of holding many leases in one process:
// N azlease Mutex locks beside N raw azblob lease clients and N bare
// net/http renewals (the floor), against the emulator served on loopback by a
// separate process, over plain HTTP and TLS. It writes a markdown table
// (see report.go) that `make bench` folds into bench/results.md.
//
//	go run ./internal/manybench -out bench/many.md [-n 1000,10000] [-dur 60s] [-reps 3] [-tls both] [-quick]
//
// The same executable is the server (-mode server) and the client (-mode
// client) processes; the orchestrator (no -mode) starts them per cell. The
// client uses only azlease's public API, so the harness measures whatever
// the library does inside.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	mode := flag.String("mode", "", "internal: server or client (default: run the benchmark)")
	// Orchestrator.
	out := flag.String("out", "bench/many.md", "markdown table to write")
	rawOut := flag.String("raw", "", "also write every cell's figures as JSON to this file")
	ns := flag.String("n", "1000,10000", "comma-separated numbers of leases held (client: one number)")
	reps := flag.Int("reps", 3, "repetitions of each cell")
	tlsMode := flag.String("tls", "both", "transport: http, tls or both (server: http or tls)")
	heading := flag.String("heading", "", "a heading for a further, briefly introduced table of the same benchmark (default: the full \"Holding many leases\" section)")
	quick := flag.Bool("quick", false, "a smoke run: N=50, 2 s window, renew every 1 s, 1 repetition, both transports")
	// Client (and orchestrator, passed on).
	dur := flag.Duration("dur", 60*time.Second, "steady-state window per cell")
	renew := flag.Duration("renew", 5*time.Second, "renew interval")
	leaseDur := flag.Duration("lease", 15*time.Second, "lease duration")
	settle := flag.Duration("settle", 0, "wait after the leases are taken, before the window (0: one renew interval)")
	parallel := flag.Int("parallel", 32, "leases taken at once during setup")
	burst := flag.Bool("burst", false, "take every lease at once instead of spreading them over one renew interval (renewals then come in bursts)")
	only := flag.String("variants", strings.Join(variants, ","), "comma-separated variants to run: azlease, raw, http")
	variant := flag.String("variant", "", "client: azlease, raw or http")
	url := flag.String("url", "", "client: Blob service URL")
	stats := flag.String("stats", "", "client: the server's stats URL")
	// Server.
	certFile := flag.String("cert", "", "server: where to write the certificate's PEM (TLS)")
	late := flag.Duration("late", 6*time.Second, "server: a renewal later than this after the previous one is late")
	flag.Parse()
	if *settle == 0 {
		*settle = *renew
	}
	raiseFileLimit()
	var err error
	switch *mode {
	case "server":
		err = serve(*tlsMode == "tls", *certFile, *late, *leaseDur)
	case "client":
		var count int
		count, err = strconv.Atoi(*ns)
		if err == nil {
			err = runClient(clientConfig{variant: *variant, n: count, url: *url, stats: *stats, lease: *leaseDur,
				renew: *renew, settle: *settle, window: *dur, parallel: *parallel, spread: spread(*burst, *renew)})
		}
	case "":
		err = benchmark(*out, *rawOut, *ns, *only, *reps, *tlsMode, *quick, *burst, *dur, *renew, *leaseDur, *settle, *parallel, *heading)
	default:
		err = fmt.Errorf("unknown -mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "manybench %s: %v\n", *mode, err)
		os.Exit(1)
	}
}

func spread(burst bool, renew time.Duration) time.Duration {
	if burst {
		return 0
	}
	return renew
}
