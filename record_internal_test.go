package azlease

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func ptr(s string) *string { return &s }

func TestRecordKeysAreCaseInsensitive(t *testing.T) {
	// Azure hands metadata back with Go-canonicalised names.
	md := map[string]*string{
		"Azleaseepoch":     ptr("41"),
		"AZLEASEHOLDER":    ptr("node%2Da"),
		"Owner":            ptr("ops"),
		"Azleaseoncestate": ptr("done"), // another azlease key: kept
	}
	r, err := parseRecord(md)
	require.NoError(t, err)
	assert.Equal(t, uint64(41), r.epoch)
	assert.Equal(t, "node-a", r.holder)

	next := r.next(nextEpoch(r.epoch, time.Time{}, 0), "node b;,%", time.UnixMilli(1700000000123), 3)
	out := next.format(md)
	assert.Len(t, out, 6, "old-case record keys are replaced, not duplicated: %v", out)
	assert.Equal(t, "ops", *out["Owner"])
	assert.Equal(t, "done", *out["Azleaseoncestate"])
	back, err := parseRecord(out)
	require.NoError(t, err)
	assert.Equal(t, next, back)
	assert.Equal(t, uint64(42), back.epoch)
	assert.Equal(t, []HistoryEntry{{Holder: "node b;,%", Epoch: 42, Acquired: time.UnixMilli(1700000000123).UTC()}}, back.history)
}

func TestRecordHistoryIsBounded(t *testing.T) {
	var r record
	for i := range 20 {
		r = r.next(r.epoch+1, "h", time.UnixMilli(int64(i)), 4)
	}
	assert.Equal(t, uint64(20), r.epoch)
	require.Len(t, r.history, 4)
	assert.Equal(t, uint64(20), r.history[0].Epoch)
	assert.Equal(t, uint64(17), r.history[3].Epoch)
	assert.Empty(t, record{}.next(1, "h", time.Now(), 0).history)
}

func TestRecordReleasedMarkerBelongsToItsEpoch(t *testing.T) {
	r, err := parseRecord(map[string]*string{"azleaseepoch": ptr("5"), "azleasereleased": ptr("5")})
	require.NoError(t, err)
	assert.True(t, r.released)
	r, err = parseRecord(map[string]*string{"azleaseepoch": ptr("6"), "azleasereleased": ptr("5")})
	require.NoError(t, err)
	assert.False(t, r.released, "a marker from an older term says nothing about this one")
}

func TestRecordBadEpoch(t *testing.T) {
	for _, v := range []string{"x", "-1", "18446744073709551615", "1e3", ""} {
		_, err := parseRecord(map[string]*string{"AzLeaseEpoch": ptr(v)})
		require.ErrorIs(t, err, errBadEpoch, "%q", v)
	}
}

// FuzzRecordMetadata: any metadata parses without panicking; a record that
// parses survives a format/parse round trip; the next epoch is larger; user
// keys are kept.
func FuzzRecordMetadata(f *testing.F) {
	f.Add("azleaseepoch", "7", "azleasehistory", "7,1,a;6,0,b", "Owner", "ops")
	f.Add("Azleaseepoch", "x", "azleaseholder", "%zz", "", "")
	f.Add("azleasehistory", ";;,,;1,2", "azleaseacquired", "-99999999999999999", "azleasereleased", "0")
	f.Add("azleaseepoch", "7", "azleasehistory", "7,1000,a;6,0,b", "azleaseterms", "7;0,s,,,,15;1,f,s,990,-5,15")
	f.Add("azleaseepoch", "7", "azleaseacquired", "1000", "azleaseterms", "9;2,q,r,5;0,x;;,,,,,,;3,zz,b,1e3,,99999999")
	f.Add("azleaseepoch", "3", "azleaseterms", "x;0,f", "azleasehistory", "3,1,a")
	f.Add("azleaseepoch", "9", "azleaseholds", "10000,0,5,1000000000000,7,7,7,7", "azleasenext", "q")
	f.Add("azleaseepoch", "9", "Azleaseholds", "1,2,3,4,5,6,7,8,9", "azleaseholds", "-1,,x")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string) {
		md := map[string]*string{k1: ptr(v1), k2: ptr(v2), k3: ptr(v3)}
		r, err := parseRecord(md)
		if err != nil {
			return
		}
		n := r.next(nextEpoch(r.epoch, time.UnixMilli(1), 0), "holder", time.UnixMilli(1), 8)
		require.Greater(t, n.epoch, r.epoch)
		out := n.format(md)
		back, err := parseRecord(out)
		require.NoError(t, err)
		require.Equal(t, n.epoch, back.epoch)
		require.Equal(t, n.holder, back.holder)
		require.LessOrEqual(t, len(back.history), 8)
		require.Equal(t, n.cur, back.cur, "the latest term's facts survive")
		require.Equal(t, n.history, back.history, "and the history's")
		require.Equal(t, n.holds, back.holds, "the published holds are carried")
		require.LessOrEqual(t, len(back.holds), maxHolds)
		for _, h := range back.holds {
			require.True(t, h >= 0 && h <= maxHold, "hold %v", h)
		}
		pushed := pushHold(r.holds, time.Duration(len(v1))*time.Millisecond)
		require.LessOrEqual(t, len(pushed), maxHolds)
		require.Equal(t, pushed, parseHolds(formatHolds(pushed)), "a pushed hold survives a round trip")
		for k, v := range md {
			if !isRecordKey(k) {
				require.Equal(t, v, out[k])
			}
		}
	})
}

// TestNextEpoch: epochs grow by one from term to term; a lock blob created
// again starts above every epoch of the old one (its creation time, in
// milliseconds, is the floor), and above any epoch the holder saw before.
func TestNextEpoch(t *testing.T) {
	created := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	floor := uint64(created.Unix()) * 1000
	for _, c := range []struct {
		name       string
		prev, seen uint64
		created    time.Time
		want       uint64
	}{
		{"first term on a new blob", 0, 0, created, floor + 1},
		{"later terms count up", floor + 41, 0, created, floor + 42},
		{"created time unknown", 41, 0, time.Time{}, 42},
		{"blob created again a second later", 0, floor + 900, created.Add(time.Second), floor + 1001},
		{"created again within the second: what was seen", 0, floor + 900, created, floor + 901},
		{"an old small epoch jumps to the floor", 3, 0, created, floor + 1},
		{"before 1970 is ignored", 5, 0, time.Unix(-10, 0), 6},
		{"largest", math.MaxUint64 - 2, 0, created, math.MaxUint64 - 1},
	} {
		assert.Equal(t, c.want, nextEpoch(c.prev, c.created, c.seen), c.name)
	}
}

// TestRecordRole: the role goes with the record, case-insensitively, and
// survives the clean-release write (which formats the record it parsed); a
// malformed one reads as absent; a new term's role is its caller's to set.
func TestRecordRole(t *testing.T) {
	r, err := parseRecord(map[string]*string{"Azleaseepoch": ptr("3"), "AZLEASEROLE": ptr("elector")})
	require.NoError(t, err)
	assert.Equal(t, "elector", r.role)
	r.released = true
	back, err := parseRecord(r.format(map[string]*string{"AZLEASEROLE": ptr("elector")}))
	require.NoError(t, err)
	assert.Equal(t, r, back)
	for _, bad := range []string{"", "Elector", "mutex!", "averyveryverylongrole"} {
		r, err := parseRecord(map[string]*string{"azleaseepoch": ptr("3"), "azleaserole": ptr(bad)})
		require.NoError(t, err)
		assert.Empty(t, r.role, "%q", bad)
	}
	assert.Empty(t, r.next(4, "h", time.Now(), 8).role)
	n := r.next(4, "h", time.Now(), 8)
	n.role = "mutex"
	out := n.format(map[string]*string{"azleaserole": ptr("elector")})
	assert.Len(t, out, 5, "epoch, holder, acquired, history, role (the old role replaced): %v", out)
	assert.Equal(t, "mutex", *out[metaRole])
}

// TestRecordTermFacts: how terms began and ended goes with the record, by
// epoch, in a key of its own: an older azlease (which keeps keys it does not
// know, and reads history items of three fields only) still reads every
// history entry, and a term it records beside the key has no facts rather
// than another term's; a record without the key reads as unknown.
func TestRecordTermFacts(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	var r record
	r = r.next(10, "a", t0, 8)
	r.noteChange(ChangeFree, 15*time.Second, 0, termFacts{})
	n := r.next(11, "b", t0.Add(time.Minute), 8)
	end := termFacts{began: ChangeFree, endedBy: ChangeExpired, ended: t0.Add(50 * time.Second), seenHeld: t0.Add(45 * time.Second), duration: 15 * time.Second}
	n.noteChange(ChangeExpired, 20*time.Second, 10, end)
	md := n.format(map[string]*string{"Owner": ptr("ops")})
	back, err := parseRecord(md)
	require.NoError(t, err)
	assert.Equal(t, n, back)
	assert.Equal(t, termFacts{began: ChangeExpired, duration: 20 * time.Second}, back.cur)
	assert.Equal(t, HistoryEntry{Holder: "a", Epoch: 10, Acquired: t0, Began: ChangeFree, EndedBy: ChangeExpired,
		Ended: t0.Add(50 * time.Second), SeenHeld: t0.Add(45 * time.Second), LeaseDuration: 15 * time.Second}, back.history[1])
	assert.Equal(t, "11;0,x,,,,20;1,f,x,50000,45000,15", *md[metaTerms])
	for _, item := range strings.Split(*md[metaHistory], ";") {
		assert.Len(t, strings.Split(item, ","), 3, "history items as older versions read them")
	}

	// An older azlease takes term 12: it rewrites the history (three fields
	// each) and keeps the terms key as it is.
	old := map[string]*string{"azleaseepoch": ptr("12"), "azleaseholder": ptr("c"), "azleaseacquired": ptr("1700000120000"),
		"azleasehistory": ptr("12,1700000120000,c;11,1700000060000,b;10,1700000000000,a"), "azleaseterms": md[metaTerms]}
	back, err = parseRecord(old)
	require.NoError(t, err)
	assert.Equal(t, termFacts{}, back.cur, "the older azlease's term: nothing recorded")
	assert.Equal(t, ChangeUnknown, back.history[0].Began)
	assert.Equal(t, ChangeExpired, back.history[1].Began, "term 11 keeps its facts")
	assert.Equal(t, ChangeExpired, back.history[2].EndedBy)

	// Older records: no facts at all.
	back, err = parseRecord(map[string]*string{"azleaseepoch": ptr("5"), "azleasehistory": ptr("5,1,a;4,0,b")})
	require.NoError(t, err)
	assert.Equal(t, termFacts{}, back.cur)
	assert.Equal(t, ChangeUnknown, back.history[1].EndedBy)
}

// TestRecordTermFactsAreCompact: the facts of a full history (MaxHistory
// terms and the latest, with hour-long offsets) take under 700 bytes of
// Azure's 8 KiB.
func TestRecordTermFactsAreCompact(t *testing.T) {
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	var r record
	for i := range 40 {
		at := t0.Add(time.Duration(i) * time.Hour)
		n := r.next(nextEpoch(r.epoch, t0, 0), strings.Repeat("é", 32), at, MaxHistory)
		n.noteChange(ChangeExpired, time.Hour, r.epoch, termFacts{began: ChangeUnobserved, endedBy: ChangeExpired, ended: at.Add(-time.Millisecond), seenHeld: at.Add(-59 * time.Minute), duration: time.Hour})
		r = n
	}
	v := *r.format(nil)[metaTerms]
	assert.Less(t, len(v), 700, v)
	assert.Len(t, strings.Split(v, ";"), MaxHistory+1, "the base and MaxHistory terms (the latest among them)")
}
