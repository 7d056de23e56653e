package azlease

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseMarkerValidatesControlFields: the state and attempt count decide
// whether fn may run, so a marker whose control fields are not what azlease
// writes is corrupt; informational fields stay lenient.
func TestParseMarkerValidatesControlFields(t *testing.T) {
	marker := func(state, attempts string) map[string]*string {
		return map[string]*string{"Azleaseoncestate": ptr(state), "Azleaseonceattempts": ptr(attempts)}
	}
	for _, md := range []map[string]*string{
		marker("failed", "-1"),
		marker("pending", "9223372036854775807"),
		marker("running", "99999999999999999999"),
		marker("failed", "1000001"),
		marker("done", "x"),
		marker("done", ""),
		marker("finished", "1"),
		marker("", "1"),
		{"azleaseoncestate": ptr("done")},
		{"azleaseonceattempts": ptr("1")},
		{"azleaseoncemaxattempts": ptr("3")}, // a limit without a marker
		withLimit(marker("failed", "1"), "0"),
		withLimit(marker("failed", "1"), "1001"),
		withLimit(marker("failed", "1"), "-3"),
		withLimit(marker("failed", "1"), "three"),
		withLimit(marker("failed", "1"), ""),
	} {
		_, err := parseMarker(md)
		require.ErrorIs(t, err, ErrOnceCorrupt, "%v", md)
		assert.ErrorContains(t, err, "ResetOnce")
	}

	st, err := parseMarker(marker("failed", "1000000"))
	require.NoError(t, err)
	assert.Equal(t, OnceStatus{State: OnceFailed, Attempts: 1000000}, st)

	st, err = parseMarker(withLimit(marker("failed", "2"), "1000"))
	require.NoError(t, err)
	assert.Equal(t, OnceStatus{State: OnceFailed, Attempts: 2, MaxAttempts: 1000}, st, "the limit is recorded")
	st, err = parseMarker(withLimit(marker("pending", "0"), "1"))
	require.NoError(t, err)
	assert.Equal(t, OnceStatus{State: OncePending, MaxAttempts: 1}, st, "a pending marker with a limit is a marker")

	md := marker("done", "2")
	md["azleaseonceholder"] = ptr("%zz")     // not an escape: absent
	md["azleaseonceepoch"] = ptr("-3")       // not a number: absent
	md["azleaseoncetime"] = ptr("yesterday") // absent
	md["azleaseonceerror"] = ptr(strings.Repeat("e", 5000))
	st, err = parseMarker(md)
	require.NoError(t, err)
	assert.Equal(t, OnceDone, st.State)
	assert.Equal(t, 2, st.Attempts)
	assert.Empty(t, st.Holder)
	assert.Zero(t, st.Epoch)
	assert.True(t, st.Time.IsZero())
	assert.Len(t, st.LastError, maxErrorText, "clipped as it would be written")

	st, err = parseMarker(nil)
	require.NoError(t, err)
	assert.Equal(t, OnceStatus{State: OncePending}, st, "no marker")
}

// withLimit adds a recorded MaxAttempts to a marker.
func withLimit(md map[string]*string, limit string) map[string]*string {
	md["AzleaseonceMaxattempts"] = ptr(limit)
	return md
}

// FuzzOnceMarker: any metadata parses without panicking; a marker that
// parses has a known state, an attempt count from 0 to 1,000,000 and a
// recorded limit from 1 to 1000 (or none), and survives a format/parse
// round trip unchanged; one that does not is corrupt, and what ResetOnce
// writes over it parses; user keys are kept.
func FuzzOnceMarker(f *testing.F) {
	f.Add(uint16(0x7f), "done", "1", "node%2Da", "7", "1700000000123", "boom", "3", "Owner", "ops")
	f.Add(uint16(0x03), "failed", "-1", "", "", "", "", "", "", "")
	f.Add(uint16(0x83), "running", "9223372036854775807", "", "", "", "", "", "azleaseoncestate", "done")
	f.Add(uint16(0x3f), "pending", "0", "%zz", "18446744073709551616", "-9223372036854775808", strings.Repeat("%E2%80%A6", 400), "", "x", "y")
	f.Add(uint16(0x01), "finished", "", "", "", "", "", "", "azleaseepoch", "3")
	f.Add(uint16(0x20), "", "", "", "", "", "only an error", "", "", "")
	f.Add(uint16(0x43), "failed", "2", "", "", "", "", "1001", "", "")
	f.Add(uint16(0xc3), "pending", "0", "", "", "", "", "1", "", "")
	f.Add(uint16(0x40), "", "", "", "", "", "", "5", "", "")
	keys := []string{metaOnceState, metaOnceAttempts, metaOnceHolder, metaOnceEpoch, metaOnceTime, metaOnceError, metaOnceLimit}
	f.Fuzz(func(t *testing.T, present uint16, state, attempts, holder, epoch, when, errText, limit, k, v string) {
		// Bits 0-6 say which marker keys are present, bit 7 spells them
		// as Go canonicalises header names; k=v is one more key.
		vals := []string{state, attempts, holder, epoch, when, errText, limit}
		md := map[string]*string{}
		for i, key := range keys {
			if present&(1<<i) == 0 {
				continue
			}
			if present&(1<<7) != 0 {
				key = strings.ToUpper(key[:1]) + key[1:]
			}
			md[key] = ptr(vals[i])
		}
		if k != "" {
			md[k] = ptr(v)
		}

		st, err := parseMarker(md)
		if err != nil {
			require.ErrorIs(t, err, ErrOnceCorrupt)
			require.Contains(t, err.Error(), "ResetOnce")
			reset, err := parseMarker(withMarker(md, OnceStatus{State: OncePending}))
			require.NoError(t, err, "what ResetOnce writes is a valid marker")
			require.Equal(t, OnceStatus{State: OncePending}, reset)
			return
		}
		require.Contains(t, []OnceState{OncePending, OnceRunning, OnceDone, OnceFailed}, st.State)
		require.GreaterOrEqual(t, st.Attempts, 0)
		require.LessOrEqual(t, st.Attempts, maxMarkerAttempts)
		if st.MaxAttempts != 0 {
			require.GreaterOrEqual(t, st.MaxAttempts, 1)
			require.LessOrEqual(t, st.MaxAttempts, maxOnceAttempts)
		}
		require.LessOrEqual(t, len(st.LastError), maxErrorText)
		require.False(t, st.Locked)

		out := withMarker(md, st)
		back, err := parseMarker(out)
		require.NoError(t, err)
		require.Equal(t, st, back)
		require.Equal(t, st.Time.UnixMilli(), back.Time.UnixMilli())
		for key, val := range md {
			if !isOnceKey(key) {
				require.Equal(t, val, out[key], "user key %q kept", key)
			}
		}

		// The next attempt's count does not overflow.
		require.Greater(t, st.Attempts+1, st.Attempts)
	})
}

func isOnceKey(k string) bool {
	for _, ok := range onceKeys {
		if strings.EqualFold(k, ok) {
			return true
		}
	}
	return false
}
