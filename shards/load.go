package shards

// Load: what a shard's work reports (Shard.SetLoad), how the replica
// smooths it (an exponentially weighted moving average with a half-life of
// LoadHalfLife), and its compact form in metadata: a two-character code on
// a logarithmic scale (steps of 1 %), keyed by a six-character digest of
// the shard's name, so that a membership carries hundreds of loads within
// Azure's 8 KiB whatever the names' length.

import (
	"crypto/sha256"
	"encoding/base64"
	"math"
	"sync"
	"time"
)

// LoadHalfLife is the half-life of the smoothing of a shard's load: a
// change in the reported load shows half in the smoothed value after 10 s,
// 7/8 after 30 s. A rise of more than LoadRiseStep is taken faster: a
// second average, with a half-life of LoadRiseHalfLife, follows the
// reports, and once it exceeds the smoothed value by that much the smoothed
// value jumps to it and follows it up for LoadRiseFollow (it never falls
// below it then), so that a jump shows whole within about 10 s rather than
// its last quarter over the slow half-life. So a shard whose load jumps is
// acted on within seconds, on about its new load, while noise of ±20 % and
// brief dips move nothing.
const (
	LoadHalfLife     = 10 * time.Second
	LoadRiseHalfLife = 2 * time.Second
	LoadRiseStep     = 0.3
	LoadRiseFollow   = 4 * LoadRiseHalfLife
)

// loadMeter smooths one shard's reported load for one term. The reported
// value is a rate held until the next report; two averages follow it, in
// continuous time, with LoadHalfLife and LoadRiseHalfLife; the slow one is
// the smoothed value, and jumps to the fast one on a rise (LoadRiseStep),
// then follows it up until LoadRiseFollow after the jump.
type loadMeter struct {
	mu       sync.Mutex
	known    bool      // a value exists: reported in this term, or carried from the previous owner
	reported bool      // the work reported in this term
	rate     float64   // the rate held since at
	smooth   float64   // the slow average at at
	fast     float64   // the fast average at at
	at       time.Time // when the averages were last brought up to date
	follow   time.Time // until then, the smoothed value follows the fast one up (a rise was taken)
}

// validLoad reports whether v is a load SetLoad takes: finite and not
// negative.
func validLoad(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// advance brings smooth up to now with the rate held. m.mu is held.
func (m *loadMeter) advance(now time.Time) {
	if !m.known {
		return
	}
	if m.at.Before(m.follow) && m.follow.Before(now) {
		m.step(m.follow) // the end of the following, then on
	}
	m.step(now)
}

// step advances both averages from m.at to now, at most to the end of a
// following under way (advance splits there). m.mu is held.
func (m *loadMeter) step(now time.Time) {
	dt := now.Sub(m.at)
	if dt <= 0 {
		return
	}
	f := math.Exp2(-float64(dt) / float64(LoadHalfLife))
	m.smooth = m.rate + (m.smooth-m.rate)*f
	f = math.Exp2(-float64(dt) / float64(LoadRiseHalfLife))
	m.fast = m.rate + (m.fast-m.rate)*f
	m.at = now
	switch {
	case m.fast > m.smooth*(1+LoadRiseStep):
		m.smooth, m.follow = m.fast, now.Add(LoadRiseFollow)
	case !now.After(m.follow) && m.fast > m.smooth:
		m.smooth = m.fast
	}
}

// set records a report of v at now. The first value of a shard (nothing
// reported or carried before) is taken as it is: the smoothed value starts
// there rather than from zero.
func (m *loadMeter) set(v float64, now time.Time) {
	if m == nil || !validLoad(v) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.known {
		m.known, m.smooth, m.fast, m.at = true, v, v, now
	}
	m.advance(now)
	m.rate, m.reported = v, true
}

// carry starts the meter from the smoothed load the previous owner handed
// on: it is held as the rate until the work reports.
func (m *loadMeter) carry(v float64, now time.Time) {
	if m == nil || !validLoad(v) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.known {
		return
	}
	m.known, m.smooth, m.fast, m.rate, m.at = true, v, v, v, now
}

// value is the smoothed load at now, and whether there is one.
func (m *loadMeter) value(now time.Time) (float64, bool) {
	if m == nil {
		return 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.known {
		return 0, false
	}
	m.advance(now)
	return m.smooth, true
}

// The compact form of a load: two characters of a 64-character alphabet,
// 4,096 codes. Code 0 is zero; code c ≥ 1 is loadMin × loadStep^(c−1), from
// 10⁻⁶ to about 4.6 × 10¹¹ in steps of 1 % (a value is read back within
// 0.5 %). Loads below 10⁻⁶ are written as 10⁻⁶, above the largest as the
// largest.
const (
	loadAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_"
	loadMin      = 1e-6
	loadStep     = 1.01
	loadCodes    = 64 * 64
	loadCodeLen  = 2
	// loadKeyLen is the length of a shard's key in a membership's loads:
	// 36 bits of the SHA-256 of its name, in base64url.
	loadKeyLen = 6
	// loadEntryLen is one published load: key and code.
	loadEntryLen = loadKeyLen + loadCodeLen
)

var loadDigits = func() (d [256]int8) {
	for i := range d {
		d[i] = -1
	}
	for i := range len(loadAlphabet) {
		d[loadAlphabet[i]] = int8(i)
	}
	return d
}()

// loadCode is the code of v (a valid load).
func loadCode(v float64) int {
	if !(v > 0) {
		return 0
	}
	c := 1 + int(math.Round(math.Log(v/loadMin)/math.Log(loadStep)))
	return min(max(c, 1), loadCodes-1)
}

// loadOfCode is the load a code stands for.
func loadOfCode(c int) float64 {
	if c <= 0 {
		return 0
	}
	return loadMin * math.Pow(loadStep, float64(c-1))
}

// encodeLoad is v's two characters.
func encodeLoad(v float64) string {
	c := loadCode(v)
	return string([]byte{loadAlphabet[c/64], loadAlphabet[c%64]})
}

// decodeLoad reads two characters; ok is false when they are not a code.
func decodeLoad(s string) (float64, bool) {
	if len(s) != loadCodeLen {
		return 0, false
	}
	hi, lo := loadDigits[s[0]], loadDigits[s[1]]
	if hi < 0 || lo < 0 {
		return 0, false
	}
	return loadOfCode(int(hi)*64 + int(lo)), true
}

// quantize is v as it reads back from its code.
func quantize(v float64) float64 { return loadOfCode(loadCode(v)) }

// loadKey is a shard's key in a membership's loads.
func loadKey(shard string) string {
	h := sha256.Sum256([]byte(shard))
	return base64.RawURLEncoding.EncodeToString(h[:5])[:loadKeyLen]
}
