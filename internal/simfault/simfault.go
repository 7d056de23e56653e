// Package simfault holds what the simulations of the root package and of
// package shards draw their per-request faults with: a random source per
// client and operation, and the mix of transient faults. One copy, so that
// both kinds of simulation meet the same faults and a seed means the same
// draws in each.
package simfault

import (
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/azlease/azlease/azleasetest"
)

// Sources hands out a random source per client and operation, derived
// from the scenario's seed and both names: the fault a client's k-th
// request of an operation meets does not depend on how the other requests
// interleave with it (one shared source would hand out its values in the
// order requests arrive, which goroutine scheduling can change from run to
// run). Not safe for concurrent use: callers hold their own lock.
type Sources struct {
	seed uint64
	m    map[string]*rand.Rand
}

// NewSources returns the sources of a scenario's seed.
func NewSources(seed uint64) *Sources { return &Sources{seed: seed, m: map[string]*rand.Rand{}} }

// For returns the source of r's client and operation, made on first use.
func (s *Sources) For(r azleasetest.Request) *rand.Rand {
	key := Key(r)
	rng, ok := s.m[key]
	if !ok {
		h := fnv.New64a()
		h.Write([]byte(key))
		rng = rand.New(rand.NewPCG(s.seed, h.Sum64()^0xfa017))
		s.m[key] = rng
	}
	return rng
}

// Key is the name of r's client and operation, which Source derives from.
func Key(r azleasetest.Request) string { return r.Client + "/" + string(r.Op) }

// Transient draws the fault for one request from rng, at rate (0 to 1):
// 503 and 500 answers, a lost connection, a lost answer, a slow request or
// answer (up to 3 s), a hang after the request was applied; with lateMax >
// 0 also ApplyLate: no answer (the sender times out), and the server applies
// the request up to lateMax after the sender gave up.
func Transient(rng *rand.Rand, rate float64, lateMax time.Duration) azleasetest.Fault {
	if rng.Float64() >= rate {
		return azleasetest.Fault{}
	}
	fs := []azleasetest.Fault{
		{Action: azleasetest.Fail},
		{Action: azleasetest.Fail, Status: 500, Code: "InternalError"},
		{Action: azleasetest.Drop},
		{Action: azleasetest.ApplyThenDrop},
		{Delay: time.Duration(rng.IntN(3000)) * time.Millisecond},
		{DelayResponse: time.Duration(rng.IntN(3000)) * time.Millisecond},
		{Action: azleasetest.ApplyThenHang},
	}
	if lateMax > 0 {
		fs = append(fs, azleasetest.Fault{Action: azleasetest.ApplyLate, LateBy: time.Duration(rng.Int64N(int64(lateMax) + 1))})
	}
	return fs[rng.IntN(len(fs))]
}
