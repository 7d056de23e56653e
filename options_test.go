package azlease_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/internal/emulator"
)

// containerAt returns a client for the named container on an in-process
// emulator; it makes no request.
func containerAt(t testing.TB, name string) *container.Client {
	t.Helper()
	cc, err := emulator.New(nil).ContainerClient(name, "")
	require.NoError(t, err)
	return cc
}

func requireOptionError(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, azlease.ErrInvalidOptions)
	var oe *azlease.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, field, oe.Field)
	assert.Contains(t, err.Error(), field, "the message names the field")
}

func TestNewLeaseRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  azlease.LeaseOptions
		field string
	}{
		{"duration too short", azlease.LeaseOptions{Duration: 14 * time.Second}, "LeaseOptions.Duration"},
		{"duration too long", azlease.LeaseOptions{Duration: 61 * time.Second}, "LeaseOptions.Duration"},
		{"duration not whole seconds", azlease.LeaseOptions{Duration: 15500 * time.Millisecond}, "LeaseOptions.Duration"},
		{"infinite duration", azlease.LeaseOptions{Duration: -1}, "LeaseOptions.Duration"},
		{"negative duration", azlease.LeaseOptions{Duration: -15 * time.Second}, "LeaseOptions.Duration"},
		{"margin too small", azlease.LeaseOptions{SafetyMargin: time.Millisecond}, "LeaseOptions.SafetyMargin"},
		{"margin too large", azlease.LeaseOptions{SafetyMargin: 4 * time.Second}, "LeaseOptions.SafetyMargin"},
		{"negative margin", azlease.LeaseOptions{SafetyMargin: -time.Second}, "LeaseOptions.SafetyMargin"},
		{"attempt timeout too short", azlease.LeaseOptions{AttemptTimeout: time.Millisecond}, "LeaseOptions.AttemptTimeout"},
		{"attempt timeout leaves no room for retries", azlease.LeaseOptions{AttemptTimeout: 5 * time.Second}, "LeaseOptions.AttemptTimeout"},
		{"identity too long", azlease.LeaseOptions{Identity: strings.Repeat("x", 65)}, "LeaseOptions.Identity"},
		{"identity with a newline", azlease.LeaseOptions{Identity: "a\nb"}, "LeaseOptions.Identity"},
		{"identity not UTF-8", azlease.LeaseOptions{Identity: "\xff"}, "LeaseOptions.Identity"},
		{"history too long", azlease.LeaseOptions{History: 17}, "LeaseOptions.History"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := azlease.NewLease(containerAt(t, "locks"), "x", &tc.opts)
			requireOptionError(t, err, tc.field)
		})
	}
}

func TestNewLeaseAcceptsBoundaries(t *testing.T) {
	for _, opts := range []*azlease.LeaseOptions{
		nil,
		{},
		{Duration: 15 * time.Second, SafetyMargin: 150 * time.Millisecond},
		{Duration: 60 * time.Second, SafetyMargin: 15 * time.Second, AttemptTimeout: 15 * time.Second},
		{Identity: strings.Repeat("é", 32), History: 16},
		{History: -1, NoCreate: true},
	} {
		l, err := azlease.NewLease(containerAt(t, "locks"), "x", opts)
		require.NoError(t, err, "%+v", opts)
		require.NotNil(t, l)
	}
}

func TestNewLeaseRejectsBadTargets(t *testing.T) {
	_, err := azlease.NewLease(nil, "x", nil)
	requireOptionError(t, err, "container")

	for _, name := range []string{"ab", "Locks", "lo_cks", "-locks", "locks-", "lo--cks", strings.Repeat("a", 64)} {
		_, err := azlease.NewLease(containerAt(t, name), "x", nil)
		requireOptionError(t, err, "container")
	}
	for _, name := range []string{"$root", "abc", "a-b-c", strings.Repeat("a", 63)} {
		_, err := azlease.NewLease(containerAt(t, name), "x", nil)
		require.NoError(t, err, name)
	}

	for _, name := range []string{"", strings.Repeat("a", 1025), "a.", "a/", "a/./b", "x./y", "a/../b", "a\x00b", "a\tb", "\xff", "a\\b", strings.Repeat("a/", 254) + "a"} {
		_, err := azlease.NewLease(containerAt(t, "locks"), name, nil)
		requireOptionError(t, err, "blobName")
	}
	for _, name := range []string{"a", "jobs/nightly report", "ünïcode", strings.Repeat("a", 1024), strings.Repeat("a/", 253) + "a"} {
		_, err := azlease.NewLease(containerAt(t, "locks"), name, nil)
		require.NoError(t, err, "%q", name)
	}
}

// FuzzLeaseOptions: no combination of options or names makes NewLease panic,
// and whatever it accepts respects Azure's limits.
func FuzzLeaseOptions(f *testing.F) {
	f.Add(int64(15*time.Second), int64(0), int64(0), "node-a", 0, "leader", "locks")
	f.Add(int64(-1), int64(-1), int64(-1), "", -5, "", "")
	f.Add(int64(60*time.Second), int64(15*time.Second), int64(15*time.Second), "x\n", 17, "a/", "Bad")
	f.Add(int64(1<<62), int64(1<<62), int64(1<<62), strings.Repeat("é", 40), 1<<30, "\xff", "$root")
	cc := containerAt(f, "locks")
	f.Fuzz(func(t *testing.T, d, margin, attempt int64, identity string, history int, blobName, containerName string) {
		target := cc
		if containerName != "locks" && utf8.ValidString(containerName) && !strings.ContainsAny(containerName, "/?#%") {
			target = containerAt(t, containerName)
		}
		opts := &azlease.LeaseOptions{
			Duration: time.Duration(d), SafetyMargin: time.Duration(margin), AttemptTimeout: time.Duration(attempt),
			Identity: identity, History: history,
		}
		l, err := azlease.NewLease(target, blobName, opts)
		if err != nil {
			var oe *azlease.OptionError
			require.True(t, errors.As(err, &oe), "%v", err)
			require.NotEmpty(t, oe.Field)
			return
		}
		dur := l.Duration()
		require.GreaterOrEqual(t, dur, azlease.MinDuration)
		require.LessOrEqual(t, dur, azlease.MaxDuration)
		require.Zero(t, dur%time.Second)
		require.LessOrEqual(t, len(identity), azlease.MaxIdentity)
		require.LessOrEqual(t, history, azlease.MaxHistory)
		require.NotEmpty(t, blobName)
		require.LessOrEqual(t, len(blobName), 1024)
	})
}
