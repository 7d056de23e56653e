package shardbench

// An opt-in trace of the load benchmark's ×10 jump (issue 33: what a slow
// seed waits for). With AZLEASE_LOADBENCH_TRACE=DIR, each by-load run
// writes DIR/load-SEED.txt: for each second from 10 s before the jump to
// the end of the run, whether the group is in band (by base loads, as the
// benchmark measures it), each member's base load over the others' mean
// (its shard count), the listing as an observer reads it each second
// (shards.Inspect: each member's published load over the level, shards
// misplaced, waiting for their cooldown, hot, hand-offs under way), the
// seconds since each member's last listing and its last membership write,
// and the events of that second: runs that began elsewhere (moves), and
// the replicas' Info logs (hand-offs with their reason). It observes only:
// the replicas' requests and logs, and one listing a second by a client
// the cost counts leave out.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// jumpTrace records one run's jump phase.
type jumpTrace struct {
	mu       sync.Mutex
	members  []string
	lastList map[string]time.Time // client → its last List Blobs
	lastPub  map[string]time.Time // client → its last write of its membership
	logs     []traceLine
	lines    []string
	on       bool
	jumpAt   time.Time
}

type traceLine struct {
	at   time.Time
	text string
}

// newJumpTrace returns a trace when AZLEASE_LOADBENCH_TRACE is set, else
// nil (every method of a nil *jumpTrace does nothing).
func newJumpTrace(members []string) *jumpTrace {
	if os.Getenv("AZLEASE_LOADBENCH_TRACE") == "" {
		return nil
	}
	return &jumpTrace{members: members, lastList: map[string]time.Time{}, lastPub: map[string]time.Time{}}
}

// request notes a replica's request (from the fault hook).
func (tr *jumpTrace) request(r azleasetest.Request) {
	if tr == nil || r.Client == "observer" {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	switch {
	case r.Op == azleasetest.OpListBlobs:
		tr.lastList[r.Client] = time.Now()
	case r.Op == azleasetest.OpSetMetadata && r.Blob == "g/members/"+r.Client:
		tr.lastPub[r.Client] = time.Now()
	}
}

// logger is the replicas' logger: Info and above, kept while the trace is
// on.
func (tr *jumpTrace) logger(id string) *slog.Logger {
	if tr == nil {
		return nil
	}
	return slog.New(slog.NewTextHandler(&traceWriter{tr: tr}, &slog.HandlerOptions{
		Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == "group" {
				return slog.Attr{}
			}
			return a
		},
	}))
}

type traceWriter struct{ tr *jumpTrace }

func (w *traceWriter) Write(p []byte) (int, error) {
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	if w.tr.on && !time.Now().Before(w.tr.jumpAt.Add(-10*time.Second)) {
		w.tr.logs = append(w.tr.logs, traceLine{at: time.Now(), text: strings.TrimSpace(string(p))})
	}
	return len(p), nil
}

// start turns the trace on; jumpAt is when the jump comes.
func (tr *jumpTrace) start(jumpAt time.Time) {
	if tr == nil {
		return
	}
	tr.mu.Lock()
	tr.on, tr.jumpAt = true, jumpAt
	tr.mu.Unlock()
}

// second records one second: in is whether the group is in band.
func (tr *jumpTrace) second(ctx context.Context, lp *loadProc, own map[string]string, in bool, moves []modelMove, obs func() (shards.Assignment, error)) {
	if tr == nil {
		return
	}
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "t=%+4.0fs in=%v\n", now.Sub(tr.jumpAt).Seconds(), in)
	// The truth: base loads.
	per, count, total, heaviest := baseTotals(lp, own)
	n := float64(len(tr.members))
	rest := total / n
	hotHost := ""
	if h := lp.baseOf(heaviest); h > total/n {
		hotHost = own[heaviest]
		rest = (total - h) / (n - 1)
	}
	b.WriteString("  truth (base/others' mean):")
	for _, m := range tr.members {
		mark := ""
		if m == hotHost {
			mark = fmt.Sprintf("[hot %s]", heaviest)
		}
		fmt.Fprintf(&b, " %s=%.3f(%d)%s", m, per[m]/rest, count[m], mark)
	}
	b.WriteString("\n")
	if a, err := obs(); err != nil {
		fmt.Fprintf(&b, "  listing: %v\n", err)
	} else {
		fmt.Fprintf(&b, "  listed (load/level): level=%.4f misplaced=%d waiting=%d hot=%v:", a.Level, a.Misplaced, a.Waiting, a.Hot)
		for _, m := range a.Members {
			fmt.Fprintf(&b, " %s=%.3f(%d→%d)", m.Name, m.Load/float64(max(m.Weight, 1))/max(a.Level, 1e-12), m.Owns, m.Share)
		}
		b.WriteString("\n")
		var handing, planned []string
		for _, s := range a.Shards {
			if s.HandingTo != "" {
				handing = append(handing, fmt.Sprintf("%s:%s→%s(%.3f %s)", s.Name, s.Owner, s.HandingTo, s.Load, s.Moved))
			}
			if a.PlanKnown && s.Planned != "" && s.Planned != s.Owner && s.HandingTo == "" {
				planned = append(planned, fmt.Sprintf("%s:%s→%s(%.3f)", s.Name, s.Owner, s.Planned, s.Load))
			}
		}
		if len(handing) > 0 {
			fmt.Fprintf(&b, "  handing: %s\n", strings.Join(handing, " "))
		}
		if len(planned) > 0 {
			fmt.Fprintf(&b, "  planned: %s\n", strings.Join(planned, " "))
		}
	}
	tr.mu.Lock()
	b.WriteString("  since list/pub:")
	for _, m := range tr.members {
		fmt.Fprintf(&b, " %s=%.0f/%.0f", m, now.Sub(tr.lastList[m]).Seconds(), now.Sub(tr.lastPub[m]).Seconds())
	}
	b.WriteString("\n")
	for _, mv := range moves {
		fmt.Fprintf(&b, "  move %s %s→%s at %+.1fs\n", mv.shard, mv.from, mv.to, mv.at.Sub(tr.jumpAt).Seconds())
	}
	for _, l := range tr.logs {
		fmt.Fprintf(&b, "  log %+.1fs %s\n", l.at.Sub(tr.jumpAt).Seconds(), l.text)
	}
	tr.logs = nil
	tr.lines = append(tr.lines, b.String())
	tr.mu.Unlock()
}

// write writes the trace to DIR/name.txt, with a header.
func (tr *jumpTrace) write(name, header string) error {
	if tr == nil {
		return nil
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b bytes.Buffer
	b.WriteString(header + "\n")
	for _, l := range tr.lines {
		b.WriteString(l)
	}
	dir := os.Getenv("AZLEASE_LOADBENCH_TRACE")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".txt"), b.Bytes(), 0o644)
}
