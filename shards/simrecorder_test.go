package shards_test

// What the replicas of a simulation believed and did: each run of the
// work for a shard (its believed interval, from its start to the earlier of
// its return and its term's validity deadline), and the checkpoints each
// wrote through the shard's term and read back. The checks: no shard owned
// by two terms at once (azleasetest.CheckIntervals against the server's
// grants of the shard's blob), and no checkpoint regression.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/shards"
)

// workRun is one call of the work for a shard.
type workRun struct {
	shard, client string
	epoch         uint64
	leaseID       string
	start, end    time.Time
	ctxEnd        time.Time // when its context ended
	cause         error     // why its context ended
}

// ckRead is a checkpoint read at the start of a run of the work.
type ckRead struct {
	epoch       uint64 // the reading term's
	sent        time.Time
	value       int64
	writerEpoch uint64 // the term that wrote what was read
	bad         string // content that does not parse
}

// ckAck is a checkpoint write that succeeded.
type ckAck struct {
	epoch uint64
	at    time.Time // when its success was reported
	value int64
}

// simRecorder records the work of every replica.
type simRecorder struct {
	mu       sync.Mutex
	runs     []workRun
	current  map[string]string        // shard → the client whose work runs now, its context not ended
	working  map[string]*azlease.Term // shard → the term of the run in current
	reads    map[string][]ckRead
	acks     map[string][]ckAck
	written  map[string]map[int64]bool // shard → every value whose write was sent
	writes   int
	failed   int           // writes that failed
	writeGap time.Duration // the checkpoint writes are writeGap/3 to 7·writeGap/3 apart
	// flakyUntil: runs that start before it may return early or panic.
	flakyUntil time.Time
	// loadOf is the load a shard's work reports every second (false:
	// none).
	loadOf func(string) (float64, bool)
}

func newSimRecorder() *simRecorder {
	return &simRecorder{
		current: map[string]string{}, working: map[string]*azlease.Term{}, reads: map[string][]ckRead{}, acks: map[string][]ckAck{},
		written: map[string]map[int64]bool{}, writeGap: 3 * time.Second,
	}
}

// checkpoint is what the work writes: "EPOCH VALUE".
func checkpoint(epoch uint64, v int64) []byte { return fmt.Appendf(nil, "%d %d", epoch, v) }

func parseCheckpoint(b []byte) (epoch uint64, v int64, err error) {
	if len(b) == 0 {
		return 0, 0, nil
	}
	e, val, ok := strings.Cut(string(b), " ")
	if !ok {
		return 0, 0, fmt.Errorf("checkpoint %q", b)
	}
	if epoch, err = strconv.ParseUint(e, 10, 64); err != nil {
		return 0, 0, err
	}
	v, err = strconv.ParseInt(val, 10, 64)
	return epoch, v, err
}

// work is the work of a replica's process (client): it reads the shard's
// checkpoint through the term, and while its context lasts increments it
// and writes it back every writeGap/3 to 7·writeGap/3 (a few times per
// term); when its context ends it writes a last checkpoint while the term
// is still valid and returns drain after its context ended. Until
// flakyUntil, one run in ten returns an error after its first write and
// one in thirty panics, as a user's work may: the replica calls it again.
func (r *simRecorder) work(client string, drain time.Duration) shards.Work {
	return func(ctx context.Context, s *shards.Shard) error {
		run := workRun{shard: s.Name, client: client, epoch: s.Term.Epoch(), leaseID: s.Term.Token().LeaseID, start: time.Now()}
		r.mu.Lock()
		r.current[s.Name] = client
		r.working[s.Name] = s.Term
		flaky := run.start.Before(r.flakyUntil)
		r.mu.Unlock()
		rng := rand.New(rand.NewPCG(run.epoch, uint64(run.start.UnixNano())))
		defer func() {
			run.end = time.Now()
			if run.ctxEnd.IsZero() {
				run.ctxEnd = run.end // returned early
			}
			if vu := s.Term.ValidUntil(); vu.Before(run.end) {
				run.end = vu
			}
			r.mu.Lock()
			if r.current[s.Name] == client {
				delete(r.current, s.Name)
				delete(r.working, s.Name)
			}
			r.runs = append(r.runs, run)
			r.mu.Unlock()
		}()
		if r.loadOf != nil {
			stop := make(chan struct{})
			reported := make(chan struct{})
			go func() {
				defer close(reported)
				for {
					if v, ok := r.loadOf(s.Name); ok {
						s.SetLoad(v)
					}
					select {
					case <-stop:
						return
					case <-ctx.Done():
						return
					case <-time.After(time.Second):
					}
				}
			}()
			defer func() {
				close(stop)
				<-reported
			}()
		}
		fail := 0
		if flaky {
			switch n := rng.IntN(30); {
			case n == 0:
				panic("the work panics")
			case n < 4:
				fail = 1 // return an error after the first write
			}
		}

		cur := int64(-1)
		sent := time.Now()
		if content, err := s.Term.Read(ctx); err == nil {
			rd := ckRead{epoch: run.epoch, sent: sent}
			rd.writerEpoch, rd.value, err = parseCheckpoint(content)
			if err != nil {
				rd.bad = err.Error()
			}
			r.mu.Lock()
			r.reads[s.Name] = append(r.reads[s.Name], rd)
			r.mu.Unlock()
			cur = rd.value
		}
		write := func(ctx context.Context) {
			cur++
			r.mu.Lock()
			if r.written[s.Name] == nil {
				r.written[s.Name] = map[int64]bool{}
			}
			r.written[s.Name][cur] = true
			r.writes++
			r.mu.Unlock()
			err := s.Term.Write(ctx, checkpoint(run.epoch, cur))
			r.mu.Lock()
			if err == nil {
				r.acks[s.Name] = append(r.acks[s.Name], ckAck{epoch: run.epoch, at: time.Now(), value: cur})
			} else {
				r.failed++
			}
			r.mu.Unlock()
		}
		for writes := 0; cur >= 0; writes++ {
			if fail > 0 && writes == fail {
				return errors.New("the work gives up")
			}
			gap := time.Duration(rng.Int64N(int64(2*r.writeGap))) + r.writeGap/3
			t := time.NewTimer(gap)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
			if ctx.Err() != nil {
				break
			}
			write(ctx)
		}
		<-ctx.Done()
		run.ctxEnd, run.cause = time.Now(), context.Cause(ctx)
		// From here the work only drains: the shard is not worked on, and
		// the group does not count as balanced on it.
		r.mu.Lock()
		if r.current[s.Name] == client {
			delete(r.current, s.Name)
			delete(r.working, s.Name)
		}
		r.mu.Unlock()
		if drain > 0 {
			// A last checkpoint while the term lasts (it does while the
			// shard is being handed on: the hand-off waits for the work).
			if cur >= 0 && s.Term.Valid() {
				fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
				write(fctx)
				cancel()
			}
			time.Sleep(time.Until(run.ctxEnd.Add(drain)))
		}
		return nil
	}
}

// workingTerm returns the term of the run of a shard's work now under
// way, or nil.
func (r *simRecorder) workingTerm(shard string) *azlease.Term {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.working[shard]
}

// ending returns a shard whose work runs in a term that ends within d
// (by its validity deadline, which a renewal has not moved on), or "".
func (r *simRecorder) ending(d time.Duration) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, t := range r.working {
		if time.Until(t.ValidUntil()) < d {
			return s
		}
	}
	return ""
}

// running returns the client whose work runs now, by shard.
func (r *simRecorder) running() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.current)
}

// allRuns returns the runs that returned so far.
func (r *simRecorder) allRuns() []workRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// safety is what the checks found.
type safety struct {
	violations   int           // CheckIntervals violations, all kinds
	twice        time.Duration // shard-time owned by two terms at once
	regressions  int           // reads older than a write acknowledged before they were sent
	newer        int           // reads of a newer term's checkpoint
	finalBehind  int           // shards whose final checkpoint is older than the newest acknowledged
	report       []string
	terms, runs  int
	reads, acks  int
	writes, fail int
}

func (s *safety) add(o safety) {
	s.violations += o.violations
	s.twice += o.twice
	s.regressions += o.regressions
	s.newer += o.newer
	s.finalBehind += o.finalBehind
	s.terms += o.terms
	s.runs += o.runs
	s.reads += o.reads
	s.acks += o.acks
	s.writes += o.writes
	s.fail += o.fail
}

func (s safety) ok() bool {
	return s.violations == 0 && s.twice == 0 && s.regressions == 0 && s.newer == 0 && s.finalBehind == 0
}

func (s safety) String() string {
	return fmt.Sprintf("%d violations of exclusive ownership (%v owned twice), %d checkpoint regressions, %d reads of a newer term's checkpoint, %d final checkpoints behind the newest acknowledged",
		s.violations, s.twice, s.regressions, s.newer, s.finalBehind)
}

// check checks every shard: its runs against the server's grants of its
// blob (each term a holder of its own, so no two terms may overlap and
// epochs must grow), its checkpoint reads against the writes acknowledged
// before they were sent, and its final content (read by cc, after every
// replica stopped) against the newest acknowledged write.
func (r *simRecorder) check(srv *azleasetest.Server, cc *container.Client, group string, names []string, removed map[string]bool) safety {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s safety
	byShard := map[string][]azleasetest.Interval{}
	terms := map[string]bool{}
	for _, run := range r.runs {
		holder := fmt.Sprintf("%s/epoch %d", run.client, run.epoch)
		byShard[run.shard] = append(byShard[run.shard], azleasetest.Interval{
			Holder: holder, LeaseID: run.leaseID, Epoch: run.epoch, Start: run.start, End: run.end,
		})
		terms[run.shard+"/"+strconv.FormatUint(run.epoch, 10)] = true
	}
	s.terms, s.runs = len(terms), len(r.runs)
	s.writes, s.fail = r.writes, r.failed
	for _, name := range names {
		if err := azleasetest.CheckIntervals(srv.Grants(azleasetest.Container, group+"/shards/"+name), byShard[name]); err != nil {
			var ee *azleasetest.ExclusionError
			if errors.As(err, &ee) {
				s.violations += len(ee.Violations)
				for _, v := range ee.Violations {
					if v.Kind == azleasetest.Overlap {
						s.twice += earlierOf(v.Interval.End, v.Other.End).Sub(laterOf(v.Interval.Start, v.Other.Start))
					}
				}
			} else {
				s.violations++
			}
			s.report = append(s.report, fmt.Sprintf("shard %s: %v", name, err))
		}
		acks := slices.Clone(r.acks[name])
		slices.SortFunc(acks, func(a, b ckAck) int { return a.at.Compare(b.at) })
		s.acks += len(acks)
		for _, rd := range r.reads[name] {
			s.reads++
			if rd.bad != "" {
				s.regressions++
				s.report = append(s.report, fmt.Sprintf("shard %s: epoch %d read a bad checkpoint: %s", name, rd.epoch, rd.bad))
				continue
			}
			if rd.writerEpoch > rd.epoch {
				s.newer++
				s.report = append(s.report, fmt.Sprintf("shard %s: epoch %d read the checkpoint of epoch %d", name, rd.epoch, rd.writerEpoch))
			}
			for _, a := range acks {
				if !a.at.Before(rd.sent) {
					break
				}
				if a.value > rd.value {
					s.regressions++
					s.report = append(s.report, fmt.Sprintf("shard %s: epoch %d read %d at %s, but epoch %d's write of %d was acknowledged at %s",
						name, rd.epoch, rd.value, rd.sent.Format("15:04:05.000"), a.epoch, a.value, a.at.Format("15:04:05.000")))
					break
				}
			}
		}
		if len(acks) == 0 || removed[name] {
			continue // a removed shard's content is cleared
		}
		newest := int64(-1)
		for _, a := range acks {
			newest = max(newest, a.value)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := cc.NewBlobClient(group+"/shards/"+name).DownloadStream(ctx, nil)
		var final int64 = -1
		var content []byte
		if err == nil {
			content, err = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil {
				_, final, err = parseCheckpoint(content)
			}
		}
		cancel()
		if err != nil || final < newest || !r.written[name][final] {
			s.finalBehind++
			s.report = append(s.report, fmt.Sprintf("shard %s: final checkpoint %q (%v), newest acknowledged %d", name, content, err, newest))
		}
	}
	return s
}

func earlierOf(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// moves counts, among the runs, the terms that began after since (lease
// moves and acquisitions), the runs that restarted in a term that had
// already run (the work interrupted and called again without a move), and
// the terms that ended because the lease was lost. A run that began at
// since itself counts as before it: since is an observation (the group
// seen balanced, its work running), which under synctest can fall in the
// very instant the run began, and saw it.
func countChanges(runs []workRun, since time.Time) (terms, restarts, losses int) {
	seen := map[string]time.Time{} // term → its first run's start
	for _, r := range runs {
		k := r.shard + "/" + strconv.FormatUint(r.epoch, 10)
		if s, ok := seen[k]; !ok || r.start.Before(s) {
			seen[k] = r.start
		}
	}
	for _, r := range runs {
		k := r.shard + "/" + strconv.FormatUint(r.epoch, 10)
		if !r.start.After(since) {
			if r.ctxEnd.After(since) && errors.Is(r.cause, azlease.ErrLeaseLost) {
				losses++
			}
			continue
		}
		if seen[k].Equal(r.start) {
			terms++
		} else {
			restarts++
		}
		if errors.Is(r.cause, azlease.ErrLeaseLost) {
			losses++
		}
	}
	return terms, restarts, losses
}
