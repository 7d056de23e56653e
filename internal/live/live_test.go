package live_test

import (
	"context"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/azlease/azlease/internal/azurite"
	"github.com/azlease/azlease/internal/live"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { azurite.StopShared() }))
}

// TestThrowAwayOnAzurite opens the "azure" backend with Azurite's connection
// string, as if it were a live account: the container a test works in exists
// during the test and is gone after it.
func TestThrowAwayOnAzurite(t *testing.T) {
	az := azurite.Require(t)
	b, err := live.Open(live.Account{ConnectionString: az.ConnectionString()})
	require.NoError(t, err)
	require.True(t, b.Live())
	var name string
	t.Run("test", func(t *testing.T) {
		name = b.Container(t, "ignored-on-azure")
		require.Regexp(t, `^azlease-live-[0-9a-f]{16}$`, name)
		_, err := b.Client(t, name, nil).GetProperties(context.Background(), nil)
		require.NoError(t, err, "created when the test starts")
	})
	_, err = b.Client(t, name, nil).GetProperties(context.Background(), nil)
	require.True(t, bloberror.HasCode(err, bloberror.ContainerNotFound), "deleted when the test ends: %v", err)
}

func TestFromEnv(t *testing.T) {
	t.Setenv(live.EnvConnectionString, "")
	t.Setenv(live.EnvAccountURL, "")
	_, ok := live.FromEnv()
	require.False(t, ok)
	t.Setenv(live.EnvAccountURL, " https://example.blob.core.windows.net/ ")
	a, ok := live.FromEnv()
	require.True(t, ok)
	require.Equal(t, "https://example.blob.core.windows.net/", a.AccountURL)
	_, err := live.Open(live.Account{})
	require.Error(t, err)
}
