package azlease

import (
	"math"
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
