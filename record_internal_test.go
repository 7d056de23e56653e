package azlease

import (
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

	next := r.next("node b;,%", time.UnixMilli(1700000000123), 3)
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
		r = r.next("h", time.UnixMilli(int64(i)), 4)
	}
	assert.Equal(t, uint64(20), r.epoch)
	require.Len(t, r.history, 4)
	assert.Equal(t, uint64(20), r.history[0].Epoch)
	assert.Equal(t, uint64(17), r.history[3].Epoch)
	assert.Empty(t, record{}.next("h", time.Now(), 0).history)
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
		n := r.next("holder", time.UnixMilli(1), 8)
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
