package shards_test

// The per-request faults of a shards simulation, as the root package's
// simulations draw them (elector_sim_test.go): 503 and 500 answers, lost
// connections, lost answers, slow requests and answers, hangs, and requests
// applied 0–2 lease durations after their sender gave up; plus, in a bad
// period, lost acquire answers and hand-offs, releases applied late.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/simfault"
)

// faultMix draws the faults of one scenario. Each client's operation has a
// random source of its own, derived from the seed and both names, so the
// fault a replica's k-th listing meets does not depend on how the other
// requests interleave with it.
type faultMix struct {
	mu       sync.Mutex
	sources  *simfault.Sources
	rate     float64
	lateMax  time.Duration
	kinds    []azleasetest.Fault // nil: every kind
	badStart time.Time
	badEnd   time.Time
	late     map[azleasetest.Op]int
	requests int
	log      []string
}

func newFaultMix(seed uint64, rate float64, lease time.Duration) *faultMix {
	return &faultMix{sources: simfault.NewSources(seed), rate: rate, lateMax: 2 * lease, late: map[azleasetest.Op]int{}}
}

// draw chooses the fault for r.
func (m *faultMix) draw(r azleasetest.Request) azleasetest.Fault {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests++
	rng := m.sources.For(r)
	f, bad := m.badPeriod(r, rng)
	if !bad {
		f = m.transient(rng)
	}
	if f.Action == azleasetest.ApplyLate {
		m.late[r.Op]++
	}
	if debugSim && f != (azleasetest.Fault{}) {
		m.log = append(m.log, fmt.Sprintf("%v %s %s %s: %+v (bad period %v)", time.Now().Format("15:04:05.000"), r.Client, r.Op, r.Blob, f, bad))
	}
	return f
}

// transient draws a transient fault, at the mix's rate: one of kinds if
// set, else the mix the root package's simulations draw (simfault).
func (m *faultMix) transient(rng *rand.Rand) azleasetest.Fault {
	if m.kinds == nil {
		return simfault.Transient(rng, m.rate, m.lateMax)
	}
	if rng.Float64() >= m.rate {
		return azleasetest.Fault{}
	}
	return m.kinds[rng.IntN(len(m.kinds))]
}

// badPeriod returns the faults of the seed's bad period, if now is in it:
// most acquire answers and hand-offs (Change Lease) are lost after they
// were applied, releases and hand-off markers are applied late.
func (m *faultMix) badPeriod(r azleasetest.Request, rng *rand.Rand) (azleasetest.Fault, bool) {
	if now := time.Now(); m.badEnd.IsZero() || now.Before(m.badStart) || !now.Before(m.badEnd) {
		return azleasetest.Fault{}, false
	}
	lost := []azleasetest.Fault{{Action: azleasetest.ApplyThenDrop}, {Action: azleasetest.ApplyThenHang}}
	switch r.Op {
	case azleasetest.OpAcquireLease, azleasetest.OpChangeLease:
		if rng.IntN(10) < 7 {
			return lost[rng.IntN(2)], true
		}
	case azleasetest.OpReleaseLease, azleasetest.OpSetMetadata:
		if rng.IntN(2) == 0 {
			return azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: time.Duration(rng.Int64N(int64(m.lateMax) + 1))}, true
		}
	}
	return azleasetest.Fault{}, false
}
