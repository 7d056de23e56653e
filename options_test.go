package azlease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
)

// containerAt returns a client for the named container on an in-process
// emulator; it makes no request.
func containerAt(t testing.TB, name string) *container.Client {
	t.Helper()
	cc, err := azleasetest.New(nil).ContainerClient(name, "")
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
		{"duration too short", azlease.LeaseOptions{LeaseDuration: 14 * time.Second}, "LeaseOptions.LeaseDuration"},
		{"duration too long", azlease.LeaseOptions{LeaseDuration: 61 * time.Second}, "LeaseOptions.LeaseDuration"},
		{"duration not whole seconds", azlease.LeaseOptions{LeaseDuration: 15500 * time.Millisecond}, "LeaseOptions.LeaseDuration"},
		{"infinite duration", azlease.LeaseOptions{LeaseDuration: -1}, "LeaseOptions.LeaseDuration"},
		{"negative duration", azlease.LeaseOptions{LeaseDuration: -15 * time.Second}, "LeaseOptions.LeaseDuration"},
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
		{LeaseDuration: 15 * time.Second, SafetyMargin: 150 * time.Millisecond},
		{LeaseDuration: 60 * time.Second, SafetyMargin: 15 * time.Second, AttemptTimeout: 15 * time.Second},
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
			LeaseDuration: time.Duration(d), SafetyMargin: time.Duration(margin), AttemptTimeout: time.Duration(attempt),
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

// TestOptionErrorsQuoteLittle: an *OptionError quotes at most 64 bytes of a
// bad value and says how long it was, wherever the value comes from.
func TestOptionErrorsQuoteLittle(t *testing.T) {
	huge := strings.Repeat("é", 5120) // 10 kB
	ctx := context.Background()
	cc := containerAt(t, "locks")
	l, err := azlease.NewLease(cc, "x", nil)
	require.NoError(t, err)
	fn := func(context.Context, azlease.Token) error { return nil }
	check := func(name string, err error) {
		t.Helper()
		require.ErrorIs(t, err, azlease.ErrInvalidOptions, name)
		msg := err.Error()
		assert.Less(t, len(msg), 300, "%s: %d bytes", name, len(msg))
		assert.Contains(t, msg, " bytes)", name)
		assert.True(t, utf8.ValidString(msg), "%s: cut at a character boundary", name)
	}
	_, err = azlease.NewLease(cc, "x", &azlease.LeaseOptions{Identity: huge})
	check("identity", err)
	_, err = azlease.NewElector(cc, "x", &azlease.ElectorOptions{Identity: huge})
	check("elector identity", err)
	_, err = azlease.NewLease(cc, huge, nil)
	check("blob name", err)
	_, err = azlease.NewMutex(containerAt(t, strings.Repeat("a", 10240)), "x", nil)
	check("container name", err)
	_, err = azlease.DoOnce(ctx, cc, huge, nil, fn)
	check("once key", err)
	_, err = azlease.InspectOnce(ctx, cc, "k", &azlease.DoOnceOptions{Prefix: huge})
	check("once prefix", err)
	err = l.HandOff(ctx, huge)
	check("proposed lease ID", err)
	check("metadata name", l.SetMetadata(ctx, map[string]string{strings.Repeat("x", 10240) + "-": "v"}))
	_, err = azlease.ContainerClientFromConnectionString(azlease.DevelopmentConnectionString, huge, nil)
	check("connection string container", err)
	_, err = azlease.ContainerClientWithCredential("ftp://"+huge, "locks", nil, nil)
	check("service URL", err)
	_, err = azlease.ContainerClientFromSASURL("https://a.example/"+huge+"?sv=1", nil)
	check("SAS URL", err)

	// Short values are quoted whole, as before.
	_, err = azlease.NewLease(cc, "x", &azlease.LeaseOptions{Identity: "a\nb"})
	require.ErrorContains(t, err, `"a\nb": contains a non-printable character`)
}
