package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// The fleet in fake time (testing/synctest): five gocron schedulers, each a
// host with a storage client, a clock and a start time of its own, on the
// emulator, run a job every 5 s.

const (
	period = 5 * time.Second
	// settle is when the fleet starts, after the bubble's: every host
	// starts within ±1.5 s of it.
	settle = 10 * time.Second
)

// fleetRun starts hosts (each at settle + its start), runs them until ticks
// ticks after the last host started have fired everywhere, stops them, and
// returns the first and last tick of that window.
func fleetRun(t *testing.T, hosts []host, ticks int, period time.Duration, start func(h host) gocron.Scheduler) (first, last time.Time) {
	t.Helper()
	t0 := time.Now()
	var latest time.Duration
	for _, h := range hosts {
		latest = max(latest, h.start)
	}
	// The first tick every host fires for: after the last start, by the
	// slowest clock (skew −1.5 s fires 1.5 s late).
	first = t0.Add(settle + latest + 1500*time.Millisecond).Truncate(period).Add(period)
	first = first.Round(0).UTC() // as Tick returns them: map keys
	last = first.Add(time.Duration(ticks-1) * period)
	scheds := make([]gocron.Scheduler, len(hosts))
	done := make(chan struct{})
	for i, h := range hosts {
		go func() {
			defer func() { done <- struct{}{} }()
			time.Sleep(settle + h.start)
			scheds[i] = start(h)
		}()
	}
	for range hosts {
		<-done
	}
	time.Sleep(time.Until(last.Add(period / 2))) // every host has fired for last, none for the next
	for _, s := range scheds {
		require.NoError(t, s.Shutdown())
	}
	return first, last
}

// onceJob is the job on host h: it records its run, by the tick of h's
// clock, and works for d.
func onceJob(r *recorder, l *Locker, h host, d time.Duration) func(clockwork.Clock) {
	return func(clock clockwork.Clock) {
		i := r.add(runRecord{host: h.name, tick: l.Tick(clock.Now()), start: time.Now(), recorded: true})
		time.Sleep(d)
		r.finish(i, time.Now())
	}
}

// TestOncePerTick: 5 schedulers (clients of their own) run a 10 ms job
// every 5 s, with their clocks and start times skewed by up to ±1.5 s, for
// 100 ticks: exactly one run per tick, none missed, and the ticks' records
// stay within Retention (5 minutes: about 60 ticks). "aligned": each job
// starts on the ticks by its host's clock (Locker.StartAt), so its runs
// fire skew apart in real time, and on the tick by their own clocks.
// "unaligned": gocron's default start, a period after the scheduler's, so
// each host's runs land start + skew away from the ticks by its own clock
// (up to 2.3 s here, of the 2.5 s a tick told by time alone tolerates): the
// Locker rounds them to the nearest tick.
func TestOncePerTick(t *testing.T) {
	for _, aligned := range []bool{true, false} {
		name := map[bool]string{true: "aligned", false: "unaligned"}[aligned]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := azleasetest.NewServer(t, nil)
				r := &recorder{}
				first, last := fleetRun(t, fleetHosts, 100, period, func(h host) gocron.Scheduler {
					l, err := NewLocker(srv.Client(h.name), &Options{Period: period, Retention: 5 * time.Minute, Once: &azlease.DoOnceOptions{Identity: h.name}})
					require.NoError(t, err)
					l.now = skewedClock{Clock: clockwork.NewRealClock(), skew: h.skew}.Now
					align := func(clockwork.Clock) gocron.JobOption { return l.StartAt() }
					if !aligned {
						align = nil
					}
					return scheduler(t, h, period, align, gocron.WithDistributedLocker(recordingLocker{l, r}), onceJob(r, l, h, 10*time.Millisecond))
				})
				summary := checkOncePerTick(t, r, first, last, period)
				sts, err := azlease.InspectPrefix(t.Context(), srv.Client("check"), "once/report/")
				require.NoError(t, err)
				assert.LessOrEqual(t, len(sts), int(5*time.Minute/period)+3, "records within Retention")
				t.Logf("%s; %d records left (Retention/period = %d); hosts %s", summary, len(sts), int(5*time.Minute/period), hostNames(fleetHosts))
			})
		})
	}
}

// plainLocker is the locker gocron's users write on Redis, etcd or a
// database (gocron issue #841): lock the job's name, run, unlock. Here on an
// azlease Mutex, TryLock: a replica that finds it held skips the job.
type plainLocker struct {
	cc *container.Client
	id string
}

func (p plainLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	m, err := azlease.NewMutex(p.cc, "plain/"+key, &azlease.MutexOptions{Identity: p.id})
	if err != nil {
		return nil, err
	}
	lk, ok, err := m.TryLock(ctx)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("plain lock: %w", azlease.ErrLeaseHeld)
	}
	return plainLock{lk}, nil
}

type plainLock struct{ lk *azlease.Lock }

func (l plainLock) Unlock(ctx context.Context) error { return l.lk.Unlock(ctx) }

// TestPlainLockRunsOnEveryReplica: the same fleet with a plain lock (lock,
// run, unlock) runs the job on several replicas per tick, as gocron issue
// #841 describes: each replica fires after the previous one's 10 ms run
// released the lock. This is what TestOncePerTick is compared with.
func TestPlainLockRunsOnEveryReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		r := &recorder{}
		ticker, err := NewLocker(dummyClient(t), &Options{Period: period}) // to tell ticks only
		require.NoError(t, err)
		first, last := fleetRun(t, fleetHosts, 100, period, func(h host) gocron.Scheduler {
			return scheduler(t, h, period, func(clock clockwork.Clock) gocron.JobOption {
				return gocron.WithStartAt(gocron.WithStartDateTimePast(clock.Now().Truncate(period)))
			}, gocron.WithDistributedLocker(recordingLocker{plainLocker{srv.Client(h.name), h.name}, r}), onceJob(r, ticker, h, 10*time.Millisecond))
		})
		runs, _ := r.byTick()
		doubled, total := 0, 0
		for tk := first; !tk.After(last); tk = tk.Add(period) {
			total += len(runs[tk])
			if len(runs[tk]) > 1 {
				doubled++
			}
		}
		t.Logf("plain lock: %d of 100 ticks ran more than once, %d runs in all (%.1f per tick); refusals %v", doubled, total, float64(total)/100, r.skipped)
		assert.GreaterOrEqual(t, doubled, 90, "the plain lock lets most ticks run on several replicas")
	})
}

// TestOncePerTickLongJob: a job that runs 3 s, longer than the replicas'
// fires are apart: the replicas that fire while it runs wait for it, then
// skip the tick.
func TestOncePerTickLongJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		r := &recorder{}
		first, last := fleetRun(t, fleetHosts, 20, period, func(h host) gocron.Scheduler {
			l, err := NewLocker(srv.Client(h.name), &Options{Period: period, Once: &azlease.DoOnceOptions{Identity: h.name, PollInterval: 500 * time.Millisecond}})
			require.NoError(t, err)
			l.now = skewedClock{Clock: clockwork.NewRealClock(), skew: h.skew}.Now
			return scheduler(t, h, period, func(clockwork.Clock) gocron.JobOption { return l.StartAt() },
				gocron.WithDistributedLocker(recordingLocker{l, r}), onceJob(r, l, h, 3*time.Second))
		})
		t.Log(checkOncePerTick(t, r, first, last, period))
	})
}

// TestOncePerTickRunnerCut: the host running a tick is cut off from storage
// mid-run (a crash, as far as storage can tell: its job goes on for 40 s
// unseen), and its Unlock says its run may not be recorded. With a job every
// minute, a replica that fired for the tick meanwhile waits, takes the tick
// over when the runner's lease expires (15 s), and runs it, as DoOnce takes
// over a run whose runner died. With a job every 5 s, the lease outlasts the
// half period the others wait: they give up on that tick (ErrTickBusy)
// rather than miss the next ones. Every other tick runs once.
func TestOncePerTickRunnerCut(t *testing.T) {
	for _, tc := range []struct {
		period   time.Duration
		ticks    int
		takeover bool
	}{{time.Minute, 6, true}, {5 * time.Second, 20, false}} {
		t.Run(tc.period.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runnerCut(t, tc.period, tc.ticks, tc.takeover) })
		})
	}
}

func runnerCut(t *testing.T, period time.Duration, ticks int, takeover bool) {
	srv := azleasetest.NewServer(t, nil)
	r := &recorder{}
	hosts := fleetHosts[:3]
	cutAt := time.Now().Add(30 * time.Second).UTC() // the first run of this tick or later is cut off
	var victim atomic.Pointer[runRecord]
	unrecorded := make(chan error, 1)
	first, last := fleetRun(t, hosts, ticks, period, func(h host) gocron.Scheduler {
		l, err := NewLocker(srv.Client(h.name), &Options{Period: period, Once: &azlease.DoOnceOptions{Identity: h.name}})
		require.NoError(t, err)
		l.now = skewedClock{Clock: clockwork.NewRealClock(), skew: h.skew}.Now
		job := onceJob(r, l, h, 10*time.Millisecond)
		return scheduler(t, h, period, func(clockwork.Clock) gocron.JobOption { return l.StartAt() },
			gocron.WithDistributedLocker(cutLocker{recordingLocker{l, r}, unrecorded}), func(clock clockwork.Clock) {
				rec := runRecord{host: h.name, tick: l.Tick(clock.Now()), start: time.Now()}
				if !rec.tick.Before(cutAt) && victim.CompareAndSwap(nil, &rec) {
					r.add(rec)
					srv.Partition(h.name, azleasetest.Blackhole)
					time.Sleep(40 * time.Second)
					return
				}
				job(clock)
			})
	})
	cut := victim.Load()
	require.NotNil(t, cut)
	require.ErrorIs(t, <-unrecorded, azlease.ErrOnceUnrecorded, "the cut host learns its run may not be recorded")
	runs, ticksRun := r.byTick()
	for _, tk := range ticksRun {
		if tk != cut.tick {
			assert.Len(t, runs[tk], 1, "tick %s", tk)
		}
	}
	for tk := first; !tk.After(last); tk = tk.Add(period) {
		assert.NotEmpty(t, runs[tk], "tick %s ran", tk)
	}
	if !takeover {
		require.Len(t, runs[cut.tick], 1, "only the cut host's run: %v", runs[cut.tick])
		assert.NotZero(t, r.skipped["busy"], "the others gave up on the cut tick")
		t.Logf("cut %s at tick %s; the others gave up on it; refusals %v", cut.host, cut.tick.Format("15:04:05"), r.skipped)
		return
	}
	require.Len(t, runs[cut.tick], 2, "the cut host's run, and the takeover: %v", runs[cut.tick])
	over := runs[cut.tick][1]
	assert.NotEqual(t, cut.host, over.host)
	assert.GreaterOrEqual(t, over.start.Sub(cut.start), 14*time.Second, "taken over after the cut runner's lease expired")
	t.Logf("cut %s at tick %s; taken over by %s %v later; refusals %v", cut.host, cut.tick.Format("15:04:05"), over.host, over.start.Sub(cut.start), r.skipped)
}

// cutLocker hands the cut host's Unlock error to the test.
type cutLocker struct {
	recordingLocker
	unrecorded chan error
}

func (l cutLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	lk, err := l.recordingLocker.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return cutLock{lk, l}, nil
}

type cutLock struct {
	gocron.Lock
	l cutLocker
}

func (c cutLock) Unlock(ctx context.Context) error {
	err := c.Lock.Unlock(ctx)
	if err != nil {
		select {
		case c.l.unrecorded <- err:
		default:
		}
	}
	return err
}

// TestElector: five schedulers with the Elector adapter: only the leader
// runs the job, once per its period; when the leader stops, another leads
// and runs it.
func TestElector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		r := &recorder{}
		electors := map[string]*azlease.Elector{}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		stopped := false
		first, last := fleetRun(t, fleetHosts, 40, period, func(h host) gocron.Scheduler {
			e, err := azlease.NewElector(srv.Client(h.name), "report-leader", &azlease.ElectorOptions{Identity: h.name})
			require.NoError(t, err)
			require.NoError(t, e.Start(ctx, Lead))
			electors[h.name] = e
			return scheduler(t, h, period, nil, gocron.WithDistributedElector(NewElector(e)), func(clock clockwork.Clock) {
				r.add(runRecord{host: h.name, start: time.Now()})
				if !stopped && len(r.runs) == 10 { // stop the leader: another takes over
					stopped = true
					go func() { _ = e.Stop(context.Background()) }()
				}
			})
		})
		for _, e := range electors {
			require.NoError(t, e.Stop(context.Background()))
		}
		hosts := map[string]int{}
		var prev time.Time
		for _, rec := range r.runs {
			hosts[rec.host]++
			if !prev.IsZero() {
				assert.Greater(t, rec.start.Sub(prev), 1500*time.Millisecond, "never two runs for one tick")
			}
			prev = rec.start
		}
		n := int(last.Sub(first)/period) + 1
		assert.GreaterOrEqual(t, len(r.runs), n-4, "at most a few ticks missed around the change of leader")
		assert.Len(t, hosts, 2, "the first leader, then its successor: %v", hosts)
		t.Logf("%d runs over %d periods, by host %v", len(r.runs), n, hosts)
	})
}

// TestOncePerTickFailedRun: a job that returns an error counts as its
// tick's run, as gocron counts it: the other replicas skip the tick (the
// record says done), gocron reports the error to the runner's
// AfterJobRunsWithError listeners, and the next tick runs as usual.
func TestOncePerTickFailedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := azleasetest.NewServer(t, nil)
		r := &recorder{}
		var failures atomic.Int32
		first, last := fleetRun(t, fleetHosts[:3], 10, period, func(h host) gocron.Scheduler {
			l, err := NewLocker(srv.Client(h.name), &Options{Period: period, Once: &azlease.DoOnceOptions{Identity: h.name}})
			require.NoError(t, err)
			clock := skewedClock{Clock: clockwork.NewRealClock(), skew: h.skew}
			l.now = clock.Now
			s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedLocker(recordingLocker{l, r}))
			require.NoError(t, err)
			_, err = s.NewJob(gocron.DurationJob(period), gocron.NewTask(func() error {
				r.add(runRecord{host: h.name, tick: l.Tick(clock.Now()), start: time.Now()})
				return errors.New("the report failed")
			}), gocron.WithName("report"), l.StartAt(), gocron.WithEventListeners(
				gocron.AfterJobRunsWithError(func(_ uuid.UUID, _ string, err error) { failures.Add(1) })))
			require.NoError(t, err)
			s.Start()
			return s
		})
		summary := checkOncePerTick(t, r, first, last, period)
		assert.Equal(t, int32(len(r.runs)), failures.Load(), "gocron saw every failure")
		assert.Zero(t, r.skipped["busy"]+r.skipped["other"], "nobody retried a failed tick: %v", r.skipped)
		t.Log(summary)
	})
}
