package azlease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/azurite"
)

// runChild lets this test binary serve as a child process of a test (see
// multiprocess_test.go, where it is set): it reports whether the environment
// asks for a child, and the child's exit status.
var runChild = func() (status int, isChild bool) { return 0, false }

func TestMain(m *testing.M) {
	// A child runs before goleak and any test, and exits with its own
	// status.
	if status, isChild := runChild(); isChild {
		os.Exit(status)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { azurite.StopShared() }))
}

// emu is an emulator with helpers for tests. Create it inside the synctest
// bubble so that its clock is the bubble's.
type emu struct {
	*azleasetest.Server
	t *testing.T
}

const testContainer = "locks"

func newEmu(t *testing.T) *emu {
	t.Helper()
	s := azleasetest.New(nil)
	t.Cleanup(s.Close)
	return &emu{Server: s, t: t}
}

// client returns a container client whose requests carry label for the
// fault hook.
func (e *emu) client(label string) *container.Client {
	e.t.Helper()
	cc, err := e.ContainerClient(testContainer, label)
	require.NoError(e.t, err)
	return cc
}

// unique returns prefix with a random suffix: a container name no earlier
// run on the shared Azurite has used.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%08x", prefix, rand.Uint32())
}

// azuriteClient returns a container client for the named container on the
// shared Azurite, on its own transport that the test closes.
func azuriteClient(t testing.TB, name string) *container.Client {
	t.Helper()
	az := azurite.Require(t)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cc, err := az.ContainerClient(name, &http.Client{Transport: tr})
	require.NoError(t, err)
	return cc
}

// raw turns off the SDK's retries for a direct call made by a test.
func raw(ctx context.Context) context.Context {
	return policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
}

// faultsFor applies f only to requests from client label; others pass.
func faultsFor(label string, f func(azleasetest.Request) azleasetest.Fault) azleasetest.FaultFunc {
	return func(r azleasetest.Request) azleasetest.Fault {
		if r.Client != label {
			return azleasetest.Fault{}
		}
		return f(r)
	}
}

// epoch1 is the first fencing epoch of a lock blob created as a synctest
// bubble starts (2000-01-01 00:00:00 UTC): the blob's creation time in
// milliseconds since 1970, plus one. Later terms count up from it.
const epoch1 = uint64(946684800001)
