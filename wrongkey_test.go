package azlease_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/azleasetest"
	"github.com/azlease/azlease/internal/azurite"
)

// A wrong account key is detected within one request: an Elector's Run
// returns the permanent error after its first request, on the emulator
// (Shared Key checked, as Azure does) and on Azurite. These tests count the
// requests and log how long it took on the real wire; README "Operating it"
// quotes them.

// countingTransport counts the requests sent through it.
type countingTransport struct {
	next policy.Transporter
	n    atomic.Int64
}

func (c *countingTransport) Do(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.Do(req)
}

// wrongKey is a valid base64 key that is not the account's.
var wrongKey = "QUJD" + azurite.Key[4:]

// wrongKeyRun runs an Elector on cc, which signs with a wrong key, and
// returns Run's error and what it logged; its Check and health probe fail
// with the refusal.
func wrongKeyRun(t *testing.T, cc *container.Client) (string, error) {
	var logs logBuffer
	el, err := azlease.NewElector(cc, "leader", &azlease.ElectorOptions{Logger: logs.logger()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = el.Run(ctx, func(context.Context, *azlease.Term) error { return errors.New("never leads") })
	check := el.Check()
	assert.ErrorIs(t, check, azlease.ErrPermanent)
	code, body := probe(el.HealthHandler())
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "403")
	t.Logf("Check: %v\nhealth: %d %s", check, code, body)
	return logs.String(), err
}

func TestElectorWrongKeyWithinOneRequest(t *testing.T) {
	t.Run("emulator", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s := azleasetest.New(nil) // checks Shared Key signatures
			defer s.Close()
			tr := &countingTransport{next: s.Transport("a")}
			cred, err := container.NewSharedKeyCredential(azleasetest.Account, wrongKey)
			require.NoError(t, err)
			cc, err := container.NewClientWithSharedKeyCredential("http://127.0.0.1:10000/"+azleasetest.Account+"/"+testContainer, cred,
				&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}})
			require.NoError(t, err)
			start := time.Now()
			logs, err := wrongKeyRun(t, cc)
			require.ErrorIs(t, err, azlease.ErrPermanent)
			assert.Contains(t, err.Error(), "403")
			assert.Equal(t, int64(1), tr.n.Load(), "one request")
			assert.Zero(t, time.Since(start))
			assert.Equal(t, 1, strings.Count(logs, "storage refuses requests"), logs)
			assert.NotContains(t, logs, wrongKey[4:12])
			t.Logf("wrong key on the emulator: Run returned after %d request(s): %v\nlogged:\n%s", tr.n.Load(), err, logs)
		})
	})
	t.Run("azurite", func(t *testing.T) {
		t.Parallel()
		az := azurite.Require(t)
		h := &http.Transport{}
		defer h.CloseIdleConnections()
		tr := &countingTransport{next: &http.Client{Transport: h}}
		cred, err := container.NewSharedKeyCredential(azurite.Account, wrongKey)
		require.NoError(t, err)
		cc, err := container.NewClientWithSharedKeyCredential(az.URL+"/"+unique("wrongkey"), cred,
			&container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: tr}})
		require.NoError(t, err)
		start := time.Now()
		logs, err := wrongKeyRun(t, cc)
		took := time.Since(start)
		require.ErrorIs(t, err, azlease.ErrPermanent)
		assert.Contains(t, err.Error(), "403")
		assert.Equal(t, int64(1), tr.n.Load(), "one request")
		assert.Equal(t, 1, strings.Count(logs, "storage refuses requests"), logs)
		t.Logf("wrong key on Azurite: Run returned after %d request(s), %v: %v", tr.n.Load(), took.Round(time.Millisecond), err)
		t.Logf("logged:\n%s", logs)
	})
}
