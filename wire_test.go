package azlease_test

import (
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease/internal/live"
)

// wire is where a wire test runs (internal/live): the shared Azurite, or a
// live Azure account when AZLEASE_TEST_CONNECTION_STRING or
// AZLEASE_TEST_ACCOUNT_URL is set (make live-azure), in a throw-away
// container deleted when the test ends.
type wire struct {
	t    testing.TB
	b    *live.Backend
	name string // the container
}

func newWire(t testing.TB, prefix string) *wire {
	t.Helper()
	b := live.Select(t)
	return &wire{t: t, b: b, name: b.Container(t, prefix)}
}

// client returns a client (a "process") for the test's container, on its
// own transport.
func (w *wire) client() *container.Client {
	w.t.Helper()
	return w.b.Client(w.t, w.name, nil)
}

// lossy returns a client whose responses are thrown away when lose says so.
func (w *wire) lossy(lose func(*http.Request) bool) *container.Client {
	w.t.Helper()
	return w.b.Client(w.t, w.name, func(tr *http.Transport) policy.Transporter {
		return &lossyTransport{next: tr, lose: lose}
	})
}

// killable returns a client that its killSwitch crashes.
func (w *wire) killable() (*container.Client, *killSwitch) {
	w.t.Helper()
	ks := &killSwitch{}
	cc := w.b.Client(w.t, w.name, func(tr *http.Transport) policy.Transporter {
		ks.next = tr
		return ks
	})
	return cc, ks
}
