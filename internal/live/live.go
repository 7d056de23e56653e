// Package live selects where the wire tests run: the project's pinned
// Azurite, or a real Azure Storage account when a developer sets
// AZLEASE_TEST_CONNECTION_STRING or AZLEASE_TEST_ACCOUNT_URL (`make
// live-azure`). CI sets neither, so `make test` never reaches Azure.
//
// On a live account every test works in a throw-away container named
// azlease-live-<random hex>, created when the test starts and deleted when
// it ends.
package live

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/azlease/azlease"
	"github.com/azlease/azlease/internal/azurite"
)

// The variables a developer sets for a live run. They are the only ones this
// package reads.
const (
	// EnvConnectionString holds a storage account's connection string (as
	// the Azure portal shows it).
	EnvConnectionString = "AZLEASE_TEST_CONNECTION_STRING"
	// EnvAccountURL holds a Blob service URL
	// (https://account.blob.core.windows.net/); requests are signed by
	// azidentity's DefaultAzureCredential (az login, environment, managed
	// identity), which needs Storage Blob Data Contributor on the account.
	EnvAccountURL = "AZLEASE_TEST_ACCOUNT_URL"
	// EnvResults is the markdown file the live conformance run writes
	// (make live-azure: bench/azure-live.md). Unset: the results go to the
	// test log.
	EnvResults = "AZLEASE_LIVE_RESULTS"
)

// Hint is the one line that says how to run against Azure.
const Hint = "live Azure check not run: set " + EnvConnectionString + " (a storage account's connection string) or " +
	EnvAccountURL + " (https://<account>.blob.core.windows.net/, signed in with az login) and run make live-azure"

// Account is a live storage account.
type Account struct {
	ConnectionString string // used when set
	AccountURL       string // else this, with DefaultAzureCredential
}

// FromEnv returns the account the environment names, and whether it names
// one.
func FromEnv() (Account, bool) {
	a := Account{
		ConnectionString: strings.TrimSpace(os.Getenv(EnvConnectionString)),
		AccountURL:       strings.TrimSpace(os.Getenv(EnvAccountURL)),
	}
	return a, a.ConnectionString != "" || a.AccountURL != ""
}

// Backend makes container clients for the wire tests.
type Backend struct {
	// Name is "azurite" or "azure".
	Name string
	// Host is the Blob service's host name (no key, no SAS).
	Host string
	// How is how the backend authenticates, for the results file.
	How    string
	client func(containerName string, opts *container.ClientOptions) (*container.Client, error)
}

// Open returns the "azure" backend for a.
func Open(a Account) (*Backend, error) {
	b := &Backend{Name: "azure"}
	switch {
	case a.ConnectionString != "":
		b.How = "connection string"
		b.client = func(name string, opts *container.ClientOptions) (*container.Client, error) {
			return azlease.ContainerClientFromConnectionString(a.ConnectionString, name, opts)
		}
	case a.AccountURL != "":
		b.How = "account URL with DefaultAzureCredential"
		// One credential for every client, on the default transport: a
		// test's faulty transport must not reach the token requests.
		cred, err := azidentity.NewDefaultAzureCredential(nil)
		if err != nil {
			return nil, err
		}
		b.client = func(name string, opts *container.ClientOptions) (*container.Client, error) {
			return azlease.ContainerClientWithCredential(a.AccountURL, name, cred, opts)
		}
	default:
		return nil, fmt.Errorf("live: %s", Hint)
	}
	probe, err := b.client("azlease-live-probe", nil)
	if err != nil {
		return nil, err
	}
	if u, err := url.Parse(probe.URL()); err == nil {
		b.Host = u.Host
	}
	return b, nil
}

// Select returns the backend of the wire tests: "azure" when the
// environment names an account, else the shared Azurite (which
// AZLEASE_SKIP_AZURITE=1 skips, as azurite.Require does).
func Select(t testing.TB) *Backend {
	t.Helper()
	if a, ok := FromEnv(); ok {
		b, err := Open(a)
		if err != nil {
			t.Fatalf("live: %v", err)
		}
		return b
	}
	az := azurite.Require(t)
	return &Backend{Name: "azurite", Host: strings.TrimPrefix(az.URL, "http://"), How: "well-known account",
		client: func(name string, opts *container.ClientOptions) (*container.Client, error) {
			cred, err := container.NewSharedKeyCredential(azurite.Account, azurite.Key)
			if err != nil {
				return nil, err
			}
			return container.NewClientWithSharedKeyCredential(az.URL+"/"+name, cred, opts)
		}}
}

// Live reports whether b is a real Azure account.
func (b *Backend) Live() bool { return b.Name == "azure" }

// Client returns a client for the container name on its own transport,
// closed when the test ends. wrap, when not nil, puts a test's transport
// (lost responses, a crash) in front of it.
func (b *Backend) Client(t testing.TB, name string, wrap func(*http.Transport) policy.Transporter) *container.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone() // proxies from the environment, as azcore's default
	t.Cleanup(tr.CloseIdleConnections)
	var transport policy.Transporter = &http.Client{Transport: tr}
	if wrap != nil {
		transport = wrap(tr)
	}
	cc, err := b.client(name, &container.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: transport}})
	if err != nil {
		t.Fatalf("live: client for container %s: %v", name, err)
	}
	return cc
}

// NewName returns azlease-live-<16 random hex digits>: a valid container
// name no other run uses.
func NewName() string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	return "azlease-live-" + hex.EncodeToString(r[:])
}

// ThrowAway creates a container with a [NewName] name and deletes it when
// the test ends (after every cleanup registered later, so after the test's
// leases are released). A failed delete fails the test: it would leave a
// container behind on the account.
func (b *Backend) ThrowAway(t testing.TB) string {
	t.Helper()
	name := NewName()
	cc := b.Client(t, name, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cc.Create(ctx, nil); err != nil {
		t.Fatalf("live: create container %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := cc.Delete(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerNotFound) {
			t.Errorf("live: delete throw-away container %s: %v (delete it by hand)", name, err)
		}
	})
	return name
}

// Container returns the container a wire test works in: on Azure a
// [Backend.ThrowAway] one; on Azurite, prefix with a random suffix, not
// created (the library creates it), as the Azurite tests always did.
func (b *Backend) Container(t testing.TB, prefix string) string {
	t.Helper()
	if b.Live() {
		return b.ThrowAway(t)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	return prefix + "-" + hex.EncodeToString(r[:])
}
